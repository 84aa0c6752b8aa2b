#include "ir/ops/winograd.h"

#include <algorithm>
#include <vector>

#include "autoshard/tensor/parallel.h"
#include "ir/ops/gemm.h"

namespace autoshard {

namespace {

constexpr int kTile = 4, kOut = 2, kPoints = kTile * kTile;

// Tiles per batch element.
int64_t tiles_h(const ConvGeometry& g) {
  return (g.out_h + kOut - 1) / kOut;
}
int64_t tiles_w(const ConvGeometry& g) {
  return (g.out_w + kOut - 1) / kOut;
}

// U[p, ci, co] = (G k G^T)[p] for the 3x3 kernel k of channels (ci, co),
// G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. k is w[., ., ci, co], or with
// `turned` (the input gradient's kernel) w[2 - ., 2 - ., co, ci] of a w
// whose channels are the other way round.
// This thread's scratch `which`, at least `elements` long, kept between
// calls: a fresh vector of V, M and U per convolution (16 MiB and more)
// was faulted in and zeroed on every call, which made a ResNet-18 step
// 1.75x slower with Winograd than without (bench_keras_layers --model
// resnet, 2.66 s against 1.52 s) though each kernel alone was faster.
// A thread that ran Winograd keeps up to about 48 MiB (U, V, M, or the
// filter gradient's points: each sized by tiles_per_pass or 16 cin cout).
float* scratch(int which, int64_t elements) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[which];
  if (static_cast<int64_t>(b.size()) < elements) b.resize(static_cast<size_t>(elements));
  return b.data();
}

// U[p, ci, co] = (G k G^T)[p] of each 3x3 kernel k (in scratch 0).
const float* transform_kernel(const ConvGeometry& g, const float* w, bool turned) {
  const int64_t ci_n = g.cin, co_n = g.cout, plane = ci_n * co_n;
  float* u = scratch(0, kPoints * plane);
  parallel_for(ci_n, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci)
      for (int64_t co = 0; co < co_n; ++co) {
        float k[3][3], t[4][3];
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c)
            k[r][c] = turned ? w[(((2 - r) * 3 + 2 - c) * co_n + co) * ci_n + ci]
                             : w[((r * 3 + c) * ci_n + ci) * co_n + co];
        for (int c = 0; c < 3; ++c) {
          t[0][c] = k[0][c];
          t[1][c] = 0.5f * (k[0][c] + k[1][c] + k[2][c]);
          t[2][c] = 0.5f * (k[0][c] - k[1][c] + k[2][c]);
          t[3][c] = k[2][c];
        }
        float* out = u + ci * co_n + co;
        for (int r = 0; r < 4; ++r) {
          out[(r * 4 + 0) * plane] = t[r][0];
          out[(r * 4 + 1) * plane] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
          out[(r * 4 + 2) * plane] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
          out[(r * 4 + 3) * plane] = t[r][2];
        }
      }
  });
  return u;
}

// V[p, t, ci] = (B^T d B)[p] for each tile t in [t0, t1) of the batch
// (d: the tile's 4x4 inputs, zeros outside x), B^T = [1 0 -1 0; 0 1 1 0;
// 0 -1 1 0; 0 1 0 -1]. Channels innermost, so each step is a vector op.
void transform_input(const ConvGeometry& g, const float* x, int64_t t0, int64_t t1, float* v) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cin, count = t1 - t0;
  parallel_for(count, 1, [&](int64_t a, int64_t b) {
    std::vector<float> d(kPoints * C), s(kPoints * C);
    for (int64_t t = a; t < b; ++t) {
      const int64_t tile = t0 + t, n = tile / (th * tw);
      const int64_t h0 = (tile / tw) % th * kOut - g.pad_h, w0 = tile % tw * kOut - g.pad_w;
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < kTile; ++c) {
          float* dst = d.data() + (r * kTile + c) * C;
          const int64_t ih = h0 + r, iw = w0 + c;
          if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w)
            std::fill_n(dst, C, 0.0f);
          else
            std::copy_n(x + ((n * g.in_h + ih) * g.in_w + iw) * C, C, dst);
        }
      // Rows: s[i][c] = (B^T d)[i][c].
      auto row = [&](const float* src, float* dst, int64_t stride) {
        for (int64_t k = 0; k < C; ++k) {
          const float d0 = src[k], d1 = src[stride + k], d2 = src[2 * stride + k],
                      d3 = src[3 * stride + k];
          dst[k] = d0 - d2;
          dst[stride + k] = d1 + d2;
          dst[2 * stride + k] = d2 - d1;
          dst[3 * stride + k] = d1 - d3;
        }
      };
      for (int c = 0; c < kTile; ++c) row(d.data() + c * C, s.data() + c * C, kTile * C);
      // Columns, written to V's planes.
      for (int i = 0; i < kTile; ++i) {
        const float* si = s.data() + i * kTile * C;
        float* out[4];
        for (int j = 0; j < kTile; ++j) out[j] = v + ((i * kTile + j) * count + t) * C;
        for (int64_t k = 0; k < C; ++k) {
          const float s0 = si[k], s1 = si[C + k], s2 = si[2 * C + k], s3 = si[3 * C + k];
          out[0][k] = s0 - s2;
          out[1][k] = s1 + s2;
          out[2][k] = s2 - s1;
          out[3][k] = s1 - s3;
        }
      }
    }
  });
}

