// Initializer: how a weight's first values are drawn. Draws are keyed by the
// weight's path and each element's global index (CounterRng), so the same
// weight gets the same values whatever the order of creation or the sharding.
#pragma once

#include <cstdint>
#include <string>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct Initializer {
  enum class Kind { Zeros, Ones, Constant, Normal, Uniform, GlorotUniform };
  Kind kind = Kind::GlorotUniform;
  double a = 0, b = 0;  // normal: mean a, stddev b; uniform: [a, b); constant: a

  static Initializer zeros() { return {Kind::Zeros}; }
  static Initializer ones() { return {Kind::Ones}; }
  static Initializer constant(double v) { return {Kind::Constant, v}; }
  // Keras's RandomNormal(mean, stddev) order.
  static Initializer normal(double mean = 0.0, double stddev = 0.05) {
    return {Kind::Normal, mean, stddev};
  }
  static Initializer uniform(double lo, double hi) { return {Kind::Uniform, lo, hi}; }
  static Initializer glorot_uniform() { return {Kind::GlorotUniform}; }
  // Keras names: "zeros", "ones", "glorot_uniform", "random_normal", "random_uniform".
  static Initializer from_name(const std::string& name);

  // The value of element `index` of a weight of `shape` at `path` under `seed`.
  float value(const std::string& path, const Shape& shape, uint64_t seed, int64_t index) const;
  Tensor make(const std::string& path, const Shape& shape, uint64_t seed) const;
};

}  // namespace autoshard
