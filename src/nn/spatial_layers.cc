#include "autoshard/nn/spatial_layers.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {
namespace {

// {before, after} for each of `rank` spatial dims, from Keras's int, one
// value per dim (symmetric) or ((before, after), ...) forms, flattened.
std::vector<int64_t> spatial_sides(const std::vector<int64_t>& v, int rank, const std::string& who,
                                   const char* what) {
  std::vector<int64_t> s;
  if (v.size() == 1) s.assign(2 * rank, v[0]);
  if (v.size() == size_t(rank) && rank > 1)
    for (int64_t x : v) s.push_back(x), s.push_back(x);
  if (v.size() == size_t(2 * rank)) s = v;
  AS_CHECK(!s.empty(), who, ": ", what, " needs 1, ", rank, " or ", 2 * rank, " values, got ",
           v.size());
  for (int64_t x : s) AS_CHECK(x >= 0, who, ": ", what, " must not be negative, got ", x);
  return s;
}

Value spatial_input(const std::vector<Value>& inputs, int rank, const std::string& who) {
  AS_CHECK(inputs.size() == 1, who, " takes one input, got ", inputs.size());
  AS_CHECK(inputs[0].rank() == rank + 2, who, " needs [batch, ",
           rank == 2 ? "rows, cols" : "depth, rows, cols", ", channels], got ",
           shape_str(inputs[0].shape()));
  return inputs[0];
}

std::string spatial_class(const char* base, int rank) {
  return base + std::to_string(rank) + "D";
}

// ZeroPadding2D/3D and Cropping2D/3D
// (keras/src/layers/reshaping/zero_padding3d.py, cropping3d.py): one Pad op,
// negative to crop.
class PadImpl : public LayerImpl {
 public:
  PadImpl(int rank, std::vector<int64_t> sides, bool crop, std::string name)
      : LayerImpl(name.empty() ? default_layer_name((crop ? "cropping" : "zero_padding") +
                                                    std::to_string(rank) + "d")
                               : std::move(name)),
        rank_(rank),
        crop_(crop) {
    who_ = spatial_class(crop ? "Cropping" : "ZeroPadding", rank) + " " + this->name();
    sides_ = spatial_sides(sides, rank, who_, crop ? "cropping" : "padding");
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = spatial_input(inputs, rank_, who_);
    const int64_t s = crop_ ? -1 : 1;
    std::vector<int64_t> lo(rank_ + 2, 0), hi(rank_ + 2, 0);
    for (int i = 0; i < rank_; ++i) {
      AS_CHECK(!crop_ || sides_[2 * i] + sides_[2 * i + 1] < x.dim(1 + i), who_, ": cropping ",
               sides_[2 * i], "+", sides_[2 * i + 1], " from spatial dim ", i,
               " leaves nothing of ", shape_str(x.shape()));
      lo[1 + i] = s * sides_[2 * i];
      hi[1 + i] = s * sides_[2 * i + 1];
    }
    return ops::pad(x, lo, hi);
  }

 private:
  int rank_;
  bool crop_;
  std::string who_;
  std::vector<int64_t> sides_;
};

// UpSampling2D/3D (keras/src/layers/reshaping/up_sampling3d.py,
// _resize_volumes: each spatial dim repeated): a broadcast between two
// free reshapes.
class UpSamplingImpl : public LayerImpl {
 public:
  UpSamplingImpl(int rank, std::vector<int64_t> size, const std::string& interpolation,
                 std::string name)
      : LayerImpl(name.empty() ? default_layer_name("up_sampling" + std::to_string(rank) + "d")
                               : std::move(name)),
        rank_(rank) {
    who_ = spatial_class("UpSampling", rank) + " " + this->name();
    if (size.size() == 1) size.assign(rank, size[0]);
    bool positive = size.size() == size_t(rank);
    for (int64_t s : size) positive = positive && s >= 1;
    AS_CHECK(positive, who_, ": size needs 1 or ", rank, " positive values");
    AS_CHECK(interpolation == "nearest", who_, ": interpolation '", interpolation,
             "' is not supported (only 'nearest')");
    size_ = size;
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = spatial_input(inputs, rank_, who_);
    Shape spread{x.dim(0)}, repeated{x.dim(0)}, out{x.dim(0)};
    for (int i = 0; i < rank_; ++i) {
      spread.push_back(x.dim(1 + i)), spread.push_back(1);
      repeated.push_back(x.dim(1 + i)), repeated.push_back(size_[i]);
      out.push_back(x.dim(1 + i) * size_[i]);
    }
    for (Shape* s : {&spread, &repeated, &out}) s->push_back(x.dim(-1));
    return ops::reshape(ops::broadcast_to(ops::reshape(x, spread), repeated), out);
  }

 private:
  int rank_;
  std::string who_;
  std::vector<int64_t> size_;
};

}  // namespace

ZeroPadding2D::ZeroPadding2D(std::vector<int64_t> padding, std::string name)
    : Layer(std::make_shared<PadImpl>(2, std::move(padding), false, std::move(name))) {}
Cropping2D::Cropping2D(std::vector<int64_t> cropping, std::string name)
    : Layer(std::make_shared<PadImpl>(2, std::move(cropping), true, std::move(name))) {}
UpSampling2D::UpSampling2D(std::vector<int64_t> size, std::string interpolation, std::string name)
    : Layer(std::make_shared<UpSamplingImpl>(2, std::move(size), interpolation, std::move(name))) {}
ZeroPadding3D::ZeroPadding3D(std::vector<int64_t> padding, std::string name)
    : Layer(std::make_shared<PadImpl>(3, std::move(padding), false, std::move(name))) {}
Cropping3D::Cropping3D(std::vector<int64_t> cropping, std::string name)
    : Layer(std::make_shared<PadImpl>(3, std::move(cropping), true, std::move(name))) {}
UpSampling3D::UpSampling3D(std::vector<int64_t> size, std::string interpolation, std::string name)
    : Layer(std::make_shared<UpSamplingImpl>(3, std::move(size), interpolation, std::move(name))) {}

}  // namespace autoshard
