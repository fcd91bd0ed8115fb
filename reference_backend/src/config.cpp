#include "config.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "errors.h"
#include "faults.h"

namespace flemu {

bool Config::operator==(const Config& o) const {
  return device_count == o.device_count && memory_bytes == o.memory_bytes && fp64 == o.fp64 &&
         fp16 == o.fp16 && bf16 == o.bf16 && peer_access == o.peer_access && strict == o.strict &&
         sanitize_us == o.sanitize_us && sanitize_seed == o.sanitize_seed &&
         sanitize_seed_set == o.sanitize_seed_set && inject_error_op == o.inject_error_op &&
         inject_error_code == o.inject_error_code && inject_error_async == o.inject_error_async &&
         inject_crash_op == o.inject_crash_op && faults == o.faults &&
         check_contracts == o.check_contracts && minimal_profile == o.minimal_profile && blas == o.blas &&
         dnnl == o.dnnl;
}

namespace {

constexpr uint64_t kMinMemory = 4096;
constexpr uint64_t kMaxMemory = uint64_t{1} << 40;
constexpr int32_t kMaxDevices = 64;
constexpr uint32_t kMaxSanitizeUs = 1000000;

[[noreturn]] void bad_value(const std::string& key, const std::string& value, const char* expected) {
  invalid_argument("invalid ", key, "='", value, "': expected ", expected);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const std::string& key, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  bad_value(key, value, "0 or 1");
}

// Parses a whole string as an unsigned decimal; false on junk or overflow.
bool parse_u64(const std::string& text, uint64_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

uint64_t parse_bytes(const std::string& key, const std::string& value) {
  static const char* kExpected =
      "a byte count from 4096 to 1T, optionally with a K, M or G suffix (powers of 1024), e.g. 8G";
  std::string v = lower(value);
  // Accept "8g", "8gb", "8gib".
  if (v.size() > 3 && v.compare(v.size() - 3, 3, "ib") == 0) v.erase(v.size() - 2);
  if (v.size() > 2 && v.back() == 'b' && std::isalpha(static_cast<unsigned char>(v[v.size() - 2])))
    v.pop_back();
  uint64_t mult = 1;
  if (!v.empty()) {
    switch (v.back()) {
      case 'k': mult = uint64_t{1} << 10; break;
      case 'm': mult = uint64_t{1} << 20; break;
      case 'g': mult = uint64_t{1} << 30; break;
      case 't': mult = uint64_t{1} << 40; break;
      default: break;
    }
    if (mult != 1) v.pop_back();
  }
  uint64_t n = 0;
  if (!parse_u64(v, &n) || n > kMaxMemory / mult) bad_value(key, value, kExpected);
  n *= mult;
  if (n < kMinMemory || n > kMaxMemory) bad_value(key, value, kExpected);
  return n;
}

uint64_t parse_range(const std::string& key, const std::string& value, uint64_t lo, uint64_t hi,
                     const char* expected) {
  uint64_t n = 0;
  if (!parse_u64(value, &n) || n < lo || n > hi) bad_value(key, value, expected);
  return n;
}

void parse_inject_error(const std::string& key, const std::string& value, Config* cfg) {
  static const char* kExpected =
      "<op>:<code>[:async] with <op> a flemu kernel name (e.g. aten::mm) and <code> a "
      "TFL_ErrorCode from 1 to 10, e.g. aten::mm:5 or aten::mm:5:async";
  std::string rest = value;
  bool async = false;
  const std::string suffix = ":async";
  if (rest.size() > suffix.size() && rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0) {
    async = true;
    rest.erase(rest.size() - suffix.size());
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) bad_value(key, value, kExpected);
  uint64_t code = 0;
  if (!parse_u64(rest.substr(colon + 1), &code) || code < 1 || code > 10)
    bad_value(key, value, kExpected);
  std::string op = rest.substr(0, colon);
  if (op.empty() || op.back() == ':') bad_value(key, value, kExpected);
  cfg->inject_error_op = op;
  cfg->inject_error_code = static_cast<int32_t>(code);
  cfg->inject_error_async = async;
}

using Setter = std::function<void(const std::string& key, const std::string& value, Config*)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"FLEMU_DEVICE_COUNT",
       [](const std::string& k, const std::string& v, Config* c) {
         c->device_count = static_cast<int32_t>(
             parse_range(k, v, 0, kMaxDevices, "an integer from 0 to 64"));
       }},
      {"FLEMU_MEMORY_BYTES",
       [](const std::string& k, const std::string& v, Config* c) { c->memory_bytes = parse_bytes(k, v); }},
      {"FLEMU_FP64", [](const std::string& k, const std::string& v, Config* c) { c->fp64 = parse_bool(k, v); }},
      {"FLEMU_FP16", [](const std::string& k, const std::string& v, Config* c) { c->fp16 = parse_bool(k, v); }},
      {"FLEMU_BF16", [](const std::string& k, const std::string& v, Config* c) { c->bf16 = parse_bool(k, v); }},
      {"FLEMU_PEER_ACCESS",
       [](const std::string& k, const std::string& v, Config* c) { c->peer_access = parse_bool(k, v); }},
      {"FLEMU_STRICT", [](const std::string& k, const std::string& v, Config* c) { c->strict = parse_bool(k, v); }},
      {"FLEMU_SANITIZE",
       [](const std::string& k, const std::string& v, Config* c) {
         c->sanitize_us = static_cast<uint32_t>(parse_range(
             k, v, 0, kMaxSanitizeUs, "a maximum delay in microseconds from 0 (off) to 1000000"));
       }},
      {"FLEMU_SANITIZE_SEED",
       [](const std::string& k, const std::string& v, Config* c) {
         c->sanitize_seed = parse_range(k, v, 0, UINT64_MAX, "an unsigned 64-bit integer");
         c->sanitize_seed_set = true;
       }},
      {"FLEMU_INJECT_ERROR", parse_inject_error},
      {"FLEMU_INJECT_CRASH",
       [](const std::string&, const std::string& v, Config* c) { c->inject_crash_op = v; }},
      {"FLEMU_CHECK_CONTRACTS",
       [](const std::string& k, const std::string& v, Config* c) { c->check_contracts = parse_bool(k, v); }},
      {"FLEMU_PROFILE",
       [](const std::string& k, const std::string& v, Config* c) {
         const std::string p = lower(v);
         if (p != "full" && p != "minimal") bad_value(k, v, "full or minimal");
         c->minimal_profile = p == "minimal";
       }},
      {"FLEMU_FAULT",
       [](const std::string& k, const std::string& v, Config* c) { c->faults = parse_faults(k, v); }},
      {"FLEMU_BLAS", [](const std::string& k, const std::string& v, Config* c) { c->blas = parse_bool(k, v); }},
      {"FLEMU_DNNL", [](const std::string& k, const std::string& v, Config* c) { c->dnnl = parse_bool(k, v); }},
      {"FLEMU_ISA",
       [](const std::string& k, const std::string& v, Config* c) {
         const std::string isa = lower(v);
         if (isa == "auto") c->max_isa = -1;
         else if (isa == "baseline") c->max_isa = 0;
         else if (isa == "avx2") c->max_isa = 1;
         else if (isa == "avx512") c->max_isa = 2;
         else bad_value(k, v, "auto, baseline, avx2 or avx512");
       }},
  };
  return table;
}

}  // namespace

Config load_config(const char* const* keys, const char* const* values, size_t num_options) {
  Config cfg;
  // An empty variable counts as unset, as shells make that easy to produce.
  for (const auto& [key, set] : setters()) {
    const char* env = std::getenv(key.c_str());
    if (env != nullptr && env[0] != '\0') set(key, env, &cfg);
  }
  for (size_t i = 0; i < num_options; ++i) {
    if (keys == nullptr || values == nullptr || keys[i] == nullptr) continue;
    auto it = setters().find(keys[i]);
    if (it == setters().end()) continue;
    const std::string value = values[i] != nullptr ? values[i] : "";
    if (value.empty()) {
      // An explicit empty option switches the injections and faults off; elsewhere it is an error.
      if (it->first == "FLEMU_INJECT_ERROR") {
        cfg.inject_error_op.clear();
        cfg.inject_error_code = 0;
        cfg.inject_error_async = false;
        continue;
      }
      if (it->first == "FLEMU_INJECT_CRASH") {
        cfg.inject_crash_op.clear();
        continue;
      }
      if (it->first == "FLEMU_FAULT") {
        cfg.faults = 0;
        continue;
      }
    }
    it->second(it->first, value, &cfg);
  }
  return cfg;
}

}  // namespace flemu
