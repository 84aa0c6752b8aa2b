#include "autoshard/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "tensor/large_array.h"
#include "tensor/quantize.h"

namespace autoshard {

const char* dtype_name(DType dtype) {
  return dtype == DType::F32 ? "f32" : dtype == DType::I32 ? "i32" : "bf16";
}
size_t dtype_size(DType dtype) {
  return dtype == DType::BF16 ? 2 : 4;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    AS_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    if (d != 0 && n > kMaxElements / d)
      fail("shape ", shape_str(shape), " has more than 2^60 elements");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

// Zero-filled storage, 64-byte aligned so kernels can use aligned vector
// loads (large tensors on huge pages: tensor/large_array.h), with the
// compact copy of its values when it has one.
struct Tensor::Storage {
  std::byte* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<const QuantizedMatrix> quantized;
  Storage(size_t n, const Shape& shape)
      : data(static_cast<std::byte*>(allocate_array(n))), bytes(n) {
    if (data == nullptr)
      fail("out of memory: a tensor of shape ", shape_str(shape), " needs ", n, " bytes (", n >> 20,
           " MiB)");
  }
  ~Storage() { free_array(data, bytes); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

Tensor::Tensor(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  numel_ = autoshard::numel(shape_);
  auto storage = std::make_shared<Storage>(nbytes(), shape_);
  record_ = storage.get();
  // The aliasing constructor: the record's count, its bytes' address.
  storage_ = std::shared_ptr<std::byte>(std::move(storage), record_->data);
}

const QuantizedMatrix* Tensor::quantized() const {
  return record_ ? record_->quantized.get() : nullptr;
}

void Tensor::set_quantized(std::shared_ptr<const QuantizedMatrix> copy) {
  AS_CHECK(record_ != nullptr, "a borrowed tensor ", shape_str(shape_),
           " cannot hold a compact copy of its values");
  AS_CHECK(dtype_ == DType::F32, "only an f32 tensor holds a compact copy, not ",
           dtype_name(dtype_), shape_str(shape_));
  record_->quantized = std::move(copy);
}

void Tensor::dtype_mismatch(DType want) const {
  fail("tensor ", dtype_name(dtype_), shape_str(shape_), " read as ", dtype_name(want));
}

Tensor Tensor::full(Shape shape, float value) {
  Tensor t(std::move(shape));
  std::fill_n(t.f32(), t.numel(), value);
  return t;
}

Tensor Tensor::from(Shape shape, std::span<const float> values) {
  Tensor t(std::move(shape));
  AS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "Tensor::from: ", values.size(),
           " values for shape ", shape_str(t.shape()));
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

Tensor Tensor::from(Shape shape, std::span<const int32_t> values) {
  Tensor t(std::move(shape), DType::I32);
  AS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "Tensor::from: ", values.size(),
           " values for shape ", shape_str(t.shape()));
  std::copy(values.begin(), values.end(), t.i32());
  return t;
}

Tensor Tensor::from(Shape shape, std::initializer_list<float> values) {
  return from(std::move(shape), std::span<const float>(values.begin(), values.size()));
}

Tensor Tensor::from_ints(Shape shape, std::initializer_list<int32_t> values) {
  return from(std::move(shape), std::span<const int32_t>(values.begin(), values.size()));
}

int64_t Tensor::dim(int axis) const {
  int r = rank();
  if (axis < 0) axis += r;
  AS_CHECK(axis >= 0 && axis < r, "axis ", axis, " out of range for shape ", shape_str(shape_));
  return shape_[axis];
}

Tensor Tensor::borrowed(Shape shape, DType dtype, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.numel_ = autoshard::numel(t.shape_);
  // The aliasing constructor: owner's count, data's address.
  t.storage_ = std::shared_ptr<std::byte>(std::move(owner), static_cast<std::byte*>(data));
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  AS_CHECK(autoshard::numel(shape) == numel_, "cannot reshape ", shape_str(shape_), " to ",
           shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(Shape shape, DType dtype) const {
  int64_t n = autoshard::numel(shape);
  AS_CHECK(static_cast<size_t>(n) * dtype_size(dtype) <= nbytes(), "view ", shape_str(shape),
           " does not fit in a buffer of ", nbytes(), " bytes");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.numel_ = n;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::converted(DType dtype) const {
  if (dtype == dtype_) return *this;
  const bool narrow = dtype_ == DType::F32 && dtype == DType::BF16;
  AS_CHECK(narrow || (dtype_ == DType::BF16 && dtype == DType::F32), "cannot convert ",
           dtype_name(dtype_), shape_str(shape_), " to ", dtype_name(dtype),
           " (only f32 <-> bf16)");
  Tensor t(shape_, dtype);
  parallel_for(numel_, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    if (narrow) {
      const float* src = f32();
      uint16_t* dst = t.data<uint16_t>();
      for (int64_t i = begin; i < end; ++i) dst[i] = bf16_round(src[i]);
    } else {
      const uint16_t* src = data<uint16_t>();
      float* dst = t.f32();
      for (int64_t i = begin; i < end; ++i) dst[i] = bf16_widen(src[i]);
    }
  });
  return t;
}

std::vector<float> Tensor::to_vector() const {
  AS_CHECK(dtype_ == DType::F32, "to_vector needs an f32 tensor");
  return std::vector<float>(f32(), f32() + numel_);
}

float Tensor::item() const {
  AS_CHECK(numel_ == 1, "item() needs a single-element tensor, got ", shape_str(shape_));
  return dtype_ == DType::F32 ? f32()[0] : static_cast<float>(i32()[0]);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  AS_CHECK(a.shape() == b.shape(), "compare: shapes differ ", shape_str(a.shape()), " vs ",
           shape_str(b.shape()));
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = std::fabs(double(a.f32()[i]) - double(b.f32()[i]));
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

double max_relative_error(const Tensor& a, const Tensor& b) {
  double scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(double(b.f32()[i])));
  return max_abs_diff(a, b) / (scale > 0 ? scale : 1.0);
}

}  // namespace autoshard
