#include "ir/ops/vision_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "autoshard/tensor/parallel.h"
#include "ir/ops/depthwise.h"
#include "ir/ops/gemm.h"
#include "ir/ops/winograd.h"
#include "tensor/lanes.h"

namespace autoshard {
namespace {

int64_t taps(const ConvGeometry& g) {
  return g.k_h * g.k_w;
}
int64_t positions(const ConvGeometry& g) {
  return g.out_h * g.out_w;
}

// The group of local output channel j.
int64_t group_of(const ConvGeometry& g, int64_t offset, int64_t j) {
  return g.groups == 1 ? 0 : (offset + j) / g.group_out;
}

// Runs of local output channels [j0, j1) within one group.
struct Segment {
  int64_t group, j0, j1;
};
std::vector<Segment> segments(const ConvGeometry& g, int64_t offset) {
  std::vector<Segment> out;
  for (int64_t j = 0; j < g.cout;) {
    const int64_t grp = group_of(g, offset, j);
    const int64_t end = g.groups == 1 ? g.cout : std::min(g.cout, (grp + 1) * g.group_out - offset);
    out.push_back({grp, j, end});
    j = end;
  }
  return out;
}

thread_local std::vector<float> col_scratch(1);
float* col_buffer(int64_t count) {
  if (static_cast<int64_t>(col_scratch.size()) < count) col_scratch.resize(count);
  return col_scratch.data();
}

// Batch elements per im2col chunk: the column matrix stays near 8M floats.
int64_t chunk_of(const ConvGeometry& g) {
  const int64_t per = std::max<int64_t>(1, positions(g) * taps(g) * g.group_in);
  return std::clamp<int64_t>((int64_t{8} << 20) / per, 1, std::max<int64_t>(1, g.batch));
}

// col[(b - b0) * P + o, t * group_in + ci] = x[b, tap t of o, c0 + ci] (or 0).
void im2col(const ConvGeometry& g, const float* x, int64_t b0, int64_t b1, int64_t c0, float* col) {
  const int64_t P = positions(g), row = taps(g) * g.group_in;
  parallel_for((b1 - b0) * P, grain_for(row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = b0 + r / P, oh = r % P / g.out_w, ow = r % g.out_w;
      float* dst = col + r * row;
      std::fill_n(dst, row, 0.0f);
      for_each_tap(g, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
        std::memcpy(dst + (kh * g.k_w + kw) * g.group_in,
                    x + ((b * g.in_h + ih) * g.in_w + iw) * g.cin + c0, g.group_in * sizeof(float));
      });
    }
  });
}

// x[b, tap t of o, c0 + ci] += col[...]: one batch element per task (the
// taps of different positions overlap within an image).
void col2im(const ConvGeometry& g, const float* col, int64_t b0, int64_t b1, int64_t c0, float* x) {
  const int64_t P = positions(g), row = taps(g) * g.group_in;
  parallel_for(b1 - b0, 1, [&](int64_t e0, int64_t e1) {
    for (int64_t b = b0 + e0; b < b0 + e1; ++b)
      for (int64_t o = 0; o < P; ++o) {
        const float* src = col + ((b - b0) * P + o) * row;
        for_each_tap(g, o / g.out_w, o % g.out_w,
                     [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                       float* dst = x + ((b * g.in_h + ih) * g.in_w + iw) * g.cin + c0;
                       const float* s = src + (kh * g.k_w + kw) * g.group_in;
                       for (int64_t ci = 0; ci < g.group_in; ++ci) dst[ci] += s[ci];
                     });
      }
  });
}

// A 1x1 kernel with stride 1 and no padding reads x as it is.
bool pointwise(const ConvGeometry& g) {
  return taps(g) == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0 &&
         g.in_h == g.out_h && g.in_w == g.out_w;
}

}  // namespace

void conv_forward_reference(const ConvGeometry& g, int64_t offset, const float* x, const float* w,
                            float* y) {
  std::vector<int64_t> base(g.cout);
  for (int64_t j = 0; j < g.cout; ++j) base[j] = group_of(g, offset, j) * g.group_in;
  parallel_for(g.batch * positions(g), grain_for(taps(g) * g.group_in * g.cout),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t b = r / positions(g), o = r % positions(g);
                   float* out = y + r * g.cout;
                   std::fill_n(out, g.cout, 0.0f);
                   for_each_tap(g, o / g.out_w, o % g.out_w,
                                [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                                  const float* xi = x + ((b * g.in_h + ih) * g.in_w + iw) * g.cin;
                                  const float* wk = w + (kh * g.k_w + kw) * g.group_in * g.cout;
                                  for (int64_t ci = 0; ci < g.group_in; ++ci)
                                    for (int64_t j = 0; j < g.cout; ++j)
                                      out[j] += xi[base[j] + ci] * wk[ci * g.cout + j];
                                });
                 }
               });
}

