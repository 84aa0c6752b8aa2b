#include "autoshard/nn/merge_layers.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/masking.h"
#include "autoshard/optim/composed_ops.h"

namespace autoshard {

namespace {

// A merge layer folding its inputs left to right with `combine`.
class MergeImpl : public LayerImpl {
 public:
  using Combine = Value (*)(Value, Value);
  MergeImpl(std::string name, const char* kind, Combine combine, size_t exact_inputs = 0)
      : LayerImpl(std::move(name)), kind_(kind), combine_(combine), exact_(exact_inputs) {}

  Value call(Trace&, const std::vector<Value>& inputs) override {
    AS_CHECK(inputs.size() >= 2 && (exact_ == 0 || inputs.size() == exact_), kind_, " ", name(),
             " needs ", exact_ ? "exactly " : "at least ", exact_ ? exact_ : 2, " inputs, got ",
             inputs.size());
    Value y = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) y = combine_(y, inputs[i]);
    return finish(y, inputs.size());
  }
  // Keras's Merge.compute_mask: the inputs' masks and-ed.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return all_masks(t, inputs);
  }

 protected:
  virtual Value finish(Value y, size_t) { return y; }

 private:
  const char* kind_;
  Combine combine_;
  size_t exact_;
};

class AverageImpl : public MergeImpl {
 public:
  explicit AverageImpl(std::string name)
      : MergeImpl(std::move(name), "Average", [](Value a, Value b) { return a + b; }) {}

 protected:
  Value finish(Value y, size_t n) override { return ops::scale(y, 1.0 / double(n)); }
};

class ConcatenateImpl : public LayerImpl {
 public:
  ConcatenateImpl(int64_t axis, std::string name) : LayerImpl(std::move(name)), axis_(axis) {}

  Value call(Trace&, const std::vector<Value>& inputs) override {
    AS_CHECK(!inputs.empty(), "Concatenate ", name(), " needs at least one input");
    const int rank = inputs[0].rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    AS_CHECK(axis >= 1 && axis < rank, "Concatenate ", name(), ": axis ", axis_,
             " is not an axis after the batch of ", shape_str(inputs[0].shape()));
    for (const Value& v : inputs) {
      Shape a = v.shape(), b = inputs[0].shape();
      AS_CHECK(v.rank() == rank, "Concatenate ", name(), ": inputs of ranks ", rank, " and ",
               v.rank());
      a[axis] = b[axis] = 0;
      AS_CHECK(a == b, "Concatenate ", name(), ": inputs ", shape_str(inputs[0].shape()), " and ",
               shape_str(v.shape()), " differ off the axis ", axis);
    }
    return ops::concat(inputs, axis);
  }
  // Keras's Concatenate.compute_mask: along a feature axis the masks
  // and-ed; along the masked (time) axis the masks joined, an input
  // without one counting as all kept.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    Value any = all_masks(t, inputs);
    if (!any.valid()) return {};
    const int64_t axis = axis_ < 0 ? axis_ + inputs[0].rank() : axis_;
    if (axis >= any.rank()) return any;
    std::vector<Value> masks;
    for (const Value& v : inputs) {
      Value m = t.mask(v);
      Shape lead(v.shape().begin(), v.shape().begin() + any.rank());
      masks.push_back(m.valid() ? m : ops::constant(t.graph(), lead, 1.0));
    }
    return ConcatenateImpl(axis, name()).call(t, masks);
  }

 private:
  int64_t axis_;
};

// x / ||x|| along `axis`, as keras.ops.normalize (keras/src/ops/nn.py,
// order 2): x * min(rsqrt(sum x^2), 1 / epsilon).
Value l2_normalized(Value x, int64_t axis) {
  Shape keep = x.shape();
  keep[axis] = 1;
  Value sum = ops::reshape(ops::reduce_sum(x * x, {axis}), keep);
  Value inverse = composed::clip(ops::unary(sum, UnaryFn::Rsqrt), 0, 1e7);
  return x * ops::broadcast_to(inverse, x.shape());
}

class DotImpl : public LayerImpl {
 public:
  DotImpl(std::vector<int64_t> axes, bool normalize, std::string name)
      : LayerImpl(std::move(name)), axes_(std::move(axes)), normalize_(normalize) {
    AS_CHECK(axes_.size() == 2, "Dot ", this->name(), ": axes must be one axis or two, got ",
             axes_.size());
  }

  Value call(Trace&, const std::vector<Value>& inputs) override {
    AS_CHECK(inputs.size() == 2, "Dot ", name(), " needs exactly 2 inputs, got ", inputs.size());
    Value a = inputs[0], b = inputs[1];
    const int64_t ax = axis(a, axes_[0]), bx = axis(b, axes_[1]);
    AS_CHECK(a.dim(0) == b.dim(0) && a.dim(int(ax)) == b.dim(int(bx)), "Dot ", name(), ": inputs ",
             shape_str(a.shape()), " and ", shape_str(b.shape()),
             " differ in the batch or along axes ", axes_[0], " and ", axes_[1]);
    if (normalize_) a = l2_normalized(a, ax), b = l2_normalized(b, bx);
    // The batch is 'a', the summed axis 'z', every other axis its own letter.
    std::string out = "a";
    char next = 'b';
    const auto letters = [&](Value v, int64_t summed) {
      std::string e = "a";
      for (int64_t d = 1; d < v.rank(); ++d) {
        if (d == summed) {
          e += 'z';
          continue;
        }
        e += next;
        out += next++;
      }
      return e;
    };
    const std::string ea = letters(a, ax), eb = letters(b, bx);
    Value y = ops::einsum(ea + "," + eb + "->" + out, a, b);
    return y.rank() == 1 ? ops::reshape(y, {y.dim(0), 1}) : y;
  }

 private:
  int64_t axis(Value v, int64_t given) const {
    const int64_t a = given < 0 ? given + v.rank() : given;
    AS_CHECK(a >= 1 && a < v.rank() && v.rank() <= 12, "Dot ", name(), ": axis ", given,
             " is not an axis after the batch of ", shape_str(v.shape()));
    return a;
  }

  std::vector<int64_t> axes_;
  bool normalize_;
};

}  // namespace

Subtract::Subtract(std::string name)
    : Layer(std::make_shared<MergeImpl>(
          layer_name_or_default(name, "subtract"), "Subtract",
          [](Value a, Value b) { return a - b; }, 2)) {}
Multiply::Multiply(std::string name)
    : Layer(std::make_shared<MergeImpl>(layer_name_or_default(name, "multiply"), "Multiply",
                                        [](Value a, Value b) { return a * b; })) {}
Average::Average(std::string name)
    : Layer(std::make_shared<AverageImpl>(layer_name_or_default(name, "average"))) {}
Maximum::Maximum(std::string name)
    : Layer(std::make_shared<MergeImpl>(layer_name_or_default(name, "maximum"), "Maximum",
                                        &composed::maximum)) {}
Minimum::Minimum(std::string name)
    : Layer(std::make_shared<MergeImpl>(layer_name_or_default(name, "minimum"), "Minimum",
                                        &composed::minimum)) {}
Concatenate::Concatenate(int64_t axis, std::string name)
    : Layer(std::make_shared<ConcatenateImpl>(axis, layer_name_or_default(name, "concatenate"))) {}

Dot::Dot(std::vector<int64_t> axes, bool normalize, std::string name)
    : Layer(std::make_shared<DotImpl>(std::move(axes), normalize,
                                      layer_name_or_default(name, "dot"))) {}

}  // namespace autoshard
