// flemu's stream queue on its own (built from src/stream.cpp, no library or
// torch): tasks run once each, in enqueue order, across chunk boundaries and
// chunk recycling, whether built in their slot or on the heap; a sleeping
// worker wakes, also for a task enqueued just as it goes to sleep;
// destruction drains; a task's captures are released before it counts as
// done; a failing task becomes the pending error; two threads enqueueing at
// once are serialized and, when asked, reported as a host contract
// violation. Prints "N checks, F failures". A watchdog aborts a run that
// hangs (a lost wake-up).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../src/stream.cpp"

namespace {

int checks = 0, failures = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
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
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    s.wait(s.submit("wake", [&count] { count.fetch_add(1); }));
  }
  expect(count.load() == 20, "a task enqueued on a sleeping worker runs (20 rounds)");
}

// Enqueues land around the moment the worker stops polling (50 us) and goes
// to sleep: a wake-up lost in that window hangs the wait (the watchdog).
void wake_race() {
  flemu::Stream s(0, 9, 0, 0);
  int ran = 0;
  for (int i = 0; i < 3000; ++i) {
    const int64_t until = flemu::now_ns() + 35'000 + (i % 31) * 1'000;
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
  throwing_closure_loses_nothing();
  concurrent_producers(false);
  concurrent_producers(true);
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
