#include "streams.h"

#include "caching_allocator.h"
#include "event_calls.h"
#include "loaded_plugin.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>
#include <thread>

namespace torch_fl::bridge {

namespace {

thread_local c10::DeviceIndex tls_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> tls_stream{};

constexpr auto kType = c10::DeviceType::PrivateUse1;

TFL_Event* as_event(void* event) {
  return static_cast<TFL_Event*>(event);
}

} // namespace

StreamRegistry& StreamRegistry::get() {
  static StreamRegistry registry;
  return registry;
}

void StreamRegistry::init(int device_count) {
  device_count_ = device_count;
  streams_ = std::make_unique<Slots[]>(device_count);
  enqueue_locks_ = std::make_unique<Locks[]>(device_count);
  round_robin_ = std::make_unique<std::atomic<uint32_t>[]>(device_count);
  for (int d = 0; d < device_count; ++d) {
    for (auto& slot : streams_[d]) {
      slot.store(nullptr);
    }
    round_robin_[d].store(0);
    native(static_cast<c10::DeviceIndex>(d), 0);
  }
}

TFL_Stream* StreamRegistry::native(c10::DeviceIndex device, c10::StreamId id) {
  TORCH_CHECK(
      device >= 0 && device < device_count_,
      "stream on invalid device index ", static_cast<int>(device));
  TORCH_CHECK(
      id >= 0 && id <= kPoolSize,
      "stream id ", id, " is not a stream of this torch-fl device");
  std::atomic<TFL_Stream*>& slot = streams_[device][id];
  TFL_Stream* stream = slot.load(std::memory_order_acquire);
  if (stream != nullptr) {
    return stream;
  }
  std::lock_guard<std::mutex> lock(create_mutex_);
  stream = slot.load(std::memory_order_acquire);
  if (stream == nullptr) {
    Plugin& plugin = active_plugin();
    TFL_Stream_Create_Args args{};
    args.struct_size = TFL_Stream_Create_Args_STRUCT_SIZE;
    args.device = device;
    plugin.check(plugin.stream().Stream_Create(&args), "Stream_Create");
    stream = args.stream;
    slot.store(stream, std::memory_order_release);
  }
  return stream;
}

void EnqueueLock::wait_and_lock(pthread_t me) {
  for (int i = 1;; ++i) {
    pthread_t none{};
    if (owner_.load(std::memory_order_relaxed) == pthread_t{} &&
        owner_.compare_exchange_weak(none, me, std::memory_order_acquire)) {
      return;
    }
    if (i < 64) {
      continue;
    }
    if (i < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

EnqueueLock* StreamRegistry::enqueue_lock(TFL_Stream* stream, c10::DeviceIndex device) {
  const int first = device >= 0 && device < device_count_ ? device : 0;
  const int last = device >= 0 && device < device_count_ ? device + 1 : device_count_;
  for (int d = first; d < last; ++d) {
    for (size_t i = 0; i < streams_[d].size(); ++i) {
      if (streams_[d][i].load(std::memory_order_relaxed) == stream) {
        return &enqueue_locks_[d][i];
      }
    }
  }
  return nullptr;
}

EnqueueGuard::EnqueueGuard(TFL_Stream* stream, c10::DeviceIndex device)
    : lock_(stream == nullptr ? nullptr : StreamRegistry::get().enqueue_lock(stream, device)) {
  if (lock_ != nullptr) {
    lock_->lock();
  }
}

EnqueueGuard::~EnqueueGuard() {
  if (lock_ != nullptr) {
    lock_->unlock();
  }
}

c10::Stream StreamRegistry::default_stream(c10::DeviceIndex device) const {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, device), 0);
}

c10::Stream StreamRegistry::next_pool_stream(c10::DeviceIndex device) {
  check_device_index(device);
  const uint32_t n = round_robin_[device].fetch_add(1) % kPoolSize;
  const c10::StreamId id = static_cast<c10::StreamId>(n + 1);
  native(device, id);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, device), id);
}

c10::Stream StreamRegistry::current(c10::DeviceIndex device) const {
  TORCH_CHECK(
      device >= 0 && device < device_count_,
      "stream on invalid device index ", static_cast<int>(device));
  return c10::Stream(
      c10::Stream::UNSAFE, c10::Device(kType, device), tls_stream[device]);
}

TFL_Stream* StreamRegistry::current_native(c10::DeviceIndex device) {
  return native(device, tls_stream[device]);
}

c10::Stream StreamRegistry::exchange(const c10::Stream& stream) {
  const c10::DeviceIndex device = stream.device_index();
  check_device_index(device);
  native(stream); // validates the id
  c10::Stream old = current(device);
  tls_stream[device] = stream.id();
  return old;
}

