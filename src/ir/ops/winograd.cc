#include "ir/ops/winograd.h"

#include <algorithm>
#include <vector>

#include "autoshard/tensor/parallel.h"
#include "tensor/tile_gemm.h"
#include "tensor/transpose.h"

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

// This thread's scratch `which`, at least `elements` long, kept between
// calls: a fresh vector of V, M and U per convolution (16 MiB and more)
// was faulted in and zeroed on every call, which made a ResNet-18 step
// 1.75x slower with Winograd than without (bench_keras_layers --model
// resnet, 2.66 s against 1.52 s) though each kernel alone was faster.
// A calling thread keeps U (0: 16 cin cout floats), the filter gradient's
// sums (3: up to 16 MiB on the blocked path, 16 cin cout on the planes
// path) and on the planes path V and M or D (1, 2: about 16 MiB together);
// a core's blocks keep V and M or D (1, 2: about 512 KiB, more for very
// uneven channels, at least 8 tiles a block). Resizing moves a buffer, so
// the chunks of a parallel loop take only 1 and 2, and only where their
// caller holds neither; the turned kernel (1) is dead before V is made.
float* scratch(int which, int64_t elements) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[which];
  if (static_cast<int64_t>(b.size()) < elements) b.resize(static_cast<size_t>(elements));
  return b.data();
}

// w' [3, 3, ci, co] = w [2 - ., 2 - ., co, ci]: the input gradient's
// kernel, the taps turned half a turn and each tap's channels transposed
// (in scratch 1, which V takes over once U is made), in runs of 16 ci.
const float* turn_kernel(const ConvGeometry& g, const float* w) {
  constexpr int64_t kRun = 16;
  const int64_t ci_n = g.cin, co_n = g.cout, plane = ci_n * co_n;
  const int64_t runs = chunk_count(ci_n, kRun);
  float* turned = scratch(1, 9 * plane);
  parallel_for(9 * runs, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t tap = b / runs, ci0 = b % runs * kRun;
      // [co, ci] of the turned tap into [ci, co].
      transpose_columns(w + (8 - tap) * plane, co_n, ci_n, ci0, std::min(ci_n, ci0 + kRun),
                        turned + tap * plane, co_n);
    }
  });
  return turned;
}

// U[p, ci, co] = (G k G^T)[p] for the 3x3 kernel k of channels (ci, co),
// G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1], in scratch 0. k is w[., ., ci,
// co], or with `turned` (the input gradient's kernel) w[2 - ., 2 - ., co,
// ci] of a w whose channels are the other way round. Runs of 16 output
// channels at a time, as vectors: a kernel at a time, 12% of a ResNet-18
// step went here.
const float* transform_kernel(const ConvGeometry& g, const float* w, bool turned) {
  constexpr int64_t kRun = 16;
  const int64_t ci_n = g.cin, co_n = g.cout, plane = ci_n * co_n;
  const float* k = turned ? turn_kernel(g, w) : w;  // [3, 3, ci, co]
  float* u = scratch(0, kPoints * plane);
  parallel_for(ci_n, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci)
      for (int64_t co0 = 0; co0 < co_n; co0 += kRun) {
        const int64_t n = std::min(kRun, co_n - co0);
        float tap[9][kRun] = {}, t[4][3][kRun], out[kPoints][kRun];
        for (int i = 0; i < 9; ++i) std::copy_n(k + (i * ci_n + ci) * co_n + co0, n, tap[i]);
        // t = G k: rows of the kernel combined.
        for (int c = 0; c < 3; ++c)
          for (int64_t l = 0; l < kRun; ++l) {
            const float k0 = tap[c][l], k1 = tap[3 + c][l], k2 = tap[6 + c][l];
            t[0][c][l] = k0;
            t[1][c][l] = 0.5f * (k0 + k1 + k2);
            t[2][c][l] = 0.5f * (k0 - k1 + k2);
            t[3][c][l] = k2;
          }
        // (G k) G^T: its columns combined.
        for (int r = 0; r < 4; ++r)
          for (int64_t l = 0; l < kRun; ++l) {
            const float t0 = t[r][0][l], t1 = t[r][1][l], t2 = t[r][2][l];
            out[r * 4 + 0][l] = t0;
            out[r * 4 + 1][l] = 0.5f * (t0 + t1 + t2);
            out[r * 4 + 2][l] = 0.5f * (t0 - t1 + t2);
            out[r * 4 + 3][l] = t2;
          }
        for (int p = 0; p < kPoints; ++p) std::copy_n(out[p], n, u + p * plane + ci * co_n + co0);
      }
  });
  return u;
}

