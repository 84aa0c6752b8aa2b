// Transposing a block of a row-major float matrix: the layout copies of the
// products (ir/ops/gemm.cc: an LSTM step's gradient turned to columns) and
// of Winograd's input-gradient kernel (ir/ops/winograd.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace autoshard {

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows and c in [c0, c1),
// in 16 x 16 tiles. Element by element along src's rows every write went to
// another cache line: an LSTM step's [32, 2048] gradient took about a third
// as long to turn as its product did to run. In a tile both the reads and
// the writes stay on 16 lines. Sequential: callers share columns out over
// their cores.
inline void transpose_columns(const float* src, int64_t rows, int64_t ld_src, int64_t c0,
                              int64_t c1, float* dst, int64_t ld_dst) {
  constexpr int64_t kTile = 16;
  for (int64_t cb = c0; cb < c1; cb += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const int64_t c_end = std::min(c1, cb + kTile), r_end = std::min(rows, r0 + kTile);
      for (int64_t c = cb; c < c_end; ++c)
        for (int64_t r = r0; r < r_end; ++r) dst[c * ld_dst + r] = src[r * ld_src + c];
    }
}

}  // namespace autoshard
