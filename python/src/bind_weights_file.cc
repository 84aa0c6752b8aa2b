// autoshard._native's weights files for models with custom layers: a Keras
// 3 style `model.weights.h5` (one float32 dataset per weight, at the path
// Python chooses: "layers/anti/vars/0") written and read by name. Stock
// models go through the Keras file readers and writers (bind_saving.cc),
// which build the model from its config; a custom layer's config is Python
// code they never run, so its weights are written and read here instead.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "io/keras/hdf5_file.h"

namespace py = pybind11;

namespace autoshard::python {
namespace {

// Every dataset under `group`, depth first, as (path, float32 array), and
// integer scalars (Normalization's count) as (path, int).
void read_all(const keras::H5File& f, const std::string& group, py::list& out) {
  for (const std::string& name : f.children(group)) {
    const std::string path = group == "/" ? name : group + "/" + name;
    if (f.is_group(path)) {
      read_all(f, path, out);
    } else if (f.is_dataset(path)) {
      const keras::H5Dataset d = f.dataset(path);
      if (d.integer && d.shape.empty()) out.append(py::make_tuple(path, f.read_int(path)));
      if (!d.floating) continue;
      Tensor t(d.shape, DType::F32);
      f.read_block(path, std::vector<int64_t>(d.shape.size(), 0), d.shape, t.data<float>());
      out.append(py::make_tuple(path, to_numpy(t)));
    }
  }
}

}  // namespace

void bind_weights_file(py::module_& m) {
  // entries: (path, float array) or (path, int): an int64 scalar, as Keras
  // keeps Normalization's count.
  m.def("write_weights_h5", [](const std::string& path,
                               const std::vector<std::pair<std::string, py::handle>>& entries) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::vector<std::pair<std::string, int64_t>> ints;
    for (const auto& [name, value] : entries) {
      if (py::isinstance<py::int_>(value))
        ints.emplace_back(name, value.cast<int64_t>());
      else
        tensors.emplace_back(name, to_tensor(value, DType::F32, "weight '" + name + "'"));
    }
    py::gil_scoped_release release;
    keras::H5Writer w(path);
    for (const auto& [name, t] : tensors) {
      const size_t slash = name.rfind('/');
      if (slash != std::string::npos) w.group(name.substr(0, slash));
      w.dataset(name, t);
    }
    for (const auto& [name, v] : ints) w.int64_scalar(name, v);  // makes its groups
    w.close();
  });
  m.def("read_weights_h5", [](const std::string& path) {
    auto f = keras::H5File::open(path, "weights file '" + path + "'");
    py::list out;
    read_all(*f, "/", out);
    return out;
  });
}

}  // namespace autoshard::python
