// The pieces of the tfl torch.distributed backend below the c10d Backend
// itself (process_group.cpp): access to the plugin's collectives group, the
// events an operation records, the Work a collective returns, and the
// completion lanes that finish Works in stream order.
#pragma once

#include "event_calls.h"
#include "loaded_plugin.h"

#include <torch_fl/plugin_api.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torch_fl::bridge::dist {

constexpr const char* kBackendName = "tfl";
constexpr auto kType = c10::DeviceType::PrivateUse1;

std::string device_name(c10::DeviceIndex index);
// The plugin's collectives group; NotImplementedError when it has none.
const TFL_CollectivesApi& collectives();
[[noreturn]] void throw_comm_error(TFL_Error* error, const std::string& what);
// Synchronous plugin errors: bad arguments map like every other plugin call
// (ValueError, NotImplementedError); anything else is a backend error.
void check_call(TFL_Error* error, const char* what);

class WorkTFL final : public c10d::Work {
 public:
  WorkTFL(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, nullptr),
        what_(std::move(what)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~WorkTFL() override {
    for (TFL_Event* e : events_) {
      destroy_event(e);
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          "tfl: " + what_ + " did not complete within " + std::to_string(timeout.count()) +
              " ms of wait(); it is still running (the communicator's own timeout ends it)");
    }
    if (exception_) {
      std::rethrow_exception(exception_);
    }
    return true;
  }

  // Completion is observed on the host, after which work enqueued on any
  // stream is ordered after the collective.
  void synchronize() override {}

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  const std::string& what() const {
    return what_;
  }
  void add_event(TFL_Event* event) {
    events_.push_back(event);
  }
  const std::vector<TFL_Event*>& events() const {
    return events_;
  }
  void keep(std::vector<at::Tensor> tensors) {
    for (auto& t : tensors) {
      keep_alive_.push_back(std::move(t));
    }
  }

  // Called once by the completion thread.
  void complete(std::exception_ptr error) {
    for (TFL_Event* e : events_) {
      destroy_event(e);
    }
    events_.clear();
    keep_alive_.clear();
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  std::vector<TFL_Event*> events_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Completes the Works of one plugin stream, in order.
class CompletionLane {
 public:
  explicit CompletionLane(c10::DeviceIndex device) : device_(device) {
    thread_ = std::thread([this] { loop(); });
  }
  ~CompletionLane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  void push(c10::intrusive_ptr<WorkTFL> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
      ++pending_;
    }
    cv_.notify_all();
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ == 0;
  }

 private:
  void loop();

  c10::DeviceIndex device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkTFL>> queue_;
  int64_t pending_ = 0;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;
};

} // namespace torch_fl::bridge::dist