// y's 2x2 block of each tile = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1]; blocks
// cut off by out_h or out_w write only their inside.
void transform_output(const ConvGeometry& g, const float* m, int64_t t0, int64_t t1, float* y) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cout, count = t1 - t0;
  parallel_for(count, 1, [&](int64_t a, int64_t b) {
    std::vector<float> r(2 * kTile * C);
    for (int64_t t = a; t < b; ++t) {
      const int64_t tile = t0 + t, n = tile / (th * tw);
      const int64_t h0 = (tile / tw) % th * kOut, w0 = tile % tw * kOut;
      auto at = [&](int p) { return m + (p * count + t) * C; };
      for (int j = 0; j < kTile; ++j) {
        const float *m0 = at(j), *m1 = at(4 + j), *m2 = at(8 + j), *m3 = at(12 + j);
        float *r0 = r.data() + j * C, *r1 = r.data() + (kTile + j) * C;
        for (int64_t k = 0; k < C; ++k) {
          r0[k] = m0[k] + m1[k] + m2[k];
          r1[k] = m1[k] - m2[k] - m3[k];
        }
      }
      for (int i = 0; i < kOut && h0 + i < g.out_h; ++i) {
        const float* ri = r.data() + i * kTile * C;
        for (int j = 0; j < kOut && w0 + j < g.out_w; ++j) {
          float* dst = y + ((n * g.out_h + h0 + i) * g.out_w + w0 + j) * C;
          for (int64_t k = 0; k < C; ++k)
            dst[k] = j == 0 ? ri[k] + ri[C + k] + ri[2 * C + k]
                            : ri[C + k] - ri[2 * C + k] - ri[3 * C + k];
        }
      }
    }
  });
}

// D[p, t, co] = (A e A^T)[p] for the 2x2 block e of dy at each tile t in
// [t0, t1) (zeros past out_h and out_w), A = [1 0; 1 1; 1 -1; 0 -1]: the
// adjoint of transform_output, for the filter gradient.
void transform_gradient(const ConvGeometry& g, const float* dy, int64_t t0, int64_t t1, float* d) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cout, count = t1 - t0;
  parallel_for(count, 1, [&](int64_t a, int64_t b) {
    std::vector<float> e(kOut * kOut * C), r(kTile * kOut * C);
    for (int64_t t = a; t < b; ++t) {
      const int64_t tile = t0 + t, n = tile / (th * tw);
      const int64_t h0 = (tile / tw) % th * kOut, w0 = tile % tw * kOut;
      for (int i = 0; i < kOut; ++i)
        for (int j = 0; j < kOut; ++j) {
          float* dst = e.data() + (i * kOut + j) * C;
          if (h0 + i < g.out_h && w0 + j < g.out_w)
            std::copy_n(dy + ((n * g.out_h + h0 + i) * g.out_w + w0 + j) * C, C, dst);
          else
            std::fill_n(dst, C, 0.0f);
        }
      // Rows: r[i][j] = (A e)[i][j].
      for (int j = 0; j < kOut; ++j) {
        const float *e0 = e.data() + j * C, *e1 = e.data() + (kOut + j) * C;
        float* out[4];
        for (int i = 0; i < kTile; ++i) out[i] = r.data() + (i * kOut + j) * C;
        for (int64_t k = 0; k < C; ++k) {
          out[0][k] = e0[k];
          out[1][k] = e0[k] + e1[k];
          out[2][k] = e0[k] - e1[k];
          out[3][k] = -e1[k];
        }
      }
      // Columns, written to D's planes.
      for (int i = 0; i < kTile; ++i) {
        const float *r0 = r.data() + i * kOut * C, *r1 = r0 + C;
        float* out[4];
        for (int j = 0; j < kTile; ++j) out[j] = d + ((i * kTile + j) * count + t) * C;
        for (int64_t k = 0; k < C; ++k) {
          out[0][k] = r0[k];
          out[1][k] = r0[k] + r1[k];
          out[2][k] = r0[k] - r1[k];
          out[3][k] = -r1[k];
        }
      }
    }
  });
}

