// The process-wide state flemu builds in Plugin_Initialize: configuration,
// one Device (arena + streams) per emulated device, pinned host memory.
#ifndef FLEMU_RUNTIME_H_
#define FLEMU_RUNTIME_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arena.h"
#include "config.h"
#include "host_memory.h"
#include "stream.h"
#include "torch_fl/core.h"

namespace flemu {

struct Device {
  Device(int32_t index, const Config& cfg);
  int32_t index;
  Arena arena;
  std::mutex streams_mu;
  std::vector<std::shared_ptr<Stream>> streams;
};

class Runtime {
 public:
  explicit Runtime(Config cfg, const TFL_HostServices* host);
  ~Runtime();  // drains and joins every stream still alive

  const Config& config() const { return cfg_; }
  int32_t device_count() const { return static_cast<int32_t>(devices_.size()); }
  // Throws TFL_ERR_INVALID_ARGUMENT for an index out of range.
  Device& device(int32_t index);
  HostMemory& host_memory() { return host_memory_; }

  // The arena that owns device address `p`, or nullptr.
  Arena* arena_of(const void* p);

  std::shared_ptr<Stream> create_stream(int32_t device);
  // Removes the stream from its device; it drains and joins when the last
  // reference goes.
  std::shared_ptr<Stream> remove_stream(Stream* stream);
  // Waits for every stream of the device; returns the first pending error.
  TFL_Error* synchronize_device(int32_t device);

  void log(int32_t level, const std::string& message) const;

 private:
  Config cfg_;
  std::vector<std::unique_ptr<Device>> devices_;
  HostMemory host_memory_;
  std::atomic<uint32_t> next_stream_id_{0};
  void* host_data_ = nullptr;
  void (*host_log_)(void*, int32_t, const char*) = nullptr;
};

// The runtime between Plugin_Initialize and Plugin_Shutdown.
Runtime* runtime_or_null();
// Throws TFL_ERR_INVALID_ARGUMENT when the plugin is not initialized.
Runtime& runtime();
void set_runtime(Runtime* rt);

// Resolves a TFL_Stream handle; throws for NULL or a destroyed stream.
Stream& stream_from_handle(TFL_Stream* handle);
std::shared_ptr<Stream> shared_stream_from_handle(TFL_Stream* handle);
inline TFL_Stream* handle_of(Stream* s) { return reinterpret_cast<TFL_Stream*>(s); }

}  // namespace flemu

#endif  // FLEMU_RUNTIME_H_
