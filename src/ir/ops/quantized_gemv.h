// Matrix-vector products: a decode step's one-row products, over weights
// held in bf16 or int8 (per-output-channel scales), dequantized inside the
// kernel (a step reads 2 or 1 bytes per weight instead of 4), and over f32
// matrices with the same kernels (faster than OpenBLAS 0.3.21's sgemv, which
// read a decode step's f32 weights at about half the copy bandwidth on a
// 2-core Intel Xeon VM).
//
// How a weight reaches these kernels: quantize_weights (nn/generation.h)
// sets its f32 values to the dequantized ones (training, prefill and every
// op other than a one-row product read those, so all paths compute with the
// same weights), keeps a compact copy beside them in its storage
// (Tensor::quantized) and has the model's generation graph say so: the
// weight's leaf carries its format and its products are QuantizedEinsum
// ops (einsum.cc), whose kernel hands the copy to sgemm (gemm.h), which
// runs the kernel below when a product has one row (or one column) and the
// copy has the product's shape. A plain einsum (activations, the key-value
// cache, f32 weights) takes the f32 path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/quantize.h"

namespace autoshard {

// y[o] = sum_i W[o, i] x[i] for every output o: the fast kernels (vector
// lanes, split over this thread's cores) and the plain loops they are
// tested against (one double sum per output, in order).
void quantized_gemv(const QuantizedMatrix& w, const float* x, float* y);
void quantized_gemv_reference(const QuantizedMatrix& w, const float* x, float* y);

// Products that ran on a compact copy since the process started (tests, the
// bench's check that decode read them).
int64_t quantized_gemv_calls();

// The product C = alpha * op(W) x + beta * C of a matrix-vector sgemm call
// on the compact copy `w` of an f32 matrix seen as `outputs` x `inner`
// (`rows_are_outputs`: W is [outputs, inner], else [inner, outputs]) with
// leading dimension ldw: x read with stride incx, y written with stride
// incy. Returns false, computing nothing, when `w` is null or has another
// shape or layout.
bool quantized_gemv_if_fits(const QuantizedMatrix* w, bool rows_are_outputs, int64_t outputs,
                            int64_t inner, int64_t ldw, const float* x, int64_t incx, float alpha,
                            float beta, float* y, int64_t incy);

// C = alpha * op(W) x + beta * C over an f32 matrix W, seen as `outputs` x
// `inner` (`rows_are_outputs`: W is [outputs, inner], else [inner,
// outputs]) with row stride ldw: the kernels above with no widening
// (tests/quantized_decode_test.cc checks them against plain loops).
void f32_gemv(bool rows_are_outputs, int64_t outputs, int64_t inner, const float* w, int64_t ldw,
              const float* x, int64_t incx, float alpha, float beta, float* y, int64_t incy);

}  // namespace autoshard
