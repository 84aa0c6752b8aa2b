// Fused scaled-dot-product attention, FlashAttention's scheme on the CPU: for
// each batch and head, queries are taken kQ at a time and the keys visited kK
// at a time with an online softmax (a running maximum and sum per query), so
// the t x s scores never exist; a thread holds only kQ x kK tiles. The
// backward pass is two ops: the softmax statistics (each query's log-sum-exp
// and dout . out; wrt 3, one product per tile), then dq, dk and dv in one
// pass over the tiles (wrt 4, FlashAttention's backward: five products per
// tile), returned stacked on a new leading axis, as an op has one output; the
// vjp crops each gradient out of it. An op per gradient (wrt 0, 1, 2, each
// recomputing the scores: eight products per tile for the three) is kept as
// the fused pass's reference.
//
// The plain reference is the unfused graph (einsum, scale, softmax, einsum);
// tests/attention_test.cc compares the two, values and gradients.
#include <algorithm>
#include <cmath>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "ir/ops/gemm.h"
#include "tensor/fast_math.h"
#include "tensor/lanes.h"
#include "tensor/tile_gemm.h"
#include "tensor/vec16.h"

namespace autoshard {
namespace {

// Tiles that stay in the L1 cache, multiplied on the calling thread (each
// thread of the pool works on its own heads) by tile_gemm where it is
// vectorised (AVX-512 or AVX2), else by OpenBLAS (where the tile products
// of non-native builds and the ThreadSanitizer build run).
constexpr int64_t kQ = 32;  // queries per tile
constexpr int64_t kK = 64;  // keys per tile
// A head with this many queries packs the keys and values it reads
// transposed once (s x d copies against t x s x d products), so that
// tile_gemm reads every operand row-major; a head with fewer (a decode
// step) multiplies q k^T and dout v^T with OpenBLAS.
constexpr int64_t kPackQueries = 16;

// Where one (batch, head) slice of the operands lives: row i of q is at
// q + i * ldq, and so on.
struct Head {
  const float *q, *k, *v, *out, *dout;
  int64_t ldq, ldk, ldv, ldo;  // ldo: out's and dout's
  int64_t t, s, dk, dv;
  bool causal;
  float scale;
  const int32_t* positions;  // each query's place among the keys, or null
  int64_t window;            // a causal query sees at most this many keys (0: all)
  float softcap;             // scores become softcap * tanh(score / softcap) (0: left as they are)
  // Query i's log-sum-exp at stats[i * lds] and dout_i . out_i beside it,
  // when computed by the statistics op (else null: computed here).
  const float* stats;
  int64_t lds;

  // A scaled product scale * q . k, soft-capped (when capped).
  float cap(float z) const { return softcap > 0 ? softcap * std::tanh(z / softcap) : z; }

