#include "autoshard/nn/spatial_layers.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {
namespace {

// {top, bottom, left, right} from Keras's int, (rows, cols) or
// ((top, bottom), (left, right)) forms.
std::vector<int64_t> four_sides(const std::vector<int64_t>& v, const std::string& who,
                                const char* what) {
  std::vector<int64_t> s;
  if (v.size() == 1) s = {v[0], v[0], v[0], v[0]};
  if (v.size() == 2) s = {v[0], v[0], v[1], v[1]};
  if (v.size() == 4) s = v;
  AS_CHECK(!s.empty(), who, ": ", what, " needs 1, 2 or 4 values, got ", v.size());
  for (int64_t x : s) AS_CHECK(x >= 0, who, ": ", what, " must not be negative, got ", x);
  return s;
}

Value image(const std::vector<Value>& inputs, const std::string& who) {
  AS_CHECK(inputs.size() == 1, who, " takes one input, got ", inputs.size());
  AS_CHECK(inputs[0].rank() == 4, who, " needs [batch, rows, cols, channels], got ",
           shape_str(inputs[0].shape()));
  return inputs[0];
}

class PadImpl : public LayerImpl {
 public:
  PadImpl(std::vector<int64_t> sides, bool crop, std::string name)
      : LayerImpl(name.empty() ? default_layer_name(crop ? "cropping2d" : "zero_padding2d")
                               : std::move(name)),
        crop_(crop) {
    who_ = std::string(crop ? "Cropping2D " : "ZeroPadding2D ") + this->name();
    sides_ = four_sides(sides, who_, crop ? "cropping" : "padding");
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = image(inputs, who_);
    const int64_t s = crop_ ? -1 : 1;
    AS_CHECK(!crop_ || (sides_[0] + sides_[1] < x.dim(1) && sides_[2] + sides_[3] < x.dim(2)), who_,
             ": cropping ", sides_[0], "+", sides_[1], " rows and ", sides_[2], "+", sides_[3],
             " cols leaves nothing of ", shape_str(x.shape()));
    return ops::pad(x, {0, s * sides_[0], s * sides_[2], 0}, {0, s * sides_[1], s * sides_[3], 0});
  }

 private:
  bool crop_;
  std::string who_;
  std::vector<int64_t> sides_;
};

class UpSamplingImpl : public LayerImpl {
 public:
  UpSamplingImpl(std::vector<int64_t> size, const std::string& interpolation, std::string name)
      : LayerImpl(name.empty() ? default_layer_name("up_sampling2d") : std::move(name)) {
    who_ = "UpSampling2D " + this->name();
    if (size.size() == 1) size.push_back(size[0]);
    AS_CHECK(size.size() == 2 && size[0] >= 1 && size[1] >= 1, who_,
             ": size needs 1 or 2 positive values");
    AS_CHECK(interpolation == "nearest", who_, ": interpolation '", interpolation,
             "' is not supported (only 'nearest')");
    size_ = size;
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = image(inputs, who_);
    const int64_t b = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
    Value spread =
        ops::broadcast_to(ops::reshape(x, {b, h, 1, w, 1, c}), {b, h, size_[0], w, size_[1], c});
    return ops::reshape(spread, {b, h * size_[0], w * size_[1], c});
  }

 private:
  std::string who_;
  std::vector<int64_t> size_;
};

}  // namespace

ZeroPadding2D::ZeroPadding2D(std::vector<int64_t> padding, std::string name)
    : Layer(std::make_shared<PadImpl>(std::move(padding), false, std::move(name))) {}
Cropping2D::Cropping2D(std::vector<int64_t> cropping, std::string name)
    : Layer(std::make_shared<PadImpl>(std::move(cropping), true, std::move(name))) {}
UpSampling2D::UpSampling2D(std::vector<int64_t> size, std::string interpolation, std::string name)
    : Layer(std::make_shared<UpSamplingImpl>(std::move(size), interpolation, std::move(name))) {}

}  // namespace autoshard
