#include "autoshard/nn/initializer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "autoshard/error.h"
#include "tensor/rng.h"

// LAPACK through OpenBLAS (Fortran symbols; Debian's OpenBLAS has no LAPACKE).
extern "C" {
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau,
             double* work, const int* lwork, int* info);
}

namespace autoshard {

namespace {

CounterRng rng_of(const std::string& path, uint64_t seed) {
  return CounterRng(stable_hash(path.c_str()) ^ (seed * 0x9E3779B97F4A7C15ull), 0);
}

// Keras's compute_fans: rank 0 and 1 have fan_in = fan_out = the size (1 for
// a scalar), rank 2 [in, out], higher ranks [*receptive, in, out].
std::pair<double, double> fans(const Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  double receptive = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) receptive *= double(shape[d]);
  return {double(shape[shape.size() - 2]) * receptive, double(shape.back()) * receptive};
}

// Q (m x n, m >= n, column-major) of the QR factorisation of `a`, with each
// column's sign flipped where R's diagonal is negative (Keras's q * sign(d)).
std::vector<double> orthonormal_columns(std::vector<double> a, int m, int n) {
  std::vector<double> tau(n);
  int info = 0, lwork = -1;
  double query = 0;
  dgeqrf_(&m, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  lwork = std::max(1, int(query));
  std::vector<double> work(lwork);
  dgeqrf_(&m, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  AS_CHECK(info == 0, "orthogonal initializer: LAPACK dgeqrf failed (info ", info, ")");
  std::vector<double> sign(n);
  for (int j = 0; j < n; ++j) sign[j] = a[size_t(j) * m + j] < 0 ? -1.0 : 1.0;
  lwork = -1;
  dorgqr_(&m, &n, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  lwork = std::max(1, int(query));
  work.assign(lwork, 0.0);
  dorgqr_(&m, &n, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  AS_CHECK(info == 0, "orthogonal initializer: LAPACK dorgqr failed (info ", info, ")");
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) a[size_t(j) * m + i] *= sign[j];
  return a;
}

// The whole orthogonal weight, row-major in `shape`, drawn from the path's
// normal stream: Keras's flat shape (max(rows, cols), min(rows, cols)), Q,
// transposed when rows < cols.
std::vector<float> orthogonal_matrix(const std::string& path, const Shape& shape, uint64_t seed,
                                     double gain) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = cols == 0 ? 0 : numel(shape) / cols;
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  AS_CHECK(m <= (int64_t{1} << 30) / std::max<int64_t>(1, n),
           "orthogonal initializer: ", shape_str(shape), " is too large to factorise");
  std::vector<float> out(size_t(rows * cols));
  if (n == 0) return out;
  const CounterRng rng = rng_of(path, seed);
  // The draw fills the flat matrix row-major, as Keras's normal(flat_shape).
  std::vector<double> a(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) a[size_t(j * m + i)] = rng.normal(uint64_t(i * n + j));
  const std::vector<double> q = orthonormal_columns(std::move(a), int(m), int(n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(gain * q[size_t(j * m + i)]);
      if (rows >= cols)
        out[size_t(i * cols + j)] = v;  // q is [rows, cols]
      else
        out[size_t(j * cols + i)] = v;  // q^T is [rows, cols]
    }
  return out;
}

// Weights are drawn element by element (for any sharding), but an
// orthogonal matrix is one factorisation: the last few are kept, shared so
// that a block being filled keeps its matrix while another is evicted.
using OrthogonalKey = std::tuple<std::string, Shape, uint64_t, double>;
std::shared_ptr<const std::vector<float>> cached_orthogonal(const OrthogonalKey& key) {
  static std::mutex mu;
  static std::vector<std::pair<OrthogonalKey, std::shared_ptr<const std::vector<float>>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, m] : cache)
    if (k == key) return m;
  if (cache.size() >= 4) cache.erase(cache.begin());  // a few weights are made at a time
  const auto& [path, shape, seed, gain] = key;
  cache.emplace_back(
      key, std::make_shared<const std::vector<float>>(orthogonal_matrix(path, shape, seed, gain)));
  return cache.back().second;
}

float orthogonal_value(const std::string& path, const Shape& shape, uint64_t seed, double gain,
                       int64_t index) {
  // The element loop asks for one matrix many times in a row.
  thread_local OrthogonalKey last;
  thread_local std::shared_ptr<const std::vector<float>> matrix;
  if (!matrix || std::get<0>(last) != path || std::get<1>(last) != shape ||
      std::get<2>(last) != seed || std::get<3>(last) != gain) {
    last = {path, shape, seed, gain};
    matrix = cached_orthogonal(last);
  }
  return (*matrix)[size_t(index)];
}

// A unit normal cut at +-2 (Keras's truncated_normal, as TensorFlow's and
// JAX's: a draw beyond two standard deviations is drawn again): element e's
// k-th try comes from stream k, so every element stays independent of the
// others and of the sharding.
double truncated_unit_normal(const std::string& path, uint64_t seed, uint64_t e) {
  const uint64_t key = stable_hash(path.c_str()) ^ (seed * 0x9E3779B97F4A7C15ull);
  for (uint64_t k = 0; k < 64; ++k) {
    const double z = CounterRng(key, k).normal(e);
    if (std::abs(z) <= 2.0) return z;
  }
  return 0.0;  // 64 misses in a row: probability 0.0455^64, never in practice
}

// Keras's VarianceScaling.__call__ (keras/src/initializers/random_initializers.py):
// scale / max(1, n); a truncated normal's stddev sqrt(scale) / .8796..., an
// untruncated one's sqrt(scale), a uniform's limit sqrt(3 scale).
float variance_scaling_value(const Initializer& init, const std::string& path, const Shape& shape,
                             uint64_t seed, uint64_t e) {
  const auto [fan_in, fan_out] = fans(shape);
  const double n = init.mode == Initializer::FanMode::FanIn    ? fan_in
                   : init.mode == Initializer::FanMode::FanOut ? fan_out
                                                               : (fan_in + fan_out) / 2;
  const double scale = init.a / std::max(1.0, n);
  switch (init.distribution) {
    case Initializer::Distribution::TruncatedNormal:
      return static_cast<float>(std::sqrt(scale) / 0.87962566103423978 *
                                truncated_unit_normal(path, seed, e));
    case Initializer::Distribution::UntruncatedNormal:
      return static_cast<float>(std::sqrt(scale) * rng_of(path, seed).normal(e));
    case Initializer::Distribution::Uniform: {
      const double limit = std::sqrt(3.0 * scale);
      return static_cast<float>(-limit + 2 * limit * rng_of(path, seed).uniform(e));
    }
  }
  return 0.0f;
}

// Keras's IdentityInitializer: gain * eye(rows, cols), rank 2 only.
float identity_value(double gain, const std::string& path, const Shape& shape, int64_t index) {
  AS_CHECK(shape.size() == 2, "weight '", path,
           "': the identity initializer makes matrices (rank 2), not ", shape_str(shape));
  return index / shape[1] == index % shape[1] ? static_cast<float>(gain) : 0.0f;
}

}  // namespace

Initializer Initializer::variance_scaling(double scale, FanMode mode, Distribution distribution) {
  AS_CHECK(scale > 0, "variance_scaling: scale must be positive, got ", scale);
  Initializer i = of(Kind::VarianceScaling, scale);
  i.mode = mode, i.distribution = distribution;
  return i;
}

Initializer::FanMode Initializer::fan_mode(const std::string& name) {
  if (name == "fan_in") return FanMode::FanIn;
  if (name == "fan_out") return FanMode::FanOut;
  if (name == "fan_avg") return FanMode::FanAvg;
  fail("variance_scaling: mode '", name, "' is not one of fan_in, fan_out, fan_avg");
}

Initializer::Distribution Initializer::distribution_of(const std::string& name) {
  if (name == "truncated_normal") return Distribution::TruncatedNormal;
  if (name == "untruncated_normal") return Distribution::UntruncatedNormal;
  if (name == "uniform") return Distribution::Uniform;
  fail("variance_scaling: distribution '", name,
       "' is not one of truncated_normal, untruncated_normal, uniform");
}

Initializer Initializer::unit_forget_bias(int64_t units, const Initializer& rest) {
  AS_CHECK(units > 0, "unit_forget_bias: units must be positive, got ", units);
  Initializer i = of(Kind::UnitForgetBias, double(units));
  i.inner = std::make_shared<const Initializer>(rest);
  return i;
}

// Keras's names and aliases (keras/src/initializers/__init__.py: each class's
// snake_case name, and uniform, normal, one, zero), with its defaults.
Initializer Initializer::from_name(const std::string& name) {
  using D = Distribution;
  if (name == "zeros" || name == "zero" || name == "constant") return zeros();
  if (name == "ones" || name == "one") return ones();
  if (name == "glorot_uniform") return glorot_uniform();
  if (name == "glorot_normal") return variance_scaling(1, FanMode::FanAvg, D::TruncatedNormal);
  if (name == "he_normal") return variance_scaling(2, FanMode::FanIn, D::TruncatedNormal);
  if (name == "he_uniform") return variance_scaling(2, FanMode::FanIn, D::Uniform);
  if (name == "lecun_normal") return variance_scaling(1, FanMode::FanIn, D::TruncatedNormal);
  if (name == "lecun_uniform") return variance_scaling(1, FanMode::FanIn, D::Uniform);
  if (name == "variance_scaling") return variance_scaling(1, FanMode::FanIn, D::TruncatedNormal);
  if (name == "random_normal" || name == "normal") return normal(0.0, 0.05);
  if (name == "random_uniform" || name == "uniform") return uniform(-0.05, 0.05);
  if (name == "truncated_normal") return truncated_normal(0.0, 0.05);
  if (name == "orthogonal" || name == "orthogonal_initializer") return orthogonal();
  if (name == "identity" || name == "identity_initializer") return identity();
  fail("unknown initializer '", name,
       "' (known: zeros, ones, constant, glorot_uniform, glorot_normal, he_normal, he_uniform, "
       "lecun_normal, lecun_uniform, variance_scaling, random_normal, random_uniform, "
       "truncated_normal, orthogonal, identity)");
}

float Initializer::value(const std::string& path, const Shape& shape, uint64_t seed,
                         int64_t index) const {
  const CounterRng rng = rng_of(path, seed);
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
      const auto [fan_in, fan_out] = fans(shape);
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      return static_cast<float>(-limit + 2 * limit * rng.uniform(e));
    }
    case Kind::Orthogonal:
      return orthogonal_value(path, shape, seed, a, index);
    case Kind::TruncatedNormal:
      return static_cast<float>(a + b * truncated_unit_normal(path, seed, e));
    case Kind::VarianceScaling:
      return variance_scaling_value(*this, path, shape, seed, e);
    case Kind::Identity:
      return identity_value(a, path, shape, index);
    case Kind::UnitForgetBias: {
      const auto units = static_cast<int64_t>(a);
      if (index / units == 1) return 1.0f;
      return inner ? inner->value(path, shape, seed, index) : 0.0f;
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
