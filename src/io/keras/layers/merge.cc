// Keras's merging layers: Add, Subtract, Multiply, Average, Maximum,
// Minimum and Concatenate.
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
}

}  // namespace autoshard::keras
