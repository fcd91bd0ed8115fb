// The plugin's event calls (TFL_StreamApi's Event_* and Stream_WaitEvent),
// each filling its argument struct once: every user of events in the bridge
// (streams and torch.Event, the caching allocators, collectives, the
// profiler) goes through these. Errors are raised as the plugin's (Plugin::check).
#pragma once

#include <torch_fl/plugin_api.h>

#include <c10/core/Device.h>

#include <cstdint>

namespace torch_fl::bridge {

// A new event of `device` (flags: TFL_EVENT_TIMING or 0).
TFL_Event* create_event(c10::DeviceIndex device, uint32_t flags = 0);
// Destroys `event`; nothing once the plugin is shut down or for nullptr.
void destroy_event(TFL_Event* event) noexcept;
void record_event(TFL_Event* event, TFL_Stream* stream);
// Makes `stream` wait, on the device, for `event`'s work.
void stream_wait_event(TFL_Stream* stream, TFL_Event* event);
bool query_event(TFL_Event* event);
void synchronize_event(TFL_Event* event);
// Milliseconds from `start` to `end`, both completed (synchronize first).
double elapsed_ms(TFL_Event* start, TFL_Event* end);

} // namespace torch_fl::bridge
