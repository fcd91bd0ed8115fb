// The plugin's settings: {{ cookiecutter.c_prefix }}_* environment variables, overridden by the
// options passed to torch_fl.register_device_plugin(..., metadata={...}).
#pragma once

#include <cstddef>
#include <cstdint>

namespace {{ cookiecutter.package_slug }} {

struct Config {
  int32_t device_count = 2;             // {{ cookiecutter.c_prefix }}_DEVICE_COUNT
  uint64_t memory_bytes = 4ull << 30;   // {{ cookiecutter.c_prefix }}_MEMORY_BYTES, per device

  bool operator==(const Config& other) const {
    return device_count == other.device_count && memory_bytes == other.memory_bytes;
  }
};

// Reads the environment, then the options (same keys win). Throws a tfl::Error
// naming the variable when a value is malformed.
Config load_config(const char* const* keys, const char* const* values, size_t count);

}  // namespace {{ cookiecutter.package_slug }}