// dw[., ., ci, co] = G^T M G for the 4x4 points M[p, ci, co], G as in
// transform_kernel (its adjoint).
void transform_filter_gradient(const ConvGeometry& g, const float* m, float* dw) {
  const int64_t ci_n = g.cin, co_n = g.cout, plane = ci_n * co_n;
  parallel_for(ci_n, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci)
      for (int64_t co = 0; co < co_n; ++co) {
        const float* in = m + ci * co_n + co;
        float t[3][4];
        for (int c = 0; c < 4; ++c) {
          const float m0 = in[c * plane], m1 = in[(4 + c) * plane], m2 = in[(8 + c) * plane],
                      m3 = in[(12 + c) * plane];
          t[0][c] = m0 + 0.5f * (m1 + m2);
          t[1][c] = 0.5f * (m1 - m2);
          t[2][c] = 0.5f * (m1 + m2) + m3;
        }
        for (int r = 0; r < 3; ++r) {
          float* out = dw + (r * 3 * ci_n + ci) * co_n + co;
          out[0] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
          out[plane] = 0.5f * (t[r][1] - t[r][2]);
          out[2 * plane] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
        }
      }
  });
}

// Tiles per pass: V and M stay near 4M floats (16 MiB), within a large L3.
int64_t tiles_per_pass(const ConvGeometry& g) {
  const int64_t per = kPoints * (g.cin + g.cout);
  return std::max<int64_t>(1, (int64_t{4} << 20) / per);
}

}  // namespace

bool winograd_suits(const ConvGeometry& g) {
  return g.k_h == 3 && g.k_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 &&
         g.dil_w == 1 && g.groups == 1 && g.cin >= 16 && g.cout >= 16 && g.out_h >= 2 &&
         g.out_w >= 2;
}

namespace {

void winograd(const ConvGeometry& g, const float* x, const float* w, bool turned, float* y) {
  const float* u = transform_kernel(g, w, turned);
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g), step = tiles_per_pass(g);
  float* v = scratch(1, kPoints * std::min(step, total) * g.cin);
  float* m = scratch(2, kPoints * std::min(step, total) * g.cout);
  for (int64_t t0 = 0; t0 < total; t0 += step) {
    const int64_t t1 = std::min(total, t0 + step), count = t1 - t0;
    transform_input(g, x, t0, t1, v);
    // M[p] = V[p] [count, cin] x U[p] [cin, cout], one GEMM per point.
    for (int p = 0; p < kPoints; ++p)
      sgemm(false, false, count, g.cout, g.cin, v + p * count * g.cin, g.cin,
            u + p * g.cin * g.cout, g.cout, m + p * count * g.cout, g.cout);
    transform_output(g, m, t0, t1, y);
  }
}

}  // namespace

void conv3x3_winograd(const ConvGeometry& g, const float* x, const float* w, float* y) {
  winograd(g, x, w, false, y);
}

void conv3x3_winograd_backward_input(const ConvGeometry& g, const float* dy, const float* w,
                                     float* dx) {
  // dx[ih, iw, ci] = sum dy[ih + pad - kh, iw + pad - kw, co] w[kh, kw, ci, co]:
  // a convolution of dy by w'[2 - kh, 2 - kw, co, ci] padded by 2 - pad.
  ConvGeometry t = g;
  t.in_h = g.out_h, t.in_w = g.out_w, t.out_h = g.in_h, t.out_w = g.in_w;
  t.pad_h = 2 - g.pad_h, t.pad_w = 2 - g.pad_w;
  t.cin = g.cout, t.cout = g.cin, t.group_in = g.cout, t.group_out = g.cin;
  winograd(t, dy, w, true, dx);
}

void conv3x3_winograd_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                                      float* dw) {
  // The forward pass is linear in the kernel: y = A^T [(G k G^T) . V] A per
  // tile, so dk = G^T [(A dy A^T) . V] G summed over the tiles: per point,
  // M[p] [cin, cout] = V[p]^T D[p] over all tiles, 16 GEMMs.
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g), step = tiles_per_pass(g);
  float* v = scratch(1, kPoints * std::min(step, total) * g.cin);
  float* d = scratch(2, kPoints * std::min(step, total) * g.cout);
  float* m = scratch(3, kPoints * g.cin * g.cout);
  for (int64_t t0 = 0; t0 < total; t0 += step) {
    const int64_t t1 = std::min(total, t0 + step), count = t1 - t0;
    transform_input(g, x, t0, t1, v);
    transform_gradient(g, dy, t0, t1, d);
    for (int p = 0; p < kPoints; ++p)
      sgemm(true, false, g.cin, g.cout, count, v + p * count * g.cin, g.cin, d + p * count * g.cout,
            g.cout, m + p * g.cin * g.cout, g.cout, 1.0f, t0 == 0 ? 0.0f : 1.0f);
  }
  transform_filter_gradient(g, m, dw);
}

}  // namespace autoshard
