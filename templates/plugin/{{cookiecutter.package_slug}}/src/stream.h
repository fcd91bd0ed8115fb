// Streams and events of the emulated device.
//
// A stream is an in-order queue of work. Here each stream is a worker thread
// that runs its tasks one after another, so copies and kernels really are
// asynchronous and a missing synchronization in the host shows up as wrong
// results, as it would on hardware.
//
// VENDOR: a Stream wraps your driver's queue (command list, channel...).
// submit() becomes "enqueue on the hardware queue"; tickets become your
// driver's fences or sequence numbers; Event::record becomes "record a
// hardware event/fence".
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "torch_fl/plugin_api.h"

namespace {{ cookiecutter.package_slug }} {

class Stream {
 public:
  using Task = std::function<void()>;

  explicit Stream(int32_t device);
  ~Stream();  // stop()
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t device() const { return device_; }

  // Enqueues `task` and returns its ticket: 1, 2, 3... in submission order.
  // A task reports failure by throwing (tfl::fail; anything else thrown is an
  // internal error); the stream keeps the first failure as its pending error
  // and goes on with the next task.
  uint64_t submit(Task task);
  // The ticket of the newest task, 0 when nothing was ever submitted.
  uint64_t tail() const;
  // Whether the task with `ticket` (and so everything before it) has completed.
  bool reached(uint64_t ticket) const;
  // Blocks the calling thread until reached(ticket).
  void wait(uint64_t ticket) const;
  bool idle() const { return reached(tail()); }
  // The pending asynchronous error (caller owns it), or NULL; reported once.
  TFL_Error* take_error();
  // Runs what is queued, then ends the worker. Idempotent.
  void stop();

 private:
  void worker_loop();

  const int32_t device_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // the worker waits here for tasks
  mutable std::condition_variable done_cv_;  // waiters wait here for completions
  std::deque<Task> queue_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  TFL_Error* error_ = nullptr;
  std::thread worker_;  // last: starts after everything above is ready
};

// A marker in a stream. Recording enqueues a tiny task; the event is complete
// when that task has run, that is, when everything enqueued before it has.
class Event {
 public:
  // Where the event was last recorded; a waiter copies it, so re-recording
  // later does not move a wait that is already enqueued.
  struct Mark {
    std::shared_ptr<Stream> stream;  // NULL: never recorded (complete)
    uint64_t ticket = 0;
    std::shared_ptr<std::atomic<int64_t>> time_ns;  // set when the marker runs
  };

  Event(int32_t device, bool timing) : device_(device), timing_(timing) {}
  int32_t device() const { return device_; }
  bool timing() const { return timing_; }

  void record(const std::shared_ptr<Stream>& stream);
  Mark mark() const;
  bool query() const;
  // Blocks until complete; returns the recording stream's pending error.
  TFL_Error* synchronize() const;

 private:
  const int32_t device_;
  const bool timing_;
  mutable std::mutex mu_;
  Mark mark_;
};

}  // namespace {{ cookiecutter.package_slug }}
