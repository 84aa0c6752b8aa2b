#include "autoshard/nn/conv_layers.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "nn/conv3d.h"

namespace autoshard {
namespace {

enum class ConvKind { Plain, Depthwise, Separable, Transpose };

const char* base_name(ConvKind kind, int rank) {
  switch (kind) {
    case ConvKind::Plain:
      return rank == 1 ? "conv1d" : rank == 2 ? "conv2d" : "conv3d";
    case ConvKind::Depthwise:
      return "depthwise_conv2d";
    case ConvKind::Separable:
      return "separable_conv2d";
    case ConvKind::Transpose:
      return "conv2d_transpose";
  }
  return "conv";
}

const char* class_name(ConvKind kind, int rank) {
  switch (kind) {
    case ConvKind::Plain:
      return rank == 1 ? "Conv1D" : rank == 2 ? "Conv2D" : "Conv3D";
    case ConvKind::Depthwise:
      return "DepthwiseConv2D";
    case ConvKind::Separable:
      return "SeparableConv2D";
    case ConvKind::Transpose:
      return "Conv2DTranspose";
  }
  return "Conv";
}

// One value per spatial dim, from Keras's int or tuple form.
std::vector<int64_t> per_dim(std::vector<int64_t> v, int rank, const std::string& layer,
                             const char* what) {
  if (v.size() == 1) v.assign(rank, v[0]);
  AS_CHECK(static_cast<int>(v.size()) == rank, layer, ": ", what, " needs 1 or ", rank,
           " values, got ", v.size());
  for (int64_t x : v) AS_CHECK(x >= 1, layer, ": ", what, " must be at least 1, got ", x);
  return v;
}

const char* conv_spatial_names(int rank) {
  return rank == 1 ? "steps" : rank == 2 ? "rows, cols" : "depth, rows, cols";
}

class ConvImpl : public LayerImpl {
 public:
  ConvImpl(ConvKind kind, int rank, int64_t filters, std::vector<int64_t> kernel, ConvOptions o)
      : LayerImpl(o.name_.empty() ? default_layer_name(base_name(kind, rank)) : o.name_),
        kind_(kind),
        rank_(rank),
        filters_(filters),
        o_(std::move(o)) {
    const std::string who = std::string(class_name(kind, rank)) + " " + name();
    kernel_ = per_dim(std::move(kernel), rank, who, "kernel_size");
    strides_ = per_dim(o_.strides_, rank, who, "strides");
    dilations_ = per_dim(o_.dilation_rate_, rank, who, "dilation_rate");
    if (kind != ConvKind::Depthwise)
      AS_CHECK(filters > 0, who, ": filters must be positive, got ", filters);
    AS_CHECK(o_.padding_ == "valid" || o_.padding_ == "same" ||
                 (o_.padding_ == "causal" && kind == ConvKind::Plain && rank == 1),
             who, ": padding must be 'valid' or 'same'", rank == 1 ? " or 'causal'" : "", ", got '",
             o_.padding_, "'");
    AS_CHECK(o_.groups_ >= 1 && filters % o_.groups_ == 0, who, ": groups (", o_.groups_,
             ") must divide filters (", filters, ")");
    AS_CHECK(o_.depth_multiplier_ >= 1, who, ": depth_multiplier must be at least 1, got ",
             o_.depth_multiplier_);
    // Keras refuses any stride above 1 together with any dilation above 1
    // (keras/src/layers/convolutional/base_conv.py, BaseConv.__init__).
    AS_CHECK(*std::max_element(strides_.begin(), strides_.end()) == 1 ||
                 *std::max_element(dilations_.begin(), dilations_.end()) == 1,
             who, ": strides > 1 together with dilation_rate > 1 are not supported (as in Keras)");
    check_activation(o_.activation_);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    const std::string who = std::string(class_name(kind_, rank_)) + " " + name();
    AS_CHECK(inputs.size() == 1, who, " takes one input, got ", inputs.size());
    Value x = inputs[0];
    AS_CHECK(x.rank() == rank_ + 2, who, " needs [batch, ", conv_spatial_names(rank_),
             ", channels], got ", shape_str(x.shape()));
    const int64_t in = x.dim(-1);
    Value y;
    switch (kind_) {
      case ConvKind::Plain: {
        AS_CHECK(in % o_.groups_ == 0, who, ": groups (", o_.groups_, ") must divide the ", in,
                 " input channels");
        Value w =
            t.weight("kernel", kernel_shape(in / o_.groups_, filters_), o_.kernel_initializer_);
        y = rank_ == 3 ? conv3d(x, w, attrs(x.shape(), o_.groups_))
                       : ops::conv(x, w, attrs(x.shape(), o_.groups_));
        break;
      }
      case ConvKind::Depthwise:
        y = depthwise(t, x, "kernel");
        break;
      case ConvKind::Separable: {
        Value d = depthwise(t, x, "depthwise_kernel");
        Value p = t.weight("pointwise_kernel", {1, 1, in * o_.depth_multiplier_, filters_},
                           o_.pointwise_initializer_);
        ConvAttrs one;
        one.strides = one.dilations = {1, 1};
        one.pad_lo = one.pad_hi = {0, 0};
        y = ops::conv(d, p, one);
        break;
      }
      case ConvKind::Transpose:
        y = transpose(t, x);
        break;
    }
    const int64_t out = y.dim(-1);
    if (o_.use_bias_) y = y + t.weight("bias", {out}, o_.bias_initializer_);
    return apply_activation(y, o_.activation_);
  }

