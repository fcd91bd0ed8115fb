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
  int parallelism() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs fn(i) for every i in [0, n), in any order, on the pool and the
  // calling thread; returns when all are done and rethrows the first
  // exception. When another parallel_for is already running (two streams
  // at once, or a nested call) it runs serially on the caller instead.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

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
  void helper_loop();

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Job> current_;
  std::atomic<uint64_t> generation_{0};
  int sleepers_ = 0;
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
