// autoshard.keras_hub's native part: a KerasHub preset's Keras variables
// (their variable.path and shape), and a Keras LayoutMap's layouts of them
// (over Keras's dimensions) as layouts of autoshard's weights, which a
// ModelParallel distribution of the engine's model takes
// (python/autoshard/keras_hub/models.py looks the keys up as Keras does),
// and the LoRA adapters' `.lora.h5` files.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/models/keras_hub_model.h"
#include "convert.h"
#include "io/keras/hdf5_file.h"
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

// The attribute of the "lora" group that says how autoshard numbered the
// adapters (KerasHub numbers them by its own layer walk; see save_lora_weights
// in python/autoshard/keras_hub/models.py).
constexpr const char* kLoraOrder = "autoshard_adapter_order";

// Backbone.save_lora_weights's file as KerasHub writes it
// (keras_hub/src/models/backbone.py, save_lora_weights, through Keras's
// H5IOStore in keras/src/saving/saving_lib.py: `make(path)` makes the group
// path/vars): lora/vars/rank (an int64 scalar) and, per adapted layer i,
// lora/i/vars/lora_kernel_a and lora_kernel_b.
void write_lora_h5(const std::string& path, int64_t rank, const std::string& order,
                   const std::vector<std::pair<py::handle, py::handle>>& adapters) {
  std::vector<std::pair<Tensor, Tensor>> ab;
  for (const auto& [a, b] : adapters)
    ab.emplace_back(to_tensor(a, DType::F32, "lora_kernel_a"),
                    to_tensor(b, DType::F32, "lora_kernel_b"));
  py::gil_scoped_release release;
  keras::H5Writer w(path);
  w.group("lora/vars");
  w.int64_scalar("lora/vars/rank", rank);
  w.string_attribute("lora", kLoraOrder, order);
  for (size_t i = 0; i < ab.size(); ++i) {
    const std::string vars = "lora/" + std::to_string(i) + "/vars/";
    w.group(vars.substr(0, vars.size() - 1));
    w.dataset(vars + "lora_kernel_a", ab[i].first);
    w.dataset(vars + "lora_kernel_b", ab[i].second);
  }
  w.close();
}

// A dataset's whole value as f32.
Tensor read_whole(const keras::H5File& f, const std::string& path) {
  AS_CHECK(f.is_dataset(path), f.what(), ": '", path, "' is missing");
  const keras::H5Dataset d = f.dataset(path);
  Tensor t(d.shape, DType::F32);
  f.read_block(path, std::vector<int64_t>(d.shape.size(), 0), d.shape, t.data<float>());
  return t;
}

// (rank, the order attribute or "", [(a, b)] by ascending layer index).
py::tuple read_lora_h5(const std::string& path) {
  auto f = keras::H5File::open(path, "LoRA file '" + path + "'");
  AS_CHECK(f->is_dataset("lora/vars/rank"), "LoRA file '", path,
           "' has no lora/vars/rank, so Backbone.save_lora_weights did not write it");
  const int64_t rank = f->read_int("lora/vars/rank");
  std::vector<int64_t> layers;
  for (const std::string& name : f->children("lora")) {
    if (name == "vars") continue;
    AS_CHECK(!name.empty() && name.find_first_not_of("0123456789") == std::string::npos,
             "LoRA file '", path, "': group lora/", name, " is not a layer index");
    layers.push_back(std::stoll(name));
  }
  std::sort(layers.begin(), layers.end());
  py::list adapters;
  for (int64_t i : layers) {
    const std::string vars = "lora/" + std::to_string(i) + "/vars/";
    adapters.append(py::make_tuple(to_numpy(read_whole(*f, vars + "lora_kernel_a")),
                                   to_numpy(read_whole(*f, vars + "lora_kernel_b"))));
  }
  return py::make_tuple(rank, f->string_attribute("lora", kLoraOrder).value_or(""), adapters);
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
  m.def("write_lora_h5", &write_lora_h5, "path"_a, "rank"_a, "order"_a, "adapters"_a);
  m.def("read_lora_h5", &read_lora_h5, "path"_a);
}

}  // namespace autoshard::python
