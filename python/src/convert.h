// NumPy arrays to and from autoshard Tensors, for the Python bindings.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "autoshard/tensor/tensor.h"

namespace autoshard::python {

// A C-ordered float32 or int32 copy of `array` as a Tensor of `dtype`
// (floats become f32, integers and bools i32). `what` names the argument in
// errors ("x", "y['head']"). Needs the GIL. `borrow`: an array that is
// already C-ordered and of `dtype` is not copied but lent to the Tensor
// (Tensor::borrowed; it keeps the array alive): only for fit, evaluate and
// predict, which copy their batches out of it.
Tensor to_tensor(const pybind11::handle& array, DType dtype, const std::string& what,
                 bool borrow = false);
// The dtype a target array trains as: integer and bool arrays are class ids
// (i32), the rest f32.
DType target_dtype(const pybind11::handle& array);
// A new NumPy array holding a copy of `t`.
pybind11::array to_numpy(const Tensor& t);

}  // namespace autoshard::python
