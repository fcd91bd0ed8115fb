#include "hooks.h"

#include "caching_allocator.h"
#include "copy.h"
#include "generator.h"
#include "host_allocator.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>

namespace torch_fl::bridge {

namespace {

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    Plugin* plugin = active_plugin_or_null();
    return plugin != nullptr && plugin->device_count() > 0;
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    auto device = CachingAllocator::get().device_of(data);
    TORCH_CHECK(
        device.has_value(), "pointer ", data, " is not memory of a '",
        active_plugin().name(), "' device");
    return at::Device(c10::DeviceType::PrivateUse1, *device);
  }

  bool isPinnedPtr(const void* data) const override {
    return HostAllocator::get().is_pinned(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return &HostAllocator::get();
  }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    Plugin* plugin = active_plugin_or_null();
    return plugin != nullptr && device >= 0 && device < plugin->device_count();
  }

  c10::DeviceIndex deviceCount() const override {
    Plugin* plugin = active_plugin_or_null();
    return plugin ? static_cast<c10::DeviceIndex>(plugin->device_count()) : 0;
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_current_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = current_device();
    if (device >= 0 && device != old) {
      set_current_device(device);
    }
    return old;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_size)
      const override {
    resize_storage_bytes(storage, new_size);
  }
};

} // namespace

void register_hooks() {
  static Hooks* hooks = new Hooks();
  at::RegisterPrivateUse1HooksInterface(hooks);
}

} // namespace torch_fl::bridge
