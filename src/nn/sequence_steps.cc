#include "nn/sequence_steps.h"

#include "autoshard/ir/ops.h"

namespace autoshard::sequence {

Value slice(Value x, int axis, int64_t begin, int64_t n) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  lo[axis] = -begin;
  hi[axis] = -(x.dim(axis) - begin - n);
  return ops::pad(x, lo, hi);
}

Value at(Value x, int axis, int64_t i) {
  Shape rest = x.shape();
  rest.erase(rest.begin() + axis);
  return ops::reshape(slice(x, axis, i, 1), rest);
}

Value row(Value x, int64_t i) {
  return at(x, 0, i);
}

std::vector<Value> split(Value x, int axis) {
  std::vector<Value> out;
  for (int64_t i = 0; i < x.dim(axis); ++i) out.push_back(at(x, axis, i));
  return out;
}

Value stack(const std::vector<Value>& v, int axis) {
  std::vector<Value> steps;
  for (const Value& x : v) {
    Shape s = x.shape();
    s.insert(s.begin() + axis, 1);
    steps.push_back(ops::reshape(x, s));
  }
  return ops::concat(steps, axis);
}

}  // namespace autoshard::sequence
