#include "stream.h"

#include <pthread.h>

#include <unistd.h>

#include <chrono>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#endif

#include "errors.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace flemu {

namespace {
// How long a waiting thread polls before it sleeps.
constexpr int64_t kWaiterSpinNs = 20'000;

// A host thread's poll before it sleeps: it runs parts of the pool's job in
// progress meanwhile (ThreadPool::lend_until). A stream worker waiting for
// another stream's event only polls, and its wait does not count for parking
// (host_wait_ended): it is no host giving its core to the device.
bool host_poll(const std::function<bool()>& done) {
  ThreadPool* pool = ThreadPool::started();
  return pool != nullptr ? pool->lend_until(done, kWaiterSpinNs) : spin_until(done, kWaiterSpinNs);
}

// A host thread's wait has ended: the pool counts it for parking a helper
// (ThreadPool::wait_ended), after the work waited for, never before its start.
void host_wait_ended() {
  if (ThreadPool* pool = ThreadPool::started()) pool->wait_ended();
}

// The producer publishes a task and then reads whether the worker sleeps; the
// worker announces its sleep and then reads what was published. Either side
// needs a full fence between its write and its read, or both can miss the
// other. With membarrier(2) the worker, which sleeps rarely, pays for both:
// its heavy fence makes every thread of the process pass a full barrier, so
// the producer, which publishes every launch, needs only to keep the compiler
// from reordering (a sequentially consistent store had made each launch wait
// for the worker's cache line). Without membarrier both sides fence.
// ThreadSanitizer models no fences: its builds make both accesses
// sequentially consistent instead.
#if defined(__SANITIZE_THREAD__)
constexpr bool kFences = false;
#else
constexpr bool kFences = true;
#endif
constexpr std::memory_order kAnnounce = kFences ? std::memory_order_relaxed : std::memory_order_seq_cst;

// Registering for membarrier takes milliseconds (the kernel waits for an RCU
// grace period), so a helper thread does it when the first stream is made,
// off the host's path. Until it is done, producers fence fully and a worker
// that goes to sleep wakes after a millisecond to look again.
enum class Barrier : int { kPending, kRegistered, kUnavailable };
std::atomic<Barrier> g_barrier{Barrier::kPending};

class BarrierRegistration {
 public:
  void start() {
    std::call_once(once_, [this] {
      pid_ = getpid();
      thread_ = std::thread([] {
#if defined(__linux__) && defined(SYS_membarrier)
        const bool ok = kFences && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
        const bool ok = false;
#endif
        g_barrier.store(ok ? Barrier::kRegistered : Barrier::kUnavailable, std::memory_order_release);
      });
    });
  }
  // Joined at unload or exit; a forked child has no such thread to join.
  ~BarrierRegistration() {
    if (!thread_.joinable()) return;
    if (getpid() == pid_) thread_.join();
    else thread_.detach();
  }

 private:
  std::once_flag once_;
  pid_t pid_ = 0;
  std::thread thread_;
};
BarrierRegistration g_registration;

inline void light_fence() {
  if constexpr (kFences) {
    if (g_barrier.load(std::memory_order_relaxed) == Barrier::kRegistered)
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// True when every producer is sure to see the announced sleep or to have its
// task seen: the membarrier ran, or no producer skips its fence. False while
// registration is pending or when membarrier failed (refused after a fork,
// say): the worker then sleeps for at most a millisecond.
bool heavy_fence() {
  if constexpr (kFences) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    switch (g_barrier.load(std::memory_order_acquire)) {
      case Barrier::kPending: return false;
      case Barrier::kUnavailable: return true;
      case Barrier::kRegistered:
#if defined(__linux__) && defined(SYS_membarrier)
        return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
        return false;
#endif
    }
  }
  return true;
}
}  // namespace

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

void name_this_thread(const char* name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------

Stream::Stream(int32_t device, uint32_t id, uint32_t sanitize_us, uint64_t sanitize_seed,
               bool check_single_producer)
    : device_(device), id_(id), sanitize_us_(sanitize_us), check_single_producer_(check_single_producer),
      sanitize_rng_(sanitize_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t{id} + 1))) {
  tail_chunk_ = head_chunk_ = new Chunk;
  g_registration.start();
  worker_ = std::thread([this] { worker_loop(); });
}

