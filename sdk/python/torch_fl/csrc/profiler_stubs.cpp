#include "profiler_stubs.h"

#include "loaded_plugin.h"
#include "streams.h"
#include "timing_events.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

namespace torch_fl::bridge {

namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

TFL_Event* as_event(const ProfilerVoidEventStub* stub) {
  return stub != nullptr ? static_cast<TFL_Event*>(stub->get()) : nullptr;
}

struct DeviceProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns)
      const override {
    const c10::DeviceIndex d = current_device();
    if (device != nullptr) {
      *device = d;
    }
    TFL_Event* e = nullptr;
    if (device_has_timing_events(d)) {
      e = TimingEventPool::get().acquire(d);
      // The pool takes the event back when PyTorch drops the result that holds it.
      *event = ProfilerVoidEventStub(
          e, [d](void* p) { TimingEventPool::get().release(d, static_cast<TFL_Event*>(p)); });
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    if (e != nullptr) {
      record_event(e, StreamRegistry::get().current_native(d));
    }
  }

  // Microseconds, as PyTorch's CUDA stubs report.
  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2)
      const override {
    TFL_Event* start = as_event(event);
    TFL_Event* end = as_event(event2);
    if (start == nullptr || end == nullptr) {
      return 0.0f;
    }
    synchronize_event(start);
    synchronize_event(end);
    const double ms = elapsed_ms(start, end);
    return ms > 0.0 ? static_cast<float>(ms * 1000.0) : 0.0f;
  }

  // The ABI has no annotation ranges: the trace keeps host-side names only.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return active_plugin_or_null() != nullptr;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    Plugin* plugin = active_plugin_or_null();
    if (plugin == nullptr) {
      return;
    }
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, 0));
    for (int d = 0; d < plugin->device_count(); ++d) {
      guard.set_index(static_cast<c10::DeviceIndex>(d));
      op(d);
    }
  }

  void synchronize() const override {
    Plugin* plugin = active_plugin_or_null();
    if (plugin == nullptr) {
      return;
    }
    for (int d = 0; d < plugin->device_count(); ++d) {
      synchronize_device(static_cast<c10::DeviceIndex>(d));
    }
  }
};

} // namespace

void register_profiler_stubs() {
  static DeviceProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

} // namespace torch_fl::bridge
