// Streams and events. A stream is one worker thread draining a FIFO of
// tasks strictly in order (a lock-free single-producer queue); events are
// markers in those FIFOs with a generation count, so that "wait for the
// event as last recorded" is exact.
#ifndef FLEMU_STREAM_H_
#define FLEMU_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <new>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "torch_fl/stream.h"

namespace flemu {

// One unit of work on a stream. run() reports failure by throwing
// flemu::Error; the stream turns that into its pending error.
class Task {
 public:
  explicit Task(const char* name) : name_(name) {}
  virtual ~Task() = default;
  virtual void run() = 0;
  const char* name() const { return name_; }

 private:
  const char* name_;  // static string, e.g. "aten::mm"
};

template <class Fn>
class FnTask final : public Task {
 public:
  FnTask(const char* name, Fn fn) : Task(name), fn_(std::move(fn)) {}
  void run() override { fn_(); }

 private:
  Fn fn_;
};

// How long an idle worker keeps polling before it sleeps: long enough to
// catch the next launch of a host that spent a while on other work (Python
// between steps, a data loader) without a futex wake-up, which on a virtual
// machine also waits for an idle vCPU to wake. With 50 us, a 16-element add
// and its synchronize took 78 us after the host had been busy for 200 us
// (1.5 us back to back) and a small bmm 139 us (24 us); with 1 ms, 9 and
// 36 us (bench/test_idle_gap.py). PyTorch's OpenMP threads spin for
// milliseconds; spin_until yields the core every 64 polls.
constexpr int64_t kWorkerSpinNs = 1'000'000;

// Busy-waits up to `spin_ns` for `ready()`; true when it became ready. Every
// 64 polls it also yields the core: flemu's threads share the host's cores,
// and a spinning stream or pool thread must not keep the host's thread (or
// another flemu thread with work) from running. With nothing else runnable
// the yield returns at once and the poll goes on.
template <class Ready>
bool spin_until(Ready&& ready, int64_t spin_ns);

void cpu_relax();

// Names the calling thread ("flemu-stream", "flemu-pool"; at most 15
// characters) as profilers, top and /proc/<pid>/task/*/comm show it.
void name_this_thread(const char* name);

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  // check_single_producer: two threads enqueueing at once is reported as a
  // host contract violation (the stream's pending error) instead of only
  // being serialized (FLEMU_CHECK_CONTRACTS).
  Stream(int32_t device, uint32_t id, uint32_t sanitize_us, uint64_t sanitize_seed,
         bool check_single_producer = false);
  ~Stream();  // drains the queue, then joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t device() const { return device_; }
  uint32_t id() const { return id_; }
  bool valid() const { return magic_ == kMagic; }

  // Enqueues `fn` as a task; returns its sequence number (1, 2, ...). The
  // ABI lets one host thread at a time enqueue on a stream; a second one
  // waits here (and is reported under check_single_producer).
  template <class Fn>
  uint64_t submit(const char* name, Fn&& fn) {
    using T = FnTask<std::decay_t<Fn>>;
    ProducerGuard guard(*this);
    Slot& slot = tail_slot();
    if constexpr (sizeof(T) <= sizeof(Slot::storage) && alignof(T) <= 16) {
      slot.task = ::new (static_cast<void*>(slot.storage)) T(name, std::forward<Fn>(fn));
      slot.on_heap = false;
    } else {
      slot.task = new T(name, std::forward<Fn>(fn));
      slot.on_heap = true;
    }
    return publish();
  }

  uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  bool idle() const { return completed() == submitted(); }
  // Whether tasks run after a random delay (FLEMU_SANITIZE).
  bool delays_tasks() const { return sanitize_us_ != 0; }
  // Blocks the calling thread until task `seq` has run.
  void wait(uint64_t seq);
  void wait_idle() { wait(submitted()); }

