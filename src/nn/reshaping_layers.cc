#include "autoshard/nn/reshaping_layers.h"

#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

namespace {

Value one_input(const std::vector<Value>& inputs, const std::string& layer) {
  AS_CHECK(inputs.size() == 1, "layer ", layer, " takes one input, got ", inputs.size());
  AS_CHECK(inputs[0].rank() >= 1, "layer ", layer, " needs a batch dimension");
  return inputs[0];
}

class FlattenImpl : public LayerImpl {
 public:
  using LayerImpl::LayerImpl;
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, name());
    int64_t features = 1;
    for (int i = 1; i < x.rank(); ++i) features *= x.dim(i);
    return ops::reshape(x, {x.dim(0), features});
  }
};

class ReshapeImpl : public LayerImpl {
 public:
  ReshapeImpl(Shape target, std::string name) : LayerImpl(std::move(name)), target_(target) {
    AS_CHECK(std::count(target_.begin(), target_.end(), -1) <= 1 &&
                 std::all_of(target_.begin(), target_.end(), [](int64_t d) { return d >= -1; }),
             "Reshape: target_shape ", shape_str(target_),
             " needs sizes of at least 0, with at most one -1");
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, name());
    const int64_t have = numel(x.shape()) / std::max<int64_t>(1, x.dim(0));
    int64_t known = 1;
    for (int64_t d : target_)
      if (d != -1) known *= d;
    Shape out{x.dim(0)};
    for (int64_t d : target_) {
      if (d == -1) {
        AS_CHECK(known > 0 && have % known == 0, "Reshape ", name(), ": cannot infer -1 in ",
                 shape_str(target_), " from ", have, " features");
        d = have / known;
        known *= d;
      }
      out.push_back(d);
    }
    AS_CHECK(known == have, "Reshape ", name(), ": target_shape ", shape_str(target_),
             " does not hold the ", have, " features of ", shape_str(x.shape()));
    return ops::reshape(x, out);
  }

 private:
  Shape target_;
};

class PermuteImpl : public LayerImpl {
 public:
  PermuteImpl(std::vector<int64_t> dims, std::string name)
      : LayerImpl(std::move(name)), dims_(std::move(dims)) {
    std::vector<int64_t> sorted = dims_;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      AS_CHECK(sorted[i] == int64_t(i) + 1, "Permute: dims must be a permutation of 1..",
               sorted.size(), " (1-based, the batch excluded)");
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, name());
    AS_CHECK(size_t(x.rank()) == dims_.size() + 1, "Permute ", name(), ": ", dims_.size(),
             " dims for an input of shape ", shape_str(x.shape()));
    std::vector<int64_t> perm{0};
    perm.insert(perm.end(), dims_.begin(), dims_.end());
    return ops::transpose(x, perm);
  }

 private:
  std::vector<int64_t> dims_;
};

class RepeatVectorImpl : public LayerImpl {
 public:
  RepeatVectorImpl(int64_t n, std::string name) : LayerImpl(std::move(name)), n_(n) {
    AS_CHECK(n >= 1, "RepeatVector: n must be positive, got ", n);
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, name());
    AS_CHECK(x.rank() == 2, "RepeatVector ", name(), " needs [batch, features], got ",
             shape_str(x.shape()));
    return ops::broadcast_to(ops::reshape(x, {x.dim(0), 1, x.dim(1)}), {x.dim(0), n_, x.dim(1)});
  }

 private:
  int64_t n_;
};

class RescalingImpl : public LayerImpl {
 public:
  RescalingImpl(double scale, double offset, std::string name)
      : LayerImpl(std::move(name)), scale_(scale), offset_(offset) {
    AS_CHECK(std::isfinite(scale) && std::isfinite(offset),
             "Rescaling: scale and offset must be finite");
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value y = ops::scale(one_input(inputs, name()), scale_);
    return offset_ == 0 ? y : y + ops::constant(t.graph(), {}, offset_);
  }

 private:
  double scale_, offset_;
};

}  // namespace

Flatten::Flatten(std::string name)
    : Layer(std::make_shared<FlattenImpl>(layer_name_or_default(name, "flatten"))) {}
Reshape::Reshape(Shape target_shape, std::string name)
    : Layer(std::make_shared<ReshapeImpl>(std::move(target_shape),
                                          layer_name_or_default(name, "reshape"))) {}
Permute::Permute(std::vector<int64_t> dims, std::string name)
    : Layer(
          std::make_shared<PermuteImpl>(std::move(dims), layer_name_or_default(name, "permute"))) {}
RepeatVector::RepeatVector(int64_t n, std::string name)
    : Layer(std::make_shared<RepeatVectorImpl>(n, layer_name_or_default(name, "repeat_vector"))) {}
Rescaling::Rescaling(double scale, double offset, std::string name)
    : Layer(std::make_shared<RescalingImpl>(scale, offset,
                                            layer_name_or_default(name, "rescaling"))) {}

}  // namespace autoshard
