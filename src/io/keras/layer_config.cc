#include "io/keras/layer_config.h"

#include <cctype>
#include <cstdlib>
#include <optional>

#include "autoshard/error.h"
#include "autoshard/io/keras_regularizers.h"
#include "autoshard/json.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// Keras's initializer classes by their config's class_name
// (keras/src/initializers/random_initializers.py, constant_initializers.py);
// nullopt for a class autoshard lacks.
std::optional<Initializer> initializer_of_class(const std::string& cls, const json& c) {
  using I = Initializer;
  auto num = [&c](const char* k, double def) {
    const json* v = json_member(c, k);
    return v && v->is_number() ? v->get<double>() : def;
  };
  auto str = [&c](const char* k, const char* def) {
    const json* v = json_member(c, k);
    return v && v->is_string() ? v->get<std::string>() : std::string(def);
  };
  if (cls == "Constant") return I::constant(num("value", 0));
  if (cls == "RandomNormal") return I::normal(num("mean", 0), num("stddev", 0.05));
  if (cls == "TruncatedNormal") return I::truncated_normal(num("mean", 0), num("stddev", 0.05));
  if (cls == "RandomUniform") return I::uniform(num("minval", -0.05), num("maxval", 0.05));
  if (cls == "Orthogonal" || cls == "OrthogonalInitializer") return I::orthogonal(num("gain", 1));
  if (cls == "Identity" || cls == "IdentityInitializer") return I::identity(num("gain", 1));
  if (cls == "VarianceScaling") {
    std::string d = str("distribution", "truncated_normal");
    if (d == "normal") d = "truncated_normal";  // Keras's alias
    return I::variance_scaling(num("scale", 1), I::fan_mode(str("mode", "fan_in")),
                               I::distribution_of(d));
  }
  // The rest take no arguments but a seed: their snake_case names.
  std::string snake;
  for (char ch : cls) {
    if (std::isupper(static_cast<unsigned char>(ch)) && !snake.empty()) snake += '_';
    snake += char(std::tolower(static_cast<unsigned char>(ch)));
  }
  for (const char* known : {"zeros", "ones", "glorot_uniform", "glorot_normal", "he_normal",
                            "he_uniform", "lecun_normal", "lecun_uniform"})
    if (snake == known) return I::from_name(snake);
  return std::nullopt;
}

}  // namespace

Initializer LayerConfig::initializer_or(const std::string& k, const Initializer& def) {
  used_.insert(k);
  const json* v = json_member(c_, k);
  if (!v || v->is_null()) return def;
  if (v->is_string()) {  // a name autoshard lacks: a custom function's
    try {
      return Initializer::from_name(v->get<std::string>());
    } catch (const Error&) {
      return def;
    }
  }
  try {
    const json* cls = json_member(*v, "class_name");
    if (cls && cls->is_string()) {
      const json* c = json_member(*v, "config");
      const json empty = json::object();
      return initializer_of_class(cls->get<std::string>(), c && c->is_object() ? *c : empty)
          .value_or(def);
    }
  } catch (const Error& e) {
    bad(k, *v, e.what());
  }
  return def;
}

LayerConfig::LayerConfig(const LayerSpec& spec, const BuildContext& ctx)
    : spec_(spec),
      c_(spec.config),
      layer_(shown_name(spec.name)),
      cls_(shown_name(spec.cls)),
      ctx_(ctx) {
  AS_CHECK(c_.is_object(), ctx.where, ": layer '", layer_, "' (", cls_,
           "): config must be an object");
  for (const char* k : {"name", "batch_input_shape", "batch_shape", "input_shape", "input_dim",
                        "build_config", "input_length", "implementation", "unroll", "seed",
                        "zero_output_for_mask", "sparse", "ragged", "module"})
    used_.insert(k);
  check_common();
}

