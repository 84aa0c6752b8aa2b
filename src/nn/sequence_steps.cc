#include "nn/sequence_steps.h"

#include "autoshard/ir/ops.h"

namespace autoshard::sequence {

Value slice(Value x, int axis, int64_t begin, int64_t n) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  lo[axis] = -begin;
  hi[axis] = -(x.dim(axis) - begin - n);
  return ops::pad(x, lo, hi);
}

Value row(Value x, int64_t i) {
  Shape rest(x.shape().begin() + 1, x.shape().end());
  return ops::reshape(slice(x, 0, i, 1), rest);
}

void split_rows(Value x, std::vector<Value>& out) {
  const int64_t n = x.dim(0);
  if (n == 1) {
    out.push_back(row(x, 0));
    return;
  }
  const int64_t half = (n + 1) / 2;
  split_rows(slice(x, 0, 0, half), out);
  split_rows(slice(x, 0, half, n - half), out);
}

Value concat(Value a, Value b, int axis) {
  std::vector<int64_t> zero(a.rank(), 0), after = zero, before = zero;
  after[axis] = b.dim(axis);
  before[axis] = a.dim(axis);
  return ops::pad(a, zero, after) + ops::pad(b, before, zero);
}

Value stack_rows(const std::vector<Value>& v, size_t lo, size_t hi) {
  if (hi - lo == 1) {
    Shape s = v[lo].shape();
    s.insert(s.begin(), 1);
    return ops::reshape(v[lo], s);
  }
  const size_t mid = lo + (hi - lo + 1) / 2;
  return concat(stack_rows(v, lo, mid), stack_rows(v, mid, hi), 0);
}

}  // namespace autoshard::sequence
