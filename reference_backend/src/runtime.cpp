#include "runtime.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <random>

#include "errors.h"
#include "thread_pool.h"

namespace flemu {

namespace {
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_forked{false};

// A child forked after Plugin_Initialize has none of the worker threads,
// and its arenas are MAP_SHARED with the parent: using (or freeing) them
// would hang or corrupt the parent's memory. The child starts uninitialized.
void forget_runtime_in_child() {
  if (g_runtime.exchange(nullptr) != nullptr) g_forked.store(true);
  ThreadPool::abandon_after_fork();
}
}  // namespace

Runtime* runtime_or_null() { return g_runtime.load(std::memory_order_acquire); }

Runtime& runtime() {
  Runtime* rt = runtime_or_null();
  if (rt == nullptr) {
    if (g_forked.load())
      fail(TFL_ERR_UNAVAILABLE,
           "this process was forked from one that had initialized flemu; its devices stay with the parent "
           "(call Plugin_Initialize in the child to get its own)");
    invalid_argument("the plugin is not initialized (call Plugin_Initialize first)");
  }
  return *rt;
}

void set_runtime(Runtime* rt) {
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, forget_runtime_in_child); });
  g_runtime.store(rt, std::memory_order_release);
}

Device::Device(int32_t i, const Config& cfg)
    : index(i), arena(i, cfg.memory_bytes, cfg.strict, /*guards=*/cfg.check_contracts) {}

Runtime::Runtime(Config cfg, const TFL_HostServices* host) : cfg_(std::move(cfg)) {
  if (host != nullptr && TFL_HAS_FIELD(host, TFL_HostServices, log)) {
    host_data_ = host->host_data;
    host_log_ = host->log;
  }
  if (cfg_.sanitize_us != 0 && !cfg_.sanitize_seed_set) {
    cfg_.sanitize_seed = std::random_device{}();
    cfg_.sanitize_seed_set = true;
  }
  for (int32_t i = 0; i < cfg_.device_count; ++i) devices_.push_back(std::make_unique<Device>(i, cfg_));
  if (cfg_.sanitize_us != 0)
    log(TFL_LOG_INFO, cat("flemu: sanitizer on: up to ", cfg_.sanitize_us,
                          " us before each stream task, FLEMU_SANITIZE_SEED=", cfg_.sanitize_seed));
}

Runtime::~Runtime() {
  for (auto& dev : devices_) {
    std::vector<std::shared_ptr<Stream>> streams;
    {
      std::lock_guard<std::mutex> lock(dev->streams_mu);
      streams.swap(dev->streams);
    }
    streams.clear();  // each drains and joins
  }
}

Device& Runtime::device(int32_t index) {
  if (index < 0 || index >= device_count())
    invalid_argument("device index ", index, " is out of range (this process has ", device_count(),
                     " flemu devices, 0..", device_count() - 1, ")");
  return *devices_[static_cast<size_t>(index)];
}

Arena* Runtime::arena_of(const void* p) {
  for (auto& dev : devices_)
    if (dev->arena.owns(p)) return &dev->arena;
  return nullptr;
}

std::shared_ptr<Stream> Runtime::create_stream(int32_t index) {
  Device& dev = device(index);
  const uint32_t id = next_stream_id_.fetch_add(1);
  auto stream = std::make_shared<Stream>(index, id, cfg_.sanitize_us, cfg_.sanitize_seed, cfg_.check_contracts);
  std::lock_guard<std::mutex> lock(dev.streams_mu);
  dev.streams.push_back(stream);
  return stream;
}

std::shared_ptr<Stream> Runtime::remove_stream(Stream* stream) {
  Device& dev = device(stream->device());
  std::lock_guard<std::mutex> lock(dev.streams_mu);
  auto it = std::find_if(dev.streams.begin(), dev.streams.end(),
                         [&](const std::shared_ptr<Stream>& s) { return s.get() == stream; });
  if (it == dev.streams.end())
    invalid_argument("stream ", static_cast<const void*>(stream), " is not a live stream of device ",
                     stream->device());
  std::shared_ptr<Stream> out = std::move(*it);
  dev.streams.erase(it);
  return out;
}

TFL_Error* Runtime::synchronize_device(int32_t index) {
  Device& dev = device(index);
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(dev.streams_mu);
    streams = dev.streams;
  }
  TFL_Error* first = nullptr;
  for (auto& s : streams) {
    s->wait_idle();
    // Every stream's error is consumed here: the device-wide call reports them.
    TFL_Error* err = s->take_error();
    if (first == nullptr) first = err;
    else destroy_error(err);
  }
  return first;
}

void Runtime::log(int32_t level, const std::string& message) const {
  if (host_log_ != nullptr) host_log_(host_data_, level, message.c_str());
}

Stream& stream_from_handle(TFL_Stream* handle) {
  auto* s = reinterpret_cast<Stream*>(handle);
  if (s == nullptr) invalid_argument("stream is NULL");
  if (!s->valid()) invalid_argument("stream ", static_cast<const void*>(handle), " is not a live flemu stream");
  return *s;
}

std::shared_ptr<Stream> shared_stream_from_handle(TFL_Stream* handle) {
  return stream_from_handle(handle).shared_from_this();
}

}  // namespace flemu
