#include "thread_pool.h"

#include <omp.h>

#include "stream.h"  // spin_until, cpu_relax

namespace flemu {

namespace {
// How long an idle helper polls before it sleeps: long enough to bridge a
// host round trip between two parallel kernels (synchronize, Python, the next
// launch), as OpenMP's threads do for PyTorch's CPU operators. A helper that
// had gone to sleep woke after the stream thread had taken its part too: a
// 256x128x512 GEMM took 300 us instead of 125 us.
constexpr int64_t kHelperSpinNs = 500'000;
// How long the caller of parallel_for polls for the helpers' last indices
// before it sleeps until they finish. A helper preempted on the caller's core
// (three threads share two: the host's, the stream's, a helper) runs only
// when the caller stops polling: a polling caller stalled GEMMs for a
// scheduler tick (4 ms) each.
constexpr int64_t kJoinSpinNs = 20'000;
std::mutex g_instance_mu;
std::unique_ptr<ThreadPool> g_instance;
std::atomic<ThreadPool*> g_instance_ptr{nullptr};
}  // namespace

ThreadPool& ThreadPool::instance() {
  if (ThreadPool* p = g_instance_ptr.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g_instance_mu);
  if (!g_instance) {
    const unsigned hw = std::thread::hardware_concurrency();
    g_instance = std::make_unique<ThreadPool>(hw > 1 ? static_cast<int>(hw) - 1 : 0);
    g_instance_ptr.store(g_instance.get(), std::memory_order_release);
  }
  return *g_instance;
}

void ThreadPool::shutdown_instance() {
  std::lock_guard<std::mutex> lock(g_instance_mu);
  g_instance_ptr.store(nullptr, std::memory_order_release);
  g_instance.reset();
}

void ThreadPool::abandon_after_fork() {
  g_instance_ptr.store(nullptr, std::memory_order_release);
  (void)g_instance.release();  // leaked on purpose: destroying it would join threads that do not exist here
}

ThreadPool* ThreadPool::started() { return g_instance_ptr.load(std::memory_order_acquire); }

ThreadPool::ThreadPool(int helpers) : helpers_(helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { helper_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stop_flag_.store(true);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(Job& job) {
  for (;;) {
    const int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.n) return;
    try {
      (*job.fn)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mu);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.n) {
      // The caller checks `done` under join_mu before it sleeps: taking the
      // lock here orders this wake-up after that check or before it.
      { std::lock_guard<std::mutex> g(job.join_mu); }
      job.join_cv.notify_one();
    }
  }
}

void ThreadPool::helper_loop(int index) {
  name_this_thread("flemu-pool");
  uint64_t seen = 0;
  for (;;) {
    spin_until(
        [&] {
          return generation_.load(std::memory_order_acquire) != seen || stop_flag_.load() || parked(index);
        },
        kHelperSpinNs);
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if ((generation_.load() == seen || parked(index)) && !stop_) {
        ++sleepers_;
        if (index == helpers_ - 1) last_helper_sleeps_ = true;
        cv_.wait(lock, [&] { return (generation_.load() != seen && !parked(index)) || stop_; });
        last_helper_sleeps_ = false;
        --sleepers_;
      }
      if (stop_) return;
      seen = generation_.load();
      job = current_;
    }
    if (job) work_on(*job);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> run_lock(run_mu_, std::try_to_lock);
  if (n == 1 || threads_.empty() || !run_lock.owns_lock()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const uint64_t waits = waits_.load(std::memory_order_acquire);
  waited_streak_.store(waits != waits_seen_ ? waited_streak_.load(std::memory_order_relaxed) + 1 : 0,
                       std::memory_order_release);
  waits_seen_ = waits;
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = job;
    generation_.fetch_add(1, std::memory_order_release);
    // A parked helper sleeps too; waking it would only cost a switch.
    wake = sleepers_ > (last_helper_sleeps_ && parked(helpers_ - 1) ? 1 : 0);
  }
  if (wake) cv_.notify_all();
  work_on(*job);
  // Indices already claimed by helpers finish soon; a helper that arrives
  // later finds none left and never touches `fn`.
  auto finished = [&] { return job->done.load(std::memory_order_acquire) >= n; };
  if (!spin_until(finished, kJoinSpinNs)) {
    std::unique_lock<std::mutex> lock(job->join_mu);
    job->join_cv.wait(lock, finished);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_.reset();
  }
  if (job->error) std::rethrow_exception(job->error);
}

bool ThreadPool::lend_until(const std::function<bool()>& ready, int64_t spin_ns) {
  // Kernels set OpenMP's thread count of the thread they run on to one
  // (dnnl_support.h); this thread is the host's, whose count PyTorch reads.
  const int omp_threads = omp_get_max_threads();
  uint64_t seen = 0;
  std::shared_ptr<Job> job;
  auto ready_or_job = [&] {
    if (ready()) return true;
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (generation == seen) return false;
    seen = generation;
    std::lock_guard<std::mutex> lock(mu_);
    job = current_;
    return job != nullptr;
  };
  bool is_ready = false;
  while (spin_until(ready_or_job, spin_ns)) {
    if (!job) {
      is_ready = true;
      break;
    }
    work_on(*job);
    job.reset();
  }
  if (omp_get_max_threads() != omp_threads) omp_set_num_threads(omp_threads);
  return is_ready;
}

}  // namespace flemu
