#include "op_stats.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

namespace torch_fl::bridge {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, std::unique_ptr<OpCounter>> counters;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

} // namespace

OpCounter& op_counter(const std::string& op, c10::ScalarType dtype) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& slot = r.counters[{op, static_cast<int>(dtype)}];
  if (!slot) {
    slot = std::make_unique<OpCounter>();
  }
  return *slot;
}

std::vector<OpStatsRow> op_stats_snapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<OpStatsRow> rows;
  rows.reserve(r.counters.size());
  for (const auto& [key, counter] : r.counters) {
    OpStatsRow row;
    row.op = key.first;
    const auto dtype = static_cast<c10::ScalarType>(key.second);
    row.dtype = dtype == c10::ScalarType::Undefined
        ? std::string("none")
        : std::string(c10::getDtypeNames(dtype).first);
    uint64_t total = 0;
    for (int p = 0; p < kNumPaths; ++p) {
      row.calls[p] = counter->calls[p].load(std::memory_order_relaxed);
      total += row.calls[p];
    }
    if (total == 0) {
      continue;
    }
    row.time_ns = counter->time_ns.load(std::memory_order_relaxed);
    row.bytes_copied = counter->bytes_copied.load(std::memory_order_relaxed);
    rows.push_back(std::move(row));
  }
  return rows;
}

void op_stats_reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [key, counter] : r.counters) {
    for (auto& c : counter->calls) {
      c.store(0, std::memory_order_relaxed);
    }
    counter->time_ns.store(0, std::memory_order_relaxed);
    counter->bytes_copied.store(0, std::memory_order_relaxed);
  }
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

} // namespace torch_fl::bridge