// The tile transforms below are sequential: they run inside the chunks of
// the callers' parallel loops. Each handles the `count` tiles first, first +
// 1, ... of the batch (numbered over batch, rows, columns) and reads or
// writes them as rows 0..count-1 of 16 planes (one per point p) of
// `plane_rows` rows each, channels innermost, so each step is a vector op.

// V[p, t, ci] = (B^T d B)[p] for each tile t (d: the tile's 4x4 inputs,
// zeros outside x), B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
void transform_input(const ConvGeometry& g, const float* x, int64_t first, int64_t count,
                     int64_t plane_rows, float* v) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cin;
  // Rows of the tile outside x read these zeros instead of a copy of x.
  thread_local std::vector<float> zeros, s;
  zeros.assign(static_cast<size_t>(C), 0.0f), s.resize(static_cast<size_t>(kPoints * C));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t tile = first + t, n = tile / (th * tw);
    const int64_t h0 = (tile / tw) % th * kOut - g.pad_h, w0 = tile % tw * kOut - g.pad_w;
    const float* d[kTile][kTile];  // the tile's inputs, channels innermost
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c) {
        const int64_t ih = h0 + r, iw = w0 + c;
        d[r][c] = ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w
                      ? zeros.data()
                      : x + ((n * g.in_h + ih) * g.in_w + iw) * C;
      }
    // Rows: s[i][c] = (B^T d)[i][c].
    for (int c = 0; c < kTile; ++c) {
      const float *d0 = d[0][c], *d1 = d[1][c], *d2 = d[2][c], *d3 = d[3][c];
      float *s0 = s.data() + c * C, *s1 = s0 + kTile * C, *s2 = s1 + kTile * C,
            *s3 = s2 + kTile * C;
      for (int64_t k = 0; k < C; ++k) {
        s0[k] = d0[k] - d2[k];
        s1[k] = d1[k] + d2[k];
        s2[k] = d2[k] - d1[k];
        s3[k] = d1[k] - d3[k];
      }
    }
    // Columns, written to V's planes.
    for (int i = 0; i < kTile; ++i) {
      const float* si = s.data() + i * kTile * C;
      float* out[4];
      for (int j = 0; j < kTile; ++j) out[j] = v + ((i * kTile + j) * plane_rows + t) * C;
      for (int64_t k = 0; k < C; ++k) {
        const float s0 = si[k], s1 = si[C + k], s2 = si[2 * C + k], s3 = si[3 * C + k];
        out[0][k] = s0 - s2;
        out[1][k] = s1 + s2;
        out[2][k] = s2 - s1;
        out[3][k] = s1 - s3;
      }
    }
  }
}

// y's 2x2 block of each tile = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1]; blocks
// cut off by out_h or out_w write only their inside.
void transform_output(const ConvGeometry& g, const float* m, int64_t first, int64_t count,
                      int64_t plane_rows, float* y) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cout;
  thread_local std::vector<float> r;
  r.resize(static_cast<size_t>(2 * kTile * C));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t tile = first + t, n = tile / (th * tw);
    const int64_t h0 = (tile / tw) % th * kOut, w0 = tile % tw * kOut;
    auto at = [&](int p) { return m + (p * plane_rows + t) * C; };
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
}

// D[p, t, co] = (A e A^T)[p] for the 2x2 block e of dy at each tile t (zeros
// past out_h and out_w), A = [1 0; 1 1; 1 -1; 0 -1]: the adjoint of
// transform_output, for the filter gradient.
void transform_gradient(const ConvGeometry& g, const float* dy, int64_t first, int64_t count,
                        int64_t plane_rows, float* d) {
  const int64_t th = tiles_h(g), tw = tiles_w(g), C = g.cout;
  thread_local std::vector<float> e, r;
  e.resize(static_cast<size_t>(kOut * kOut * C)), r.resize(static_cast<size_t>(kTile * kOut * C));
  for (int64_t t = 0; t < count; ++t) {
    const int64_t tile = first + t, n = tile / (th * tw);
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
      for (int j = 0; j < kTile; ++j) out[j] = d + ((i * kTile + j) * plane_rows + t) * C;
      for (int64_t k = 0; k < C; ++k) {
        out[0][k] = r0[k];
        out[1][k] = r0[k] + r1[k];
        out[2][k] = r0[k] - r1[k];
        out[3][k] = -r1[k];
      }
    }
  }
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

// Tiles per pass of the planes path: V and M stay near 4M floats (16 MiB),
// within a large L3.
int64_t tiles_per_pass(const ConvGeometry& g) {
  const int64_t per = kPoints * (g.cin + g.cout);
  return std::max<int64_t>(1, (int64_t{4} << 20) / per);
}