void conv_backward_input_reference(const ConvGeometry& g, int64_t offset, const float* dy,
                                   const float* w, float* dx) {
  std::fill_n(dx, g.batch * g.in_h * g.in_w * g.cin, 0.0f);
  // dx channel i: its group and its row of w; the output channels it feeds.
  std::vector<int64_t> row(g.cin), co0(g.cin), co1(g.cin);
  for (int64_t i = 0; i < g.cin; ++i) {
    if (g.groups == 1) {
      row[i] = i, co0[i] = 0, co1[i] = g.cout;
      continue;
    }
    const int64_t gi = offset + i, grp = gi / g.group_in;
    row[i] = gi % g.group_in, co0[i] = grp * g.group_out, co1[i] = co0[i] + g.group_out;
  }
  parallel_for(g.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t o = 0; o < positions(g); ++o) {
        const float* d = dy + (b * positions(g) + o) * g.cout;
        for_each_tap(g, o / g.out_w, o % g.out_w,
                     [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                       float* xi = dx + ((b * g.in_h + ih) * g.in_w + iw) * g.cin;
                       const float* wk = w + (kh * g.k_w + kw) * g.group_in * g.cout;
                       for (int64_t i = 0; i < g.cin; ++i) {
                         float s = 0;
                         for (int64_t co = co0[i]; co < co1[i]; ++co)
                           s += d[co] * wk[row[i] * g.cout + co];
                         xi[i] += s;
                       }
                     });
      }
  });
}

void conv_backward_filter_reference(const ConvGeometry& g, int64_t offset, const float* x,
                                    const float* dy, float* dw) {
  std::vector<int64_t> base(g.cout);
  for (int64_t j = 0; j < g.cout; ++j) base[j] = group_of(g, offset, j) * g.group_in;
  const int64_t T = taps(g);
  // One task per tap: each writes its own slice of dw, in a fixed order.
  parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t kh = t / g.k_w, kw = t % g.k_w;
      float* wk = dw + t * g.group_in * g.cout;
      std::fill_n(wk, g.group_in * g.cout, 0.0f);
      for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dil_h;
          if (ih < 0 || ih >= g.in_h) continue;
          for (int64_t ow = 0; ow < g.out_w; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dil_w;
            if (iw < 0 || iw >= g.in_w) continue;
            const float* xi = x + ((b * g.in_h + ih) * g.in_w + iw) * g.cin;
            const float* d = dy + ((b * g.out_h + oh) * g.out_w + ow) * g.cout;
            for (int64_t ci = 0; ci < g.group_in; ++ci)
              for (int64_t j = 0; j < g.cout; ++j) wk[ci * g.cout + j] += xi[base[j] + ci] * d[j];
          }
        }
    }
  });
}

// im2col + one GEMM per group segment and chunk of the batch. Depthwise
// (one input channel per group) has no reduction worth a GEMM: plain loop.
// Winograd where it suits (ir/ops/winograd.h), the depthwise kernels for
// depthwise convolutions (ir/ops/depthwise.h), else im2col + GEMM.
void conv_forward(const ConvGeometry& g, int64_t offset, const float* x, const float* w, float* y) {
  if (winograd_suits(g)) return conv3x3_winograd(g, x, w, y);
  if (depthwise_suits(g, offset)) return depthwise_forward(g, x, w, y);
  conv_forward_gemm(g, offset, x, w, y);
}

void conv_forward_gemm(const ConvGeometry& g, int64_t offset, const float* x, const float* w,
                       float* y) {
  if (g.group_in == 1 && g.groups > 1) return conv_forward_reference(g, offset, x, w, y);
  const int64_t P = positions(g), K = taps(g) * g.group_in, step = chunk_of(g);
  const std::vector<Segment> segs = segments(g, offset);
  for (int64_t b0 = 0; b0 < g.batch; b0 += step) {
    const int64_t b1 = std::min(g.batch, b0 + step), M = (b1 - b0) * P;
    for (const Segment& s : segs) {
      const float* a = x + b0 * P * g.cin + s.group * g.group_in;
      int64_t lda = g.cin;
      if (!pointwise(g) || g.groups > 1) {
        float* col = col_buffer(M * K);
        im2col(g, x, b0, b1, s.group * g.group_in, col);
        a = col, lda = K;
      }
      sgemm(false, false, M, s.j1 - s.j0, K, a, lda, w + s.j0, g.cout, y + b0 * P * g.cout + s.j0,
            g.cout);
    }
  }
}

