// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): a counter-based generator. Block `counter`
// under `key` gives four independent 32-bit words, so element i of a random
// tensor is a pure function of (seed, offset + i) — the same on any number of
// threads and on every run.
#ifndef FLEMU_KERNELS_SUPPORT_PHILOX_H_
#define FLEMU_KERNELS_SUPPORT_PHILOX_H_

#include <cmath>
#include <cstdint>

namespace flemu {

struct Philox4x32 {
  uint32_t w[4];
};

// The ten-round bijection of a 128-bit counter under a 64-bit key.
inline Philox4x32 philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;  // the key schedule: a Weyl sequence
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Block `counter` (the low 64 bits of the counter; the high ones are zero) under `seed`.
inline Philox4x32 philox4x32_10(uint64_t seed, uint64_t counter) {
  const uint32_t ctr[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return philox4x32_10_block(ctr, key);
}

// kPhiloxLanes consecutive blocks at once, first_counter onwards: words[4 *
// l + j] is word j of block first_counter + l, the order of philox4x32_10's
// words, block after block. Each 32-bit word lives zero-extended in a 64-bit
// lane of a GCC vector, so the 32x32->64-bit products are one vector multiply
// per eight blocks on every build; a lane array of 32-bit words, left to the
// auto-vectorizer, stayed one scalar multiply per block (a dropout element
// took 4.0 ns against 0.9, AVX-512). Integer operations only: every build
// gives philox4x32_10's words exactly. Always inlined, for the ISA builds of
// callers (isa.h).
constexpr int kPhiloxLanes = 16;

[[gnu::always_inline]] inline void philox4x32_10_lanes(uint64_t seed, uint64_t first_counter,
                                                      uint32_t (&words)[4 * kPhiloxLanes]) {
  typedef uint64_t Lanes __attribute__((vector_size(64)));  // eight blocks
  constexpr int kVectors = kPhiloxLanes / 8;
  constexpr uint64_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u, kLow = 0xFFFFFFFFu;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  const Lanes iota = {0, 1, 2, 3, 4, 5, 6, 7};
  Lanes c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    const Lanes counter = (first_counter + static_cast<uint64_t>(8 * v)) + iota;
    c0[v] = counter & kLow;
    c1[v] = counter >> 32;
    c2[v] = c3[v] = Lanes{};
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int v = 0; v < kVectors; ++v) {
      const Lanes p0 = c0[v] * kMul0, p1 = c2[v] * kMul1;  // both factors below 2^32: exact
      const Lanes n0 = (p1 >> 32) ^ c1[v] ^ static_cast<uint64_t>(k0);
      const Lanes n2 = (p0 >> 32) ^ c3[v] ^ static_cast<uint64_t>(k1);
      c1[v] = p1 & kLow;
      c3[v] = p0 & kLow;
      c0[v] = n0;
      c2[v] = n2;
    }
    k0 += kWeyl0;  // the key schedule: a Weyl sequence
    k1 += kWeyl1;
  }
  for (int v = 0; v < kVectors; ++v) {
    for (int l = 0; l < 8; ++l) {
      uint32_t* w = words + 4 * (8 * v + l);
      w[0] = static_cast<uint32_t>(c0[v][l]);
      w[1] = static_cast<uint32_t>(c1[v][l]);
      w[2] = static_cast<uint32_t>(c2[v][l]);
      w[3] = static_cast<uint32_t>(c3[v][l]);
    }
  }
}

// The w < threshold form of uniform_d32(w) < p (for p in [0, 1]): w * 2^-32
// < p exactly when w < ceil(p * 2^32), both sides integers.
inline uint64_t below_threshold_u32(double p) { return static_cast<uint64_t>(std::ceil(p * 4294967296.0)); }

// [0, 1) with 24 random bits: every value is exactly representable in float.
inline float uniform_f24(uint32_t w) { return static_cast<float>(w >> 8) * 0x1.0p-24f; }
// [0, 1) with 53 random bits from two words.
inline double uniform_d53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}
// [0, 1) with 32 random bits, for comparisons against a probability.
inline double uniform_d32(uint32_t w) { return static_cast<double>(w) * 0x1.0p-32; }

// Box-Muller: two standard normals from u1 in [0, 1) and u2 in [0, 1);
// 1 - u1 keeps the logarithm finite.
template <class F>
inline void box_muller(F u1, F u2, F* z0, F* z1) {
  const F r = std::sqrt(F(-2) * std::log(F(1) - u1));
  const F theta = F(6.283185307179586476925286766559) * u2;
  *z0 = r * std::cos(theta);
  *z1 = r * std::sin(theta);
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_PHILOX_H_