  // Keys query i sees: [first(i), visible(i)).
  int64_t visible(int64_t i) const {
    if (positions) return std::clamp<int64_t>(int64_t{positions[i]} + 1, 0, s);
    return causal ? std::clamp<int64_t>(i + 1 + (s - t), 0, s) : s;
  }
  int64_t first(int64_t i) const {
    return window > 0 ? std::max<int64_t>(visible(i) - window, 0) : 0;
  }
  // The keys some query of [i0, i0 + ra) sees lie in
  // [first_of_any(i0, ra), visible_to_any(i0, ra)).
  int64_t visible_to_any(int64_t i0, int64_t ra) const {
    if (!positions) return visible(i0 + ra - 1);  // grows with i
    int64_t end = 0;
    for (int64_t r = 0; r < ra; ++r) end = std::max(end, visible(i0 + r));
    return end;
  }
  int64_t first_of_any(int64_t i0, int64_t ra) const {
    if (window == 0) return 0;
    int64_t begin = s;
    for (int64_t r = 0; r < ra; ++r) begin = std::min(begin, first(i0 + r));
    return begin;
  }
};

// The rows b_c of the products a_r . b_c (a head's keys, or its values),
// and, when rows [from, to) are packed transposed,
// packed[p * ldp + c - from] = rows[c * ld + p] (else packed is null). Rows
// outside [from, to) are the keys no query of the head sees.
struct Rows {
  const float* rows;
  int64_t ld;
  const float* packed;
  int64_t ldp, from, to;
};

// Rows [from, to) of `rows` (d wide, ld apart) packed transposed into out.
// The packed rows are an odd number of cache lines long, so the d rows of a
// tile do not all map to the same cache sets (as a power-of-two stride
// would).
Rows pack_transposed(const float* rows, int64_t ld, int64_t from, int64_t to, int64_t d,
                     std::vector<float>& out) {
  const int64_t ldt = ((to - from + 15) / 16 | 1) * 16;
  out.resize(d * ldt);
  constexpr int64_t kBlock = 16;  // 16 x 16 blocks: whole cache lines read and written
  for (int64_t c0 = from; c0 < to; c0 += kBlock)
    for (int64_t p0 = 0; p0 < d; p0 += kBlock)
      for (int64_t p = p0; p < std::min(d, p0 + kBlock); ++p)
        for (int64_t c = c0; c < std::min(to, c0 + kBlock); ++c)
          out[p * ldt + c - from] = rows[c * ld + p];
  return {rows, ld, out.data(), ldt, from, to};
}

// Per-thread scratch: tiles, per-query statistics and the head's packed
// keys and values.
struct Scratch {
  std::vector<float> scores;  // (kQ, kK) q k^T of a tile, then its probabilities (forward)
  std::vector<float> probs;   // (kQ, kK) P of a tile (gradients)
  std::vector<float> dprobs;  // (kQ, kK) dout v^T, then dS = P (dP - D)
  std::vector<float> acc;     // (kQ, max(dk, dv)) running P v, or dq of a query tile
  std::vector<float> m, l;    // (kQ,) running maximum and sum of each query
  std::vector<float> lse, d;  // (t,) log-sum-exp of each query; D = dout . out
  std::vector<float> kt, vt;  // (dk, ldt), (dv, ldt): k^T and v^T when packed
  Rows keys{}, values{};
  // Sizes the scratch for head h and packs the keys its queries see (and,
  // with_values, the values: dP = dout v^T) when it has the queries to pay
  // for it.
  void fit(const Head& h, bool with_values = false) {
    keys = {h.k, h.ldk, nullptr, 0, 0, h.s};
    values = {h.v, h.ldv, nullptr, 0, 0, h.s};
    const int64_t from = h.first_of_any(0, h.t), to = h.visible_to_any(0, h.t);
    if (kTileGemmVectorised && h.t >= kPackQueries && to > from && h.dk > 0 && h.dv > 0) {
      keys = pack_transposed(h.k, h.ldk, from, to, h.dk, kt);
      if (with_values) values = pack_transposed(h.v, h.ldv, from, to, h.dv, vt);
    }
    scores.resize(kQ * kK);
    probs.resize(kQ * kK);
    dprobs.resize(kQ * kK);
    acc.resize(kQ * std::max(h.dk, h.dv));
    m.resize(kQ);
    l.resize(kQ);
    lse.resize(h.t);
    d.resize(h.t);
  }
};

// out[r * kK + c] = alpha a_r . b_(j0 + c) for r < ra, c < cb (rows of
// length n), and 0 for c >= cb and for the keys of the tile outside
// [b.from, b.to), which no query sees (a key tile of the gradients starts
// at a multiple of kK, before the first key a sliding window leaves in
// view: those keys are not packed).
void row_dots(const float* a, int64_t lda, int64_t ra, const Rows& b, int64_t j0, int64_t cb,
              int64_t n, float alpha, float* out) {
  const int64_t lo = std::clamp(b.from - j0, int64_t{0}, cb);
  const int64_t hi = std::clamp(b.to - j0, lo, cb);
  if (hi > lo) {  // (else no key of the tile is seen: zeros only)
    if (b.packed)
      tile_gemm(ra, hi - lo, n, alpha, a, lda, 1, b.packed + (j0 + lo - b.from), b.ldp, false,
                out + lo, kK);
    else
      sgemm(false, true, ra, hi - lo, n, a, lda, b.rows + (j0 + lo) * b.ld, b.ld, out + lo, kK,
            alpha);
  }
  for (int64_t r = 0; r < ra; ++r) {
    std::fill(out + r * kK, out + r * kK + lo, 0.0f);
    std::fill(out + r * kK + hi, out + (r + 1) * kK, 0.0f);
  }
}

// c (m x n, ldc) += alpha * op(a) b, op(a) being m x k (a's transpose when trans_a).
void gemm_acc(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (kTileGemmVectorised)
    tile_gemm(m, n, k, alpha, a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, true, c, ldc);
  else
    sgemm(trans_a, false, m, n, k, a, lda, b, ldb, c, ldc, alpha, 1.0f);
}

// The keys of tile [j0, j0 + cb) that query i sees: columns [unseen(..), seen(..)).
inline int64_t seen(const Head& h, int64_t i, int64_t j0, int64_t cb) {
  return std::clamp<int64_t>(h.visible(i) - j0, 0, cb);
}
inline int64_t unseen(const Head& h, int64_t i, int64_t j0, int64_t cb) {
  return std::clamp<int64_t>(h.first(i) - j0, 0, cb);
}

// Soft-caps n scaled scores in place (when capped).
void cap_row(const Head& h, float* s, int64_t n) {
  if (h.softcap > 0)
    for (int64_t c = 0; c < n; ++c) s[c] = h.cap(s[c]);
}

// The factor exp(m - mx) a query's running sum and values are corrected
// by when its maximum moves from m to mx: 0 from none yet, and exactly 1
// (what fast_exp(0) gives, without computing it) when it did not move.
inline float correction(float m, float mx) {
  if (m == -INFINITY) return 0.0f;
  return m - mx == 0.0f ? 1.0f : fast_exp(m - mx);
}

// One query's row of a tile's scaled scores, keys [lo, vis) seen: capped
// (when capped), its running maximum m and sum l moved on, the row turned
// into exp(score - m) (0 where unseen). Returns the factor the query's
// running values are corrected by.
float softmax_row(const Head& h, float* sr, int64_t lo, int64_t vis, float& m, float& l) {
  cap_row(h, sr + lo, vis - lo);
  // nan_max: a NaN score makes the row's maximum, and so its output, NaN.
  const float mx = nan_max(m, lane_max(sr + lo, vis - lo));
  const float corr = correction(m, mx);
  // In lanes: a serial sum of exponentials would not vectorise.
  const float sum =
      float_lanes(lo, vis, [sr, mx](int64_t c) { return sr[c] = fast_exp(sr[c] - mx); });
  std::fill(sr, sr + lo, 0.0f);
  std::fill(sr + vis, sr + kK, 0.0f);
  l = l * corr + sum;
  m = mx;
  return corr;
}

// softmax_row for a query that sees all kK keys of the tile, uncapped (most
// rows of a long sequence), in registers: kK / kRegisterLanes vectors.
float whole_softmax_row(float* sr, float& m, float& l) {
  constexpr int kVectors = kK / kRegisterLanes;
  static_assert(kK % kRegisterLanes == 0 && (kVectors & (kVectors - 1)) == 0);
  f32xR v[kVectors], top[kVectors];
  for (int i = 0; i < kVectors; ++i) top[i] = v[i] = load_lanes<f32xR>(sr + kRegisterLanes * i);
  for (int half = kVectors / 2; half > 0; half /= 2)  // a tree of maxima
    for (int i = 0; i < half; ++i) top[i] = nan_max_lanes(top[i], top[i + half]);
  const float mx = nan_max(m, max_of_lanes(top[0]));
  const float corr = correction(m, mx);
  f32xR sum{};
  for (int i = 0; i < kVectors; ++i) {
    v[i] = fast_exp(v[i] - mx);
    store_lanes(sr + kRegisterLanes * i, v[i]);
    sum += v[i];
  }
  l = l * corr + sum_of_lanes(sum);
  m = mx;
  return corr;
}

// The online softmax over queries [i0, i0 + ra): each query's running
// maximum m and sum l, and (with_values) the running sum of p v in acc.
void online_softmax(const Head& h, Scratch& w, int64_t i0, int64_t ra, bool with_values) {
  std::fill_n(w.m.data(), ra, -INFINITY);
  std::fill_n(w.l.data(), ra, 0.0f);
  if (with_values) std::fill_n(w.acc.data(), ra * h.dv, 0.0f);
  const int64_t end = h.visible_to_any(i0, ra);
  for (int64_t j0 = h.first_of_any(i0, ra); j0 < end; j0 += kK) {
    const int64_t cb = std::min(kK, end - j0);
    row_dots(h.q + i0 * h.ldq, h.ldq, ra, w.keys, j0, cb, h.dk, h.scale, w.scores.data());
    for (int64_t r = 0; r < ra; ++r) {
      const int64_t lo = unseen(h, i0 + r, j0, cb), vis = seen(h, i0 + r, j0, cb);
      float* sr = w.scores.data() + r * kK;
      if (vis <= lo) {  // no key of this tile: probabilities 0, running values kept
        std::fill_n(sr, kK, 0.0f);
        continue;
      }
      const float corr = lo == 0 && vis == kK && h.softcap <= 0
                             ? whole_softmax_row(sr, w.m[r], w.l[r])
                             : softmax_row(h, sr, lo, vis, w.m[r], w.l[r]);
      if (with_values && corr != 1.0f)  // (times 1 would change no bit)
        for (int64_t e = 0; e < h.dv; ++e) w.acc[r * h.dv + e] *= corr;
    }
    if (with_values)  // acc += P V over the tile
      gemm_acc(false, ra, h.dv, cb, 1.0f, w.scores.data(), kK, h.v + j0 * h.ldv, h.ldv,
               w.acc.data(), h.dv);
  }
}

void forward_head(const Head& h, Scratch& w, float* out) {
  for (int64_t i0 = 0; i0 < h.t; i0 += kQ) {
    const int64_t ra = std::min(kQ, h.t - i0);
    online_softmax(h, w, i0, ra, true);
    for (int64_t r = 0; r < ra; ++r) {
      // A query that sees no key: zeros (l is 0); a NaN l stays NaN.
      const float inv = w.l[r] == 0.0f ? 0.0f : 1.0f / w.l[r];
      for (int64_t e = 0; e < h.dv; ++e) out[(i0 + r) * h.ldo + e] = w.acc[r * h.dv + e] * inv;
    }
  }
}

// Each query's log-sum-exp of its scaled scores, and D_i = dout_i . out_i:
// read from the statistics op's output when the gradient op has it.
void statistics(const Head& h, Scratch& w) {
  if (h.stats) {
    for (int64_t i = 0; i < h.t; ++i) {
      w.lse[i] = h.stats[i * h.lds];
      w.d[i] = h.stats[i * h.lds + 1];
    }
    return;
  }
  for (int64_t i0 = 0; i0 < h.t; i0 += kQ) {
    const int64_t ra = std::min(kQ, h.t - i0);
    online_softmax(h, w, i0, ra, false);
    for (int64_t r = 0; r < ra; ++r)
      w.lse[i0 + r] = w.l[r] == 0.0f ? INFINITY : w.m[r] + std::log(w.l[r]);  // NaN kept
  }
  for (int64_t i = 0; i < h.t; ++i) {
    const float *dout = h.dout + i * h.ldo, *out = h.out + i * h.ldo;
    w.d[i] = float_lanes(0, h.dv, [dout, out](int64_t e) { return dout[e] * out[e]; });
  }
}

// One tile's probabilities P (from the scores and each query's log-sum-exp)
// and, unless only P is wanted, dS = P (dP - D) with dP = dout v^T, times
// the soft cap's derivative 1 - tanh^2 where the scores are capped (kept in
// `scores` once P is known).
void tile_grads(const Head& h, Scratch& w, int64_t i0, int64_t ra, int64_t j0, int64_t cb,
                bool only_probs) {
  row_dots(h.q + i0 * h.ldq, h.ldq, ra, w.keys, j0, cb, h.dk, h.scale, w.scores.data());
  for (int64_t r = 0; r < ra; ++r) {
    const int64_t vis = seen(h, i0 + r, j0, cb);
    const int64_t lo = std::min(unseen(h, i0 + r, j0, cb), vis);
    float* sr = w.scores.data() + r * kK;
    float* pr = w.probs.data() + r * kK;
    const float lse = w.lse[i0 + r];
    if (lo == 0 && vis == kK && h.softcap <= 0) {  // a whole row, in registers
      for (int i = 0; i < kK; i += kRegisterLanes)
        store_lanes(pr + i, fast_exp(load_lanes<f32xR>(sr + i) - lse));
      continue;
    }
    std::fill(pr, pr + lo, 0.0f);
    if (h.softcap > 0) {
      for (int64_t c = lo; c < vis; ++c) {
        const float s = h.cap(sr[c]);
        pr[c] = fast_exp(s - lse);
        sr[c] = 1 - (s / h.softcap) * (s / h.softcap);
      }
    } else {  // the loop that vectorises
      for (int64_t c = lo; c < vis; ++c) pr[c] = fast_exp(sr[c] - lse);
    }
    std::fill(pr + vis, pr + kK, 0.0f);
  }
  if (only_probs) return;
  row_dots(h.dout + i0 * h.ldo, h.ldo, ra, w.values, j0, cb, h.dv, 1.0f, w.dprobs.data());
  for (int64_t r = 0; r < ra; ++r) {
    const float* pr = w.probs.data() + r * kK;
    float* dr = w.dprobs.data() + r * kK;
    const float d = w.d[i0 + r];
    for (int64_t c = 0; c < kK; ++c) dr[c] = pr[c] * (dr[c] - d);
    if (h.softcap <= 0) continue;
    // Only the columns a query sees carry P > 0 (the rest stay 0 whatever they hold).
    const int64_t vis = seen(h, i0 + r, j0, cb);
    const int64_t lo = std::min(unseen(h, i0 + r, j0, cb), vis);
    const float* sr = w.scores.data() + r * kK;
    for (int64_t c = lo; c < vis; ++c) dr[c] *= sr[c];
  }
}

// dq_i = scale * sum_j dS_ij k_j.
void grad_q_head(const Head& h, Scratch& w, float* dq) {
  for (int64_t i0 = 0; i0 < h.t; i0 += kQ) {
    const int64_t ra = std::min(kQ, h.t - i0);
    std::fill_n(w.acc.data(), ra * h.dk, 0.0f);
    const int64_t end = h.visible_to_any(i0, ra);
    for (int64_t j0 = h.first_of_any(i0, ra); j0 < end; j0 += kK) {
      const int64_t cb = std::min(kK, end - j0);
      tile_grads(h, w, i0, ra, j0, cb, false);
      gemm_acc(false, ra, h.dk, cb, h.scale, w.dprobs.data(), kK, h.k + j0 * h.ldk, h.ldk,
               w.acc.data(), h.dk);
    }
    for (int64_t r = 0; r < ra; ++r)
      std::copy_n(w.acc.data() + r * h.dk, h.dk, dq + (i0 + r) * h.ldq);
  }
}

// dk_j = scale * sum_i dS_ij q_i, or dv_j = sum_i P_ij dout_i (wrt 2),
// added to `grad` when accumulating (the other query heads of a group).
void grad_kv_head(const Head& h, Scratch& w, int wrt, float* grad, bool accumulate) {
  const int64_t width = wrt == 1 ? h.dk : h.dv, ld = wrt == 1 ? h.ldk : h.ldv;
  for (int64_t j0 = 0; j0 < h.s; j0 += kK) {
    const int64_t cb = std::min(kK, h.s - j0);
    if (!accumulate)
      for (int64_t c = 0; c < cb; ++c) std::fill_n(grad + (j0 + c) * ld, width, 0.0f);
    for (int64_t i0 = 0; i0 < h.t; i0 += kQ) {
      const int64_t ra = std::min(kQ, h.t - i0);
      // No query of the block sees these keys.
      if (h.visible_to_any(i0, ra) <= j0 || h.first_of_any(i0, ra) >= j0 + cb) continue;
      tile_grads(h, w, i0, ra, j0, cb, wrt == 2);
      if (wrt == 1)
        gemm_acc(true, cb, width, ra, h.scale, w.dprobs.data(), kK, h.q + i0 * h.ldq, h.ldq,
                 grad + j0 * ld, ld);
      else
        gemm_acc(true, cb, width, ra, 1.0f, w.probs.data(), kK, h.dout + i0 * h.ldo, h.ldo,
                 grad + j0 * ld, ld);
    }
  }
}

// dq, and this query head's shares of dk and dv, in one pass: for each
// block of keys, each block of queries that sees one of them gives P and dS
// (tile_grads: two products), then dv += P^T dout, dk += scale dS^T q and
// dq += scale dS k. Each gradient is summed in the order its own op sums it
// (dq over key blocks, dk and dv over query blocks, both ascending). The
// rows are `ld` apart; all three start zeroed.
void grads_head(const Head& h, Scratch& w, float* dq, float* dk, float* dv, int64_t ld) {
  for (int64_t j0 = 0; j0 < h.s; j0 += kK) {
    for (int64_t i0 = 0; i0 < h.t; i0 += kQ) {
      const int64_t ra = std::min(kQ, h.t - i0);
      // The keys of the block some query of these sees: [j0, j0 + cb), or
      // none (keys past a causal diagonal take no products).
      const int64_t cb = std::min({kK, h.s - j0, h.visible_to_any(i0, ra) - j0});
      if (cb <= 0 || h.first_of_any(i0, ra) >= j0 + cb) continue;
      tile_grads(h, w, i0, ra, j0, cb, false);
      gemm_acc(true, cb, h.dv, ra, 1.0f, w.probs.data(), kK, h.dout + i0 * h.ldo, h.ldo,
               dv + j0 * ld, ld);
      gemm_acc(true, cb, h.dk, ra, h.scale, w.dprobs.data(), kK, h.q + i0 * h.ldq, h.ldq,
               dk + j0 * ld, ld);
      gemm_acc(false, ra, h.dk, cb, h.scale, w.dprobs.data(), kK, h.k + j0 * h.ldk, h.ldk,
               dq + i0 * ld, ld);
    }
  }
}

// The statistics op's last dimension: log-sum-exp, then dout . out.
constexpr int64_t kStatistics = 2;
constexpr int kWrtStatistics = 3;  // AttentionGrad's wrt for the statistics op
// AttentionGrad's wrt for dq, dk and dv in one op, stacked: [3, b, L, heads...,
// D], L = max(t, s) rows and D = max(dk, dv) columns (zeros beyond a
// gradient's own), heads being q's (h, or kv and g: dk and dv per query head,
// the vjp summing each group).
constexpr int kWrtAll = 4;

// Grouped-query attention: q [b, t, k, g, d] holds g query heads per key
// and value head (k, v [b, s, k, d]); plain attention is g = 1. Query head
// hq (of k * g) reads key and value head hq / g.
struct Heads {
  int64_t batch, t, s, kv, group, dk, dv;
  int64_t query_heads() const { return kv * group; }
};
Heads heads_of(std::span<Tensor* const> in) {
  const Shape& q = in[0]->shape();
  const Shape& v = in[2]->shape();
  const int64_t group = q.size() == 5 ? q[3] : 1;
  return {q[0], q[1], in[1]->shape()[1], v[2], group, q.back(), v[3]};
}

// The slices of (batch b, query head hq).
Head head_of(const Node& n, std::span<Tensor* const> in, const Heads& x, int64_t b, int64_t hq) {
  const int64_t hq_all = x.query_heads(), hkv = hq / x.group;
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  Head h{};
  h.q = in[0]->f32() + (b * x.t * hq_all + hq) * x.dk;
  h.k = in[1]->f32() + (b * x.s * x.kv + hkv) * x.dk;
  h.v = in[2]->f32() + (b * x.s * x.kv + hkv) * x.dv;
  if (n.op == Op::AttentionGrad) {
    h.out = in[3]->f32() + (b * x.t * hq_all + hq) * x.dv;
    h.dout = in[4]->f32() + (b * x.t * hq_all + hq) * x.dv;
    if (in.size() == 6) {
      h.stats = in[5]->f32() + (b * x.t * hq_all + hq) * kStatistics;
      h.lds = hq_all * kStatistics;
    }
  }
  h.ldq = hq_all * x.dk;
  h.ldk = x.kv * x.dk;
  h.ldv = x.kv * x.dv;
  h.ldo = hq_all * x.dv;
  h.t = x.t, h.s = x.s, h.dk = x.dk, h.dv = x.dv;
  h.causal = a.causal;
  h.scale = static_cast<float>(a.scale);
  h.positions = n.op == Op::Attention && in.size() == 4 ? in[3]->i32() : nullptr;
  h.window = a.causal ? a.window : 0;
  h.softcap = static_cast<float>(a.softcap);
  return h;
}

// Runs body(heads, scratch, b, j) for every batch b and every j < per_batch
// (query heads, or key-value heads), split over the cores.
template <typename Body>
void for_each_head(int64_t batch, int64_t per_batch, const Body& body) {
  parallel_for(batch * per_batch, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch w;
    for (int64_t bh = begin; bh < end; ++bh) body(w, bh / per_batch, bh % per_batch);
  });
}

void attention_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const Heads x = heads_of(in);
  for_each_head(x.batch, x.query_heads(), [&](Scratch& w, int64_t b, int64_t hq) {
    const Head h = head_of(n, in, x, b, hq);
    w.fit(h);
    forward_head(h, w, out.f32() + (b * x.t * x.query_heads() + hq) * x.dv);
  });
}

