// Timing events for the profiler: plugin events created with
// TFL_EVENT_TIMING, kept in a per-device pool so that a profiled run does not
// create and destroy two events per operator.
#pragma once

#include "event_calls.h"

#include <torch_fl/plugin_api.h>

#include <c10/core/Device.h>

#include <memory>
#include <mutex>
#include <vector>

namespace torch_fl::bridge {

class TimingEventPool {
 public:
  // Never destroyed: events may come back from profiler results freed at exit.
  static TimingEventPool& get();

  // A timing event of `device`, from the pool or newly created. Throws the
  // plugin's error when one cannot be created.
  TFL_Event* acquire(c10::DeviceIndex device);
  // Gives `event` back; it may be recorded again by its next user. Safe after
  // the plugin was shut down (the event is then dropped).
  void release(c10::DeviceIndex device, TFL_Event* event) noexcept;

 private:
  // Events kept per device beyond what a profiled run has in flight.
  static constexpr size_t kMaxPooled = 16384;
  std::mutex mutex_;
  std::vector<std::vector<TFL_Event*>> free_;
};

// Whether every event of `device` can be timed (TFL_CAP_TIMING_EVENTS).
bool device_has_timing_events(c10::DeviceIndex device);

} // namespace torch_fl::bridge
