#include "stream.h"

#include <pthread.h>

#include <chrono>

#include "errors.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace flemu {

namespace {
// How long an idle worker keeps polling before it sleeps: long enough to
// catch the next launch of a busy host thread without a futex wake-up.
constexpr int64_t kWorkerSpinNs = 50'000;
// How long a waiting thread polls before it sleeps.
constexpr int64_t kWaiterSpinNs = 20'000;
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

Stream::Stream(int32_t device, uint32_t id, uint32_t sanitize_us, uint64_t sanitize_seed)
    : device_(device), id_(id), sanitize_us_(sanitize_us),
      sanitize_rng_(sanitize_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t{id} + 1))) {
  worker_ = std::thread([this] { worker_loop(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stop_requested_.store(true, std::memory_order_release);
  }
  work_cv_.notify_one();
  if (worker_.joinable()) worker_.join();
  magic_ = 0;
}

uint64_t Stream::enqueue(std::unique_ptr<Task> task) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    seq = submitted_.load(std::memory_order_relaxed) + 1;
    submitted_.store(seq, std::memory_order_release);
    wake = worker_sleeping_;
  }
  // A spinning worker sees `submitted_` change; only a sleeping one needs the futex.
  if (wake) work_cv_.notify_one();
  return seq;
}

void Stream::worker_loop() {
  name_this_thread("flemu-stream");
  std::deque<std::unique_ptr<Task>> batch;
  uint64_t taken = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      lock.unlock();
      spin_until(
          [&] {
            return submitted_.load(std::memory_order_acquire) != taken ||
                   stop_requested_.load(std::memory_order_acquire);
          },
          kWorkerSpinNs);
      lock.lock();
      if (queue_.empty() && !stop_) {
        worker_sleeping_ = true;
        work_cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
        worker_sleeping_ = false;
      }
      continue;
    }
    batch.swap(queue_);
    lock.unlock();
    for (auto& task : batch) {
      const uint64_t seq = ++taken;
      run_task(*task, seq);
      task.reset();  // release what the task holds before anyone sees it done
      const uint64_t done = completed_.fetch_add(1, std::memory_order_seq_cst) + 1;
      if (done >= wake_at_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> g(done_mu_);
        wake_at_.store(UINT64_MAX, std::memory_order_seq_cst);
        done_cv_.notify_all();
      }
    }
    batch.clear();
    lock.lock();
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
  if (spin_until(done, kWaiterSpinNs)) return;
  std::unique_lock<std::mutex> lock(done_mu_);
  while (!done()) {
    // Register before the re-check so the worker either sees us or we see it.
    if (seq < wake_at_.load(std::memory_order_seq_cst)) wake_at_.store(seq, std::memory_order_seq_cst);
    if (done()) break;
    done_cv_.wait(lock);
  }
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

void Event::record(const std::shared_ptr<Stream>& stream) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = recorded_gen_.load(std::memory_order_relaxed) + 1;
    recorded_gen_.store(generation, std::memory_order_release);
    stream_ = stream;
    // The host never enqueues on one stream from two threads at once, so the
    // marker gets the next sequence number.
    marker_seq_ = stream->submitted() + 1;
  }
  stream->submit("Event_Record", [self = shared_from_this(), generation] { self->complete(generation); });
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

void Event::wait_generation(uint64_t generation) {
  auto done = [&] { return completed_gen_.load(std::memory_order_seq_cst) >= generation; };
  if (spin_until(done, kWaiterSpinNs)) return;
  std::unique_lock<std::mutex> lock(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  cv_.wait(lock, done);
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
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
  wait_generation(generation);
  return stream ? stream->take_error(marker_seq) : nullptr;
}

void Event::enqueue_wait(Stream& stream) {
  const uint64_t generation = recorded_gen_.load(std::memory_order_acquire);
  if (completed_gen_.load(std::memory_order_acquire) >= generation) return;  // nothing to wait for
  stream.submit("Stream_WaitEvent",
                [self = shared_from_this(), generation] { self->wait_generation(generation); });
}

}  // namespace flemu
