#include "op_stats.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <unordered_map>
#include <map>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace torch_fl::bridge {

namespace {

// The values of one counter at some moment.
struct Counts {
  std::array<uint64_t, kNumPaths> calls{};
  uint64_t time_ns = 0;
  uint64_t bytes_copied = 0;
  uint64_t plugin_ns = 0;

  static Counts of(const OpCounter& c) {
    Counts v;
    for (int p = 0; p < kNumPaths; ++p) {
      v.calls[p] = c.calls[p].load(std::memory_order_relaxed);
    }
    v.time_ns = c.time_ns.load(std::memory_order_relaxed);
    v.bytes_copied = c.bytes_copied.load(std::memory_order_relaxed);
    v.plugin_ns = c.plugin_ns.load(std::memory_order_relaxed);
    return v;
  }
};

// Counters live as long as the process (callers cache references to them).
// `baseline`: their values at the last op_stats_reset(); `scopes`: their
// values when each open scope began (a counter made later began at zero).
struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, std::unique_ptr<OpCounter>> counters;
  std::unordered_map<const OpCounter*, Counts> baseline;
  uint64_t next_scope = 1;
  std::unordered_map<uint64_t, std::unordered_map<const OpCounter*, Counts>> scopes;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

std::string dtype_label(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Undefined ? std::string("none")
                                             : std::string(c10::getDtypeNames(dtype).first);
}

// The rows of every counter that moved since `since` (absent: since zero).
// Caller holds the registry's mutex.
std::vector<OpStatsRow> rows_since(
    const Registry& r, const std::unordered_map<const OpCounter*, Counts>& since) {
  std::vector<OpStatsRow> rows;
  for (const auto& [key, counter] : r.counters) {
    Counts now = Counts::of(*counter);
    auto it = since.find(counter.get());
    if (it != since.end()) {
      const Counts& then = it->second;
      for (int p = 0; p < kNumPaths; ++p) {
        now.calls[p] -= then.calls[p];
      }
      now.time_ns -= then.time_ns;
      now.bytes_copied -= then.bytes_copied;
      now.plugin_ns -= then.plugin_ns;
    }
    uint64_t total = 0;
    for (uint64_t c : now.calls) {
      total += c;
    }
    if (total == 0) {
      continue;
    }
    OpStatsRow row;
    row.op = key.first;
    row.dtype = dtype_label(static_cast<c10::ScalarType>(key.second));
    row.calls = now.calls;
    row.time_ns = ticks_to_ns(now.time_ns);
    row.bytes_copied = now.bytes_copied;
    row.plugin_ns = ticks_to_ns(now.plugin_ns);
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const OpStatsRow& a, const OpStatsRow& b) {
    return std::tie(a.op, a.dtype) < std::tie(b.op, b.dtype);
  });
  return rows;
}

std::unordered_map<const OpCounter*, Counts> counts_now(const Registry& r) {
  std::unordered_map<const OpCounter*, Counts> all;
  all.reserve(r.counters.size());
  for (const auto& [key, counter] : r.counters) {
    all.emplace(counter.get(), Counts::of(*counter));
  }
  return all;
}

} // namespace

uint64_t op_stats_scope_begin() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t id = r.next_scope++;
  r.scopes.emplace(id, counts_now(r));
  return id;
}

std::vector<OpStatsRow> op_stats_scope_end(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.scopes.find(id);
  if (it == r.scopes.end()) {
    return {};
  }
  std::vector<OpStatsRow> rows = rows_since(r, it->second);
  r.scopes.erase(it);
  return rows;
}

OpCounter& op_counter(const std::string& op, c10::ScalarType dtype) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& slot = r.counters[{op, static_cast<int>(dtype)}];
  if (!slot) {
    slot = std::make_unique<OpCounter>(op, dtype);
  }
  return *slot;
}

std::vector<OpStatsRow> op_stats_snapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return rows_since(r, r.baseline);
}

void op_stats_reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.baseline = counts_now(r);
}

namespace {
std::atomic<uint64_t> g_setup_ns{0};

Py_ssize_t loaded_modules() {
  if (!Py_IsInitialized()) {
    return 0;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  const Py_ssize_t n = PyDict_Size(PyImport_GetModuleDict());
  PyGILState_Release(gil);
  return n;
}
} // namespace

uint64_t setup_ns() {
  return ticks_to_ns(g_setup_ns.load(std::memory_order_relaxed));
}

uint64_t measure_setup(const std::function<void()>& fn) {
  const Py_ssize_t before = loaded_modules();
  const uint64_t start = ticks();
  fn();
  const uint64_t spent = ticks() - start;
  if (loaded_modules() == before) {
    return 0;
  }
  g_setup_ns.fetch_add(spent, std::memory_order_relaxed);
  return spent;
}

namespace clock_detail {
namespace {
// CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every
// power state and is synchronized across cores.
bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) {
    return false;
  }
  __cpuid(0x80000007, a, b, c, d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}
} // namespace

const bool use_tsc = invariant_tsc();

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
} // namespace clock_detail

namespace {
// Where the TSC's rate is measured from: the library's load. A conversion
// divides the steady-clock time since then by the ticks since then.
struct ClockOrigin {
  uint64_t ticks;
  uint64_t ns;
};
const ClockOrigin g_origin{ticks(), clock_detail::steady_ns()};
constexpr uint64_t kMinCalibrationNs = 20'000'000;
} // namespace

uint64_t ticks_to_ns(uint64_t t) {
  if (!clock_detail::use_tsc || t == 0) {
    return t;
  }
  // Measured once, so that every conversion uses one rate and a sum of
  // times never converts to less than one of its parts.
  static const double ns_per_tick = [] {
    uint64_t ns = clock_detail::steady_ns();
    while (ns - g_origin.ns < kMinCalibrationNs) { // only right after loading
      ns = clock_detail::steady_ns();
    }
    return static_cast<double>(ns - g_origin.ns) / static_cast<double>(ticks() - g_origin.ticks);
  }();
  return static_cast<uint64_t>(static_cast<double>(t) * ns_per_tick);
}

} // namespace torch_fl::bridge
