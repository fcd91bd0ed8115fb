#include "generator.h"

#include "loaded_plugin.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <mutex>

namespace torch_fl::bridge {

namespace {
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);
}

DeviceGenerator::DeviceGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(
          c10::Device(c10::DeviceType::PrivateUse1, device),
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void DeviceGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void DeviceGenerator::set_offset(uint64_t offset) {
  offset_ = offset;
}

uint64_t DeviceGenerator::get_offset() const {
  return offset_;
}

uint64_t DeviceGenerator::current_seed() const {
  return seed_;
}

uint64_t DeviceGenerator::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void DeviceGenerator::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(
      static_cast<size_t>(new_state.numel()) == kStateBytes,
      "a torch-fl generator state is ", kStateBytes, " bytes (seed, offset), got ",
      new_state.numel());
  uint64_t words[2];
  std::memcpy(words, new_state.data(), kStateBytes);
  seed_ = words[0];
  offset_ = words[1];
}

c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  auto state = at::detail::empty_cpu(
      {static_cast<int64_t>(kStateBytes)}, at::ScalarType::Byte, std::nullopt,
      std::nullopt, std::nullopt, std::nullopt);
  const uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, kStateBytes);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> DeviceGenerator::reserve(uint64_t span) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first = offset_;
  offset_ += (span + 3) / 4 * 4;
  return {seed_, first};
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  auto* gen = new DeviceGenerator(device().index(), seed_);
  gen->offset_ = offset_;
  return gen;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::deque<at::Generator> generators;
  std::call_once(once, [] {
    const int count = active_plugin().device_count();
    for (int d = 0; d < count; ++d) {
      generators.push_back(
          at::make_generator<DeviceGenerator>(static_cast<c10::DeviceIndex>(d)));
    }
  });
  if (device < 0) {
    device = 0;
  }
  check_device_index(device);
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) {
    device = 0;
  }
  check_device_index(device);
  return at::make_generator<DeviceGenerator>(device);
}

DeviceGenerator* generator_for(
    const std::optional<at::Generator>& gen,
    c10::DeviceIndex device) {
  if (gen.has_value() && gen->defined()) {
    auto* ours = dynamic_cast<DeviceGenerator*>(gen->unsafeGetGeneratorImpl());
    TORCH_CHECK(
        ours != nullptr,
        "expected a generator of the '", active_plugin().name(),
        "' device, got one of device ", gen->device());
    return ours;
  }
  return dynamic_cast<DeviceGenerator*>(default_generator(device).unsafeGetGeneratorImpl());
}

} // namespace torch_fl::bridge
