// Initializer: how a weight's first values are drawn. Draws are keyed by the
// weight's path and each element's global index (CounterRng), so the same
// weight gets the same values whatever the order of creation or the sharding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct Initializer {
  enum class Kind {
    Zeros,
    Ones,
    Constant,
    Normal,
    Uniform,
    GlorotUniform,
    // Keras's Orthogonal: the weight reshaped to [prod(shape[:-1]), shape[-1]]
    // has orthonormal rows or columns (whichever are fewer), times gain `a`.
    Orthogonal,
    // An LSTM's bias with Keras's unit_forget_bias: `inner` everywhere but
    // the forget gate's block [a, 2a) of the 4a columns, which is one.
    UnitForgetBias,
    // Keras's TruncatedNormal(mean a, stddev b): normal draws beyond two
    // stddev from the mean drawn again.
    TruncatedNormal,
    // Keras's VarianceScaling(scale a, mode, distribution): variance
    // a / n, n the fan `mode` picks (at least 1).
    VarianceScaling,
    // Keras's Identity(gain a): a times the [rows, cols] identity (rank 2).
    Identity,
  };
  // VarianceScaling's n: fan_in, fan_out or their mean (Keras's `mode`).
  enum class FanMode : uint8_t { FanIn, FanOut, FanAvg };
  // VarianceScaling's `distribution`; a truncated normal's stddev is
  // divided by 0.8796..., the stddev of a unit normal cut at +-2.
  enum class Distribution : uint8_t { TruncatedNormal, UntruncatedNormal, Uniform };
  Kind kind = Kind::GlorotUniform;
  double a = 0, b = 0;  // normal: mean a, stddev b; uniform: [a, b); constant: a
  FanMode mode = FanMode::FanIn;
  Distribution distribution = Distribution::TruncatedNormal;
  std::shared_ptr<const Initializer> inner;  // UnitForgetBias: the other gates' initializer

  static Initializer zeros() { return of(Kind::Zeros); }
  static Initializer ones() { return of(Kind::Ones); }
  static Initializer constant(double v) { return of(Kind::Constant, v); }
  // Keras's RandomNormal(mean, stddev) order.
  static Initializer normal(double mean = 0.0, double stddev = 0.05) {
    return of(Kind::Normal, mean, stddev);
  }
  static Initializer uniform(double lo, double hi) { return of(Kind::Uniform, lo, hi); }
  static Initializer truncated_normal(double mean = 0.0, double stddev = 0.05) {
    return of(Kind::TruncatedNormal, mean, stddev);
  }
  // Keras's VarianceScaling (keras/src/initializers/random_initializers.py):
  // he_normal is variance_scaling(2, FanIn, TruncatedNormal), lecun_uniform
  // variance_scaling(1, FanIn, Uniform), glorot_normal (1, FanAvg, ...).
  static Initializer variance_scaling(double scale, FanMode mode, Distribution distribution);
  static Initializer identity(double gain = 1.0) { return of(Kind::Identity, gain); }
  // Keras's fans: the last dim is fan_out and the one before fan_in, each
  // times the receptive field (the product of the dims before those two):
  // a Conv2D kernel [kh, kw, in, out] has fan_in kh kw in, fan_out kh kw out.
  static Initializer glorot_uniform() { return of(Kind::GlorotUniform); }
  // Keras's default recurrent_initializer (gain 1): the QR factor of a
  // seeded normal matrix with the signs of R's diagonal taken out, so Q is
  // the one orthogonal matrix the draw determines.
  static Initializer orthogonal(double gain = 1.0) { return of(Kind::Orthogonal, gain); }
  // Keras's LSTM(unit_forget_bias=True) bias [4 units]: `rest` for the i, c
  // and o gates, ones for the forget gate f.
  static Initializer unit_forget_bias(int64_t units, const Initializer& rest);
  // Keras names: "zeros", "ones", "glorot_uniform", "glorot_normal",
  // "he_normal", "he_uniform", "lecun_normal", "lecun_uniform",
  // "random_normal", "random_uniform", "truncated_normal", "orthogonal",
  // "identity", "variance_scaling" (with Keras's defaults).
  static Initializer from_name(const std::string& name);
  // Keras's `mode` and `distribution` strings ("fan_avg", "uniform", ...);
  // anything else throws naming the accepted values.
  static FanMode fan_mode(const std::string& name);
  static Distribution distribution_of(const std::string& name);

  // The value of element `index` of a weight of `shape` at `path` under `seed`.
  float value(const std::string& path, const Shape& shape, uint64_t seed, int64_t index) const;
  Tensor make(const std::string& path, const Shape& shape, uint64_t seed) const;

 private:
  static Initializer of(Kind k, double a = 0, double b = 0) {
    Initializer i;
    i.kind = k, i.a = a, i.b = b;
    return i;
  }
};

}  // namespace autoshard
