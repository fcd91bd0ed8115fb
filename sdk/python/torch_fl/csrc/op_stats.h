// Per-operator, per-dtype accounting of how each call ran: natively in a
// plugin kernel, decomposed into native parts, on the CPU fallback, or failed.
// The counters are atomics so the op path can bump them from any thread.
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace torch_fl::bridge {

enum class Path : int { Native = 0, Decomposed = 1, CpuFallback = 2, Failed = 3 };
constexpr int kNumPaths = 4;

// One operator and dtype. The counts only grow: op_stats_reset() moves a
// baseline and a scope keeps what it saw at its start, so counting a call
// costs the same with or without open scopes.
struct OpCounter {
  OpCounter(std::string op_name, c10::ScalarType scalar_type)
      : op(std::move(op_name)), dtype(scalar_type) {}
  const std::string op;
  const c10::ScalarType dtype;
  std::array<std::atomic<uint64_t>, kNumPaths> calls{};
  std::atomic<uint64_t> time_ns{0};
  std::atomic<uint64_t> bytes_copied{0};
  // Of time_ns: spent inside the plugin's kernel function (its launch), so
  // the bridge's own share is time_ns - plugin_ns. Both in ticks().
  std::atomic<uint64_t> plugin_ns{0};

  void add(Path path, uint64_t spent_ticks, uint64_t bytes = 0, uint64_t in_plugin_ticks = 0) {
    calls[static_cast<int>(path)].fetch_add(1, std::memory_order_relaxed);
    time_ns.fetch_add(spent_ticks, std::memory_order_relaxed);
    if (bytes != 0) {
      bytes_copied.fetch_add(bytes, std::memory_order_relaxed);
    }
    if (in_plugin_ticks != 0) {
      plugin_ns.fetch_add(in_plugin_ticks, std::memory_order_relaxed);
    }
  }
};

struct OpStatsRow {
  std::string op;
  std::string dtype;
  std::array<uint64_t, kNumPaths> calls{};
  uint64_t time_ns = 0;
  uint64_t bytes_copied = 0;
  uint64_t plugin_ns = 0;
};

// The counter for (op, dtype); the reference stays valid for the process.
OpCounter& op_counter(const std::string& op, c10::ScalarType dtype);
std::vector<OpStatsRow> op_stats_snapshot();
void op_stats_reset();

// A scope counts only the calls made while it is open (nesting allowed; on
// every thread): begin returns its id, end closes it and returns its rows.
uint64_t op_stats_scope_begin();
std::vector<OpStatsRow> op_stats_scope_end(uint64_t id);

// Caches counter lookups for one operator on the hot path.
class OpCounterCache {
 public:
  explicit OpCounterCache(std::string op) : op_(std::move(op)) {}
  OpCounter& get(c10::ScalarType dtype) {
    const auto idx = static_cast<size_t>(dtype);
    if (idx >= slots_.size()) {
      return op_counter(op_, dtype);
    }
    OpCounter* counter = slots_[idx].load(std::memory_order_acquire);
    if (counter == nullptr) {
      counter = &op_counter(op_, dtype);
      slots_[idx].store(counter, std::memory_order_release);
    }
    return *counter;
  }
  const std::string& op() const {
    return op_;
  }

 private:
  std::string op_;
  std::array<std::atomic<OpCounter*>, 64> slots_{};
};

// The op path's clock, read four times per native call: the invariant TSC
// where the CPU has one (a read costs ~10 ns, steady_clock's ~25 on a VM),
// else steady_clock's nanoseconds. Counters and set-up times hold ticks;
// ticks_to_ns converts them for reports.
namespace clock_detail {
extern const bool use_tsc;
uint64_t steady_ns();
} // namespace clock_detail

inline uint64_t ticks() {
#if defined(__x86_64__)
  if (clock_detail::use_tsc) {
    return __rdtsc();
  }
#endif
  return clock_detail::steady_ns();
}
uint64_t ticks_to_ns(uint64_t ticks);

// One-time set-up: PyTorch's Python meta functions and decompositions
// import modules on first use (torch._dynamo: seconds). A region of the op
// path that imported modules is set-up, counted here instead of in the
// operator that happened to run first. measure_setup runs `fn` and returns
// the ticks() it spent if it imported modules, else 0; setup_ns() is their
// total in nanoseconds.
uint64_t setup_ns();
uint64_t measure_setup(const std::function<void()>& fn);

} // namespace torch_fl::bridge
