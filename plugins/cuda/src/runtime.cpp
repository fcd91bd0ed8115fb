#include "runtime.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cublas_loader.h"

namespace flcuda {

namespace {

std::mutex g_mu;
Runtime* g_runtime = nullptr;
std::atomic<bool> g_forked{false};

void mark_forked() { g_forked.store(true); }

std::string cuda_error_text(cudaError_t err) {
  return tfl::cat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

}  // namespace

int32_t error_code_of(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return TFL_OK;
    case cudaErrorMemoryAllocation: return TFL_ERR_OUT_OF_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidConfiguration: return TFL_ERR_INVALID_ARGUMENT;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable: return TFL_ERR_UNAVAILABLE;
    case cudaErrorNotReady: return TFL_ERR_UNAVAILABLE;
    default: return TFL_ERR_DEVICE;
  }
}

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  // Not sticky errors (a failed allocation, an invalid argument) must not
  // surface again at the next unrelated call.
  (void)cudaGetLastError();
  tfl::fail(error_code_of(err), what, " failed: ", cuda_error_text(err));
}

std::string probe_devices(int32_t* count) {
  *count = 0;
  // Tell "no driver installed" from "driver too old" before cudart says
  // only "insufficient driver" for both.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    return tfl::cat("no CUDA driver: libcuda.so.1 could not be loaded (", why ? why : "not found",
                    "); install the NVIDIA driver, or run on a machine with an NVIDIA GPU");
  }
  dlclose(driver);
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaErrorInsufficientDriver) {
    int driver_version = 0;
    (void)cudaDriverGetVersion(&driver_version);
    (void)cudaGetLastError();
    return tfl::cat("no CUDA driver for this runtime: the installed driver supports CUDA ", driver_version / 1000,
                    ".", (driver_version % 1000) / 10, " but the plugin's runtime is CUDA ", CUDART_VERSION / 1000,
                    ".", (CUDART_VERSION % 1000) / 10, " (", cuda_error_text(err), ")");
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
    (void)cudaGetLastError();
    return "no CUDA device: the driver is loaded but reports no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return tfl::cat("CUDA is unusable: cudaGetDeviceCount failed: ", cuda_error_text(err));
  }
  *count = n > 64 ? 64 : n;
  return "";
}

void Runtime::log(int32_t level, const std::string& message) const {
  if (host != nullptr && TFL_HAS_FIELD(host, TFL_HostServices, log) && host->log != nullptr)
    host->log(host->host_data, level, message.c_str());
}

Runtime& runtime() {
  if (g_forked.load(std::memory_order_relaxed))
    tfl::fail(TFL_ERR_UNAVAILABLE, "this process was forked after the plugin initialized; CUDA state does not "
                                   "survive fork() (use the 'spawn' start method)");
  Runtime* rt = g_runtime;
  if (rt == nullptr) tfl::fail(TFL_ERR_UNAVAILABLE, "the plugin is not initialized (call Plugin_Initialize first)");
  return *rt;
}

bool runtime_initialize(const TFL_Plugin_Initialize_Args* args) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime != nullptr) return false;
  int32_t count = 0;
  const std::string why = probe_devices(&count);
  if (!why.empty()) tfl::fail(TFL_ERR_UNAVAILABLE, why);
  auto* rt = new Runtime();
  rt->device_count = count;
  rt->host = args->host;
  const char* tf32 = std::getenv("FLCUDA_ALLOW_TF32");
  rt->tf32 = tf32 != nullptr && std::strcmp(tf32, "1") == 0;
  for (size_t i = 0; i < args->num_options; ++i)
    if (args->option_keys[i] != nullptr && std::strcmp(args->option_keys[i], "FLCUDA_ALLOW_TF32") == 0)
      rt->tf32 = args->option_values[i] != nullptr && std::strcmp(args->option_values[i], "1") == 0;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, mark_forked); });
  g_runtime = rt;
  return true;
}

void runtime_shutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime == nullptr) return;
  cublas_release_all();
  delete g_runtime;
  g_runtime = nullptr;
}

void use_device(int32_t device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

void check_device(int32_t device) {
  const int32_t n = runtime().device_count;
  if (device < 0 || device >= n)
    tfl::invalid_argument("device ", device, " does not exist (", n, " CUDA device", n == 1 ? "" : "s", ")");
}

StreamRec& stream_rec(TFL_Stream* handle) {
  auto* rec = reinterpret_cast<StreamRec*>(handle);
  if (rec == nullptr || rec->magic != kStreamMagic)
    tfl::invalid_argument("stream handle ", static_cast<const void*>(handle), " is not a live stream of this plugin");
  return *rec;
}

EventRec& event_rec(TFL_Event* handle) {
  auto* rec = reinterpret_cast<EventRec*>(handle);
  if (rec == nullptr || rec->magic != kEventMagic)
    tfl::invalid_argument("event handle ", static_cast<const void*>(handle), " is not a live event of this plugin");
  return *rec;
}

}  // namespace flcuda
