// The plugin's per-process state over the CUDA runtime: which devices there
// are, the stream and event handles handed to the host, the cuBLAS handles,
// and the translation of cudaError_t into TFL errors.
//
// Plugin_Initialize probes the driver (runtime_init). Without a driver or a
// device it fails with TFL_ERR_UNAVAILABLE and a message that says which; the
// library itself always loads, because cudart is linked statically and
// cuBLAS is opened with dlopen only once a device is there.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "torch_fl/plugin_api.h"
#include "torch_fl/plugin_helpers.h"

namespace flcuda {

namespace tfl = ::torch_fl::helpers;

// What a TFL_Stream* points to. The magic word makes a foreign or stale
// handle an error instead of a crash, at the cost of one compare.
struct StreamRec {
  uint32_t magic;
  int32_t device;
  cudaStream_t stream;
};
constexpr uint32_t kStreamMagic = 0x464c5354u;  // "FLST"

// What a TFL_Event* points to.
struct EventRec {
  uint32_t magic;
  int32_t device;
  bool timing;
  bool recorded;
  cudaEvent_t event;
};
constexpr uint32_t kEventMagic = 0x464c4556u;  // "FLEV"

// The TFL error code for a CUDA runtime error.
int32_t error_code_of(cudaError_t err);

// Throws a tfl::Error naming `what` and the CUDA error unless err == cudaSuccess.
void check_cuda(cudaError_t err, const char* what);

// Why there is no usable device, or "" when there is one. Sets *count.
std::string probe_devices(int32_t* count);

// The runtime state, created by Plugin_Initialize. Throws TFL_ERR_UNAVAILABLE
// before initialization, after a failed probe, and in a child forked after
// initialization (CUDA state does not survive fork).
struct Runtime {
  int32_t device_count = 0;
  bool tf32 = false;  // FLCUDA_ALLOW_TF32=1: cuBLAS float32 GEMMs may use TF32 tensor cores
  const TFL_HostServices* host = nullptr;
  void log(int32_t level, const std::string& message) const;
};
Runtime& runtime();
bool runtime_initialize(const TFL_Plugin_Initialize_Args* args);  // true: newly created
void runtime_shutdown();

// Makes `device` current on the calling thread (a no-op when it already is).
void use_device(int32_t device);
// Throws unless 0 <= device < device_count.
void check_device(int32_t device);

StreamRec& stream_rec(TFL_Stream* handle);
EventRec& event_rec(TFL_Event* handle);

}  // namespace flcuda
