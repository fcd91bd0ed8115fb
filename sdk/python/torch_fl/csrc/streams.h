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

#include <pthread.h>

namespace torch_fl::bridge {

constexpr int kMaxDevices = 64;
constexpr int kPoolSize = 8;

// The lock behind EnqueueGuard: recursive (a plugin may call back into the
// host during a launch), one compare-and-swap when free; a waiter polls, then
// sleeps in short steps (the holder may be in a blocking copy).
class alignas(64) EnqueueLock {
 public:
  void lock() {
    const pthread_t me = pthread_self();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    pthread_t none{};
    if (!owner_.compare_exchange_strong(none, me, std::memory_order_acquire)) {
      wait_and_lock(me);
    }
    depth_ = 1;
  }
  void unlock() {
    if (--depth_ == 0) {
      owner_.store(pthread_t{}, std::memory_order_release);
    }
  }

 private:
  void wait_and_lock(pthread_t me);
  std::atomic<pthread_t> owner_{};
  int depth_ = 0;
};

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

  // The lock that keeps two threads from enqueueing onto `stream` at once
  // (see EnqueueGuard); nullptr for a stream the registry does not own.
  // `device` narrows the search when known (-1: every device).
  EnqueueLock* enqueue_lock(TFL_Stream* stream, c10::DeviceIndex device);

 private:
  using Slots = std::array<std::atomic<TFL_Stream*>, kPoolSize + 1>;
  using Locks = std::array<EnqueueLock, kPoolSize + 1>;
  int device_count_ = 0;
  std::unique_ptr<Slots[]> streams_;
  std::unique_ptr<Locks[]> enqueue_locks_;
  std::unique_ptr<std::atomic<uint32_t>[]> round_robin_;
  std::mutex create_mutex_;
};

// Held while the bridge enqueues work onto a plugin stream (a kernel, a copy,
// an event record or wait, a graph). The ABI promises a plugin that one
// stream never receives work from two threads at once, so its queue may be
// single-producer; PyTorch calls the bridge from any thread with the GIL
// released. Streams the registry does not own (a communicator's) are
// serialized by their owner.
class EnqueueGuard {
 public:
  explicit EnqueueGuard(TFL_Stream* stream, c10::DeviceIndex device = -1);
  ~EnqueueGuard();
  EnqueueGuard(const EnqueueGuard&) = delete;
  EnqueueGuard& operator=(const EnqueueGuard&) = delete;

 private:
  EnqueueLock* lock_ = nullptr;
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
