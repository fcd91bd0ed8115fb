// Streams, the current device and the current stream of each thread.
//
// c10::Stream ids map to plugin streams: id 0 is the device's default stream,
// ids 1..kPoolSize are pool streams created on first use and handed out
// round-robin by torch.Stream(), as CUDA does.
#pragma once

#include <torch_fl/plugin_api.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace torch_fl::bridge {

constexpr int kMaxDevices = 64;
constexpr int kPoolSize = 8;

class StreamRegistry {
 public:
  static StreamRegistry& get();

  // Creates the default stream of every device.
  void init(int device_count);
  int device_count() const {
    return device_count_;
  }

  // The plugin stream behind a c10 stream id; pool streams are created here.
  TFL_Stream* native(c10::DeviceIndex device, c10::StreamId id);
  TFL_Stream* native(const c10::Stream& stream) {
    return native(stream.device_index(), stream.id());
  }

  c10::Stream default_stream(c10::DeviceIndex device) const;
  c10::Stream next_pool_stream(c10::DeviceIndex device);
  // The thread's current stream on `device` and its plugin handle.
  c10::Stream current(c10::DeviceIndex device) const;
  TFL_Stream* current_native(c10::DeviceIndex device);
  // Makes `stream` the thread's current stream on its device; returns the old one.
  c10::Stream exchange(const c10::Stream& stream);

  // Synchronizes and destroys every stream (process exit).
  void destroy_all() noexcept;

 private:
  using Slots = std::array<std::atomic<TFL_Stream*>, kPoolSize + 1>;
  int device_count_ = 0;
  std::unique_ptr<Slots[]> streams_;
  std::unique_ptr<std::atomic<uint32_t>[]> round_robin_;
  std::mutex create_mutex_;
};

// The thread's current device index (default 0).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex device);

// Registers the DeviceGuardImplInterface for PrivateUse1.
void register_device_guard();

// Blocking waits that report the plugin's asynchronous errors.
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(c10::DeviceIndex device);

} // namespace torch_fl::bridge
