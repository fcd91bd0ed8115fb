// flemu's configuration: FLEMU_* environment variables, overridable by the
// options passed to TFL_Plugin_Initialize under the same keys.
#ifndef FLEMU_CONFIG_H_
#define FLEMU_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace flemu {

struct Config {
  int32_t device_count = 2;
  uint64_t memory_bytes = uint64_t{8} << 30;  // per device
  bool fp64 = true;
  bool fp16 = true;
  bool bf16 = true;
  bool peer_access = true;
  bool strict = false;        // device pointers are PROT_NONE to the host
  uint32_t sanitize_us = 0;   // max random delay before each stream task
  uint64_t sanitize_seed = 0;
  bool sanitize_seed_set = false;
  std::string inject_error_op;  // empty: no injection
  int32_t inject_error_code = 0;
  bool inject_error_async = false;
  std::string inject_crash_op;
  uint64_t faults = 0;  // FaultSet (faults.h)
  bool check_contracts = false;  // kernels verify the host's promises; guard regions
  bool minimal_profile = false;  // FLEMU_PROFILE=minimal: a new vendor's first kernel set
  bool blas = true;              // FLEMU_BLAS=0: float GEMMs on flemu's own blocked GEMM, not OpenBLAS
  bool dnnl = true;              // FLEMU_DNNL=0: float32 convolutions on flemu's im2col path, not oneDNN
  int32_t max_isa = -1;         // FLEMU_ISA: the widest build the vectorized loops may take (Isa, isa.h); -1 auto

  bool operator==(const Config& other) const;
  bool operator!=(const Config& other) const { return !(*this == other); }
};

// Reads the environment, then applies `num_options` key/value pairs (unknown
// keys are ignored). Throws flemu::Error naming the variable, the value and
// what was expected when a value is malformed.
Config load_config(const char* const* keys, const char* const* values, size_t num_options);

}  // namespace flemu

#endif  // FLEMU_CONFIG_H_