std::string LayerConfig::at(const std::string& field) const {
  return cat(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", field, "'");
}

void LayerConfig::bad(const std::string& field, const json& value, const std::string& why) const {
  fail(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", field,
       "' = ", value.dump().substr(0, 200), " ", why);
}

bool LayerConfig::has(const std::string& k) const {
  return json_member(c_, k) != nullptr;
}

bool LayerConfig::null(const std::string& k) const {
  return c_.is_object() && c_.contains(k) && c_.at(k).is_null();
}

const json& LayerConfig::raw(const std::string& k) {
  used_.insert(k);
  return c_.at(k);
}

int64_t LayerConfig::integer(const std::string& k, std::optional<int64_t> def) {
  used_.insert(k);
  if (!has(k)) {
    if (def) return *def;
    fail(ctx_.where, ": layer '", layer_, "' (", cls_, ") has no field '", k, "'");
  }
  const json& v = c_.at(k);
  if (const std::optional<int64_t> n = json_whole_number(v)) return *n;
  bad(k, v, v.is_number_unsigned() ? "is out of range" : "must be a whole number");
}

int64_t LayerConfig::positive(const std::string& k, std::optional<int64_t> def) {
  const int64_t v = integer(k, def);
  if (v <= 0 || v > (1LL << 31)) bad(k, c_.at(k), "must be a positive size");
  return v;
}

double LayerConfig::number(const std::string& k, double def) {
  used_.insert(k);
  const json* v = json_member(c_, k);
  if (!v) return def;
  if (!v->is_number()) bad(k, *v, "must be a number");
  return v->get<double>();
}

double LayerConfig::epsilon() {
  const double eps = number("epsilon", 1e-3);
  if (!(eps > 0))
    bad("epsilon", c_.at("epsilon"), "must be above 0 (it keeps the normalisation finite)");
  return eps;
}

bool LayerConfig::boolean(const std::string& k, bool def) {
  used_.insert(k);
  const json* v = json_member(c_, k);
  if (!v) return def;
  if (!v->is_boolean()) bad(k, *v, "must be true or false");
  return v->get<bool>();
}

std::string LayerConfig::string(const std::string& k, const std::string& def) {
  used_.insert(k);
  const json* v = json_member(c_, k);
  if (!v) return def;
  if (!v->is_string()) bad(k, *v, "must be a string");
  return v->get<std::string>();
}

std::vector<int64_t> LayerConfig::sizes(const std::string& k, size_t n, std::vector<int64_t> def) {
  used_.insert(k);
  const json* found = json_member(c_, k);
  if (!found) return def;
  const json& v = *found;
  std::vector<int64_t> out;
  if (v.is_number_integer()) {
    out.assign(n, v.get<int64_t>());
  } else if (v.is_array() && v.size() == n) {
    for (const json& e : v) {
      if (!e.is_number_integer()) bad(k, v, "must be whole numbers");
      out.push_back(e.get<int64_t>());
    }
  } else {
    bad(k, v, "must be a whole number or a list of " + std::to_string(n));
  }
  for (int64_t x : out)
    if (x <= 0 || x > (1 << 20)) bad(k, v, "must be positive sizes");
  return out;
}

void LayerConfig::expect(const std::string& k, const json& expected, const std::string& why) {
  used_.insert(k);
  if (!c_.contains(k)) return;
  const json& v = c_.at(k);
  if (v == expected) return;
  if (v.is_null() && (expected.is_null() || expected == json(false))) return;
  if (v.is_number() && expected.is_number() && v.get<double>() == expected.get<double>()) return;
  bad(k, v, why.empty() ? "is not supported (only " + expected.dump() + ")" : why);
}

void LayerConfig::penalty(const std::string& k) {
  used_.insert(k);
  if (!has(k) || c_.at(k).is_null()) return;
  // Checked now, so that an unknown one is an error naming the layer; the
  // model's reader applies them (regularizers_of in keras_model.cc).
  const bool constraint = k.size() > 11 && k.compare(k.size() - 11, 11, "_constraint") == 0;
  if (constraint)
    keras_constraint(c_.at(k), at(k));
  else
    keras_regularizer(c_.at(k), at(k));
}

std::string LayerConfig::activation_name(const std::string& k, const std::string& def) {
  used_.insert(k);
  if (!c_.contains(k)) return def == "linear" ? "" : def;
  return activation_of(c_.at(k), layer_, k, ctx_);
}

void LayerConfig::channels_last() {
  expect("data_format", "channels_last", "is not supported (autoshard's layers are channels_last)");
}

void LayerConfig::weight_extras(const std::vector<std::string>& weights) {
  for (const std::string& w : weights) {
    initializer(w + "_initializer");
    penalty(w + "_regularizer");
    penalty(w + "_constraint");
  }
  expect("lora_rank", nullptr);
  expect("lora_alpha", nullptr, "is not supported (LoRA)");
  expect("quantization_config", nullptr);
}

void LayerConfig::accept_remaining_fields() {
  for (const auto& [k, v] : c_.items()) used_.insert(k);
}

void LayerConfig::finish() const {
  for (const auto& [k, v] : c_.items())
    if (!used_.count(k))
      fail(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", k,
           "' = ", v.dump().substr(0, 200), " is not supported");
}

void LayerConfig::check_common() {
  used_.insert("dtype");
  if (const json* d = json_member(c_, "dtype")) {
    std::string name = d->is_string() ? d->get<std::string>() : "";
    if (d->is_object() && d->contains("config") && d->at("config").is_object())
      name = json_string_or(d->at("config"), "name", "", at("dtype.config"));
    // Discretization's dtype names its int output (tf-keras saves "int64"):
    // its buckets come out here as f32 whole numbers.
    const bool int_buckets = spec_.cls == "Discretization" && (name == "int64" || name == "int32");
    if (name != "float32" && !int_buckets) bad("dtype", *d, "is not supported (float32 only)");
  }
  // trainable: false (a frozen layer) is read by the model's reader
  // (frozen_scopes in keras_model.cc); anything but a boolean is an error.
  used_.insert("trainable");
  if (c_.contains("trainable") && !c_.at("trainable").is_boolean())
    bad("trainable", c_.at("trainable"), "must be true or false");
  penalty("activity_regularizer");
}

std::vector<WeightRole> plain_roles(const std::vector<std::string>& names,
                                    const std::string& k3_group, const std::string& tfjs_prefix) {
  std::vector<WeightRole> roles;
  for (size_t i = 0; i < names.size(); ++i)
    roles.push_back({names[i], k3_group + "vars/" + std::to_string(i), tfjs_prefix + names[i]});
  return roles;
}

bool keras_version_is_2(const std::string& version) {
  std::string v = version;
  if (v.rfind("keras v", 0) == 0) v = v.substr(7);
  if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) return true;
  return std::atoi(v.c_str()) < 3;
}