// dcol = dy_group . w_group^T, then col2im. The plain loop where dx's
// channels are a part of the groups (a device's channel block of a
// depthwise gradient).
void conv_backward_input(const ConvGeometry& g, int64_t offset, const float* dy, const float* w,
                         float* dx) {
  if (winograd_suits(g)) return conv3x3_winograd_backward_input(g, dy, w, dx);
  if (depthwise_suits(g, offset)) return depthwise_backward_input(g, dy, w, dx);
  conv_backward_input_gemm(g, offset, dy, w, dx);
}

void conv_backward_input_gemm(const ConvGeometry& g, int64_t offset, const float* dy,
                              const float* w, float* dx) {
  if (g.groups > 1 && (offset != 0 || g.cin != g.groups * g.group_in || g.group_in == 1))
    return conv_backward_input_reference(g, offset, dy, w, dx);
  const int64_t P = positions(g), K = taps(g) * g.group_in, step = chunk_of(g);
  const int64_t cog = g.groups == 1 ? g.cout : g.group_out;
  if (pointwise(g) && g.groups == 1) {
    sgemm(false, true, g.batch * P, g.cin, g.cout, dy, g.cout, w, g.cout, dx, g.cin);
    return;
  }
  std::fill_n(dx, g.batch * g.in_h * g.in_w * g.cin, 0.0f);
  for (int64_t b0 = 0; b0 < g.batch; b0 += step) {
    const int64_t b1 = std::min(g.batch, b0 + step), M = (b1 - b0) * P;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      float* col = col_buffer(M * K);
      sgemm(false, true, M, K, cog, dy + b0 * P * g.cout + grp * cog, g.cout, w + grp * cog, g.cout,
            col, K);
      col2im(g, col, b0, b1, grp * g.group_in, dx);
    }
  }
}

// dw_segment += col^T . dy_segment over chunks of the batch.
// Winograd where it suits (ir/ops/winograd.h), the depthwise kernels for
// depthwise convolutions (ir/ops/depthwise.h), else im2col + GEMM.
void conv_backward_filter(const ConvGeometry& g, int64_t offset, const float* x, const float* dy,
                          float* dw) {
  if (winograd_suits(g)) return conv3x3_winograd_backward_filter(g, x, dy, dw);
  if (depthwise_suits(g, offset)) return depthwise_backward_filter(g, x, dy, dw);
  conv_backward_filter_gemm(g, offset, x, dy, dw);
}

void conv_backward_filter_gemm(const ConvGeometry& g, int64_t offset, const float* x,
                               const float* dy, float* dw) {
  if (g.group_in == 1 && g.groups > 1) return conv_backward_filter_reference(g, offset, x, dy, dw);
  const int64_t P = positions(g), K = taps(g) * g.group_in, step = chunk_of(g);
  const std::vector<Segment> segs = segments(g, offset);
  std::fill_n(dw, K * g.cout, 0.0f);
  for (int64_t b0 = 0; b0 < g.batch; b0 += step) {
    const int64_t b1 = std::min(g.batch, b0 + step), M = (b1 - b0) * P;
    for (const Segment& s : segs) {
      const float* a = x + b0 * P * g.cin + s.group * g.group_in;
      int64_t lda = g.cin;
      if (!pointwise(g) || g.groups > 1) {
        float* col = col_buffer(M * K);
        im2col(g, x, b0, b1, s.group * g.group_in, col);
        a = col, lda = K;
      }
      sgemm(true, false, K, s.j1 - s.j0, M, a, lda, dy + b0 * P * g.cout + s.j0, g.cout, dw + s.j0,
            g.cout, 1.0f, 1.0f);
    }
  }
}

void pool_forward(const ConvGeometry& g, bool max, const float* x, float* y) {
  const int64_t C = g.cout;
  parallel_for(g.batch * positions(g), grain_for(taps(g) * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / positions(g), o = r % positions(g);
      float* out = y + r * C;
      std::fill_n(out, C, max ? -std::numeric_limits<float>::infinity() : 0.0f);
      int64_t count = 0;
      for_each_tap(g, o / g.out_w, o % g.out_w, [&](int64_t, int64_t, int64_t ih, int64_t iw) {
        const float* xi = x + ((b * g.in_h + ih) * g.in_w + iw) * C;
        ++count;
        if (max)
          for (int64_t c = 0; c < C; ++c) out[c] = nan_max(out[c], xi[c]);  // NaN wins
        else
          for (int64_t c = 0; c < C; ++c) out[c] += xi[c];
      });
      if (count == 0) std::fill_n(out, C, 0.0f);  // a window wholly in the padding
      if (!max && count > 0)
        for (int64_t c = 0; c < C; ++c) out[c] /= static_cast<float>(count);
    }
  });
}

