#include "timing_events.h"

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
  Plugin& plugin = active_plugin();
  TFL_Event_Create_Args args{};
  args.struct_size = TFL_Event_Create_Args_STRUCT_SIZE;
  args.device = device;
  args.flags = TFL_EVENT_TIMING;
  plugin.check(plugin.stream().Event_Create(&args), "Event_Create");
  return args.event;
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
  TFL_Event_Destroy_Args args{};
  args.struct_size = TFL_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  plugin->consume(plugin->stream().Event_Destroy(&args));
}

bool device_has_timing_events(c10::DeviceIndex device) {
  Plugin* plugin = active_plugin_or_null();
  return plugin != nullptr && device >= 0 && device < plugin->device_count() &&
      (plugin->device(device).capabilities & TFL_CAP_TIMING_EVENTS) != 0;
}

void record_event(TFL_Event* event, TFL_Stream* stream) {
  Plugin& plugin = active_plugin();
  TFL_Event_Record_Args args{};
  args.struct_size = TFL_Event_Record_Args_STRUCT_SIZE;
  args.event = event;
  args.stream = stream;
  plugin.check(plugin.stream().Event_Record(&args), "Event_Record");
}

void synchronize_event(TFL_Event* event) {
  Plugin& plugin = active_plugin();
  TFL_Event_Synchronize_Args args{};
  args.struct_size = TFL_Event_Synchronize_Args_STRUCT_SIZE;
  args.event = event;
  plugin.check(plugin.stream().Event_Synchronize(&args), "Event_Synchronize");
}

double elapsed_ms(TFL_Event* start, TFL_Event* end) {
  Plugin& plugin = active_plugin();
  TFL_Event_ElapsedTime_Args args{};
  args.struct_size = TFL_Event_ElapsedTime_Args_STRUCT_SIZE;
  args.start = start;
  args.end = end;
  plugin.check(plugin.stream().Event_ElapsedTime(&args), "Event_ElapsedTime");
  return args.milliseconds;
}

} // namespace torch_fl::bridge
