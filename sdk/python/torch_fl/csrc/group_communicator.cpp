#include "group_communicator.h"

#include "kernel_abi.h"

#include <algorithm>

namespace torch_fl::bridge::dist {

GroupCommunicator::GroupCommunicator(
    c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {}

GroupCommunicator::~GroupCommunicator() {
  close(false);
}

// The communicator for `device`, created on first use: rank 0 makes the
// unique id and publishes it through the store; everyone joins.
const Comm& GroupCommunicator::get(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!closed_, "tfl: the process group was shut down or aborted");
  if (comm_.handle) {
    TORCH_CHECK(device == comm_.device, "tfl: this process group communicates on ", device_name(comm_.device),
                " (its first operation used it), but this tensor is on ", device_name(device),
                "; use one device per process, e.g. init_process_group(..., device_id=torch.device(\"",
                c10::get_privateuse1_backend(), ":", static_cast<int>(comm_.device), "\"))");
    return comm_;
  }
  check_device_index(device);
  const TFL_CollectivesApi& api = collectives();
  const std::string key = "tfl/unique_id/" + std::to_string(generation_++);
  TFL_CommUniqueId id{};
  if (rank_ == 0) {
    TFL_Comm_GetUniqueId_Args u{};
    u.struct_size = TFL_Comm_GetUniqueId_Args_STRUCT_SIZE;
    check_call(api.Comm_GetUniqueId(&u), "Comm_GetUniqueId");
    id = u.id;
    store_->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof(id.bytes)));
  } else {
    const std::vector<uint8_t> bytes = store_->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id.bytes), "tfl: the unique id in the store has ", bytes.size(),
                " bytes, expected ", sizeof(id.bytes));
    std::copy(bytes.begin(), bytes.end(), id.bytes);
    forget_unique_id(key);
  }
  TFL_Comm_Init_Args a{};
  a.struct_size = TFL_Comm_Init_Args_STRUCT_SIZE;
  a.device = device;
  a.world_size = size_;
  a.rank = rank_;
  a.id = &id;
  a.timeout_ms = timeout_.count();
  check_call(api.Comm_Init(&a), "Comm_Init");
  Comm c;
  c.handle = a.comm;
  c.device = device;
  Plugin& plugin = active_plugin();
  for (int i = 0; i < 3; ++i) {
    TFL_Stream_Create_Args s{};
    s.struct_size = TFL_Stream_Create_Args_STRUCT_SIZE;
    s.device = device;
    plugin.check(plugin.stream().Stream_Create(&s), "Stream_Create");
    c.streams[i] = s.stream;
    c.lanes[i] = std::make_unique<CompletionLane>(device);
  }
  comm_ = std::move(c);
  return comm_;
}

// A group re-created under the same name on the same store (destroy and
// init again under torchrun, whose store outlives the groups) uses the same
// key: a rank reading it before rank 0 publishes the new id would join a
// communicator that no longer exists and wait out the timeout. So the last
// rank to read an id deletes it; that happens before its Comm_Init, hence
// before the group can be destroyed and made again. A store that cannot
// delete keys keeps the id (and the race).
void GroupCommunicator::forget_unique_id(const std::string& key) {
  if (store_->add(key + "/readers", 1) < size_ - 1) {
    return;
  }
  try {
    store_->deleteKey(key);
    store_->deleteKey(key + "/readers");
  } catch (const c10::Error&) {
  }
}

void GroupCommunicator::close(bool abort) noexcept {
  Comm c;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    c = std::move(comm_);
    comm_ = Comm();
  }
  Plugin* plugin = active_plugin_or_null();
  if (!c.handle || plugin == nullptr || plugin->is_shut_down()) {
    return;
  }
  try {
    TFL_Comm_Destroy_Args d{};
    d.struct_size = TFL_Comm_Destroy_Args_STRUCT_SIZE;
    d.comm = c.handle;
    const TFL_CollectivesApi& api = collectives();
    plugin->consume(abort ? api.Comm_Abort(&d) : api.Comm_Destroy(&d));
    for (int i = 0; i < 3; ++i) {
      TFL_Stream_Destroy_Args s{};
      s.struct_size = TFL_Stream_Destroy_Args_STRUCT_SIZE;
      s.stream = c.streams[i];
      plugin->consume(plugin->stream().Stream_Destroy(&s));
    }
    for (auto& lane : c.lanes) {
      lane.reset();  // completes what is left, then joins
    }
  } catch (...) {
  }
}

c10d::ErrorType GroupCommunicator::async_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!comm_.handle) {
    return c10d::ErrorType::SUCCESS;
  }
  TFL_Comm_GetAsyncError_Args args{};
  args.struct_size = TFL_Comm_GetAsyncError_Args_STRUCT_SIZE;
  args.comm = comm_.handle;
  check_call(collectives().Comm_GetAsyncError(&args), "Comm_GetAsyncError");
  if (args.error == nullptr) {
    return c10d::ErrorType::SUCCESS;
  }
  auto [code, message] = active_plugin().consume(args.error);
  (void)message;
  return code == TFL_ERR_TIMEOUT ? c10d::ErrorType::TIMEOUT : c10d::ErrorType::COMM_ERROR;
}

c10::DeviceIndex GroupCommunicator::device() {
  std::lock_guard<std::mutex> lock(mutex_);
  return comm_.handle ? comm_.device : -1;
}

bool GroupCommunicator::busy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(std::begin(comm_.lanes), std::end(comm_.lanes),
                     [](const auto& lane) { return lane && !lane->idle(); });
}

} // namespace torch_fl::bridge::dist
