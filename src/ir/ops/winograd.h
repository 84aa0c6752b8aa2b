// Winograd's minimal filtering F(2x2, 3x3) for the 3x3 convolutions of
// stride 1 (Lavin and Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2016): each 2x2 block of outputs from a 4x4 tile of inputs in
// 16 products per channel pair instead of 36. The tile and the kernel are
// transformed (V = B^T d B, U = G g G^T), the 16 elementwise products
// summed over input channels are 16 GEMMs [tiles, cin] x [cin, cout], and
// the result transformed back (Y = A^T M A). The im2col GEMM of the same
// convolution multiplies a [tiles x 4, 9 cin] matrix by [9 cin, cout]:
// 2.25 times the work, on products only cout wide (64 columns run at two
// thirds of OpenBLAS's rate on wider ones; bench/README.md).
//
// The transforms add and subtract, so the result differs from the plain
// loop (vision_kernels.h's conv_forward_reference) in the last bits only;
// tests/ops_gradient_test.cc compares the two.
#pragma once

#include "ir/ops/vision_kernels.h"

namespace autoshard {

// Whether F(2x2, 3x3) computes `g` (3x3, stride 1, no dilation, one group)
// and is chosen for it: channels wide enough that the 16 GEMMs are not
// dominated by the transforms (bench_keras_kernels measures the choice).
bool winograd_suits(const ConvGeometry& g);

// y [batch, out_h, out_w, cout] = x [batch, in_h, in_w, cin] convolved with
// w [3, 3, cin, cout], zeros outside x (any pad_h, pad_w), as conv_forward.
void conv3x3_winograd(const ConvGeometry& g, const float* x, const float* w, float* y);

// dx of a convolution winograd_suits: the 3x3 convolution of dy with w
// turned half a turn and its channels swapped, padded by 2 - pad.
void conv3x3_winograd_backward_input(const ConvGeometry& g, const float* dy, const float* w,
                                     float* dx);

// dw [3, 3, cin, cout] of a convolution winograd_suits, from x and dy: the
// adjoint of conv3x3_winograd in the kernel (16 GEMMs [cin, tiles] x
// [tiles, cout] where im2col's is [9 cin, tiles x 4] x [tiles x 4, cout]).
void conv3x3_winograd_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                                      float* dw);

}  // namespace autoshard