// dq per query head; dk and dv per key-value head, summed over its group.
void attention_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                           const KernelContext&) {
  const int wrt = n.attr<AttentionAttrs>().wrt;
  const Heads x = heads_of(in);
  if (wrt == kWrtStatistics) {
    for_each_head(x.batch, x.query_heads(), [&](Scratch& w, int64_t b, int64_t hq) {
      const Head h = head_of(n, in, x, b, hq);
      w.fit(h);
      statistics(h, w);
      float* o = out.f32() + (b * x.t * x.query_heads() + hq) * kStatistics;
      for (int64_t i = 0; i < h.t; ++i) {
        o[i * x.query_heads() * kStatistics] = w.lse[i];
        o[i * x.query_heads() * kStatistics + 1] = w.d[i];
      }
    });
    return;
  }
  if (wrt == kWrtAll) {
    const int64_t rows = std::max(x.t, x.s), width = std::max(x.dk, x.dv);
    const int64_t ld = x.query_heads() * width;
    const int64_t plane = x.batch * rows * ld;
    for_each_head(x.batch, x.query_heads(), [&](Scratch& w, int64_t b, int64_t hq) {
      const Head h = head_of(n, in, x, b, hq);
      w.fit(h, /*with_values=*/true);
      statistics(h, w);
      float* dq = out.f32() + b * rows * ld + hq * width;
      for (int64_t p = 0; p < 3; ++p)
        for (int64_t i = 0; i < rows; ++i) std::fill_n(dq + p * plane + i * ld, width, 0.0f);
      grads_head(h, w, dq, dq + plane, dq + 2 * plane, ld);
    });
    return;
  }
  if (wrt == 0) {
    for_each_head(x.batch, x.query_heads(), [&](Scratch& w, int64_t b, int64_t hq) {
      const Head h = head_of(n, in, x, b, hq);
      w.fit(h, /*with_values=*/true);
      statistics(h, w);
      grad_q_head(h, w, out.f32() + (b * x.t * x.query_heads() + hq) * x.dk);
    });
    return;
  }
  const int64_t width = wrt == 1 ? x.dk : x.dv;
  if (x.group == 0) {  // a device given none of a group's queries: its share is zero
    std::fill_n(out.f32(), out.numel(), 0.0f);
    return;
  }
  for_each_head(x.batch, x.kv, [&](Scratch& w, int64_t b, int64_t hkv) {
    float* grad = out.f32() + (b * x.s * x.kv + hkv) * width;
    for (int64_t gi = 0; gi < x.group; ++gi) {
      const Head h = head_of(n, in, x, b, hkv * x.group + gi);
      w.fit(h, /*with_values=*/wrt == 1);
      statistics(h, w);
      grad_kv_head(h, w, wrt, grad, /*accumulate=*/gi > 0);
    }
  });
}

