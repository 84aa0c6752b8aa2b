// Tensor: a dense, row-major, reference-counted block of f32, i32 or bf16
// values.
//
// Tensors are the concrete values that flow through the executor and that the
// user hands in (weights, batches). Shapes are static and use int64 dims.
// Copies share storage; use clone() for a deep copy. A weight's storage may
// also hold a compact copy of its values in bf16 or int8 (quantized()),
// which a decode step's QuantizedEinsum products read instead of the f32
// values. A bf16 tensor is a frozen weight held in half the bytes
// (Model::hold_frozen_weights_in_bf16): its elements are the top halves of
// f32 values (uint16_t bit patterns), and the products and gathers that read
// it widen them as they go (src/ir/ops/bf16_gemm.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace autoshard {

enum class DType : uint8_t { F32, I32, BF16 };

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
// The C++ type of each dtype's elements, for Tensor::data<T>().
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::I32;
}
// bf16 elements as their bit patterns (the top 16 bits of an f32).
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::BF16;
}

using Shape = std::vector<int64_t>;

// A matrix's values in bf16 or int8 (src/tensor/quantize.h).
struct QuantizedMatrix;

// The most elements one value may have (2^60): byte counts of any dtype then
// fit in int64 with room to spare, and larger shapes are errors, never wraps.
constexpr int64_t kMaxElements = int64_t{1} << 60;

// Element count of a shape; throws autoshard::Error for a negative dimension
// or a count above kMaxElements.
int64_t numel(const Shape& shape);
std::string shape_str(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> strides_of(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled storage of the given shape. Throws autoshard::Error naming
  // the shape and its bytes when the memory cannot be had.
  Tensor(Shape shape, DType dtype = DType::F32);

  static Tensor zeros(Shape shape, DType dtype = DType::F32) {
    return Tensor(std::move(shape), dtype);
  }
  static Tensor full(Shape shape, float value);
  static Tensor from(Shape shape, std::span<const float> values);
  static Tensor from(Shape shape, std::span<const int32_t> values);
  static Tensor from(Shape shape, std::initializer_list<float> values);
  static Tensor from_ints(Shape shape, std::initializer_list<int32_t> values);
  static Tensor scalar(float value) { return from({}, {value}); }
  // A tensor over `data`, memory it does not own, kept alive by `owner`:
  // the Python bindings hand fit() a NumPy array's rows without a copy.
  // That memory has neither the 64-byte alignment nor the padding of a
  // tensor's own storage, so it is for reading by memcpy only (fit,
  // evaluate and predict slice their batches out of it), never for binding
  // to a step whose kernels make vector loads; and it must not change while
  // the engine reads it.
  static Tensor borrowed(Shape shape, DType dtype, void* data, std::shared_ptr<void> owner);

  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const;  // negative axes count from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool defined() const { return storage_ != nullptr || numel_ == 0; }

  // Typed access; throws autoshard::Error when T is not the tensor's dtype.
  template <typename T>
  T* data() {
    expect_dtype(dtype_of<T>());
    return reinterpret_cast<T*>(storage_.get());
  }
  template <typename T>
  const T* data() const {
    expect_dtype(dtype_of<T>());
    return reinterpret_cast<const T*>(storage_.get());
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  int32_t* i32() { return data<int32_t>(); }
  const int32_t* i32() const { return data<int32_t>(); }
  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }

  // Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Same storage seen with another shape and dtype that fit in it (the
  // executor's buffer reuse).
  Tensor view(Shape shape, DType dtype) const;
  Tensor clone() const;
  // The same values in `dtype`: f32 -> bf16 rounds to nearest even (a NaN
  // stays a NaN), bf16 -> f32 widens exactly; the same dtype returns this
  // tensor (shared storage). Other pairs throw autoshard::Error.
  Tensor converted(DType dtype) const;
  std::vector<float> to_vector() const;  // f32 only
  float item() const;                    // single-element f32

  // The weights format of this f32 tensor's storage: null (f32, the usual
  // case) or its values in bf16 or int8 as a matrix (weight-only
  // quantization, made by nn/generation.h's quantize_weights). The f32
  // values then hold the same numbers dequantized, for every kernel that
  // reads f32; the one-row products of QuantizedEinsum (the op a graph
  // makes of a product over a weight it holds in that format,
  // Graph::hold_weights) read the compact copy instead. Held with the storage, so every tensor
  // sharing it (copies, reshapes, the executor's bindings) sees it; a copy
  // made by clone() does not. Set it while no kernel reads the tensor; a
  // borrowed tensor cannot hold one.
  const QuantizedMatrix* quantized() const;
  void set_quantized(std::shared_ptr<const QuantizedMatrix> copy);

 private:
  void expect_dtype(DType want) const {
    if (dtype_ != want) [[unlikely]]
      dtype_mismatch(want);
  }
  [[noreturn]] void dtype_mismatch(DType want) const;

  // The storage's own record (its compact copy); null for borrowed memory.
  // It lives as long as storage_, which shares its reference count.
  struct Storage;

  Shape shape_;
  DType dtype_ = DType::F32;
  int64_t numel_ = 0;
  std::shared_ptr<std::byte> storage_;
  Storage* record_ = nullptr;
};

// Largest |a - b| over max |b| (or 1 if b is all zeros): the relative error
// measure the numerical tests use.
double max_relative_error(const Tensor& a, const Tensor& b);
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace autoshard
