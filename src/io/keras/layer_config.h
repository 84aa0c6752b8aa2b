// One Keras layer's config as the layer table's builders read it: every
// field is read, checked or known to be harmless, and a value the C++ layer
// does not support is an error naming the layer, the field and the value,
// never ignored. Initializers are accepted as they are (the file's weights
// replace the draws); regularizers, constraints and trainable are checked
// here and applied by the model's reader (keras_model.cc).
//
//   LayerConfig f(spec, ctx);
//   const int64_t units = f.positive("units");
//   const std::string act = f.activation_name("activation");
//   f.finish();  // a field nobody read is "... is not supported"
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/nn/layers.h"
#include "io/keras/architecture.h"

namespace autoshard::keras {

// One weight of a layer, in Keras's order of the layer's variables
// (trainable ones first, as Keras saves them).
struct WeightRole {
  std::string cpp;   // the C++ path relative to the layer ("kernel", "forward_lstm.kernel")
  std::string k3;    // Keras 3's dataset relative to the layer's group ("vars/0", "cell/vars/1")
  std::string tfjs;  // TF.js's name relative to the layer ("kernel", "forward_lstm/kernel")
};

// What a builder needs besides the config: the file's dialect (defaults
// differ between Keras 2, Keras 3 and TF.js), whether the model only runs
// forward, the file (for errors) and the seed of random layers.
struct BuildContext {
  Dialect dialect = Dialect::Keras3;
  bool inference = false;  // accept training-only fields (regularizers, constraints)
  std::string where;       // the file, for errors
  uint64_t seed = 0;
  // The file was saved by Keras 2 or TensorFlow.js, whose hard_sigmoid is
  // clip(0.2 x + 0.5, 0, 1) (Keras 3's is relu6(x + 3) / 6): chosen by the
  // file's Keras version (keras_version_is_2 in keras_model.cc).
  bool keras2_hard_sigmoid = false;
};

// A built layer and its weights' names in each format.
struct BuiltLayer {
  BuiltLayer(Layer l, std::vector<WeightRole> w = {},  // NOLINT: implicit, for `return {layer}`
             std::vector<WeightRole> c = {})
      : layer(std::move(l)), weights(std::move(w)), counters(std::move(c)) {}
  Layer layer;
  std::vector<WeightRole> weights;
  // Int scalars Keras saves after the weights that nothing here computes
  // with (Normalization's count): read and written back as they are, so
  // that Keras, which checks a layer's count of variables when it loads
  // (Layer.load_own_variables; Keras 2's load_weights), takes our files.
  std::vector<WeightRole> counters;
};

// A layer's config with a record of the fields read. The reads name the
// field and its value when the value has the wrong type or range.
class LayerConfig {
 public:
  // Checks what every layer shares (dtype float32, trainable, the activity
  // regularizer) and marks the fields that change nothing here as read.
  LayerConfig(const LayerSpec& spec, const BuildContext& ctx);

  const std::string& name() const { return spec_.name; }  // as the file gives it
  const std::string& cls() const { return spec_.cls; }
  const BuildContext& ctx() const { return ctx_; }

  // "FILE: layer 'NAME' (CLASS): field 'FIELD'", the start of a message.
  std::string at(const std::string& field) const;
  [[noreturn]] void bad(const std::string& field, const nlohmann::json& value,
                        const std::string& why) const;
  bool has(const std::string& k) const;
  // Whether field `k` is there and null (Keras's None where the default is
  // another value; has() counts null as absent).
  bool null(const std::string& k) const;
  const nlohmann::json& raw(const std::string& k);

  // A whole number (3.0 counts); absent: `def`, or an error without one.
  int64_t integer(const std::string& k, std::optional<int64_t> def = std::nullopt);
  // A whole number in [1, 2^31].
  int64_t positive(const std::string& k, std::optional<int64_t> def = std::nullopt);
  double number(const std::string& k, double def);
  // A normalisation's epsilon (Keras's default 1e-3): above 0, as it keeps
  // 1 / sqrt(variance + epsilon) finite; a negative one makes NaN.
  double epsilon();
  bool boolean(const std::string& k, bool def);
  std::string string(const std::string& k, const std::string& def);
  // An int or a list of `n` ints (Keras's kernel_size, strides, ...).
  std::vector<int64_t> sizes(const std::string& k, size_t n, std::vector<int64_t> def);
  // The field must hold `expected` (or be absent).
  void expect(const std::string& k, const nlohmann::json& expected, const std::string& why = "");
  // A regularizer or constraint field (null or absent: none), checked.
  void penalty(const std::string& k);
  void initializer(const std::string& k) { used_.insert(k); }
  // The initializer a field names (Keras's name, or {class_name, config});
  // absent, null or a class autoshard lacks (a custom one): `def`. A file's
  // weights replace the draws, so only a model built from its config alone
  // (model_from_json, the command line's fresh train) starts from these.
  Initializer initializer_or(const std::string& k, const Initializer& def);
  // The activation autoshard applies ("" for linear); absent: `def`.
  std::string activation_name(const std::string& k, const std::string& def = "linear");
  void channels_last();
  // The extras of a layer with these weights ("kernel", "bias"): their
  // initializers (accepted), regularizers and constraints (checked),
  // and no LoRA or quantization.
  void weight_extras(const std::vector<std::string>& weights);
  // Marks every field as read: for layers whose config changes nothing in
  // what autoshard runs (an augmentation layer in inference).
  void accept_remaining_fields();
  // Throws naming the first field nobody read.
  void finish() const;

 private:
  void check_common();

  const LayerSpec& spec_;
  const nlohmann::json& c_;
  std::string layer_, cls_;  // as messages show them (escaped, long ones cut)
  const BuildContext& ctx_;
  std::set<std::string> used_;
};

// Roles of weights saved as plain variables: names[i] is Keras 3's
// "<k3_group>vars/<i>" and TF.js's "<tfjs_prefix><name>".
std::vector<WeightRole> plain_roles(const std::vector<std::string>& names,
                                    const std::string& k3_group = "",
                                    const std::string& tfjs_prefix = "");

// Whether a file's writer computes Keras 2's hard_sigmoid: Keras before 3
// and TensorFlow.js itself do (tfjs-layers' hardSigmoid), Keras 3 does not.
// `version` is the file's keras_version ("2.15.0", "3.8.0"; "" when absent,
// files of Keras 2 and before), TF.js's "tfjs-layers 4.22.0" (Keras 2's
// form) or its converter's generatedBy "keras v3.8.0".
bool keras_version_is_2(const std::string& version);

// The activation autoshard applies for a Keras activation value (a name, or
// Keras 3's serialized function), checked; "" for linear.
std::string activation_of(const nlohmann::json& value, const std::string& layer,
                          const std::string& field, const BuildContext& ctx);

}  // namespace autoshard::keras