// Tiles per block of the blocked path: one block's V and M (16 (cin + cout)
// floats a tile) in about 512 KiB, within the L2 cache a core has to itself
// (256 KiB and 1 MiB ran 5-20% slower on the ResNet's layers), in multiples
// of 8 rows (AVX-512 tile_gemm's block; AVX2's is 6).
int64_t tiles_per_block(const ConvGeometry& g) {
  constexpr int64_t kBlockFloats = 128 << 10;
  return std::clamp<int64_t>(kBlockFloats / (kPoints * (g.cin + g.cout)) / 8 * 8, 8, 256);
}

// Applies tiles(first, count) to [0, total) in chunks of `per` tiles on the
// cores.
template <typename F>
void for_tile_chunks(int64_t total, int64_t per, const F& tiles) {
  parallel_for(chunk_count(total, per), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) tiles(c * per, std::min(per, total - c * per));
  });
}

// Whether the blocked path suits g: each block reads all of U (16 cin cout
// floats), which from 512 x 512 channels on (16 MiB) no longer stays in the
// caches and made the blocked path slower than the planes path.
bool blocks_suit(const ConvGeometry& g) {
  return g.cin * g.cout <= 256 * 256;
}

// The blocked path: each core transforms a block of tiles, runs its 16 small
// products on tile_gemm and transforms them back, all within its L2 cache.
// Each output is one chain over cin whatever the block, so a batch of few
// tiles is cut into smaller blocks to keep every core busy.
void winograd_blocked(const ConvGeometry& g, const float* x, const float* u, float* y) {
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g);
  const int64_t shared = (chunk_count(total, intra_op_threads()) + 7) / 8 * 8;
  const int64_t block = std::min(tiles_per_block(g), shared);
  for_tile_chunks(total, block, [&](int64_t first, int64_t count) {
    float* v = scratch(1, kPoints * block * g.cin);
    float* m = scratch(2, kPoints * block * g.cout);
    transform_input(g, x, first, count, count, v);
    // M[p] [count, cout] = V[p] [count, cin] x U[p] [cin, cout].
    for (int p = 0; p < kPoints; ++p)
      tile_gemm(count, g.cout, g.cin, 1.0f, v + p * count * g.cin, g.cin, 1, u + p * g.cin * g.cout,
                g.cout, false, m + p * count * g.cout, g.cout);
    transform_output(g, m, first, count, count, y);
  });
}

// Calls product(p, j0, n) for every point p and run [j0, j0 + n) of 128 of
// cout's columns, on the cores: each piece reads a [cin, 128] slice of its
// point's U (256 KiB at 512 channels), which stays in a core's L2 while
// tile_gemm runs down the rows. (OpenBLAS with the Haswell kernels this
// machine's environment chooses ran these products at half tile_gemm's rate.)
template <typename F>
void for_point_columns(const ConvGeometry& g, const F& product) {
  constexpr int64_t kColumns = 128;
  const int64_t runs = chunk_count(g.cout, kColumns);
  parallel_for(kPoints * runs, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j0 = b % runs * kColumns;
      product(static_cast<int>(b / runs), j0, std::min(kColumns, g.cout - j0));
    }
  });
}

// The planes path: the whole pass's V, 16 products of the pass's tiles,
// then the whole pass's output transform.
void winograd_planes(const ConvGeometry& g, const float* x, const float* u, float* y) {
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g), step = tiles_per_pass(g);
  float* v = scratch(1, kPoints * std::min(step, total) * g.cin);
  float* m = scratch(2, kPoints * std::min(step, total) * g.cout);
  const int64_t per = std::max<int64_t>(1, grain_for(kPoints * g.cin));
  for (int64_t t0 = 0; t0 < total; t0 += step) {
    const int64_t count = std::min(total, t0 + step) - t0;
    for_tile_chunks(count, per, [&](int64_t first, int64_t n) {
      transform_input(g, x, t0 + first, n, count, v + first * g.cin);
    });
    // M[p] = V[p] [count, cin] x U[p] [cin, cout], one product per point.
    for_point_columns(g, [&](int p, int64_t j0, int64_t n) {
      tile_gemm(count, n, g.cin, 1.0f, v + p * count * g.cin, g.cin, 1, u + p * g.cin * g.cout + j0,
                g.cout, false, m + p * count * g.cout + j0, g.cout);
    });
    for_tile_chunks(count, per, [&](int64_t first, int64_t n) {
      transform_output(g, m + first * g.cout, t0 + first, n, count, y);
    });
  }
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
  if (blocks_suit(g))
    winograd_blocked(g, x, u, y);
  else
    winograd_planes(g, x, u, y);
}

