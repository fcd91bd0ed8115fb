// One process group's communicator on the plugin: created on the first
// operation for the group's device (rank 0 makes the unique id and publishes
// it through the c10d store; every rank joins), with three plugin streams and
// their completion lanes — collectives, sends, receives — so that a send and
// the matching receive posted by two ranks in opposite order cannot deadlock.
#pragma once

#include "collective_work.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace torch_fl::bridge::dist {

enum LaneId { kCollectiveLane = 0, kSendLane = 1, kRecvLane = 2 };

struct Comm {
  TFL_Communicator* handle = nullptr;
  c10::DeviceIndex device = -1;
  TFL_Stream* streams[3] = {nullptr, nullptr, nullptr};
  std::unique_ptr<CompletionLane> lanes[3];
};

class GroupCommunicator {
 public:
  GroupCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~GroupCommunicator();
  GroupCommunicator(const GroupCommunicator&) = delete;
  GroupCommunicator& operator=(const GroupCommunicator&) = delete;

  // The communicator for `device`, created on first use; a later call for
  // another device is refused (one device per process).
  const Comm& get(c10::DeviceIndex device);
  // The device it communicates on, -1 before the first operation.
  c10::DeviceIndex device();
  // A failure the plugin reported asynchronously, as c10d's error type.
  c10d::ErrorType async_error();
  // Whether work is still in flight on any of its streams.
  bool busy();
  // Destroys (or, with `abort`, aborts) the plugin communicator; later
  // operations are refused. Idempotent.
  void close(bool abort) noexcept;

 private:
  void forget_unique_id(const std::string& key);

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  Comm comm_;
  int generation_ = 0;
  bool closed_ = false;
};

} // namespace torch_fl::bridge::dist
