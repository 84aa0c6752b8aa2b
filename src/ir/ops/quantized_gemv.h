// Matrix-vector products: a decode step's one-row products, over weights
// held in bf16 or int8 (per-output-channel scales), dequantized inside the
// kernel (a step reads 2 or 1 bytes per weight instead of 4), and over f32
// matrices with the same kernels (faster than OpenBLAS 0.3.21's sgemv, which
// read a decode step's f32 weights at about half the copy bandwidth on a
// 2-core Intel Xeon VM).
//
// How a weight reaches these kernels: the graph keeps every weight as an f32
// tensor (training, prefill and every op other than a one-row product read
// those f32 values, which quantize_weights (nn/generation.h) sets to the
// dequantized ones, so all paths compute with the same weights). Beside it,
// a device's block may be registered here with its compact copy, keyed by
// the f32 block's address; sgemm (gemm.h) asks for that address when a
// product has one row (or one column) and, when it is registered with the
// same shape, runs the kernel below on the compact copy. An unregistered
// matrix (activations, the key-value cache) takes BLAS's f32 path as before.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "autoshard/tensor/tensor.h"
#include "tensor/large_array.h"
#include "tensor/quantize.h"

namespace autoshard {

// One device's block of a weight as a matrix of `outputs` x `inner` (the
// contraction), in bf16 or int8.
struct QuantizedMatrix {
  WeightsDType dtype = WeightsDType::BF16;
  int64_t outputs = 0, inner = 0;
  // Layout of the elements: [outputs, inner] (a tied head's [vocab, width],
  // an einsum's "btc,vc->btv") or [inner, outputs] (a Dense kernel [in,
  // out]), row-major, as the f32 block.
  bool outputs_first = false;
  // On huge pages when large, as tensors are (tensor/large_array.h).
  std::vector<uint16_t, LargeArrayAllocator<uint16_t>> bf16;  // bf16 elements
  std::vector<int8_t, LargeArrayAllocator<int8_t>> codes;     // int8 elements
  std::vector<float> scales;                                  // int8: one per output
  // Bytes a product reads from this matrix.
  int64_t bytes() const {
    return int64_t(bf16.size()) * 2 + int64_t(codes.size()) + int64_t(scales.size()) * 4;
  }
};

// y[o] = sum_i W[o, i] x[i] for every output o: the fast kernels (vector
// lanes, split over this thread's cores) and the plain loops they are
// tested against (one double sum per output, in order).
void quantized_gemv(const QuantizedMatrix& w, const float* x, float* y);
void quantized_gemv_reference(const QuantizedMatrix& w, const float* x, float* y);

// Registers `w` for the f32 block `block` (which the entry keeps alive, so
// its address is never reused while registered). Re-registering an address
// replaces its entry.
void register_quantized(const Tensor& block, std::shared_ptr<const QuantizedMatrix> w);
void unregister_quantized(const float* block);
// Entries registered now (tests, the bench's check that decode uses them).
int64_t quantized_registered();
// While one of these lives (on any thread), products read the f32 blocks
// even where a compact copy is registered: bench/decode.cc times f32 and a
// compact format in turns on one model, seconds apart, without rounding
// the weights again for each turn. The f32 blocks hold the rounded values,
// so the numbers are those of the compact kernels up to summation order
// (and int8's input, which its kernel rounds to 16-bit fixed point).
class QuantizedReadsOff {
 public:
  QuantizedReadsOff();
  ~QuantizedReadsOff();
  QuantizedReadsOff(const QuantizedReadsOff&) = delete;
  QuantizedReadsOff& operator=(const QuantizedReadsOff&) = delete;
};
// Products that ran on a registered matrix since the process started.
int64_t quantized_gemv_calls();

// The product C = alpha * op(W) x + beta * C of a matrix-vector sgemm call,
// when `w` (leading dimension ldw) is a registered block seen as `outputs`
// x `inner` (`rows_are_outputs`: W is [outputs, inner], else [inner,
// outputs]): x read with stride incx, y written with stride incy. Returns
// false, computing nothing, when `w` is not registered with that shape.
bool try_quantized_gemv(bool rows_are_outputs, int64_t outputs, int64_t inner, const float* w,
                        int64_t ldw, const float* x, int64_t incx, float alpha, float beta,
                        float* y, int64_t incy);

// C = alpha * op(W) x + beta * C over an f32 matrix W, seen as `outputs` x
// `inner` (`rows_are_outputs`: W is [outputs, inner], else [inner,
// outputs]) with row stride ldw: the kernels above with no widening
// (tests/quantized_decode_test.cc checks them against plain loops).
void f32_gemv(bool rows_are_outputs, int64_t outputs, int64_t inner, const float* w, int64_t ldw,
              const float* x, int64_t incx, float alpha, float beta, float* y, int64_t incy);

}  // namespace autoshard
