// autoshard.keras_hub's native part: a KerasHub preset's Keras variables
// (their variable.path and shape), and a Keras LayoutMap's layouts of them
// (over Keras's dimensions) as layouts of autoshard's weights, which a
// ModelParallel distribution of the engine's model takes
// (python/autoshard/keras_hub/models.py looks the keys up as Keras does).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/models/keras_hub_model.h"
#include "plan/layout_map_export.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {
namespace {

using Axes = std::vector<TensorLayout::Axes>;  // axis names per dimension (none: whole)

// The preset's variables with the exact Keras paths and autoshard weights.
std::vector<KerasVariable> preset_variables(const std::string& preset) {
  const keras_hub::Variables table = keras_hub::preset_config(preset)->keras_hub_variables();
  std::map<std::string, Shape> shapes;
  for (const keras_hub::Variable& v : table.variables)
    if (!v.weight.empty()) shapes[v.weight] = v.weight_shape();
  return keras_hub_variables(table, shapes);
}

}  // namespace

void bind_keras_hub(py::module_& m) {
  // [(variable.path, Keras shape, autoshard weight or "")] of a preset.
  m.def(
      "keras_hub_variables",
      [](const std::string& preset) {
        std::vector<std::tuple<std::string, Shape, std::string>> out;
        for (const KerasVariable& v : preset_variables(preset))
          out.emplace_back(v.path, v.shape, v.weight);
        return out;
      },
      "preset"_a);
  // {weight: axes} for {variable.path: Keras layout}: each Keras layout as
  // the Sharding of the weight it is (autoshard_sharding), then as names.
  m.def(
      "keras_hub_weight_layouts",
      [](const std::string& preset, const std::vector<std::string>& axis_names,
         const std::vector<int>& axis_sizes, const std::map<std::string, Axes>& layouts) {
        const DeviceMesh mesh(axis_sizes, axis_names);
        std::map<std::string, Axes> out;
        for (const KerasVariable& v : preset_variables(preset)) {
          auto it = layouts.find(v.path);
          if (it == layouts.end() || v.weight.empty()) continue;
          AS_CHECK(it->second.size() == v.shape.size(), "layout_map: the layout of '", v.path,
                   "' names ", it->second.size(), " dimensions; the variable has ", v.shape.size(),
                   " (shape ", shape_str(v.shape), ")");
          const Sharding s = autoshard_sharding(v, TensorLayout(it->second), mesh);
          out[v.weight] = TensorLayout::of(s, mesh).axes;
        }
        return out;
      },
      "preset"_a, "axis_names"_a, "axis_sizes"_a, "layouts"_a);
}

}  // namespace autoshard::python
