// The device random-number generator: a (seed, offset) pair for
// counter-based generators, as CUDA's Philox generator keeps.
//
// Random kernels receive the seed and a reserved range of counters through
// their TFL_KernelContext; the CPU fallback of a random op draws from a CPU
// generator seeded from the same pair. Either way a run is reproducible from
// torch.manual_seed.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <utility>

namespace torch_fl::bridge {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex device, uint64_t seed = 67280421310721ull);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  // Reserves `span` counters (rounded up to a multiple of 4) and returns the
  // seed and the first counter. Thread-safe.
  std::pair<uint64_t, uint64_t> reserve(uint64_t span);

 private:
  DeviceGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a device, created on first use.
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The generator an op should draw from: `gen` when given (it must be one of
// ours), else the device's default.
DeviceGenerator* generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

} // namespace torch_fl::bridge