void pool_backward(const ConvGeometry& g, bool max, const float* x, const float* dy, float* dx) {
  const int64_t C = g.cout;
  std::fill_n(dx, g.batch * g.in_h * g.in_w * C, 0.0f);
  parallel_for(g.batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> best(C);
    std::vector<int64_t> where(C);
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t o = 0; o < positions(g); ++o) {
        const float* d = dy + (b * positions(g) + o) * C;
        int64_t count = 0;
        std::fill(best.begin(), best.end(), -std::numeric_limits<float>::infinity());
        std::fill(where.begin(), where.end(), -1);
        for_each_tap(g, o / g.out_w, o % g.out_w, [&](int64_t, int64_t, int64_t ih, int64_t iw) {
          const int64_t at = ((b * g.in_h + ih) * g.in_w + iw) * C;
          ++count;
          if (max) {
            for (int64_t c = 0; c < C; ++c)
              if (where[c] < 0 || x[at + c] > best[c] || x[at + c] != x[at + c])
                best[c] = x[at + c], where[c] = at + c;  // as PyTorch: the last NaN takes dy
          }
        });
        if (max) {
          for (int64_t c = 0; c < C; ++c)
            if (where[c] >= 0) dx[where[c]] += d[c];
          continue;
        }
        if (count == 0) continue;
        const float inv = 1.0f / static_cast<float>(count);
        for_each_tap(g, o / g.out_w, o % g.out_w, [&](int64_t, int64_t, int64_t ih, int64_t iw) {
          float* xi = dx + ((b * g.in_h + ih) * g.in_w + iw) * C;
          for (int64_t c = 0; c < C; ++c) xi[c] += d[c] * inv;
        });
      }
  });
}

namespace {

void pad_rows_reference(std::span<const int64_t> xs, std::span<const int64_t> ys,
                        std::span<const int64_t> lo, size_t d, const float* x, float* y) {
  int64_t xstride = 1, ystride = 1;
  for (size_t e = d + 1; e < xs.size(); ++e) xstride *= xs[e], ystride *= ys[e];
  const int64_t begin = std::max<int64_t>(0, -lo[d]);
  const int64_t end = std::min<int64_t>(xs[d], ys[d] - lo[d]);
  for (int64_t i = begin; i < end; ++i) {
    const float* src = x + i * xstride;
    float* dst = y + (i + lo[d]) * ystride;
    if (d + 1 == xs.size())
      *dst = *src;
    else
      pad_rows_reference(xs, ys, lo, d + 1, src, dst);
  }
}

}  // namespace

void pad_forward_reference(std::span<const int64_t> xs, std::span<const int64_t> ys,
                           std::span<const int64_t> lo, const float* x, float* y) {
  int64_t n = 1;
  for (int64_t v : ys) n *= v;
  std::fill_n(y, n, 0.0f);
  pad_rows_reference(xs, ys, lo, 0, x, y);
}

// The dims after the last moved one are copied whole, so y is a set of rows
// (one per index of the dims up to and including the last moved one, k)
// each a run of `inner` floats; the rows of one index of the dims before k
// are contiguous in x and y, so each such index is one memcpy and two fills.
void pad_forward(std::span<const int64_t> xs, std::span<const int64_t> ys,
                 std::span<const int64_t> lo, const float* x, float* y) {
  const size_t rank = xs.size();
  size_t k = 0;  // the last moved dim (0 if none: then all of x is one run)
  for (size_t d = 0; d < rank; ++d)
    if (xs[d] != ys[d] || lo[d] != 0) k = d;
  int64_t inner = 1, outer = 1;
  for (size_t d = k + 1; d < rank; ++d) inner *= ys[d];
  for (size_t d = 0; d < k; ++d) outer *= ys[d];
  const int64_t y_run = ys[k] * inner;  // one index of dims < k, in y
  const int64_t begin = std::max<int64_t>(0, -lo[k]), end = std::min<int64_t>(xs[k], ys[k] - lo[k]);
  const int64_t copy = std::max<int64_t>(0, end - begin) * inner;
  const int64_t head = copy > 0 ? (begin + lo[k]) * inner : y_run;
  parallel_for(outer, grain_for(y_run), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      float* dst = y + o * y_run;
      // Where row o of y sits in x: its index along each dim < k, moved back.
      int64_t src = 0, rest = o, stride = xs[k] * inner;
      bool inside = copy > 0;
      for (size_t d = k; d-- > 0;) {
        const int64_t i = rest % ys[d] - lo[d];
        rest /= ys[d];
        inside = inside && i >= 0 && i < xs[d];
        src += i * stride;
        stride *= xs[d];
      }
      if (!inside) {
        std::fill_n(dst, y_run, 0.0f);
        continue;
      }
      std::fill_n(dst, head, 0.0f);
      std::memcpy(dst + head, x + src + begin * inner, copy * sizeof(float));
      std::fill_n(dst + head + copy, y_run - head - copy, 0.0f);
    }
  });
}

}  // namespace autoshard