 private:
  Shape kernel_shape(int64_t a, int64_t b) const {
    Shape s(kernel_.begin(), kernel_.end());
    s.push_back(a);
    s.push_back(b);
    return s;
  }

  // Strides, dilation and the padding of `padding_` for x's spatial extents.
  ConvAttrs attrs(const Shape& x, int64_t groups) const {
    ConvAttrs a;
    a.strides = strides_;
    a.dilations = dilations_;
    a.groups = groups;
    for (int i = 0; i < rank_; ++i) {
      const int64_t span = dilations_[i] * (kernel_[i] - 1) + 1;
      if (o_.padding_ == "same") {
        auto [lo, hi] = ops::same_padding(x[1 + i], kernel_[i], strides_[i], dilations_[i]);
        a.pad_lo.push_back(lo), a.pad_hi.push_back(hi);
      } else if (o_.padding_ == "causal") {
        a.pad_lo.push_back(span - 1), a.pad_hi.push_back(0);
      } else {
        AS_CHECK(x[1 + i] >= span, class_name(kind_, rank_), " ", name(), ": a kernel spanning ",
                 span, " does not fit an input of ", x[1 + i], " with padding 'valid'");
        a.pad_lo.push_back(0), a.pad_hi.push_back(0);
      }
    }
    return a;
  }

  // Keras's depthwise kernel [kh, kw, in, m] is the grouped kernel [kh, kw,
  // 1, in * m] with output channel c * m + k: a free reshape.
  Value depthwise(Trace& t, Value x, const std::string& weight) {
    const int64_t in = x.dim(-1), m = o_.depth_multiplier_;
    Value w = t.weight(weight, kernel_shape(in, m), o_.kernel_initializer_);
    return ops::conv(x, ops::reshape(w, kernel_shape(1, in * m)), attrs(x.shape(), in));
  }

  // The input gradient of the Conv2D that maps an image of the output's
  // size to x, with Keras's kernel [kh, kw, filters, in] as that Conv2D's.
  Value transpose(Trace& t, Value x) {
    const int64_t in = x.dim(-1);
    Value w = t.weight("kernel", kernel_shape(filters_, in), o_.kernel_initializer_);
    Shape out{x.dim(0)};
    for (int i = 0; i < rank_; ++i) {
      const int64_t span = dilations_[i] * (kernel_[i] - 1) + 1;
      out.push_back(o_.padding_ == "same" ? x.dim(1 + i) * strides_[i]
                                          : (x.dim(1 + i) - 1) * strides_[i] + span);
    }
    out.push_back(filters_);
    ConvAttrs a = attrs(out, 1);
    a.shape = out;
    return ops::conv_grad_input(x, w, a);
  }

