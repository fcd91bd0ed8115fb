// The plugin's per-process state: its devices, their memory, the live streams
// and events, and the host's logging callback.
//
// Created by Plugin_Initialize, destroyed by Plugin_Shutdown. Every ABI
// function except the core group reaches it through runtime(), which fails
// with a clear error before initialization and in a forked child.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "device_memory.h"
#include "stream.h"
#include "torch_fl/plugin_api.h"

namespace {{ cookiecutter.package_slug }} {

struct Device {
  Device(int32_t i, const Config& cfg) : index(i), memory(i, cfg.memory_bytes) {}
  const int32_t index;
  DeviceMemory memory;
};

class Runtime {
 public:
  Runtime(Config cfg, const TFL_HostServices* host);
  ~Runtime();  // stops every stream, releases events and memory still held

  const Config& config() const { return cfg_; }
  int32_t device_count() const { return static_cast<int32_t>(devices_.size()); }
  // Throws for an index outside 0 .. device_count() - 1.
  Device& device(int32_t index);
  // The device whose memory holds `ptr`, or NULL (used to word error messages).
  Device* device_owning(const void* ptr);
  PinnedHostMemory& pinned() { return pinned_; }

  // Streams and events are handed to the host as opaque handles; the runtime
  // keeps the live ones so a stale or foreign handle is an error, not a crash.
  TFL_Stream* create_stream(int32_t device);
  std::shared_ptr<Stream> stream(TFL_Stream* handle);
  std::shared_ptr<Stream> remove_stream(TFL_Stream* handle);
  TFL_Event* create_event(int32_t device, bool timing);
  Event& event(TFL_Event* handle, const char* what);
  void destroy_event(TFL_Event* handle);

  // Waits for every stream of `device`; returns the first pending error.
  TFL_Error* synchronize(int32_t device);
  void log(int32_t level, const std::string& message) const;

 private:
  Config cfg_;
  void* host_data_ = nullptr;
  void (*host_log_)(void*, int32_t, const char*) = nullptr;
  std::vector<std::unique_ptr<Device>> devices_;
  PinnedHostMemory pinned_;
  std::mutex handles_mu_;
  std::map<TFL_Stream*, std::shared_ptr<Stream>> streams_;
  std::map<TFL_Event*, std::unique_ptr<Event>> events_;
};

// The initialized runtime; throws tfl::Error when there is none.
Runtime& runtime();
Runtime* runtime_or_null();
// Installs (or, with NULL, removes) the runtime.
void set_runtime(Runtime* rt);

}  // namespace {{ cookiecutter.package_slug }}
