// A small persistent pool that kernels use to split large problems (GEMM
// row blocks, big elementwise loops) across the host's cores.
#ifndef FLEMU_THREAD_POOL_H_
#define FLEMU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flemu {

class ThreadPool {
 public:
  // The process-wide pool, started on first use with one thread per
  // hardware thread (the caller counts as one).
  static ThreadPool& instance();
  // Joins the helper threads; a later instance() call starts them again.
  static void shutdown_instance();
  // In a forked child: drops the pool without joining (its threads only
  // exist in the parent); a later instance() starts a new one.
  static void abandon_after_fork();

  explicit ThreadPool(int helpers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that take part in parallel_for, the caller included.
  int parallelism() const { return helpers_ + 1; }

  // Runs fn(i) for every i in [0, n), in any order, on the pool and the
  // calling thread; returns when all are done and rethrows the first
  // exception. When another parallel_for is already running (two streams
  // at once, or a nested call) it runs serially on the caller instead.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // Waits, polling for at most spin_ns after the last piece of work, until
  // ready() or the poll ends; true when ready. Meanwhile the calling thread
  // (the host's, waiting for a stream) takes indices of the jobs that start.
  // Once kWaitedStreak jobs in a row each followed the end of a host's wait
  // (wait_ended: a host that synchronizes after every launch) one helper
  // sleeps and the waiting thread takes its place: a third thread polling
  // beside the two that compute makes the cores' owners take turns. Two
  // jobs with no wait ending between them (a training step's) end the streak.
  bool lend_until(const std::function<bool()>& ready, int64_t spin_ns);
  // A host thread's wait for the device has ended. Counted at its end, not
  // its start: a wait that began before its job started (the stream thread
  // was late) still lies between that job's start and the next one's.
  void wait_ended() { waits_.fetch_add(1, std::memory_order_acq_rel); }
  // The pool if it has been started, else null.
  static ThreadPool* started();

 private:
  struct Job {
    const std::function<void(int64_t)>* fn;
    int64_t n;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex error_mu;
    std::exception_ptr error;
    // The caller sleeps here once it has polled kJoinSpinNs; whoever
    // finishes the last index wakes it.
    std::mutex join_mu;
    std::condition_variable join_cv;
  };
  static void work_on(Job& job);
  void helper_loop(int index);
  static constexpr int kWaitedStreak = 2;
  // Whether helper `index` gives its place to a waiting thread.
  bool parked(int index) const {
    return index == helpers_ - 1 && waited_streak_.load(std::memory_order_acquire) >= kWaitedStreak;
  }

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Job> current_;
  std::atomic<uint64_t> generation_{0};
  int sleepers_ = 0;
  bool last_helper_sleeps_ = false;  // the one that parks (under mu_)
  const int helpers_;
  std::atomic<uint64_t> waits_{0};     // host waits ended so far
  std::atomic<int> waited_streak_{0};  // jobs in a row that each followed a wait
  uint64_t waits_seen_ = 0;            // waits_ when the last job started (under run_mu_)
  bool stop_ = false;
  std::atomic<bool> stop_flag_{false};
  std::vector<std::thread> threads_;
};

// The size of each part when `extent` items split into one part per thread,
// rounded up to a multiple of `align` (whole micro-tiles, channel blocks).
inline int64_t part_size(int64_t extent, int64_t threads, int64_t align = 1) {
  return ((extent + threads - 1) / threads + align - 1) / align * align;
}

}  // namespace flemu

#endif  // FLEMU_THREAD_POOL_H_
