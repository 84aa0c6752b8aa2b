#include "ir/ops/depthwise.h"

#include <algorithm>

#include "autoshard/tensor/parallel.h"

namespace autoshard {

namespace {

int64_t positions(const ConvGeometry& g) {
  return g.out_h * g.out_w;
}

}  // namespace

bool depthwise_suits(const ConvGeometry& g, int64_t offset) {
  return offset == 0 && g.group_in == 1 && g.groups == g.cin && g.cout == g.cin && g.group_out == 1;
}

void depthwise_forward(const ConvGeometry& g, const float* x, const float* w, float* y) {
  const int64_t C = g.cin, P = positions(g);
  parallel_for(g.batch * P, grain_for(g.k_h * g.k_w * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / P, o = r % P;
      float* out = y + r * C;
      std::fill_n(out, C, 0.0f);
      for_each_tap(g, o / g.out_w, o % g.out_w,
                   [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                     const float* xi = x + ((b * g.in_h + ih) * g.in_w + iw) * C;
                     const float* wk = w + (kh * g.k_w + kw) * C;
                     for (int64_t c = 0; c < C; ++c) out[c] += xi[c] * wk[c];
                   });
    }
  });
}

void depthwise_backward_input(const ConvGeometry& g, const float* dy, const float* w, float* dx) {
  const int64_t C = g.cin, P = positions(g);
  std::fill_n(dx, g.batch * g.in_h * g.in_w * C, 0.0f);
  // One image per task: the taps of neighbouring positions overlap within it.
  parallel_for(g.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t o = 0; o < P; ++o) {
        const float* d = dy + (b * P + o) * C;
        for_each_tap(g, o / g.out_w, o % g.out_w,
                     [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                       float* xi = dx + ((b * g.in_h + ih) * g.in_w + iw) * C;
                       const float* wk = w + (kh * g.k_w + kw) * C;
                       for (int64_t c = 0; c < C; ++c) xi[c] += d[c] * wk[c];
                     });
      }
  });
}

namespace {

// The sum of one tap's products over the batch and positions for channels
// [c0, c0 + n), n <= kChannels, into acc: a fixed-width loop keeps acc in
// vector registers.
constexpr int64_t kChannels = 64;  // a block: 256 bytes of each row

template <int64_t width>
void tap_sum(const ConvGeometry& g, const float* x, const float* dy, int64_t tap, int64_t c0,
             int64_t n, float* acc) {
  const int64_t C = g.cin, kh = tap / g.k_w, kw = tap % g.k_w;
  const int64_t w = width > 0 ? width : n;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
        if (iw < 0 || iw >= g.in_w) continue;
        const float* xi = x + ((b * g.in_h + ih) * g.in_w + iw) * C + c0;
        const float* d = dy + ((b * g.out_h + oh) * g.out_w + ow) * C + c0;
        for (int64_t c = 0; c < w; ++c) acc[c] += xi[c] * d[c];
      }
    }
}

}  // namespace

void depthwise_backward_filter(const ConvGeometry& g, const float* x, const float* dy, float* dw) {
  const int64_t C = g.cin, T = g.k_h * g.k_w, blocks = chunk_count(C, kChannels);
  // One task per (tap, block of channels): each sums its own slice of dw.
  parallel_for(T * blocks, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t tap = k / blocks, c0 = k % blocks * kChannels, n = std::min(kChannels, C - c0);
      float acc[kChannels] = {};
      if (n == kChannels)
        tap_sum<kChannels>(g, x, dy, tap, c0, n, acc);
      else
        tap_sum<0>(g, x, dy, tap, c0, n, acc);
      std::copy_n(acc, n, dw + tap * C + c0);
    }
  });
}

}  // namespace autoshard