Stream::~Stream() {
  stop_requested_.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_one();
  }
  if (worker_.joinable()) worker_.join();
  // The worker ran every task; what is left is the chain from its chunk on.
  for (Chunk* c = head_chunk_; c != nullptr;) {
    Chunk* next = c->next.load(std::memory_order_acquire);
    delete c;
    c = next;
  }
  delete spare_.exchange(nullptr, std::memory_order_acquire);
  magic_ = 0;
}

Stream::Slot& Stream::tail_slot() {
  if (tail_index_ == kChunkSlots) {
    Chunk* chunk = spare_.exchange(nullptr, std::memory_order_acquire);
    if (chunk == nullptr) chunk = new Chunk;
    else chunk->next.store(nullptr, std::memory_order_relaxed);
    tail_chunk_->next.store(chunk, std::memory_order_release);
    tail_chunk_ = chunk;
    tail_index_ = 0;
  }
  return tail_chunk_->slots[tail_index_];
}

uint64_t Stream::publish() {
  ++tail_index_;
  const uint64_t seq = ++produced_;
  // Either the worker sees this task before it sleeps, or this thread sees it
  // asleep and wakes it (light_fence and heavy_fence above).
  submitted_.store(seq, kFences ? std::memory_order_release : std::memory_order_seq_cst);
  light_fence();
  if (worker_sleeping_.load(kAnnounce)) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_one();
  }
  return seq;
}

void Stream::wait_for_other_producer() {
  const uint64_t n = concurrent_enqueues_.fetch_add(1, std::memory_order_relaxed);
  if (check_single_producer_ && n == 0) {
    set_error(submitted(), TFL_ERR_INTERNAL,
              cat("host contract violated: two host threads enqueued onto stream ", id_, " of device ", device_,
                  " at once (the ABI: the host never enqueues onto one stream from two threads at once)"));
  }
  for (int i = 1; producing_.exchange(true, std::memory_order_acquire); ++i) {
    cpu_relax();
    if ((i & 63) == 0) std::this_thread::yield();
  }
}

void Stream::worker_loop() {
  name_this_thread("flemu-stream");
  uint64_t taken = 0;
  auto has_work = [&] {
    return submitted_.load(std::memory_order_seq_cst) != taken || stop_requested_.load(std::memory_order_seq_cst);
  };
  for (;;) {
    const uint64_t available = submitted_.load(std::memory_order_acquire);
    if (available == taken) {
      if (stop_requested_.load(std::memory_order_acquire)) {
        if (submitted_.load(std::memory_order_acquire) == taken) return;
        continue;
      }
      if (spin_until(has_work, kWorkerSpinNs)) continue;
      std::unique_lock<std::mutex> lock(mu_);
      worker_sleeping_.store(true, kAnnounce);
      if (heavy_fence()) {
        work_cv_.wait(lock, has_work);
      } else {
        // Not announced for sure: poll again after a while.
        work_cv_.wait_for(lock, std::chrono::milliseconds(1), has_work);
      }
      worker_sleeping_.store(false, std::memory_order_relaxed);
      continue;
    }
    while (taken != available) {
      if (head_index_ == kChunkSlots) {
        // The producer linked the next chunk before publishing a task in it.
        Chunk* next = head_chunk_->next.load(std::memory_order_acquire);
        delete spare_.exchange(head_chunk_, std::memory_order_acq_rel);
        head_chunk_ = next;
        head_index_ = 0;
      }
      Slot& slot = head_chunk_->slots[head_index_++];
      const uint64_t seq = ++taken;
      run_task(*slot.task, seq);
      // Release what the task holds before anyone sees it done.
      if (slot.on_heap) delete slot.task;
      else slot.task->~Task();
      const uint64_t done = completed_.fetch_add(1, std::memory_order_seq_cst) + 1;
      if (done >= wake_at_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> g(done_mu_);
        wake_at_.store(UINT64_MAX, std::memory_order_seq_cst);
        done_cv_.notify_all();
      }
    }
  }
}