ShapeAndType attention_infer(const Graph& g, const Node& n) {
  const bool grad = n.op == Op::AttentionGrad;
  const bool positions = !grad && n.inputs.size() == 4;
  const bool with_stats = grad && n.inputs.size() == 6;
  if (!positions && !with_stats) expect_inputs(n, grad ? 5 : 3);
  const Shape &q = input_shape(g, n, 0), &k = input_shape(g, n, 1), &v = input_shape(g, n, 2);
  for (size_t i = 0; i < (positions ? 3 : n.inputs.size()); ++i)
    AS_CHECK(input_dtype(g, n, i) == DType::F32, "attention needs f32 operands");
  if (positions)
    AS_CHECK(input_dtype(g, n, 3) == DType::I32 && input_shape(g, n, 3) == Shape{q[1]},
             "attention: query positions must be i32 [", q[1], "], not ",
             shape_str(input_shape(g, n, 3)));
  AS_CHECK((q.size() == 4 || q.size() == 5) && k.size() == 4 && v.size() == 4,
           "attention needs q [batch, time, heads, dim] (or [batch, time, kv heads, group, dim] "
           "for grouped queries), k and v [batch, keys, kv heads, dim]; got q ",
           shape_str(q), ", k ", shape_str(k), ", v ", shape_str(v));
  AS_CHECK(k[0] == q[0] && v[0] == q[0] && k[2] == q[2] && v[2] == q[2] && k[3] == q.back() &&
               v[1] == k[1],
           "attention: q ", shape_str(q), ", k ", shape_str(k), " and v ", shape_str(v),
           " do not agree (q [b,t,h,d] or [b,t,h,g,d], k [b,s,h,d], v [b,s,h,dv])");
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  AS_CHECK(std::isfinite(a.softcap) && a.softcap >= 0, "attention: softcap must be 0 (none) or ",
           "positive, not ", a.softcap);
  Shape out = q;
  out.back() = v[3];
  if (!grad) return {out, DType::F32};
  AS_CHECK(input_shape(g, n, 3) == out && input_shape(g, n, 4) == out,
           "attention_grad: out and dout must be ", shape_str(out));
  const int wrt = n.attr<AttentionAttrs>().wrt;
  AS_CHECK(wrt >= 0 && wrt <= kWrtAll,
           "attention_grad: wrt must be 0, 1, 2 (q, k, v), 3 (the statistics) or 4 (all three)");
  Shape stats = q;
  stats.back() = kStatistics;
  AS_CHECK(!with_stats || (wrt != kWrtStatistics && input_shape(g, n, 5) == stats),
           "attention_grad: the statistics input must be ", shape_str(stats),
           " and only the gradients read it");
  if (wrt == kWrtStatistics) return {stats, DType::F32};
  if (wrt == kWrtAll) {
    Shape all{3, q[0], std::max(q[1], k[1])};  // [3, b, L, heads..., D]
    all.insert(all.end(), q.begin() + 2, q.end() - 1);
    all.push_back(std::max(k[3], v[3]));
    return {all, DType::F32};
  }
  return {input_shape(g, n, wrt), DType::F32};
}

