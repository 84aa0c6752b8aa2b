#include "autoshard/nn/masking.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

Value positive(Value x) {
  // ReluGrad(x, 1) is 1 where x > 0: the comparison the engine's ops build on.
  return x.graph->add(Op::ReluGrad, {x, ops::constant(*x.graph, x.shape(), 1.0)});
}

Value apply_mask(Value x, Value mask) {
  Shape spread = mask.shape();
  while (spread.size() < size_t(x.rank())) spread.push_back(1);
  return x * ops::reshape(mask, spread);
}

Value all_masks(const Trace& trace, const std::vector<Value>& inputs) {
  Value all;
  for (const Value& v : inputs)
    if (Value m = trace.mask(v); m.valid()) all = all.valid() ? all * m : m;
  return all;
}

namespace {

// keras/src/layers/core/masking.py, Masking.call and compute_mask: the mask
// is any(x != mask_value) over the last axis, and the output x * mask.
class MaskingImpl : public LayerImpl {
 public:
  MaskingImpl(double value, std::string name)
      : LayerImpl(layer_name_or_default(name, "masking")), value_(value) {}
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(inputs.size() == 1, "Masking ", name(), " takes one input, got ", inputs.size());
    Value x = inputs[0];
    AS_CHECK(x.dtype() == DType::F32 && x.rank() >= 2, "Masking ", name(),
             " needs an f32 input [batch, time, ...], got ", shape_str(x.shape()));
    // Whether any feature differs from the mask value: the sum of |x - v|
    // over the last axis is above 0 (never an underflowing square).
    Value diff = value_ == 0 ? x : x - ops::constant(t.graph(), {}, value_);
    Value mask = positive(ops::reduce_sum(ops::unary(diff, UnaryFn::Abs), {x.rank() - 1}));
    Value y = apply_mask(x, mask);
    t.set_mask(y, mask);
    return y;
  }

 private:
  double value_;
};

}  // namespace

Masking::Masking(double mask_value, std::string name)
    : Layer(std::make_shared<MaskingImpl>(mask_value, std::move(name))) {}

}  // namespace autoshard