void Stream::run_task(Task& task, uint64_t seq) {
  if (sanitize_us_ != 0) {
    const auto delay = sanitize_rng_() % (uint64_t{sanitize_us_} + 1);
    if (delay != 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
  }
  try {
    task.run();
  } catch (const Error& e) {
    set_error(seq, e.code(), cat(task.name(), " failed asynchronously on stream ", id_, " of device ",
                                 device_, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    set_error(seq, TFL_ERR_OUT_OF_MEMORY,
              cat(task.name(), " ran out of host memory on stream ", id_, " of device ", device_));
  } catch (const std::exception& e) {
    set_error(seq, TFL_ERR_INTERNAL,
              cat(task.name(), " raised an internal error on stream ", id_, " of device ", device_, ": ",
                  e.what()));
  } catch (...) {
    set_error(seq, TFL_ERR_INTERNAL,
              cat(task.name(), " raised an unknown exception on stream ", id_, " of device ", device_));
  }
}

void Stream::wait(uint64_t seq) {
  auto done = [&] { return completed_.load(std::memory_order_seq_cst) >= seq; };
  if (!host_poll(done)) {
    std::unique_lock<std::mutex> lock(done_mu_);
    while (!done()) {
      // Register before the re-check so the worker either sees us or we see it.
      if (seq < wake_at_.load(std::memory_order_seq_cst)) wake_at_.store(seq, std::memory_order_seq_cst);
      if (done()) break;
      done_cv_.wait(lock);
    }
  }
  host_wait_ended();
}

void Stream::set_error(uint64_t seq, int32_t code, std::string message) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (has_error_.load(std::memory_order_relaxed)) return;  // the first failure is the one reported
  error_seq_ = seq;
  error_code_ = code;
  error_message_ = std::move(message);
  has_error_.store(true, std::memory_order_release);
}

TFL_Error* Stream::take_error(uint64_t before) {
  if (!has_error()) return nullptr;
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!has_error_.load(std::memory_order_relaxed) || error_seq_ >= before) return nullptr;
  has_error_.store(false, std::memory_order_release);
  return make_error(error_code_, "", error_message_);
}

// ---------------------------------------------------------------------------
// Event
// ---------------------------------------------------------------------------

void Event::record(Stream& stream) {
  uint64_t generation;
  bool at_once;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = recorded_gen_.load(std::memory_order_relaxed) + 1;
    recorded_gen_.store(generation, std::memory_order_release);
    stream_ = stream.weak_from_this();
    // The host never enqueues on one stream from two threads at once, so the
    // marker gets the next sequence number (the next task's where it runs at
    // once: errors of tasks before it are still the ones synchronize reports).
    marker_seq_ = stream.submitted() + 1;
    at_once = stream.idle() && !stream.delays_tasks();
  }
  if (at_once) {
    complete(generation);
    return;
  }
  stream.submit("Event_Record", [self = shared_from_this(), generation] { self->complete(generation); });
}

void Event::complete(uint64_t generation) {
  if (timing()) timestamp_ns_.store(now_ns(), std::memory_order_release);
  // Re-recording on another stream can complete generations out of order;
  // the newest one wins.
  uint64_t cur = completed_gen_.load(std::memory_order_relaxed);
  while (cur < generation &&
         !completed_gen_.compare_exchange_weak(cur, generation, std::memory_order_seq_cst)) {
  }
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

bool Event::query() const {
  return completed_gen_.load(std::memory_order_acquire) >= recorded_gen_.load(std::memory_order_acquire);
}

void Event::wait_generation(uint64_t generation, bool host) {
  auto done = [&] { return completed_gen_.load(std::memory_order_seq_cst) >= generation; };
  if (!(host ? host_poll(done) : spin_until(done, kWaiterSpinNs))) {
    std::unique_lock<std::mutex> lock(mu_);
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, done);
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (host) host_wait_ended();
}

TFL_Error* Event::synchronize() {
  uint64_t generation, marker_seq;
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = recorded_gen_.load(std::memory_order_relaxed);
    marker_seq = marker_seq_;
    stream = stream_.lock();
  }
  if (generation == 0) return nullptr;
  wait_generation(generation, /*host=*/true);
  return stream ? stream->take_error(marker_seq) : nullptr;
}

void Event::enqueue_wait(Stream& stream) {
  const uint64_t generation = recorded_gen_.load(std::memory_order_acquire);
  if (completed_gen_.load(std::memory_order_acquire) >= generation) return;  // nothing to wait for
  stream.submit("Stream_WaitEvent",
                [self = shared_from_this(), generation] { self->wait_generation(generation, /*host=*/false); });
}

}  // namespace flemu
