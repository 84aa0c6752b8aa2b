// Which BLAS kernels the Python package runs (ir/blas_core.h). A Python
// process cannot restart itself as the command does, so autoshard/_blas.py
// asks a forked child for wanted_openblas_coretype() before the package
// loads OpenBLAS, and sets OPENBLAS_CORETYPE for itself; when NumPy loaded
// OpenBLAS first, use_private_openblas gives autoshard a copy of its own.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "autoshard/ir/blas_core.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace autoshard::python {

void bind_blas(py::module_& m) {
  m.def("wanted_openblas_coretype", &blas::wanted_openblas_coretype);
  m.def("use_private_openblas", &blas::use_private_openblas);
  m.def(
      "blas_info",
      [](bool measure_peak) {
        const blas::BlasInfo info = blas::blas_info();
        py::dict d("library"_a = info.library, "core"_a = info.core, "chosen_by"_a = info.chosen_by,
                   "library_choice"_a = info.library_choice, "best"_a = info.best,
                   "threads"_a = info.threads, "private_copy"_a = info.private_copy,
                   "cpu"_a = info.features.describe(), "description"_a = blas::describe(info));
        if (measure_peak) d["sgemm_peak_gflops"] = blas::sgemm_peak_gflops();
        return d;
      },
      "measure_peak"_a = false);
}

}  // namespace autoshard::python