std::vector<Value> attention_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  AS_CHECK(n.inputs.size() == 3,
           "attention with query positions (generation over a key-value cache) has no gradient");
  const Value q = g.value(n.inputs[0]), k = g.value(n.inputs[1]), v = g.value(n.inputs[2]);
  const Value out = g.value(id);
  AttentionAttrs a = n.attr<AttentionAttrs>();
  a.wrt = kWrtStatistics;
  const Value stats = g.add(Op::AttentionGrad, {q, k, v, out, dy}, a);
  a.wrt = kWrtAll;
  const Value all = g.add(Op::AttentionGrad, {q, k, v, out, dy, stats}, a);
  // Plane p of `all` cropped to input p's rows and width; dk and dv (held
  // per query head) summed over each group.
  const int rank = all.rank();
  std::vector<Value> grads;
  for (int p = 0; p < 3; ++p) {
    const Shape& x = g.value(n.inputs[p]).shape();
    std::vector<int64_t> lo(rank, 0), hi(rank, 0);
    lo[0] = -p;
    hi[0] = p - 2;
    hi[2] = x[1] - all.dim(2);
    hi[rank - 1] = x.back() - all.dim(rank - 1);
    Shape per_head(all.shape().begin() + 1, all.shape().end());
    per_head[1] = x[1];
    per_head.back() = x.back();
    Value grad = ops::reshape(ops::pad(all, lo, hi), per_head);
    if (p > 0 && per_head.size() == 5) grad = ops::reduce_sum(grad, {3});
    grads.push_back(grad);
  }
  return grads;
}

