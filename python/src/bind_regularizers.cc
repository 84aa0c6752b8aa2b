// autoshard._native's regularizers and constraints
// (python/autoshard/keras/regularizers.py, constraints.py): Keras's
// serialized form read by the engine (autoshard/io/keras_regularizers.h),
// and set on a model's weights and layers at compile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "autoshard/io/keras_regularizers.h"
#include "autoshard/json.h"
#include "py_model.h"

namespace py = pybind11;

namespace autoshard::python {

void bind_regularizers(py::module_& m) {
  py::class_<Trace::Penalty>(m, "Penalty");
  // `spec`: Keras's serialized regularizer or constraint as JSON text.
  m.def("regularizer", [](const std::string& spec, const std::string& where) {
    return keras_regularizer(parse_json_text(spec, where), where);
  });
  m.def("constraint", [](const std::string& spec, const std::string& where) {
    return keras_constraint(parse_json_text(spec, where), where);
  });
  m.def("set_regularizers", [](PyModel& p, std::map<std::string, Trace::Penalty> weights,
                               std::map<std::string, Trace::Penalty> activities) {
    p.model->set_regularizers(std::move(weights), std::move(activities));
  });
  m.def("set_constraints", [](PyModel& p, std::map<std::string, Trace::Penalty> weights) {
    p.model->set_constraints(std::move(weights));
  });
}

}  // namespace autoshard::python
