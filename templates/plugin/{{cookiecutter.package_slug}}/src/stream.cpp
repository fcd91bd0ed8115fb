#include "stream.h"

#include <chrono>
#include <string>

#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

Stream::Stream(int32_t device) : device_(device), worker_([this] { worker_loop(); }) {}

Stream::~Stream() {
  stop();
  tfl::destroy_error(error_);
}

uint64_t Stream::submit(Task task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) tfl::invalid_argument("the stream of device ", device_, " was destroyed");
  queue_.push_back(std::move(task));
  work_cv_.notify_one();
  return ++submitted_;
}

uint64_t Stream::tail() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

bool Stream::reached(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= ticket;
}

void Stream::wait(uint64_t ticket) const {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
}

TFL_Error* Stream::take_error() {
  std::lock_guard<std::mutex> lock(mu_);
  TFL_Error* error = error_;
  error_ = nullptr;
  return error;
}

void Stream::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    work_cv_.notify_one();
  }
  worker_.join();
}

void Stream::worker_loop() {
  // Names the stream in the error of a failing task, whatever it threw.
  const std::string context = tfl::cat("a task on a stream of device ", device_);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    TFL_Error* failure = tfl::guarded(context.c_str(), task);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Only the first failure is kept until someone synchronizes.
      if (failure != nullptr && error_ == nullptr) error_ = failure;
      else tfl::destroy_error(failure);
      ++completed_;
    }
    done_cv_.notify_all();
  }
}

void Event::record(const std::shared_ptr<Stream>& stream) {
  Mark mark;
  mark.stream = stream;
  mark.time_ns = std::make_shared<std::atomic<int64_t>>(-1);
  mark.ticket = stream->submit([stamp = mark.time_ns] {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    stamp->store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  });
  std::lock_guard<std::mutex> lock(mu_);
  mark_ = std::move(mark);
}

Event::Mark Event::mark() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mark_;
}

bool Event::query() const {
  const Mark m = mark();
  return m.stream == nullptr || m.stream->reached(m.ticket);
}

TFL_Error* Event::synchronize() const {
  const Mark m = mark();
  if (m.stream == nullptr) return nullptr;
  m.stream->wait(m.ticket);
  return m.stream->take_error();
}

}  // namespace {{ cookiecutter.package_slug }}
