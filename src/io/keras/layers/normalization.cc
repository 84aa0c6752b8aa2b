// Keras's normalization layers: BatchNormalization, LayerNormalization and
// GroupNormalization.
#include "autoshard/nn/normalization_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

BuiltLayer keras_batch_normalization(LayerConfig& f) {
  const json axis = f.has("axis") ? f.raw("axis") : json(-1);
  int64_t a = -1;
  if (axis.is_array() && axis.size() == 1 && axis[0].is_number_integer())
    a = axis[0].get<int64_t>();
  else if (axis.is_number_integer())
    a = axis.get<int64_t>();
  else
    f.bad("axis", axis, "is not supported (one axis)");
  BatchNormalizationOptions o;
  o.axis(a).momentum(f.number("momentum", 0.99)).epsilon(f.epsilon());
  const bool center = f.boolean("center", true), scale = f.boolean("scale", true);
  o.center(center).scale(scale).name(f.name());
  f.expect("synchronized", false);
  f.expect("renorm", false, "is not supported");
  f.expect("renorm_clipping", nullptr);
  f.expect("renorm_momentum", 0.99);
  f.expect("fused", nullptr);
  f.expect("virtual_batch_size", nullptr, "is not supported");
  f.expect("adjustment", nullptr, "is not supported");
  f.weight_extras({"beta", "gamma", "moving_mean", "moving_variance"});
  std::vector<std::string> w;
  if (scale) w.push_back("gamma");
  if (center) w.push_back("beta");
  w.push_back("moving_mean");
  w.push_back("moving_variance");
  return {BatchNormalization(o), plain_roles(w)};
}

// What LayerNormalization and GroupNormalization share: the last axis, epsilon,
// center and scale (and gamma and beta as their weights).
struct KerasLastAxisNorm {
  double epsilon;
  bool center, scale;
  std::vector<std::string> weights;
};

KerasLastAxisNorm keras_last_axis_norm(LayerConfig& f) {
  const json axis = f.has("axis") ? f.raw("axis") : json(-1);
  if (!(axis == json(-1) || axis == json::array({-1})))
    f.bad("axis", axis, "is not supported (the last axis, -1)");
  KerasLastAxisNorm n;
  n.epsilon = f.epsilon();
  n.center = f.boolean("center", true);
  n.scale = f.boolean("scale", true);
  f.weight_extras({"beta", "gamma"});
  if (n.scale) n.weights.push_back("gamma");
  if (n.center) n.weights.push_back("beta");
  return n;
}

BuiltLayer keras_group_normalization(LayerConfig& f) {
  const KerasLastAxisNorm n = keras_last_axis_norm(f);
  GroupNormalizationOptions o;
  o.groups(f.positive("groups", 32)).epsilon(n.epsilon).center(n.center).scale(n.scale);
  o.name(f.name());
  return {GroupNormalization(o), plain_roles(n.weights)};
}

BuiltLayer keras_layer_normalization(LayerConfig& f) {
  const KerasLastAxisNorm n = keras_last_axis_norm(f);
  const bool rms = f.boolean("rms_scaling", false);
  LayerNormalizationOptions o;
  o.epsilon(n.epsilon).center(n.center).scale(n.scale).rms_scaling(rms).name(f.name());
  return {LayerNormalization(o), plain_roles(rms ? std::vector<std::string>{"gamma"} : n.weights)};
}

}  // namespace

void add_normalization_layers(LayerTable& table) {
  table.add("BatchNormalization", keras_batch_normalization);
  table.add("LayerNormalization", keras_layer_normalization);
  table.add("GroupNormalization", keras_group_normalization);
}

}  // namespace autoshard::keras
