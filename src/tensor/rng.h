// CounterRng: Philox-4x32-10, a counter-based generator. The number drawn for
// element e depends only on (seed, stream, e), never on the order of draws or
// on which device draws it. That is what makes initializers and dropout masks
// identical on one device and on any sharding.
#pragma once

#include <cmath>
#include <cstdint>

namespace autoshard {

class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // Four 32-bit words for counter e.
  void block(uint64_t e, uint32_t out[4]) const {
    uint32_t c[4] = {uint32_t(e), uint32_t(e >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)};
    uint32_t k0 = uint32_t(seed_), k1 = uint32_t(seed_ >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
      c[0] = n0;
      c[1] = uint32_t(p1);
      c[2] = n2;
      c[3] = uint32_t(p0);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (int i = 0; i < 4; ++i) out[i] = c[i];
  }

  // 64 random bits.
  uint64_t bits64(uint64_t e) const {
    uint32_t r[4];
    block(e, r);
    return (uint64_t(r[0]) << 32) | r[1];
  }

  // Uniform in [0, 1) with 24 random bits.
  float uniform(uint64_t e) const {
    uint32_t r[4];
    block(e, r);
    return static_cast<float>(r[0] >> 8) * (1.0f / 16777216.0f);
  }

  // Standard normal by Box-Muller over two words of the same block.
  float normal(uint64_t e) const {
    uint32_t r[4];
    block(e, r);
    double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967297.0;  // (0, 1]
    double u2 = static_cast<double>(r[1]) / 4294967296.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t seed_, stream_;
};

// A stable 64-bit hash of a string (FNV-1a), used to key a parameter's
// initializer by its path.
inline uint64_t stable_hash(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

}  // namespace autoshard
