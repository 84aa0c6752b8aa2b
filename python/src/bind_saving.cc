// autoshard._native's Keras files: `model.save` and `keras.models.load_model`
// (python/autoshard/keras/saving.py) over the C++ readers and writers of
// autoshard/io/keras_model.h. A KerasFile keeps what a Keras file says beside
// its model (architecture, the weights' names in each format, the compile
// config); the model itself goes to Python as a Model, and save borrows it
// back for the write. A model built in Python gets its KerasFile by reading
// the Keras 3 config.json that saving.py writes for it (no weights).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_architecture.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/json.h"
#include "py_model.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {
namespace {

struct KerasFile {
  KerasModel k;
};

// Puts a Python model's C++ model into a KerasFile for one call and takes it
// back afterwards, also when the call throws.
class Borrow {
 public:
  Borrow(PyModel& p, KerasModel& k) : p_(p), k_(k) {
    AS_CHECK(p.model, "save: the model is not built");
    k_.model = std::move(p_.model);
  }
  ~Borrow() { p_.model = std::move(k_.model); }
  Borrow(const Borrow&) = delete;
  Borrow& operator=(const Borrow&) = delete;

 private:
  PyModel& p_;
  KerasModel& k_;
};

// Every weight the file names must be one of the model's, and every one of
// the model's named: else the config describes another model.
void check_same_weights(Model& model, const KerasModel& k) {
  std::set<std::string> have;
  for (const std::string& p : model.weight_paths()) have.insert(p);
  for (const std::string& p : model.non_trainable_weight_paths()) have.insert(p);
  std::set<std::string> named;
  for (const KerasWeightName& w : k.weight_names) {
    AS_CHECK(have.count(w.cpp), "save: the Keras config names weight '", w.cpp,
             "', which the model does not have (its layers cannot be written as Keras layers)");
    named.insert(w.cpp);
  }
  for (const std::string& p : have)
    AS_CHECK(named.count(p), "save: the model's weight '", p,
             "' has no place in the Keras config (its layer cannot be written as a Keras layer)");
}

// The compile config from saving.py's JSON: {"optimizer": "Adam",
// "optimizer_config": {...}, "losses": [{"name": ..., "from_logits": ...}],
// "loss_weights": [...], "metrics": [...]}.
KerasCompileConfig compile_config_of(const std::string& text) {
  const nlohmann::json j = parse_json_text(text, "save: the compile config");
  KerasCompileConfig c;
  c.present = true;
  c.optimizer = j.at("optimizer").get<std::string>();
  c.optimizer_config = j.at("optimizer_config");
  c.losses = j.at("losses").get<std::vector<nlohmann::json>>();
  c.loss_weights = j.at("loss_weights").get<std::vector<double>>();
  c.metrics = j.at("metrics").get<std::vector<std::string>>();
  return c;
}

py::list specs(const std::vector<KerasTensorSpec>& v) {
  py::list out;
  for (const KerasTensorSpec& s : v)
    out.append(py::dict("name"_a = s.name, "shape"_a = s.shape, "dtype"_a = dtype_name(s.dtype)));
  return out;
}

}  // namespace

