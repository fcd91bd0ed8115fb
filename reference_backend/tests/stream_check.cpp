// flemu's stream queue on its own (built from src/stream.cpp, no library or
// torch): tasks run once each, in enqueue order, across chunk boundaries and
// chunk recycling, whether built in their slot or on the heap; a sleeping
// worker wakes, also for a task enqueued just as it goes to sleep;
// destruction drains; a task's captures are released before it counts as
// done; a failing task becomes the pending error; an event recorded on an
// idle stream completes at once, on a busy one after the work before it,
// reporting only that work's failure; two threads enqueueing at
// once are serialized and, when asked, reported as a host contract
// violation; a thread waiting for a stream works on the pool's job in
// progress, in a helper's place when it waits after every job, and keeps
// its own OpenMP thread count. Prints "N checks, F failures". A watchdog
// aborts a run that hangs (a lost wake-up).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "../src/stream.cpp"
#include "../src/thread_pool.cpp"

namespace {

int checks = 0, failures = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

struct Verdict {
  bool ok;
  std::string what;
};

// Runs `scenario` until one run has every verdict true, at most `runs`
// times, and reports the last run's. For checks of which thread ran what: a
// machine busy with other work may keep the waiting thread off its core for
// a whole job, once; a bug fails every run.
void expect_in_one_of(int runs, const std::function<std::vector<Verdict>()>& scenario) {
  std::vector<Verdict> last;
  for (int run = 0; run < runs; ++run) {
    last = scenario();
    if (std::all_of(last.begin(), last.end(), [](const Verdict& v) { return v.ok; })) break;
  }
  for (const Verdict& v : last) expect(v.ok, v.what);
}

std::string error_text(TFL_Error* e) {
  if (e == nullptr) return "";
  std::string s = e->message;
  delete e;
  return s;
}

// Larger than a slot: this closure goes to the heap.
struct Big {
  std::array<uint64_t, 200> pad{};
};

void order_across_chunks() {
  flemu::Stream s(0, 1, 0, 0);
  std::vector<uint64_t> ran;  // touched only by the worker until wait_idle
  ran.reserve(5000);
  bool seqs_consecutive = true;
  for (uint64_t i = 1; i <= 5000; ++i) {
    uint64_t seq;
    if (i % 7 == 0) {
      Big big;
      big.pad[199] = i;
      seq = s.submit("big", [&ran, big] { ran.push_back(big.pad[199]); });
    } else {
      seq = s.submit("small", [&ran, i] { ran.push_back(i); });
    }
    seqs_consecutive = seqs_consecutive && seq == i;
  }
  s.wait_idle();
  expect(seqs_consecutive, "submit returns 1, 2, 3, ...");
  bool in_order = ran.size() == 5000;
  for (size_t k = 0; in_order && k < ran.size(); ++k) in_order = ran[k] == k + 1;
  expect(in_order, "5000 tasks (every 7th on the heap) ran once each, in order; ran " + std::to_string(ran.size()));
  expect(s.idle() && s.completed() == 5000, "the stream is idle after wait_idle");
}

void producer_far_ahead() {
  // The worker is held by the first task while 1000 more queue behind it:
  // the queue grows by new chunks, then recycles them as it drains.
  flemu::Stream s(0, 2, 0, 0);
  std::atomic<bool> go{false};
  std::vector<int> ran;
  s.submit("gate", [&go] {
    while (!go.load()) std::this_thread::yield();
  });
  for (int i = 0; i < 1000; ++i) s.submit("t", [&ran, i] { ran.push_back(i); });
  expect(s.completed() == 0, "nothing completes while the first task holds the worker");
  go.store(true);
  for (int i = 1000; i < 1100; ++i) s.submit("t", [&ran, i] { ran.push_back(i); });
  s.wait_idle();
  bool in_order = ran.size() == 1100;
  for (size_t k = 0; in_order && k < ran.size(); ++k) in_order = ran[k] == static_cast<int>(k);
  expect(in_order, "1100 tasks queued behind a blocked worker ran in order");
}

void sleeping_worker_wakes() {
  flemu::Stream s(0, 3, 0, 0);
  std::atomic<int> count{0};
  for (int round = 0; round < 20; ++round) {
    // Long enough for the worker to stop polling and sleep.
    std::this_thread::sleep_for(std::chrono::nanoseconds(2 * flemu::kWorkerSpinNs));
    s.wait(s.submit("wake", [&count] { count.fetch_add(1); }));
  }
  expect(count.load() == 20, "a task enqueued on a sleeping worker runs (20 rounds)");
}

// Enqueues land around the moment the worker stops polling (kWorkerSpinNs)
// and goes to sleep: a wake-up lost in that window hangs the wait (the
// watchdog).
void wake_race() {
  flemu::Stream s(0, 9, 0, 0);
  int ran = 0;
  for (int i = 0; i < 3000; ++i) {
    const int64_t until = flemu::now_ns() + flemu::kWorkerSpinNs - 15'000 + (i % 31) * 1'000;
    while (flemu::now_ns() < until) flemu::cpu_relax();
    s.wait(s.submit("wake", [&ran] { ++ran; }));
  }
  expect(ran == 3000, "3000 enqueues around the worker's going to sleep all ran");
}

void destruction_drains() {
  int ran = 0;
  {
    flemu::Stream s(0, 4, 0, 0);
    for (int i = 0; i < 300; ++i) s.submit("t", [&ran] { ++ran; });
  }
  expect(ran == 300, "destroying a stream runs its 300 queued tasks first; ran " + std::to_string(ran));
}

void captures_released_before_done() {
  flemu::Stream s(0, 5, 0, 0);
  auto held = std::make_shared<int>(7);
  Big big;
  const uint64_t a = s.submit("small", [held] { (void)*held; });
  const uint64_t b = s.submit("big", [held, big] { (void)*held; (void)big; });
  s.wait(a);
  s.wait(b);
  expect(held.use_count() == 1, "a done task no longer holds what it captured (use_count " +
                                    std::to_string(held.use_count()) + ")");
}

void failures_become_the_pending_error() {
  flemu::Stream s(0, 6, 0, 0);
  int after = 0;
  s.submit("ok", [] {});
  const uint64_t bad = s.submit("aten::bad", [] { flemu::fail(TFL_ERR_INTERNAL, "boom"); });
  s.submit("after", [&after] { ++after; });
  s.wait_idle();
  expect(after == 1, "work enqueued after a failure still runs");
  expect(error_text(s.take_error(bad)).empty(), "the error is not reported to a wait for work before it");
  const std::string msg = error_text(s.take_error());
  expect(msg.find("aten::bad failed asynchronously") != std::string::npos && msg.find("boom") != std::string::npos,
         "the failing task's name and message are the pending error: " + msg);
  expect(error_text(s.take_error()).empty(), "the pending error is reported once");
}

// An event recorded on a stream that has run everything enqueued on it
// completes at once, with no task for the worker (but not on a stream that
// delays its tasks, FLEMU_SANITIZE); on a busy stream only once the work
// before it has run. Either way its synchronize reports the failure of work
// enqueued before it, not of work enqueued after.
void events_on_idle_and_busy_streams() {
  auto s = std::make_shared<flemu::Stream>(0, 9, 0, 0);
  s->submit("aten::before", [] { flemu::fail(TFL_ERR_INTERNAL, "boom"); });
  s->wait_idle();
  auto e = std::make_shared<flemu::Event>(0, TFL_EVENT_TIMING);
  const uint64_t submitted = s->submitted();
  const int64_t t0 = flemu::now_ns();
  e->record(*s);
  const int64_t t1 = flemu::now_ns();
  expect(e->query() && s->submitted() == submitted,
         "an event recorded on an idle stream has completed at once, with no task enqueued");
  expect(e->timestamp_ns() >= t0 && e->timestamp_ns() <= t1, "its timestamp is the time of the record");
  const std::string msg = error_text(e->synchronize());
  expect(msg.find("aten::before") != std::string::npos,
         "its synchronize reports the failure of work enqueued before it: " + msg);

  s->submit("aten::after", [] { flemu::fail(TFL_ERR_INTERNAL, "later"); });
  s->wait_idle();
  e->record(*s);
  s->submit("aten::third", [] { flemu::fail(TFL_ERR_INTERNAL, "third"); });
  s->wait_idle();
  const std::string before = error_text(e->synchronize());
  expect(before.find("aten::after") != std::string::npos, "a re-record reports the failure before it: " + before);
  expect(error_text(s->take_error()).empty(), "... once");

  std::atomic<bool> release{false};
  s->submit("hold", [&release] {
    while (!release.load()) std::this_thread::yield();
  });
  auto busy = std::make_shared<flemu::Event>(0, TFL_EVENT_TIMING);
  const uint64_t held = s->submitted();
  busy->record(*s);
  s->submit("aten::later", [] { flemu::fail(TFL_ERR_INTERNAL, "later"); });
  expect(!busy->query() && s->submitted() == held + 2,
         "an event recorded behind unfinished work waits for it, as a task of the stream");
  release.store(true);
  expect(error_text(busy->synchronize()).empty() && busy->query(),
         "it completes once that work has run, and does not report a failure enqueued after it");
  s->wait_idle();
  expect(error_text(s->take_error()).find("aten::later") != std::string::npos, "that failure stays pending");

  auto delayed = std::make_shared<flemu::Stream>(0, 10, /*sanitize_us=*/20, /*sanitize_seed=*/1);
  auto marker = std::make_shared<flemu::Event>(0, 0);
  marker->record(*delayed);
  expect(delayed->submitted() == 1, "a stream that delays its tasks gets its marker as a task even when idle");
  expect(error_text(marker->synchronize()).empty() && marker->query(), "... which completes");
}

void throwing_closure_loses_nothing() {
  struct Throws {
    bool armed;
    Throws(bool a) : armed(a) {}
    Throws(const Throws& o) : armed(o.armed) {
      if (armed) throw std::bad_alloc();
    }
    void operator()() const {}
  };
  flemu::Stream s(0, 7, 0, 0);
  std::vector<int> ran;
  s.submit("a", [&ran] { ran.push_back(1); });
  bool threw = false;
  try {
    const Throws t(true);
    s.submit("throws", t);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  const uint64_t seq = s.submit("b", [&ran] { ran.push_back(2); });
  s.wait_idle();
  expect(threw, "a closure that throws while being queued throws from submit");
  expect(seq == 2 && ran == std::vector<int>({1, 2}), "the failed submit took no sequence number and no slot");
}

// A closure whose copy blocks until released: the enqueueing thread stays
// inside submit, so a second thread's submit meets it there.
struct Latch {
  std::atomic<bool>* inside;
  std::atomic<bool>* release;
  Latch(std::atomic<bool>* i, std::atomic<bool>* r) : inside(i), release(r) {}
  Latch(const Latch& o) : inside(o.inside), release(o.release) {
    inside->store(true);
    while (!release->load()) std::this_thread::yield();
  }
  void operator()() const {}
};

void concurrent_producers(bool check) {
  flemu::Stream s(0, 8, 0, 0, check);
  std::atomic<bool> inside{false}, release{false};
  int ran = 0;  // touched only by the worker
  std::thread a([&] {
    const Latch latch(&inside, &release);
    s.submit("latch", latch);
  });
  while (!inside.load()) std::this_thread::yield();
  std::thread b([&] { s.submit("second", [&ran] { ++ran; }); });
  while (s.concurrent_enqueues() == 0) std::this_thread::yield();
  release.store(true);
  a.join();
  b.join();
  // Then both threads at full speed.
  std::thread c([&] {
    for (int i = 0; i < 20000; ++i) s.submit("c", [&ran] { ++ran; });
  });
  for (int i = 0; i < 20000; ++i) s.submit("d", [&ran] { ++ran; });
  c.join();
  s.wait_idle();
  expect(ran == 40001 && s.completed() == 40002,
         "two threads enqueueing at once lose nothing: ran " + std::to_string(ran));
  const std::string msg = error_text(s.take_error());
  if (check)
    expect(msg.find("host contract violated") != std::string::npos && msg.find("two host threads") != std::string::npos,
           "with contract checking, the second thread is reported: '" + msg + "'");
  else
    expect(msg.empty(), "without contract checking nothing is reported: '" + msg + "'");
}

// A task splits over the pool; the thread waiting for it (the host, in a
// stream's synchronize, or in an event's recorded after it) takes indices of
// that job too, every index runs once, and the OpenMP thread count a part
// sets for itself (as the oneDNN kernels do) is the waiting thread's own
// again afterwards.
void waiting_thread_lends_its_core(bool by_event) {
  flemu::ThreadPool& pool = flemu::ThreadPool::instance();
  auto s = std::make_shared<flemu::Stream>(0, by_event ? 12 : 10, 0, 0);
  const std::thread::id waiter = std::this_thread::get_id();
  omp_set_num_threads(3);
  constexpr int64_t kParts = 64;
  std::unique_ptr<std::atomic<int>[]> runs(new std::atomic<int>[kParts]);
  for (int64_t i = 0; i < kParts; ++i) runs[i].store(0);
  std::atomic<int> on_waiter{0};
  std::atomic<bool> started{false};
  s->submit("split", [&] {
    pool.parallel_for(kParts, [&](int64_t i) {
      started.store(true);
      runs[i].fetch_add(1);
      if (std::this_thread::get_id() == waiter) on_waiter.fetch_add(1);
      omp_set_num_threads(1);
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    });
  });
  std::shared_ptr<flemu::Event> event;
  if (by_event) {
    event = std::make_shared<flemu::Event>(0, 0);
    event->record(*s);
  }
  // The waiter polls for 20 us before it sleeps: it comes once the job runs.
  while (!started.load()) std::this_thread::yield();
  const std::string how = by_event ? "an event's synchronize" : "wait_idle";
  if (by_event) {
    expect(event->synchronize() == nullptr, "the event's synchronize reports no error");
    expect(event->query(), "the event has completed once its synchronize returned");
  } else {
    s->wait_idle();
  }
  bool once = true;
  for (int64_t i = 0; i < kParts; ++i) once = once && runs[i].load() == 1;
  expect(once, "each of 64 parts ran once with the thread waiting in " + how + " taking part");
  if (pool.parallelism() > 1)
    expect(on_waiter.load() > 0, "the thread waiting in " + how + " ran parts of the stream's job (" +
                                     std::to_string(on_waiter.load()) + " of 64)");
  expect(omp_get_max_threads() == 3, "the OpenMP thread count of the thread waiting in " + how +
                                         " is its own again: " + std::to_string(omp_get_max_threads()));
}

// When the host's one wait after a batch of jobs begins.
enum class WaitFrom {
  before_start,   // before the first job's parts start (the stream thread is late)
  while_running,  // while the first job runs
  after_end,      // once the last job has ended
};

// `jobs` jobs of eight sleeping parts each on stream s, then one wait from
// `from`. Returns, for each job, the pool's helpers that ran its parts (the
// threads other than the stream's and the waiting one).
std::vector<std::set<std::thread::id>> split_jobs(flemu::Stream& s, WaitFrom from, int jobs) {
  std::mutex mu;
  std::vector<std::set<std::thread::id>> ran(jobs);
  std::atomic<bool> started{false}, ended{false};
  std::thread::id worker;
  for (int j = 0; j < jobs; ++j) {
    s.submit("split", [&, j] {
      worker = std::this_thread::get_id();
      // Long past the waiter's 20 us poll: it sleeps before the parts start.
      if (from == WaitFrom::before_start && j == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      flemu::ThreadPool::instance().parallel_for(8, [&](int64_t) {
        started.store(true);
        {
          std::lock_guard<std::mutex> g(mu);
          ran[j].insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      });
      if (j == jobs - 1) ended.store(true);
    });
  }
  if (from == WaitFrom::while_running) {
    while (!started.load()) std::this_thread::yield();
  } else if (from == WaitFrom::after_end) {
    while (!ended.load()) std::this_thread::yield();
  }
  s.wait_idle();
  for (auto& threads : ran) {
    threads.erase(worker);
    threads.erase(std::this_thread::get_id());
  }
  return ran;
}

// A host that waits after every job takes one helper's place from the
// third job on (the pool's threads stay one per core: that helper runs no
// part); two jobs with no wait between them (a forward and a backward pass)
// give the helper back.
std::vector<Verdict> waiting_thread_takes_a_helpers_place() {
  const int helpers = flemu::ThreadPool::instance().parallelism() - 1;
  if (helpers < 1) return {};  // no helper to stand in for
  flemu::Stream s(0, 11, 0, 0);
  const auto reset = split_jobs(s, WaitFrom::after_end, 3);
  split_jobs(s, WaitFrom::while_running, 1);
  split_jobs(s, WaitFrom::while_running, 1);
  const auto third = split_jobs(s, WaitFrom::while_running, 1);
  const auto pass = split_jobs(s, WaitFrom::after_end, 3);
  return {
      {static_cast<int>(reset[2].size()) == helpers,
       "the third of three jobs between two waits has every helper: " + std::to_string(reset[2].size()) +
           " of " + std::to_string(helpers) + " ran parts"},
      {static_cast<int>(third[0].size()) <= helpers - 1,
       "after two jobs that each followed a wait one helper gives its place to the waiting thread: " +
           std::to_string(third[0].size()) + " of " + std::to_string(helpers) + " ran parts"},
      {static_cast<int>(pass[1].size()) == helpers && static_cast<int>(pass[2].size()) == helpers,
       "the second job with no wait before it has every helper back: " + std::to_string(pass[1].size()) +
           " and " + std::to_string(pass[2].size()) + " of " + std::to_string(helpers) +
           " ran the second and third"},
  };
}

// The same host when every other wait begins before its job starts (the
// stream thread was late) and the others while their job runs: each job
// still follows the end of a wait, so the helper stays parked. Counted at
// their start, such waits left two job starts with none between them, and
// every such job woke the helper: three threads on two cores.
std::vector<Verdict> parking_holds_when_a_wait_begins_early() {
  const int helpers = flemu::ThreadPool::instance().parallelism() - 1;
  if (helpers < 1) return {};
  flemu::Stream s(0, 13, 0, 0);
  split_jobs(s, WaitFrom::after_end, 2);  // a streak that has ended
  bool parked = true;
  std::string counts;
  for (int round = 0; round < 4; ++round) {
    split_jobs(s, WaitFrom::before_start, 1);
    const auto late = split_jobs(s, WaitFrom::while_running, 1);
    if (round == 0) continue;  // the streak builds up
    parked = parked && static_cast<int>(late[0].size()) <= helpers - 1;
    counts += (counts.empty() ? "" : ", ") + std::to_string(late[0].size());
  }
  return {{parked, "with every other wait begun before its job started, one helper keeps its place given "
                   "to the waiting thread: " + counts + " of " + std::to_string(helpers) + " helpers ran parts"}};
}

}  // namespace

int main() {
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::printf("FAIL: stream_check hung for 60 s (a lost wake-up?)\n");
    std::fflush(stdout);
    std::abort();
  }).detach();
  order_across_chunks();
  producer_far_ahead();
  sleeping_worker_wakes();
  wake_race();
  destruction_drains();
  captures_released_before_done();
  failures_become_the_pending_error();
  events_on_idle_and_busy_streams();
  throwing_closure_loses_nothing();
  concurrent_producers(false);
  concurrent_producers(true);
  waiting_thread_lends_its_core(false);
  waiting_thread_lends_its_core(true);
  expect_in_one_of(3, waiting_thread_takes_a_helpers_place);
  expect_in_one_of(3, parking_holds_when_a_wait_begins_early);
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
