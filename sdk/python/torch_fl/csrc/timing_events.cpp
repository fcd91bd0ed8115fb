#include "timing_events.h"

#include "event_calls.h"
#include "loaded_plugin.h"

namespace torch_fl::bridge {

TimingEventPool& TimingEventPool::get() {
  static auto* pool = new TimingEventPool();
  return *pool;
}

TFL_Event* TimingEventPool::acquire(c10::DeviceIndex device) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (device >= 0 && static_cast<size_t>(device) < free_.size() && !free_[device].empty()) {
      TFL_Event* event = free_[device].back();
      free_[device].pop_back();
      return event;
    }
  }
  return create_event(device, TFL_EVENT_TIMING);
}

void TimingEventPool::release(c10::DeviceIndex device, TFL_Event* event) noexcept {
  if (event == nullptr) {
    return;
  }
  Plugin* plugin = active_plugin_or_null();
  if (plugin == nullptr || plugin->is_shut_down()) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() <= static_cast<size_t>(device)) {
      free_.resize(static_cast<size_t>(device) + 1);
    }
    if (free_[device].size() < kMaxPooled) {
      free_[device].push_back(event);
      return;
    }
  }
  destroy_event(event);
}

bool device_has_timing_events(c10::DeviceIndex device) {
  Plugin* plugin = active_plugin_or_null();
  return plugin != nullptr && device >= 0 && device < plugin->device_count() &&
      (plugin->device(device).capabilities & TFL_CAP_TIMING_EVENTS) != 0;
}

} // namespace torch_fl::bridge