// Batch, key-value heads and the query heads of a group may be split (each
// device runs whole heads); time, keys and the head dims stay whole. The
// gradient of k or v sums over a group: a split group leaves it partial (the
// stacked gradients keep dk and dv per query head: never partial).
LoopNest attention_loops(const Graph& g, const Node& n) {
  const Shape &q = input_shape(g, n, 0), &k = input_shape(g, n, 1), &v = input_shape(g, n, 2);
  const bool grouped = q.size() == 5;
  const int wrt = n.op == Op::AttentionGrad ? n.attr<AttentionAttrs>().wrt : -1;
  LoopNest nest;
  const int b = nest.add({q[0]}), t = nest.add({q[1], Loop::Kind::Whole});
  const int s = nest.add({k[1], Loop::Kind::Whole}), h = nest.add({k[2]});
  const bool kv_grad = wrt == 1 || wrt == 2;  // sums over a group's query heads (wrt 4: per head)
  const int grp =
      grouped ? nest.add({q[3], kv_grad ? Loop::Kind::Reduction : Loop::Kind::Parallel}) : -1;
  const int dk = nest.add({k[3], Loop::Kind::Whole}), dv = nest.add({v[3], Loop::Kind::Whole});
  auto query_like = [&](int d) {
    return grouped ? std::vector<int>{b, t, h, grp, d} : std::vector<int>{b, t, h, d};
  };
  nest.inputs = {query_like(dk), {b, s, h, dk}, {b, s, h, dv}};
  if (n.inputs.size() == 4) nest.inputs.push_back({t});  // query positions
  nest.output = query_like(dv);
  if (wrt >= 0) {
    nest.inputs.push_back(query_like(dv));
    nest.inputs.push_back(query_like(dv));
    const bool with_stats = n.inputs.size() == 6;
    const int st =
        with_stats || wrt == kWrtStatistics ? nest.add({kStatistics, Loop::Kind::Whole}) : -1;
    if (with_stats) nest.inputs.push_back(query_like(st));
    if (wrt == kWrtAll) {  // [3, b, L, heads..., D]: the stacked, padded dims stay whole
      nest.output = query_like(-1);
      nest.output[1] = -1;
      nest.output.insert(nest.output.begin(), -1);
    } else {
      nest.output = wrt == kWrtStatistics ? query_like(st) : nest.inputs[wrt];
    }
  }
  return nest;
}

