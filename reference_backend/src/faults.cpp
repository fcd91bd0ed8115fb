#include "faults.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "errors.h"

namespace flemu {

namespace {

const FaultInfo kFaults[] = {
#define FLEMU_FAULT_INFO(id, name, scope, description) {Fault::id, name, scope, description},
    FLEMU_FAULTS(FLEMU_FAULT_INFO)
#undef FLEMU_FAULT_INFO
};
static_assert(sizeof(kFaults) / sizeof(kFaults[0]) == static_cast<size_t>(Fault::kCount),
              "one FaultInfo per Fault");

std::atomic<FaultSet> g_active{0};

std::mutex g_hang_mu;
std::condition_variable g_hang_cv;
bool g_hang_released = false;

std::string catalogue() {
  std::string text;
  for (const FaultInfo& f : kFaults) text += cat("\n  ", f.name, ": ", f.description);
  return text;
}

}  // namespace

const FaultInfo& fault_info(Fault f) { return kFaults[static_cast<int32_t>(f)]; }

std::vector<std::string> fault_kernels(Fault f) {
  const std::string scope = fault_info(f).scope;
  std::vector<std::string> kernels;
  if (scope.compare(0, 6, "aten::") != 0) return kernels;
  for (size_t begin = 0; begin < scope.size();) {
    size_t end = scope.find(',', begin);
    if (end == std::string::npos) end = scope.size();
    const size_t first = scope.find_first_not_of(' ', begin);
    kernels.push_back(scope.substr(first, end - first));
    begin = end + 1;
  }
  return kernels;
}

FaultSet parse_faults(const std::string& key, const std::string& value) {
  FaultSet set = 0;
  size_t begin = 0;
  for (;;) {
    const size_t comma = value.find(',', begin);
    std::string name = value.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    const FaultInfo* found = nullptr;
    for (const FaultInfo& f : kFaults)
      if (name == f.name) found = &f;
    if (found == nullptr)
      invalid_argument("invalid ", key, "='", value, "': ",
                       name.empty() ? std::string("empty fault name") : cat("unknown fault '", name, "'"),
                       "; expected a comma-separated list of these faults:", catalogue());
    set |= fault_bit(found->id);
    if (comma == std::string::npos) return set;
    begin = comma + 1;
  }
}

std::string fault_names(FaultSet faults) {
  std::string names;
  for (const FaultInfo& f : kFaults)
    if (faults & fault_bit(f.id)) names += names.empty() ? f.name : cat(",", f.name);
  return names;
}

FaultSet active_faults() { return g_active.load(std::memory_order_relaxed); }

void set_active_faults(FaultSet faults) {
  {
    std::lock_guard<std::mutex> lock(g_hang_mu);
    g_hang_released = false;
  }
  g_active.store(faults, std::memory_order_relaxed);
}

void hang_until_released() {
  std::unique_lock<std::mutex> lock(g_hang_mu);
  g_hang_cv.wait(lock, [] { return g_hang_released; });
}

void release_hung_work() {
  {
    std::lock_guard<std::mutex> lock(g_hang_mu);
    g_hang_released = true;
  }
  g_hang_cv.notify_all();
}

}  // namespace flemu
