// autoshard.keras_layout_map's native part: a plan (autoshard.plan's
// layouts and shapes of a model file or directory) written as a Keras 3
// LayoutMap, as `autoshard plan --export-layout-map` writes it
// (plan/layout_map_export.h): the JSON form, or the .py form's text.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/models/language_model.h"
#include "plan/layout_map_export.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {

void bind_layout_map(py::module_& m) {
  m.def(
      "keras_layout_map",
      [](const std::string& path, const std::vector<std::string>& axis_names,
         const std::vector<int>& axis_sizes,
         const std::map<std::string, std::vector<TensorLayout::Axes>>& layouts,
         const std::map<std::string, Shape>& shapes, double step_s, double bytes,
         const std::string& cluster, const std::string& form) {
        AS_CHECK(form == "json" || form == "py", "keras_layout_map: form must be 'json' or 'py'");
        const DeviceMesh mesh(axis_sizes, axis_names);
        std::string backbone;
        std::vector<KerasVariable> variables;
        if (is_keras_model_path(path)) {
          variables = keras_file_variables(load_keras_model(path, {.weights = false}), shapes);
        } else {
          variables = keras_hub_variables(LanguageModelConfig::of(path).keras_hub_variables(),
                                          shapes, &backbone);
        }
        LayoutMapExport e =
            make_layout_map_export(std::move(variables), mesh, [&](const std::string& w) {
              auto it = layouts.find(w);
              AS_CHECK(it != layouts.end(), "keras_layout_map: the plan has no weight '", w, "'");
              return TensorLayout(it->second).to_sharding(mesh, w, shapes.at(w));
            });
        // Keras splits the inputs over batch_dim_name, which must be a mesh axis.
        if (mesh.axis_index("data") < 0) {
          std::vector<int> sizes = axis_sizes;
          std::vector<std::string> names = axis_names;
          sizes.insert(sizes.begin(), 1);
          names.insert(names.begin(), "data");
          e.mesh = DeviceMesh(sizes, names);
        }
        e.model = backbone.empty() ? path : path + " (KerasHub " + backbone + ")";
        e.step_s = step_s;
        e.bytes_per_device = bytes;
        e.cluster = cluster;
        return form == "py" ? layout_map_python(e) : layout_map_json(e);
      },
      "path"_a, "axis_names"_a, "axis_sizes"_a, "layouts"_a, "shapes"_a, "step_s"_a, "bytes"_a,
      "cluster"_a, "form"_a);
}

}  // namespace autoshard::python
