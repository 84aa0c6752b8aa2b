#include "convert.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "autoshard/error.h"

namespace py = pybind11;

namespace autoshard::python {

DType target_dtype(const py::handle& array) {
  py::array a = py::array::ensure(array);
  AS_CHECK(a, "targets must be array-like (a NumPy array, a list of numbers)");
  const char kind = a.dtype().kind();
  return (kind == 'i' || kind == 'u' || kind == 'b') ? DType::I32 : DType::F32;
}

namespace {

// The array itself as the Tensor's storage, when it is C-ordered and of the
// tensor's dtype; the Tensor holds a reference to it (released under the GIL).
std::optional<Tensor> lend(const py::array& a, DType dtype, const Shape& shape) {
  const bool same = dtype == DType::F32 ? a.dtype().is(py::dtype::of<float>())
                                        : a.dtype().is(py::dtype::of<int32_t>());
  if (!same || !(a.flags() & py::array::c_style) || a.size() == 0) return std::nullopt;
  auto* held = new py::object(a);
  std::shared_ptr<void> owner(held, [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return Tensor::borrowed(shape, dtype, const_cast<void*>(a.data()), std::move(owner));
}

}  // namespace

Tensor to_tensor(const py::handle& array, DType dtype, const std::string& what, bool borrow) {
  py::array a = py::array::ensure(array);
  AS_CHECK(a, what, " must be array-like (a NumPy array, a list of numbers)");
  const char kind = a.dtype().kind();
  AS_CHECK(kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b', what,
           " must hold numbers, not NumPy dtype ", std::string(py::str(a.dtype())));
  Shape shape(a.shape(), a.shape() + a.ndim());
  if (borrow)
    if (std::optional<Tensor> t = lend(a, dtype, shape)) return *t;
  // One copy into the Tensor's own storage (Tensors own their memory); the
  // cast happens in NumPy only when the dtype differs.
  if (dtype == DType::F32) {
    auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    AS_CHECK(c, what, " could not be converted to float32");
    Tensor t(shape, DType::F32);
    std::memcpy(t.raw(), c.data(), t.nbytes());
    return t;
  }
  if (kind == 'f') {
    // Class ids given as floats must be whole numbers within int32 (compared
    // as doubles: casting one past int32's range would be undefined, and
    // NumPy's cast would make it INT32_MIN; NaN fails every comparison).
    auto f = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    const double* p = f.data();
    for (py::ssize_t i = 0; i < f.size(); ++i)
      AS_CHECK(p[i] >= INT32_MIN && p[i] <= INT32_MAX && p[i] == std::trunc(p[i]), what,
               " must hold whole class ids within int32; element ", i, " is ", p[i]);
  } else if (kind == 'u' && a.dtype().itemsize() == 8) {
    // uint64 read as int64 would wrap 2^64 - 1 to -1.
    auto l = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const uint64_t* p = l.data();
    for (py::ssize_t i = 0; i < l.size(); ++i)
      AS_CHECK(p[i] <= uint64_t(INT32_MAX), what, " element ", i, " (", p[i],
               ") does not fit in int32");
  } else if (kind == 'i' || kind == 'u') {
    auto l = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const int64_t* p = l.data();
    for (py::ssize_t i = 0; i < l.size(); ++i)
      AS_CHECK(p[i] >= INT32_MIN && p[i] <= INT32_MAX, what, " element ", i, " (", p[i],
               ") does not fit in int32");
  }
  auto c = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(a);
  Tensor t(shape, DType::I32);
  std::memcpy(t.raw(), c.data(), t.nbytes());
  return t;
}

py::array to_numpy(const Tensor& held) {
  // A weight held in bf16 reaches NumPy as its f32 values.
  const Tensor t = held.dtype() == DType::BF16 ? held.converted(DType::F32) : held;
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == DType::I32) {
    py::array_t<int32_t> out(shape);
    std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
    return out;
  }
  py::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
  return out;
}

}  // namespace autoshard::python
