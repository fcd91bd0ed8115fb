#include "op_stats.h"

#include <Python.h>

#include <algorithm>
#include <chrono>
#include <tuple>
#include <unordered_map>
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

struct Delta {
  std::array<uint64_t, kNumPaths> calls{};
  uint64_t time_ns = 0;
  uint64_t bytes_copied = 0;
};

struct Scopes {
  std::mutex mutex;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::unordered_map<const OpCounter*, Delta>> open;
};

Scopes& scopes() {
  static auto* s = new Scopes();
  return *s;
}

std::string dtype_label(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Undefined ? std::string("none")
                                             : std::string(c10::getDtypeNames(dtype).first);
}

} // namespace

namespace detail {

std::atomic<int> open_scopes{0};

void add_to_scopes(const OpCounter* counter, Path path, uint64_t ns, uint64_t bytes) {
  Scopes& s = scopes();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& [id, deltas] : s.open) {
    Delta& d = deltas[counter];
    ++d.calls[static_cast<int>(path)];
    d.time_ns += ns;
    d.bytes_copied += bytes;
  }
}

} // namespace detail

uint64_t op_stats_scope_begin() {
  Scopes& s = scopes();
  std::lock_guard<std::mutex> lock(s.mutex);
  const uint64_t id = s.next_id++;
  s.open[id];
  detail::open_scopes.fetch_add(1, std::memory_order_relaxed);
  return id;
}

std::vector<OpStatsRow> op_stats_scope_end(uint64_t id) {
  std::unordered_map<const OpCounter*, Delta> deltas;
  {
    Scopes& s = scopes();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.open.find(id);
    if (it == s.open.end()) {
      return {};
    }
    deltas = std::move(it->second);
    s.open.erase(it);
    detail::open_scopes.fetch_sub(1, std::memory_order_relaxed);
  }
  std::vector<OpStatsRow> rows;
  rows.reserve(deltas.size());
  for (const auto& [counter, d] : deltas) {
    OpStatsRow row;
    row.op = counter->op;
    row.dtype = dtype_label(counter->dtype);
    row.calls = d.calls;
    row.time_ns = d.time_ns;
    row.bytes_copied = d.bytes_copied;
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const OpStatsRow& a, const OpStatsRow& b) {
    return std::tie(a.op, a.dtype) < std::tie(b.op, b.dtype);
  });
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
  std::vector<OpStatsRow> rows;
  rows.reserve(r.counters.size());
  for (const auto& [key, counter] : r.counters) {
    OpStatsRow row;
    row.op = key.first;
    row.dtype = dtype_label(static_cast<c10::ScalarType>(key.second));
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
  return g_setup_ns.load(std::memory_order_relaxed);
}

uint64_t measure_setup(const std::function<void()>& fn) {
  const Py_ssize_t before = loaded_modules();
  const uint64_t start = now_ns();
  fn();
  const uint64_t spent = now_ns() - start;
  if (loaded_modules() == before) {
    return 0;
  }
  g_setup_ns.fetch_add(spent, std::memory_order_relaxed);
  return spent;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

} // namespace torch_fl::bridge
