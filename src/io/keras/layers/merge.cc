// Keras's merging layers: Add, Subtract, Multiply, Average, Maximum,
// Minimum, Concatenate and Dot.
#include "autoshard/nn/merge_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

namespace {

// An entry for a merge layer of no options but its name.
template <typename MergeLayer>
LayerBuilder keras_merge() {
  return [](LayerConfig& f) -> BuiltLayer { return {MergeLayer(f.name())}; };
}

}  // namespace

void add_merge_layers(LayerTable& table) {
  table.add("Add", keras_merge<Add>());
  table.add("Subtract", keras_merge<Subtract>());
  table.add("Multiply", keras_merge<Multiply>());
  table.add("Average", keras_merge<Average>());
  table.add("Maximum", keras_merge<Maximum>());
  table.add("Minimum", keras_merge<Minimum>());
  table.add("Concatenate", [](LayerConfig& f) -> BuiltLayer {
    return {Concatenate(f.integer("axis", -1), f.name())};
  });
  // Keras's Dot(axes, normalize): axes one integer or a pair.
  table.add("Dot", [](LayerConfig& f) -> BuiltLayer {
    const nlohmann::json& axes = f.raw("axes");
    std::vector<int64_t> both;
    if (axes.is_number_integer()) both = {axes.get<int64_t>(), axes.get<int64_t>()};
    if (axes.is_array() && axes.size() == 2 && axes[0].is_number_integer() &&
        axes[1].is_number_integer())
      both = {axes[0].get<int64_t>(), axes[1].get<int64_t>()};
    if (both.empty()) f.bad("axes", axes, "one axis or a pair of axes");
    return {Dot(both, f.boolean("normalize", false), f.name())};
  });
}

}  // namespace autoshard::keras
