#include "runtime.h"

#include <pthread.h>

#include <atomic>

#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_forked{false};

// A child forked after Plugin_Initialize has none of the stream threads: the
// runtime is unusable there, and the ABI says so with TFL_ERR_UNAVAILABLE.
// The parent's state is left alone (leaked in the child) rather than torn down.
void forget_runtime_in_child() {
  if (g_runtime.exchange(nullptr) != nullptr) g_forked.store(true);
}

}  // namespace

Runtime* runtime_or_null() { return g_runtime.load(std::memory_order_acquire); }

Runtime& runtime() {
  Runtime* rt = runtime_or_null();
  if (rt == nullptr) {
    if (g_forked.load())
      tfl::fail(TFL_ERR_UNAVAILABLE,
           "this process was forked from one that had initialized the plugin; its devices stay with the parent");
    tfl::invalid_argument("the plugin is not initialized (call Plugin_Initialize first)");
  }
  return *rt;
}

void set_runtime(Runtime* rt) {
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, forget_runtime_in_child); });
  g_runtime.store(rt, std::memory_order_release);
}

Runtime::Runtime(Config cfg, const TFL_HostServices* host) : cfg_(cfg) {
  // Read only the host fields its struct_size covers.
  if (host != nullptr && TFL_HAS_FIELD(host, TFL_HostServices, log)) {
    host_data_ = host->host_data;
    host_log_ = host->log;
  }
  // VENDOR: open your driver and enumerate the chips here.
  for (int32_t i = 0; i < cfg_.device_count; ++i) devices_.push_back(std::make_unique<Device>(i, cfg_));
}

Runtime::~Runtime() {
  // Streams first: their queued work may still touch device memory.
  for (auto& [handle, stream] : streams_) stream->stop();
  streams_.clear();
  events_.clear();
}

Device& Runtime::device(int32_t index) {
  if (index < 0 || index >= device_count())
    tfl::invalid_argument("device index ", index, " is out of range (the plugin has ", device_count(), " devices)");
  return *devices_[static_cast<size_t>(index)];
}

Device* Runtime::device_owning(const void* ptr) {
  for (auto& dev : devices_)
    if (dev->memory.owns(ptr)) return dev.get();
  return nullptr;
}

TFL_Stream* Runtime::create_stream(int32_t index) {
  device(index);
  auto stream = std::make_shared<Stream>(index);
  auto* handle = reinterpret_cast<TFL_Stream*>(stream.get());
  std::lock_guard<std::mutex> lock(handles_mu_);
  streams_.emplace(handle, std::move(stream));
  return handle;
}

std::shared_ptr<Stream> Runtime::stream(TFL_Stream* handle) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  auto it = streams_.find(handle);
  if (it == streams_.end())
    tfl::invalid_argument("stream ", static_cast<const void*>(handle), " is not a live stream of this plugin");
  return it->second;
}

std::shared_ptr<Stream> Runtime::remove_stream(TFL_Stream* handle) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  auto it = streams_.find(handle);
  if (it == streams_.end())
    tfl::invalid_argument("stream ", static_cast<const void*>(handle), " is not a live stream of this plugin");
  std::shared_ptr<Stream> stream = std::move(it->second);
  streams_.erase(it);
  return stream;
}

TFL_Event* Runtime::create_event(int32_t index, bool timing) {
  device(index);
  auto event = std::make_unique<Event>(index, timing);
  auto* handle = reinterpret_cast<TFL_Event*>(event.get());
  std::lock_guard<std::mutex> lock(handles_mu_);
  events_.emplace(handle, std::move(event));
  return handle;
}

Event& Runtime::event(TFL_Event* handle, const char* what) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  auto it = events_.find(handle);
  if (it == events_.end())
    tfl::invalid_argument(what, " ", static_cast<const void*>(handle), " is not a live event of this plugin");
  return *it->second;
}

void Runtime::destroy_event(TFL_Event* handle) {
  std::lock_guard<std::mutex> lock(handles_mu_);
  // Waits already enqueued hold their own copy of the event's mark.
  if (events_.erase(handle) == 0)
    tfl::invalid_argument("event ", static_cast<const void*>(handle), " is not a live event of this plugin");
}

TFL_Error* Runtime::synchronize(int32_t index) {
  device(index);
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(handles_mu_);
    for (auto& [handle, stream] : streams_)
      if (stream->device() == index) streams.push_back(stream);
  }
  TFL_Error* first = nullptr;
  for (auto& stream : streams) {
    stream->wait(stream->tail());
    // The device-wide call reports (and so consumes) every stream's error.
    TFL_Error* error = stream->take_error();
    if (first == nullptr) first = error;
    else tfl::destroy_error(error);
  }
  return first;
}

void Runtime::log(int32_t level, const std::string& message) const {
  if (host_log_ != nullptr) host_log_(host_data_, level, message.c_str());
}

}  // namespace {{ cookiecutter.package_slug }}