void bind_saving(py::module_& m) {
  // saving.py's compile config (a model with custom layers keeps it in its
  // config.json) as engine objects: (optimizer, losses, loss_weights, metrics).
  m.def("compile_objects_of", [](const std::string& json_text) {
    const KerasCompileConfig c = compile_config_of(json_text);
    return py::make_tuple(c.make_optimizer(), c.make_losses(), c.loss_weights, c.make_metrics());
  });
  py::class_<KerasFile, std::shared_ptr<KerasFile>>(m, "KerasFile")
      .def_static(
          "read",
          [](const std::string& path, bool weights, bool optimizer_state) {
            auto f = std::make_shared<KerasFile>();
            KerasLoadOptions o;
            o.weights = weights;
            o.optimizer_state = optimizer_state;
            o.unknown_dims = true;  // keras.Input(shape=(None, ...)): traced per batch shape
            {
              py::gil_scoped_release release;
              f->k = load_keras_model(path, o);
            }
            return f;
          },
          "path"_a, "weights"_a = true, "optimizer_state"_a = false)
      // A model's Keras config (JSON text) as if read from a file of
      // `format`, with a save_weights file's weights when given.
      .def_static(
          "of_config",
          [](const std::string& config, const std::string& format, const std::string& where,
             const std::string& weights_h5) {
            const nlohmann::json parsed = parse_json_text(config, where);
            auto f = std::make_shared<KerasFile>();
            py::gil_scoped_release release;
            f->k = keras_model_of_config(parsed, format, where, weights_h5);
            return f;
          },
          "config"_a, "format"_a, "where"_a, "weights_h5"_a = "")
      .def_static("format_of", &keras_format_of)
      // The model read, as a Python model (once: the file keeps its names).
      .def("take_model",
           [](KerasFile& f) {
             AS_CHECK(f.k.model, "the Keras file's model was taken already");
             PyModel p{std::move(f.k.model), {}, {}};
             for (const KerasTensorSpec& s : f.k.inputs) {
               p.input_names.push_back(s.name);
               p.input_dtypes.push_back(s.dtype);
             }
             return p;
           })
      .def_property_readonly("format", [](const KerasFile& f) { return f.k.format; })
      .def_property_readonly("keras_version", [](const KerasFile& f) { return f.k.keras_version; })
      .def_property_readonly("inputs", [](const KerasFile& f) { return specs(f.k.inputs); })
      .def_property_readonly("outputs", [](const KerasFile& f) { return specs(f.k.outputs); })
      .def_property_readonly("has_compile", [](const KerasFile& f) { return f.k.compile.present; })
      // The optimizer's state read with the weights (optimizer_state=True):
      // its moments are in the model; restore_iterations sets its step count
      // once the model is compiled.
      .def_property_readonly("has_optimizer_state",
                             [](const KerasFile& f) { return f.k.has_optimizer_state; })
      .def_property_readonly("optimizer_state_note",
                             [](const KerasFile& f) { return f.k.optimizer_state_note; })
      .def("restore_iterations",
           [](const KerasFile& f, PyModel& p) {
             AS_CHECK(p.model, "the model is not built");
             if (f.k.has_optimizer_state) p.model->set_iterations(f.k.iterations);
           })
      .def_property_readonly("architecture",
                             [](const KerasFile& f) { return f.k.architecture.dump(); })
      // The file's compile config as engine objects: (optimizer, losses,
      // loss_weights, metrics).
      .def("compile_objects",
           [](const KerasFile& f) {
             const KerasCompileConfig& c = f.k.compile;
             return py::make_tuple(c.make_optimizer(), c.make_losses(), c.loss_weights,
                                   c.make_metrics());
           })
      .def("set_compile",
           [](KerasFile& f, const std::string& json_text) {
             f.k.compile = compile_config_of(json_text);
           })
      .def(
          "save",
          [](KerasFile& f, PyModel& p, const std::string& path, const std::string& format) {
            py::gil_scoped_release release;
            Borrow borrow(p, f.k);
            check_same_weights(*f.k.model, f.k);
            save_keras_model(f.k, path, format);
          },
          "model"_a, "path"_a, "format"_a = "")
      // Keras 3's save_weights: model.weights.h5 alone.
      .def(
          "save_weights",
          [](KerasFile& f, PyModel& p, const std::string& path) {
            py::gil_scoped_release release;
            Borrow borrow(p, f.k);
            check_same_weights(*f.k.model, f.k);
            save_keras_weights(f.k, path);
          },
          "model"_a, "path"_a);
  // Keras 2's form of a Keras 3 architecture (JSON text in and out): what a
  // TensorFlow.js model.json of a model built in Python holds.
  m.def("keras2_architecture", [](const std::string& keras3, const std::string& where) {
    return keras2_architecture(parse_json_text(keras3, where), where).dump();
  });
}

}  // namespace autoshard::python
