#include "first_use.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <string>
#include <vector>

namespace torch_fl::bridge {

namespace detail {
std::atomic<bool> g_first_use_pending{false};
} // namespace detail

namespace {

struct FirstUse {
  std::mutex mutex;
  std::vector<std::function<void()>> work;
  std::string failure;
};

FirstUse& state() {
  static auto* s = new FirstUse();
  return *s;
}

// The work itself may allocate on the device; that allocation must not wait
// for the lock its own thread holds.
thread_local bool t_running = false;

} // namespace

void defer_to_first_use(std::function<void()> work) {
  FirstUse& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.work.push_back(std::move(work));
  detail::g_first_use_pending.store(true, std::memory_order_release);
}

void detail::run_first_use() {
  if (t_running) {
    return;
  }
  FirstUse& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.failure.empty() && !s.work.empty()) {
    t_running = true;
    std::vector<std::function<void()>> work = std::move(s.work);
    s.work.clear();
    try {
      for (auto& w : work) {
        w();
      }
    } catch (const std::exception& e) {
      s.failure = e.what();
    }
    t_running = false;
  }
  if (s.failure.empty()) {
    g_first_use_pending.store(false, std::memory_order_release);
    return;
  }
  TORCH_CHECK(
      false, "torch-fl: putting the plugin's kernels into PyTorch's dispatcher failed on the device's "
      "first use, so the device cannot be used in this process: ", s.failure);
}

} // namespace torch_fl::bridge
