#include "autoshard/nn/causal_softmax.h"

#include <vector>

#include "autoshard/ir/ops.h"

namespace autoshard {

namespace {

// Pads (or crops, when negative) the second-to-last axis of x.
Value pad_rows(Value x, int64_t before, int64_t after) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  lo[x.rank() - 2] = before;
  hi[x.rank() - 2] = after;
  return ops::pad(x, lo, hi);
}

}  // namespace

Value keras_causal_softmax(Value s) {
  const int64_t tq = s.dim(s.rank() - 2), tk = s.dim(s.rank() - 1);
  if (tq == tk) return ops::softmax(s, true);
  if (tq < tk) return pad_rows(ops::softmax(pad_rows(s, 0, tk - tq), true), 0, tq - tk);
  const Value top = pad_rows(s, 0, tk - tq);  // rows [0, Tk)
  const Value bottom = pad_rows(s, -tk, 0);   // rows [Tk, Tq): every key
  return pad_rows(ops::softmax(top, true), 0, tq - tk) + pad_rows(ops::softmax(bottom), tk, 0);
}

}  // namespace autoshard
