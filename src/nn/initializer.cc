#include "autoshard/nn/initializer.h"

#include <cmath>

#include "autoshard/error.h"
#include "tensor/rng.h"

namespace autoshard {

Initializer Initializer::from_name(const std::string& name) {
  if (name == "zeros") return zeros();
  if (name == "ones") return ones();
  if (name == "glorot_uniform") return glorot_uniform();
  if (name == "random_normal") return normal(0.0, 0.05);
  if (name == "random_uniform") return uniform(-0.05, 0.05);
  fail("unknown initializer '", name,
       "' (known: zeros, ones, glorot_uniform, random_normal, random_uniform)");
}

float Initializer::value(const std::string& path, const Shape& shape, uint64_t seed,
                         int64_t index) const {
  const CounterRng rng(stable_hash(path.c_str()) ^ (seed * 0x9E3779B97F4A7C15ull), 0);
  const auto e = static_cast<uint64_t>(index);
  switch (kind) {
    case Kind::Zeros:
      return 0.0f;
    case Kind::Ones:
      return 1.0f;
    case Kind::Constant:
      return static_cast<float>(a);
    case Kind::Normal:
      return static_cast<float>(a + b * rng.normal(e));
    case Kind::Uniform:
      return static_cast<float>(a + (b - a) * rng.uniform(e));
    case Kind::GlorotUniform: {
      // fan_in / fan_out as Keras computes them: the last axis is fan_out,
      // the product of the rest is fan_in.
      double fan_out = shape.empty() ? 1 : static_cast<double>(shape.back());
      double fan_in = shape.size() <= 1 ? fan_out : static_cast<double>(numel(shape)) / fan_out;
      double limit = std::sqrt(6.0 / (fan_in + fan_out));
      return static_cast<float>(-limit + 2 * limit * rng.uniform(e));
    }
  }
  return 0.0f;
}

Tensor Initializer::make(const std::string& path, const Shape& shape, uint64_t seed) const {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = value(path, shape, seed, i);
  return t;
}

}  // namespace autoshard
