// Matrix products over an operand held in bf16 (a frozen weight:
// Model::hold_frozen_weights_in_bf16, Graph::hold_in_bf16) on the f32 BLAS:
// the bf16 operand is widened to f32 one panel at a time (a band of op(B)'s
// columns, or of op(A)'s rows), and each panel is multiplied as soon as it
// is made, so a product holds at most kPanelBytes of f32 beside the weight,
// never a whole f32 copy of it. Widening is exact (a bf16 value is an f32
// whose lower 16 bits are zero), so the product is the f32 product over the
// widened weight, up to the order BLAS sums in (the panels cut the output
// into bands, never the contraction).
//
// Cost: each panel is widened once per product (2 bytes read, 4 written and
// read again by BLAS), and the f32 operand is packed by BLAS once per panel;
// with panels of kPanelBytes this is small beside the product unless the
// product has few rows (a decode step's matrix-vector product, which then
// reads 10 bytes per weight where an f32 weight is 4).
#pragma once

#include <cstdint>

namespace autoshard {

// Bytes of f32 one widened panel may hold.
constexpr int64_t kPanelBytes = int64_t{4} << 20;

// One operand of a product: row-major storage with row stride `ld`, read
// transposed when `trans` (BLAS's convention); exactly one of f32 and bf16
// is set.
struct GemmOperand {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  int64_t ld = 1;
  bool trans = false;
};

// C = op(A) op(B) + beta C: C is M x N (row stride ldc), the contraction K
// long; either operand (or both) may be bf16, widened panel by panel.
void gemm_widening(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b,
                   float* c, int64_t ldc, float beta);
// The same by widening each bf16 operand whole first and making one f32
// product: the plain path that gemm_widening is tested against.
void gemm_widening_reference(int64_t M, int64_t N, int64_t K, const GemmOperand& a,
                             const GemmOperand& b, float* c, int64_t ldc, float beta);

// dst (row-major, c1 - c0 per row) = the rows [r0, r1) and columns [c0, c1)
// of the bf16 matrix `src` (row stride ld), widened.
void widen_block(const uint16_t* src, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                 float* dst);

}  // namespace autoshard