void StreamRegistry::destroy_all() noexcept {
  Plugin* plugin = active_plugin_or_null();
  if (plugin == nullptr || !streams_) {
    return;
  }
  for (int d = 0; d < device_count_; ++d) {
    for (auto& slot : streams_[d]) {
      TFL_Stream* stream = slot.exchange(nullptr);
      if (stream == nullptr) {
        continue;
      }
      TFL_Stream_Destroy_Args args{};
      args.struct_size = TFL_Stream_Destroy_Args_STRUCT_SIZE;
      args.stream = stream;
      plugin->consume(plugin->stream().Stream_Destroy(&args));
    }
  }
}

c10::DeviceIndex current_device() {
  return tls_device;
}

void set_current_device(c10::DeviceIndex device) {
  check_device_index(device);
  tls_device = device;
}

void synchronize_stream(const c10::Stream& stream) {
  Plugin& plugin = active_plugin();
  TFL_Stream_Synchronize_Args args{};
  args.struct_size = TFL_Stream_Synchronize_Args_STRUCT_SIZE;
  args.stream = StreamRegistry::get().native(stream);
  plugin.check(plugin.stream().Stream_Synchronize(&args), "Stream_Synchronize");
}

void synchronize_device(c10::DeviceIndex device) {
  check_device_index(device);
  Plugin& plugin = active_plugin();
  TFL_Device_Synchronize_Args args{};
  args.struct_size = TFL_Device_Synchronize_Args_STRUCT_SIZE;
  args.device = device;
  plugin.check(plugin.device_api().Device_Synchronize(&args), "Device_Synchronize");
}

namespace {

// The PrivateUse1 guard: devices, streams and events over the plugin ABI.
class DeviceGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kType);
    const c10::DeviceIndex old = current_device();
    if (device.index() != old) {
      set_current_device(device.index());
    }
    return c10::Device(kType, old);
  }

  c10::Device getDevice() const override {
    return c10::Device(kType, current_device());
  }

  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kType);
    set_current_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    tls_device = device.index();
  }

  // A device without an index (torch.Stream(device="<name>")) is the
  // current device, as for CUDA.
  static c10::DeviceIndex index_of(c10::Device device) {
    const c10::DeviceIndex index = device.has_index() ? device.index() : current_device();
    check_device_index(index);
    return index;
  }

  c10::Stream getStream(c10::Device device) const override {
    return StreamRegistry::get().current(index_of(device));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return StreamRegistry::get().default_stream(index_of(device));
  }

  c10::Stream getStreamFromGlobalPool(
      c10::Device device,
      bool /*isHighPriority*/) const override {
    return StreamRegistry::get().next_pool_stream(index_of(device));
  }

  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return StreamRegistry::get().next_pool_stream(index_of(device));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return StreamRegistry::get().exchange(stream);
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return StreamRegistry::get().native(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    Plugin* plugin = active_plugin_or_null();
    return plugin ? static_cast<c10::DeviceIndex>(plugin->device_count()) : 0;
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    const DeviceInfo& info = active_plugin().device(device.index());
    c10::DeviceCapability cap;
    auto& types = cap.capability_data.supported_scalar_types;
    types.has_Double = (info.capabilities & TFL_CAP_FP64) != 0;
    types.has_Half = (info.capabilities & TFL_CAP_FP16) != 0;
    types.has_BFloat16 = (info.capabilities & TFL_CAP_BF16) != 0;
    const bool complex = (info.capabilities & TFL_CAP_COMPLEX) != 0;
    types.has_ComplexFloat = complex;
    types.has_ComplexDouble = complex && types.has_Double;
    types.has_ComplexHalf = complex && types.has_Half;
    return cap;
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "event of device ", static_cast<int>(device_index),
        " cannot be recorded on a stream of device ",
        static_cast<int>(stream.device_index()));
    if (*event == nullptr) {
      *event = create_event(stream.device_index(), TFL_EVENT_TIMING);
    }
    record_event(as_event(*event), StreamRegistry::get().native(stream));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;
    }
    stream_wait_event(StreamRegistry::get().native(stream), as_event(event));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    return query_event(as_event(event));
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/)
      const noexcept override {
    destroy_event(as_event(event));
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) {
      return;
    }
    synchronize_event(as_event(event));
  }

  double elapsedTime(
      void* start,
      void* end,
      const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "elapsed_time needs two recorded events");
    return elapsed_ms(as_event(start), as_event(end));
  }

  bool queryStream(const c10::Stream& stream) const override {
    Plugin& plugin = active_plugin();
    TFL_Stream_Query_Args args{};
    args.struct_size = TFL_Stream_Query_Args_STRUCT_SIZE;
    args.stream = StreamRegistry::get().native(stream);
    plugin.check(plugin.stream().Stream_Query(&args), "Stream_Query");
    return args.idle != 0;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_stream(stream);
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    synchronize_device(device_index);
  }

  void recordDataPtrOnStream(
      const c10::DataPtr& data_ptr,
      const c10::Stream& stream) const override {
    CachingAllocator::get().recordStream(data_ptr, stream);
  }
};

} // namespace

void register_device_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kType, new DeviceGuard());
}

} // namespace torch_fl::bridge
