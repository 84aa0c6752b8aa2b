// autoshard._native's learning-rate schedules (keras.optimizers.schedules,
// python/autoshard/keras/optimizers/schedules.py): Keras's built-in schedules
// are the engine's (optim/learning_rate_schedules.h); a LearningRateSchedule
// subclass is called back in Python once per step.
#include <pybind11/pybind11.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/optim/learning_rate_schedules.h"
#include "autoshard/optim/optimizers.h"
#include "py_model.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {
namespace {

std::function<double(int64_t)> engine_schedule(const std::string& class_name,
                                               const std::string& config) {
  return keras_learning_rate_schedule(
      class_name, parse_json_text(config, "keras.optimizers.schedules." + class_name),
      "keras.optimizers.schedules");
}

// A Python schedule as the engine's: called with Keras's step (the engine's
// minus one) under the GIL; its value must be a finite number >= 0. The
// callable is released under the GIL too, whichever thread drops the last
// copy of the function.
std::function<double(int64_t)> python_schedule(py::object schedule) {
  auto held = std::shared_ptr<py::object>(new py::object(std::move(schedule)), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held](int64_t step) {
    py::gil_scoped_acquire gil;
    const py::object value = (*held)(step - 1);
    const std::string name = py::str(py::type::of(*held).attr("__name__"));
    double rate = 0;
    try {
      rate = value.cast<double>();
    } catch (const py::cast_error&) {
      fail("learning-rate schedule ", name, " returned ", std::string(py::repr(value)), " at step ",
           step - 1, ": it must return a number");
    }
    AS_CHECK(std::isfinite(rate) && rate >= 0, "learning-rate schedule ", name, " returned ", rate,
             " at step ", step - 1, ": a learning rate must be finite and >= 0");
    return rate;
  };
}

}  // namespace

void bind_schedules(py::module_& m) {
  // Keras's value at its 0-based step: the engine's at step + 1.
  m.def(
      "keras_schedule_value",
      [](const std::string& class_name, const std::string& config, int64_t step) {
        return engine_schedule(class_name, config)(step + 1);
      },
      "class_name"_a, "config"_a, "step"_a);
  m.def(
      "set_keras_schedule",
      [](Optimizer& o, const std::string& class_name, const std::string& config) {
        o.schedule = engine_schedule(class_name, config);
      },
      "optimizer"_a, "class_name"_a, "config"_a);
  m.def(
      "set_python_schedule",
      [](Optimizer& o, py::object schedule) { o.schedule = python_schedule(std::move(schedule)); },
      "optimizer"_a, "schedule"_a);
  m.def(
      "model_iterations", [](PyModel& p) { return p.model ? p.model->iterations() : int64_t{0}; },
      "model"_a);
}

}  // namespace autoshard::python
