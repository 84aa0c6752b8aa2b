// CPU kernels of the Unary and UnaryGrad ops (unary.cc), with the plain
// loops beside them that tests/keras_speed_kernels_test.cc compares them to.
#pragma once

#include <cstdint>

#include "autoshard/ir/op_attrs.h"

namespace autoshard {

// y[i] = f(x[i]) over n elements; `alpha` is the function's parameter
// (leaky_relu's slope, elu's alpha).
void unary_forward(UnaryFn fn, double alpha, const float* x, float* y, int64_t n);
// dx[i] = dy[i] * f'(x[i]).
void unary_backward(UnaryFn fn, double alpha, const float* x, const float* dy, float* dx,
                    int64_t n);

// The plain loops: the function chosen per element and computed in double.
void unary_forward_reference(UnaryFn fn, double alpha, const float* x, float* y, int64_t n);
void unary_backward_reference(UnaryFn fn, double alpha, const float* x, const float* dy, float* dx,
                              int64_t n);

}  // namespace autoshard