  ConvKind kind_;
  int rank_;
  int64_t filters_;
  ConvOptions o_;
  std::vector<int64_t> kernel_, strides_, dilations_;
};

}  // namespace

Conv1D::Conv1D(int64_t filters, int64_t kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Plain, 1, filters,
                                       std::vector<int64_t>{kernel_size}, std::move(o))) {}
Conv2D::Conv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Plain, 2, filters, std::move(kernel_size),
                                       std::move(o))) {}
Conv3D::Conv3D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Plain, 3, filters, std::move(kernel_size),
                                       std::move(o))) {}
DepthwiseConv2D::DepthwiseConv2D(std::vector<int64_t> kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Depthwise, 2, 1, std::move(kernel_size),
                                       std::move(o))) {}
SeparableConv2D::SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Separable, 2, filters, std::move(kernel_size),
                                       std::move(o))) {}
Conv2DTranspose::Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o)
    : Layer(std::make_shared<ConvImpl>(ConvKind::Transpose, 2, filters, std::move(kernel_size),
                                       std::move(o))) {}

namespace {

// Dim 1's `count` slices start, start + stride, ... of x (dim 1 cut or
// padded to stride * count slices, then every stride-th kept by a reshape
// and a crop): pads and reshapes, so it splits over every other dim.
Value conv3d_depth_taps(Value x, int64_t start, int64_t count, int64_t stride) {
  const Shape s = x.shape();
  const int64_t end = start + stride * count;
  std::vector<int64_t> lo(s.size(), 0), hi(s.size(), 0);
  lo[1] = -start, hi[1] = end - s[1];
  if (lo[1] != 0 || hi[1] != 0) x = ops::pad(x, lo, hi);
  if (stride == 1) return x;
  const int64_t rest = numel(Shape(s.begin() + 2, s.end()));
  x = ops::pad(ops::reshape(x, {s[0], count, stride, rest}), {0, 0, 0, 0}, {0, 0, 1 - stride, 0});
  Shape out = s;
  out[1] = count;
  return ops::reshape(x, out);
}

}  // namespace

// Conv3D (keras/src/layers/convolutional/conv3d.py, BaseConv.call: one
// convolution over depth, rows and cols) as a sum over the kernel's depth
// taps i: a Conv2D by kernel[i] of the depth slices tap i reads, each
// slice a batch row. Depth padding is zeros added before, as 'same' pads.
Value conv3d(Value x, Value w, const ConvAttrs& all) {
  ConvAttrs plane = all;
  for (auto* v : {&plane.strides, &plane.dilations, &plane.pad_lo, &plane.pad_hi})
    v->erase(v->begin());
  const int64_t b = x.dim(0), kd = w.dim(0), sd = all.strides[0], dd = all.dilations[0];
  std::vector<int64_t> lo(5, 0), hi(5, 0);
  lo[1] = all.pad_lo[0], hi[1] = all.pad_hi[0];
  if (lo[1] != 0 || hi[1] != 0) x = ops::pad(x, lo, hi);
  const int64_t out_d = (x.dim(1) - (dd * (kd - 1) + 1)) / sd + 1;
  Value sum;
  for (int64_t i = 0; i < kd; ++i) {
    Value slices = conv3d_depth_taps(x, i * dd, out_d, sd);
    Value rows = ops::reshape(slices, {b * out_d, x.dim(2), x.dim(3), x.dim(4)});
    const Shape tap_shape(w.shape().begin() + 1, w.shape().end());
    Value tap = kd == 1 ? w : ops::pad(w, {-i, 0, 0, 0, 0}, {i + 1 - kd, 0, 0, 0, 0});
    tap = ops::reshape(tap, tap_shape);
    Value z = ops::conv(rows, tap, plane);
    sum = sum.valid() ? sum + z : z;
  }
  return ops::reshape(sum, {b, out_d, sum.dim(1), sum.dim(2), sum.dim(3)});
}

}  // namespace autoshard