// Partial sums of the blocked filter gradient: a count set by the geometry,
// never by the cores, so the sum's order and bits do not depend on them; up
// to 8, together at most 4M floats (16 MiB).
int64_t filter_sums(const ConvGeometry& g) {
  return std::clamp<int64_t>((int64_t{4} << 20) / (kPoints * g.cin * g.cout), 1, 8);
}

// The filter gradient in blocks: runs (at most filter_sums) of consecutive
// blocks, each summing its blocks' products into its own M, then the runs'
// Ms added in order. With fewer runs than cores, each run's 16 points are
// shared out too (each part transforms the run's blocks again): a point's
// sum is the same chain however the points are grouped.
void filter_blocked(const ConvGeometry& g, const float* x, const float* dy, float* dw) {
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g), block = tiles_per_block(g);
  const int64_t blocks = chunk_count(total, block), plane = g.cin * g.cout;
  const int64_t per_run = chunk_count(blocks, filter_sums(g)), runs = chunk_count(blocks, per_run);
  const int64_t parts = std::clamp<int64_t>(chunk_count(intra_op_threads(), runs), 1, kPoints);
  const int64_t per_part = chunk_count(kPoints, parts);
  float* sums = scratch(3, runs * kPoints * plane);
  parallel_for(runs * parts, 1, [&](int64_t c0, int64_t c1) {
    float* v = scratch(1, kPoints * block * g.cin);
    float* d = scratch(2, kPoints * block * g.cout);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r = c / parts, p0 = c % parts * per_part;
      for (int64_t b = r * per_run; b < std::min(blocks, (r + 1) * per_run); ++b) {
        const int64_t first = b * block, count = std::min(block, total - first);
        transform_input(g, x, first, count, count, v);
        transform_gradient(g, dy, first, count, count, d);
        // M[p] [cin, cout] (+)= V[p]^T [cin, count] x D[p] [count, cout].
        for (int64_t p = p0; p < std::min<int64_t>(kPoints, p0 + per_part); ++p)
          tile_gemm(g.cin, g.cout, count, 1.0f, v + p * count * g.cin, 1, g.cin,
                    d + p * count * g.cout, g.cout, b != r * per_run,
                    sums + (r * kPoints + p) * plane, g.cout);
      }
    }
  });
  parallel_for(kPoints * plane, grain_for(runs), [&](int64_t i0, int64_t i1) {
    for (int64_t r = 1; r < runs; ++r)
      for (int64_t i = i0; i < i1; ++i) sums[i] += sums[r * kPoints * plane + i];
  });
  transform_filter_gradient(g, sums, dw);
}

// The filter gradient in passes: the pass's V and D, then 16 GEMMs
// [cin, tiles] x [tiles, cout] summed over the passes.
void filter_planes(const ConvGeometry& g, const float* x, const float* dy, float* dw) {
  const int64_t total = g.batch * tiles_h(g) * tiles_w(g), step = tiles_per_pass(g);
  float* v = scratch(1, kPoints * std::min(step, total) * g.cin);
  float* d = scratch(2, kPoints * std::min(step, total) * g.cout);
  float* m = scratch(3, kPoints * g.cin * g.cout);
  const int64_t per = std::max<int64_t>(1, grain_for(kPoints * (g.cin + g.cout)));
  for (int64_t t0 = 0; t0 < total; t0 += step) {
    const int64_t count = std::min(total, t0 + step) - t0;
    for_tile_chunks(count, per, [&](int64_t first, int64_t n) {
      transform_input(g, x, t0 + first, n, count, v + first * g.cin);
      transform_gradient(g, dy, t0 + first, n, count, d + first * g.cout);
    });
    // M[p] [cin, cout] (+)= V[p]^T [cin, count] x D[p] [count, cout].
    for_point_columns(g, [&](int p, int64_t j0, int64_t n) {
      tile_gemm(g.cin, n, count, 1.0f, v + p * count * g.cin, 1, g.cin, d + p * count * g.cout + j0,
                g.cout, t0 > 0, m + p * g.cin * g.cout + j0, g.cout);
    });
  }
  transform_filter_gradient(g, m, dw);
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
  if (g.batch == 0) {  // no tiles to sum
    std::fill_n(dw, 9 * g.cin * g.cout, 0.0f);
    return;
  }
  if (blocks_suit(g))
    filter_blocked(g, x, dy, dw);
  else
    filter_planes(g, x, dy, dw);
}

}  // namespace autoshard
