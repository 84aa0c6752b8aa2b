// autoshard._native.KerasProgress: the CLI's Keras 3 progress display
// (src/cli/keras_progress.h), for keras.callbacks.ProgbarLogger, so that
// `fit(verbose=1)` in Python prints what `autoshard train` prints.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cli/keras_progress.h"

namespace py = pybind11;
using namespace py::literals;

namespace autoshard::python {

void bind_progress(py::module_& m) {
  using cli::KerasProgress;
  py::class_<KerasProgress>(m, "KerasProgress")
      .def(py::init<int, bool, int>(), "verbose"_a, "enabled"_a, "epochs"_a)
      .def("epoch_begin", &KerasProgress::epoch_begin, "epoch"_a, "steps"_a)
      .def("step_end", &KerasProgress::step_end, "done"_a, "logs"_a)
      .def("epoch_end", &KerasProgress::epoch_end, "logs"_a)
      .def("show_only", &KerasProgress::show_only, "steps"_a, "logs"_a);
}

}  // namespace autoshard::python
