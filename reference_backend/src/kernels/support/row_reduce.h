// A row's max and sum in kLanes independent accumulators, so the loops
// vectorize (one running value is a dependency chain of scalar maxss/addss).
// The order of the operations depends on the length only, so results are the
// same run to run. load(j) gives element j in the compute type. Both are
// always inlined, so an ISA build of their caller (isa.h) vectorizes them.
#ifndef FLEMU_KERNELS_SUPPORT_ROW_REDUCE_H_
#define FLEMU_KERNELS_SUPPORT_ROW_REDUCE_H_

#include <algorithm>
#include <cstdint>
#include <limits>

namespace flemu {

constexpr int64_t kRowLanes = 16;

template <class C, class Load>
[[gnu::always_inline]] inline C row_max(int64_t n, Load&& load) {
  C lane[kRowLanes];
  std::fill(lane, lane + kRowLanes, -std::numeric_limits<C>::infinity());
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int64_t l = 0; l < kRowLanes; ++l) lane[l] = std::max<C>(lane[l], load(j + l));
  for (; j < n; ++j) lane[0] = std::max<C>(lane[0], load(j));
  C mx = lane[0];
  for (int64_t l = 1; l < kRowLanes; ++l) mx = std::max<C>(mx, lane[l]);
  return mx;
}

template <class C, class Load>
[[gnu::always_inline]] inline C row_sum(int64_t n, Load&& load) {
  C lane[kRowLanes] = {};
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int64_t l = 0; l < kRowLanes; ++l) lane[l] += load(j + l);
  for (; j < n; ++j) lane[0] += load(j);
  C sum = 0;
  for (int64_t l = 0; l < kRowLanes; ++l) sum += lane[l];
  return sum;
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_ROW_REDUCE_H_