  // Removes and returns the pending error if it came from a task enqueued
  // before `before` (a sequence number); nullptr otherwise.
  TFL_Error* take_error(uint64_t before = UINT64_MAX);
  bool has_error() const { return has_error_.load(std::memory_order_acquire); }
  // Records a failure as if a task with sequence `seq` had failed.
  void set_error(uint64_t seq, int32_t code, std::string message);
  // How many enqueues found another thread enqueueing on this stream.
  uint64_t concurrent_enqueues() const { return concurrent_enqueues_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint64_t kMagic = 0x464c454d5553544dull;  // "FLEMUSTM"

  // The queue is a chain of chunks of slots, written by the one producer
  // and read by the worker without a lock. A task is built in its slot when
  // it fits (a kernel's closure does), else on the heap. The worker hands a
  // chunk it has finished back as the spare, so a steady stream of launches
  // cycles through two chunks and allocates nothing.
  struct alignas(64) Slot {
    Task* task = nullptr;
    bool on_heap = false;
    alignas(16) unsigned char storage[1024 - 16];
  };
  static constexpr uint32_t kChunkSlots = 32;
  struct Chunk {
    Slot slots[kChunkSlots];
    std::atomic<Chunk*> next{nullptr};
  };

  class ProducerGuard {
   public:
    explicit ProducerGuard(Stream& s) : s_(s) {
      if (s_.producing_.exchange(true, std::memory_order_acquire)) s_.wait_for_other_producer();
    }
    ~ProducerGuard() { s_.producing_.store(false, std::memory_order_release); }
    ProducerGuard(const ProducerGuard&) = delete;
    ProducerGuard& operator=(const ProducerGuard&) = delete;

   private:
    Stream& s_;
  };

  Slot& tail_slot();
  uint64_t publish();
  void wait_for_other_producer();
  void worker_loop();
  void run_task(Task& task, uint64_t seq);

  uint64_t magic_ = kMagic;
  const int32_t device_;
  const uint32_t id_;
  const uint32_t sanitize_us_;
  const bool check_single_producer_;
  std::mt19937_64 sanitize_rng_;

  // Producer side: touched only by the enqueueing thread.
  alignas(64) std::atomic<bool> producing_{false};
  Chunk* tail_chunk_;
  uint32_t tail_index_ = 0;
  uint64_t produced_ = 0;
  std::atomic<uint64_t> concurrent_enqueues_{0};

  // Published by the producer, polled by the worker.
  alignas(64) std::atomic<uint64_t> submitted_{0};
  std::atomic<bool> worker_sleeping_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<Chunk*> spare_{nullptr};
  std::mutex mu_;  // only for the worker's sleep and wake-up
  std::condition_variable work_cv_;

  // Worker side.
  alignas(64) Chunk* head_chunk_;
  uint32_t head_index_ = 0;

  // Completion: written by the worker.
  alignas(64) std::atomic<uint64_t> completed_{0};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> wake_at_{UINT64_MAX};  // smallest seq a sleeping waiter needs

  // The first failure not yet reported.
  alignas(64) std::mutex error_mu_;
  std::atomic<bool> has_error_{false};
  uint64_t error_seq_ = 0;
  int32_t error_code_ = 0;
  std::string error_message_;

  std::thread worker_;
};

class Event : public std::enable_shared_from_this<Event> {
 public:
  Event(int32_t device, uint32_t flags) : device_(device), flags_(flags) {}
  ~Event() { magic_ = 0; }

  int32_t device() const { return device_; }
  bool timing() const { return (flags_ & TFL_EVENT_TIMING) != 0; }
  bool valid() const { return magic_ == kMagic; }

  // Enqueues a marker on `stream`; the event completes when it runs. On a
  // stream that has run everything enqueued on it (and delays no task, as
  // FLEMU_SANITIZE does) the marker would run at once: the event completes
  // here instead, with no task for the stream's worker.
  void record(Stream& stream);
  bool query() const;
  bool recorded() const { return recorded_gen_.load(std::memory_order_acquire) != 0; }
  // Blocks until the event as recorded now has completed; returns the
  // recording stream's error raised before the marker, if any.
  TFL_Error* synchronize();
  // Makes `stream` wait (on its worker) for the event as recorded now.
  void enqueue_wait(Stream& stream);
  // Steady-clock nanoseconds at which the last completed marker ran.
  int64_t timestamp_ns() const { return timestamp_ns_.load(std::memory_order_acquire); }

 private:
  static constexpr uint64_t kMagic = 0x464c454d55455654ull;  // "FLEMUEVT"

  void complete(uint64_t generation);
  // Blocks until `generation` has completed; a host thread (synchronize)
  // lends its core to the pool meanwhile, a stream worker only polls.
  void wait_generation(uint64_t generation, bool host);

  uint64_t magic_ = kMagic;
  const int32_t device_;
  const uint32_t flags_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> recorded_gen_{0};
  std::atomic<uint64_t> completed_gen_{0};
  std::atomic<int64_t> timestamp_ns_{0};
  std::atomic<int32_t> waiters_{0};
  std::weak_ptr<Stream> stream_;  // where it was last recorded
  uint64_t marker_seq_ = 0;       // the marker's sequence number there
};

int64_t now_ns();

template <class Ready>
bool spin_until(Ready&& ready, int64_t spin_ns) {
  if (ready()) return true;
  const int64_t deadline = now_ns() + spin_ns;
  for (int i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if ((i & 63) == 0) {
      if (now_ns() >= deadline) return false;
      std::this_thread::yield();
    }
  }
}

}  // namespace flemu

#endif  // FLEMU_STREAM_H_
