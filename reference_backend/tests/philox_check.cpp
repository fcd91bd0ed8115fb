// Known-answer test of flemu's Philox4x32-10 against the published vectors of
// Salmon et al. (Random123 kat_vectors: counter[4] key[2] -> output[4]), and
// of the [0, 1) conversions' ranges. Prints "N checks, F failures".
#include <cstdint>
#include <cstdio>
#include <initializer_list>

#include "../src/kernels/support/philox.h"

namespace {

int checks = 0, failures = 0;

void expect(bool ok, const char* what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what);
  }
}

struct Vector {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t out[4];
};

const Vector kVectors[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u}, {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

}  // namespace

int main() {
  for (const Vector& v : kVectors) {
    const flemu::Philox4x32 r = flemu::philox4x32_10_block(v.ctr, v.key);
    for (int i = 0; i < 4; ++i) {
      char what[96];
      std::snprintf(what, sizeof(what), "counter %08x.. word %d: got %08x, expected %08x", v.ctr[0], i, r.w[i],
                    v.out[i]);
      expect(r.w[i] == v.out[i], what);
    }
  }
  // The (seed, counter) form is the block with the counter's high words zero.
  const uint32_t ctr[4] = {0x89abcdefu, 0x01234567u, 0, 0}, key[2] = {0x9abcdef0u, 0x12345678u};
  const flemu::Philox4x32 a = flemu::philox4x32_10(0x123456789abcdef0ull, 0x0123456789abcdefull);
  const flemu::Philox4x32 b = flemu::philox4x32_10_block(ctr, key);
  for (int i = 0; i < 4; ++i) expect(a.w[i] == b.w[i], "philox4x32_10(seed, counter) matches the block form");
  // The lane form gives philox4x32_10's words block by block, across the
  // counter's 32-bit boundary and for a seed with both halves set.
  for (const uint64_t first : {uint64_t{0}, uint64_t{0xfffffff8u}, uint64_t{0x0123456789abcdefull}}) {
    uint32_t words[4 * flemu::kPhiloxLanes];
    flemu::philox4x32_10_lanes(0xfedcba9876543210ull, first, words);
    bool same = true;
    for (int l = 0; l < flemu::kPhiloxLanes; ++l) {
      const flemu::Philox4x32 r = flemu::philox4x32_10(0xfedcba9876543210ull, first + l);
      for (int i = 0; i < 4; ++i) same = same && words[4 * l + i] == r.w[i];
    }
    char what[96];
    std::snprintf(what, sizeof(what), "philox4x32_10_lanes from counter %llx matches philox4x32_10",
                  static_cast<unsigned long long>(first));
    expect(same, what);
  }
  // Conversions: extremes stay inside [0, 1).
  expect(flemu::uniform_f24(0u) == 0.0f && flemu::uniform_f24(0xffffffffu) < 1.0f, "uniform_f24 is in [0, 1)");
  expect(flemu::uniform_d53(0u, 0u) == 0.0 && flemu::uniform_d53(0xffffffffu, 0xffffffffu) < 1.0,
         "uniform_d53 is in [0, 1)");
  expect(flemu::uniform_d32(0xffffffffu) < 1.0, "uniform_d32 is below 1");
  float z0, z1;
  flemu::box_muller(0.0f, 0.25f, &z0, &z1);
  expect(z0 == 0.0f && z1 == 0.0f, "Box-Muller at u1 = 0 gives radius 0");
  flemu::box_muller(0.99999994f, 0.0f, &z0, &z1);
  expect(z0 > 5.0f && z0 < 6.0f, "Box-Muller at the largest u1 stays finite (about 5.6)");
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
