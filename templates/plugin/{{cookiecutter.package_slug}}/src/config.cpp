#include "config.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

namespace {

constexpr const char* kDeviceCount = "{{ cookiecutter.c_prefix }}_DEVICE_COUNT";
constexpr const char* kMemoryBytes = "{{ cookiecutter.c_prefix }}_MEMORY_BYTES";

uint64_t parse_unsigned(const char* key, const std::string& text, bool allow_suffix) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 18)
    tfl::invalid_argument(key, "='", text, "' is not a non-negative integer of at most 18 digits",
                     allow_suffix ? " (an optional K, M or G suffix is allowed)" : "");
  uint64_t value = std::stoull(text.substr(0, pos));
  const std::string suffix = text.substr(pos);
  if (suffix.empty()) return value;
  if (allow_suffix && suffix.size() == 1) {
    int shift = -1;
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
    }
    if (shift > 0) {
      if (value > (UINT64_MAX >> shift)) tfl::invalid_argument(key, "='", text, "' is too large");
      return value << shift;
    }
  }
  tfl::invalid_argument(key, "='", text, "' has an unknown suffix '", suffix, "'",
                   allow_suffix ? " (use K, M or G)" : "");
}

void apply(Config& cfg, const char* key, const char* value) {
  const std::string text = value == nullptr ? "" : value;
  if (std::strcmp(key, kDeviceCount) == 0) {
    const uint64_t n = parse_unsigned(key, text, false);
    if (n > 64) tfl::invalid_argument(key, "=", n, " is out of range (0 to 64 devices)");
    cfg.device_count = static_cast<int32_t>(n);
  } else if (std::strcmp(key, kMemoryBytes) == 0) {
    const uint64_t bytes = parse_unsigned(key, text, true);
    if (bytes == 0) tfl::invalid_argument(key, "=0: a device needs some memory");
    cfg.memory_bytes = bytes;
  }
  // Unknown option keys are ignored, as the ABI asks.
}

}  // namespace

Config load_config(const char* const* keys, const char* const* values, size_t count) {
  Config cfg;
  for (const char* key : {kDeviceCount, kMemoryBytes})
    if (const char* value = std::getenv(key)) apply(cfg, key, value);
  for (size_t i = 0; i < count; ++i)
    if (keys[i] != nullptr) apply(cfg, keys[i], values[i]);
  return cfg;
}

}  // namespace {{ cookiecutter.package_slug }}