ShardDecision attention_rule(const ShardQuery& q) {
  return follow_inputs(attention_loops(q.graph, q.node), q.inputs);
}

// Query-key pairs computed (about half of them when causal).
double pairs(const Node& n, const CostShapes& s) {
  const Shape &q = s.inputs[0], &k = s.inputs[1];
  const double query_heads = elements(q) / (double(q[0]) * q[1] * q.back());
  const double all = double(q[0]) * query_heads * q[1] * k[1];
  const AttentionAttrs& a = n.attr<AttentionAttrs>();
  if (a.causal && a.window > 0 && a.window < k[1]) return all / double(k[1]) * double(a.window);
  return a.causal ? all * 0.5 : all;
}
double operand_bytes(const CostShapes& s) {
  double e = elements(s.output);
  for (const Shape& in : s.inputs) e += elements(in);
  return 4 * e;
}
// A soft cap's tanh per score (~12 operations, as exp is counted), once per
// pass over the scores.
double cap_flops(const Node& n) {
  return n.attr<AttentionAttrs>().softcap > 0 ? 14 : 0;
}
OpCost attention_cost(const Node& n, const CostShapes& s) {
  const double dk = double(s.inputs[1][3]), dv = double(s.inputs[2][3]);
  return {pairs(n, s) * (2 * dk + 2 * dv + 15 + cap_flops(n)), operand_bytes(s), true};
}
// The statistics: a pass of scores. A gradient: one tile pass of scores, dP
// and its product (or all three products), after the statistics unless it
// reads them.
OpCost attention_grad_cost(const Node& n, const CostShapes& s) {
  const double dk = double(s.inputs[1][3]), dv = double(s.inputs[2][3]);
  const double statistics = 2 * dk + 15 + cap_flops(n);
  if (n.attr<AttentionAttrs>().wrt == kWrtStatistics)
    return {pairs(n, s) * statistics, operand_bytes(s), true};
  // wrt 4: scores and dP, then dv, dk and dq (five products).
  const double tiles =
      n.attr<AttentionAttrs>().wrt == kWrtAll ? 6 * dk + 4 * dv + 15 : 4 * dk + 4 * dv + 15;
  return {pairs(n, s) * (tiles + cap_flops(n) + (s.inputs.size() == 6 ? 0 : statistics)),
          operand_bytes(s), true};
}

}  // namespace

void register_attention_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Attention)] = {.name = "attention",
                              .infer = attention_infer,
                              .kernel = attention_kernel,
                              .vjp = attention_vjp,
                              .shard = attention_rule,
                              .loops = attention_loops,
                              .cost = attention_cost};
  t[size_t(Op::AttentionGrad)] = {.name = "attention_grad",
                                  .infer = attention_infer,
                                  .kernel = attention_grad_kernel,
                                  .shard = attention_rule,
                                  .loops = attention_loops,
                                  .cost = attention_grad_cost};
}

}  // namespace autoshard
