// CPU kernels of the convolution and pooling ops (vision.cc), with the plain
// loops beside them that tests/vision_kernels_test.cc compares them to.
// Channels last; a 1-D op is a 2-D one with in_h = out_h = k_h = 1.
#pragma once

#include <cstdint>
#include <span>

namespace autoshard {

// One convolution between x [batch, in_h, in_w, cin] and y [batch, out_h,
// out_w, cout] through w [k_h, k_w, group_in, cout]:
//   y[b, oh, ow, j] = sum over taps and ci < group_in of
//     x[b, oh * stride_h - pad_h + kh * dil_h, ow * ..., group(j) * group_in + ci] * w[kh, kw, ci,
//     j]
// reading zeros outside x (pad_h, pad_w may be negative: a band of x).
struct ConvGeometry {
  int64_t batch = 1, in_h = 1, in_w = 1, out_h = 1, out_w = 1;
  int64_t k_h = 1, k_w = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t cin = 1, cout = 1;  // channels of the local x and y
  int64_t group_in = 1;       // input channels per group (w's third dim)
  int64_t groups = 1;
  // Output channels per group, globally (a grouped op whose channels are
  // split holds only some of them).
  int64_t group_out = 1;
};

// Calls f(kh, kw, ih, iw) for each tap of output position (oh, ow) that
// lands inside x.
template <typename F>
void for_each_tap(const ConvGeometry& g, int64_t oh, int64_t ow, F f) {
  for (int64_t kh = 0; kh < g.k_h; ++kh) {
    const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
    if (ih < 0 || ih >= g.in_h) continue;
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
      if (iw < 0 || iw >= g.in_w) continue;
      f(kh, kw, ih, iw);
    }
  }
}

// `offset`: the global index of the local first output channel (forward and
// filter gradient) or input channel (input gradient) of a grouped op whose
// channels are split; 0 otherwise.
void conv_forward(const ConvGeometry& g, int64_t offset, const float* x, const float* w, float* y);
void conv_backward_input(const ConvGeometry& g, int64_t offset, const float* dy, const float* w,
                         float* dx);
void conv_backward_filter(const ConvGeometry& g, int64_t offset, const float* x, const float* dy,
                          float* dw);

// The im2col + GEMM kernels alone (conv_forward and both gradients choose
// between them and Winograd's, ir/ops/winograd.h).
void conv_forward_gemm(const ConvGeometry& g, int64_t offset, const float* x, const float* w,
                       float* y);
void conv_backward_input_gemm(const ConvGeometry& g, int64_t offset, const float* dy,
                              const float* w, float* dx);
void conv_backward_filter_gemm(const ConvGeometry& g, int64_t offset, const float* x,
                               const float* dy, float* dw);

// The plain loops (the definitions above, written out).
void conv_forward_reference(const ConvGeometry& g, int64_t offset, const float* x, const float* w,
                            float* y);
void conv_backward_input_reference(const ConvGeometry& g, int64_t offset, const float* dy,
                                   const float* w, float* dx);
void conv_backward_filter_reference(const ConvGeometry& g, int64_t offset, const float* x,
                                    const float* dy, float* dw);

// Pooling: the same geometry with group_in = 1, cin = cout = channels and
// k_h x k_w the window. Positions outside x are skipped; an average divides
// by the count of positions inside x.
void pool_forward(const ConvGeometry& g, bool max, const float* x, float* y);
// dx from x and dy (max: dy goes to the first maximum of each window).
void pool_backward(const ConvGeometry& g, bool max, const float* x, const float* dy, float* dx);

// Pad: y [ys] is x [xs] moved by lo[d] along each dim d (negative: cropped),
// zero where no element of x lands. Any rank >= 1.
void pad_forward(std::span<const int64_t> xs, std::span<const int64_t> ys,
                 std::span<const int64_t> lo, const float* x, float* y);
// The plain loop: one element at a time, recursing over the dims.
void pad_forward_reference(std::span<const int64_t> xs, std::span<const int64_t> ys,
                           std::span<const int64_t> lo, const float* x, float* y);

}  // namespace autoshard
