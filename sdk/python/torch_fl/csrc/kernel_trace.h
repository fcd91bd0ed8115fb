// Device activities for torch.profiler: while a Kineto session that asked for
// ProfilerActivity.PrivateUse1 records, every native kernel launch is
// bracketed by two timing events on its stream; when the session processes
// its trace, each pair becomes a kernel activity on the device's stream row,
// linked to the host operator that launched it. The unprofiled op path pays
// one relaxed atomic load (kernel_trace_recording()).
#pragma once

#include <torch_fl/plugin_api.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace torch_fl::bridge {

namespace detail {
extern std::atomic<bool> kernel_trace_on;
} // namespace detail

inline bool kernel_trace_recording() {
  return detail::kernel_trace_on.load(std::memory_order_relaxed);
}

// One kernel launch on the current stream of `device`, timed while a session
// records. Construct it just before the launch and call finish() right after;
// a launch that threw (or a session that stopped meanwhile) leaves no activity.
class TracedLaunch {
 public:
  TracedLaunch(c10::DeviceIndex device, const std::string& op);
  ~TracedLaunch();
  TracedLaunch(const TracedLaunch&) = delete;
  TracedLaunch& operator=(const TracedLaunch&) = delete;

  // `launched`: false when the kernel declined the call (no device work).
  void finish(bool launched);

 private:
  const std::string& op_;
  c10::DeviceIndex device_;
  c10::StreamId stream_id_ = 0;
  TFL_Stream* stream_ = nullptr;
  TFL_Event* start_ = nullptr;
  uint64_t correlation_ = 0;
  uint64_t generation_ = 0;
};

// Registers the activity profiler with Kineto (once the plugin is loaded).
void register_kernel_trace();

} // namespace torch_fl::bridge
