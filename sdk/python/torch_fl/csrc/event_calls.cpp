#include "event_calls.h"

#include "loaded_plugin.h"
#include "streams.h"

namespace torch_fl::bridge {

TFL_Event* create_event(c10::DeviceIndex device, uint32_t flags) {
  Plugin& plugin = active_plugin();
  TFL_Event_Create_Args args{};
  args.struct_size = TFL_Event_Create_Args_STRUCT_SIZE;
  args.device = device;
  args.flags = flags;
  plugin.check(plugin.stream().Event_Create(&args), "Event_Create");
  return args.event;
}

void destroy_event(TFL_Event* event) noexcept {
  Plugin* plugin = active_plugin_or_null();
  if (event == nullptr || plugin == nullptr || plugin->is_shut_down()) {
    return;
  }
  TFL_Event_Destroy_Args args{};
  args.struct_size = TFL_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  plugin->consume(plugin->stream().Event_Destroy(&args));
}

void record_event(TFL_Event* event, TFL_Stream* stream) {
  Plugin& plugin = active_plugin();
  TFL_Event_Record_Args args{};
  args.struct_size = TFL_Event_Record_Args_STRUCT_SIZE;
  args.event = event;
  args.stream = stream;
  EnqueueGuard enqueuing(stream);
  plugin.check(plugin.stream().Event_Record(&args), "Event_Record");
}

void stream_wait_event(TFL_Stream* stream, TFL_Event* event) {
  Plugin& plugin = active_plugin();
  TFL_Stream_WaitEvent_Args args{};
  args.struct_size = TFL_Stream_WaitEvent_Args_STRUCT_SIZE;
  args.stream = stream;
  args.event = event;
  EnqueueGuard enqueuing(stream);
  plugin.check(plugin.stream().Stream_WaitEvent(&args), "Stream_WaitEvent");
}

bool query_event(TFL_Event* event) {
  Plugin& plugin = active_plugin();
  TFL_Event_Query_Args args{};
  args.struct_size = TFL_Event_Query_Args_STRUCT_SIZE;
  args.event = event;
  plugin.check(plugin.stream().Event_Query(&args), "Event_Query");
  return args.complete != 0;
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