std::string activation_of(const json& value, const std::string& layer, const std::string& field,
                          const BuildContext& ctx) {
  std::string name;
  if (value.is_null()) return "";
  if (value.is_string()) {
    name = value.get<std::string>();
  } else if (value.is_object() && value.contains("class_name") &&
             value.at("class_name") == "function" && value.contains("config") &&
             value.at("config").is_string() &&
             (!json_member(value, "module") || value.at("module") == "keras.activations")) {
    name = value.at("config").get<std::string>();
  } else {
    fail(ctx.where, ": layer '", layer, "': field '", field, "' = ", value.dump().substr(0, 200),
         " is not a built-in activation (custom functions are code and are not run)");
  }
  if (name == "linear" || name.empty()) return "";
  // Keras 2.x keras/backend.py hard_sigmoid (clip(0.2 x + 0.5, 0, 1)) against
  // Keras 3 keras/src/ops/nn.py hard_sigmoid (relu6(x + 3) / 6).
  if (name == "hard_sigmoid" && ctx.keras2_hard_sigmoid) name = "hard_sigmoid_keras2";
  if (name == "gelu" && ctx.dialect == Dialect::TFJS) name = "gelu";
  if (name == "gelu_new") name = "gelu_tanh";
  if (name == "swish") name = "silu";
  try {
    check_activation(name);
  } catch (const Error&) {
    fail(ctx.where, ": layer '", layer, "': field '", field, "' = \"", name,
         "\" is not an activation autoshard has");
  }
  return name;
}

}  // namespace autoshard::keras
