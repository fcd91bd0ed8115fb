#include "cublas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime.h"

namespace flcuda {

namespace {

std::once_flag g_once;
CublasApi g_api{};
std::string g_error;
bool g_loaded = false;

std::mutex g_handles_mu;
std::vector<cublasHandle_t> g_all_handles;

template <class Fn>
bool bind(void* lib, const char* name, Fn* slot, std::string* missing) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    *missing += (missing->empty() ? "" : ", ");
    *missing += name;
    return false;
  }
  *slot = reinterpret_cast<Fn>(sym);
  return true;
}

void open_once() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("FLCUDA_CUBLAS_LIBRARY"); env != nullptr && *env != '\0')
    candidates.emplace_back(env);
  candidates.emplace_back("libcublas.so.13");
  candidates.emplace_back("libcublas.so");
  std::string tried;
  for (const std::string& name : candidates) {
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      tried += tfl::cat("\n  ", name, ": ", why ? why : "not found");
      continue;
    }
    std::string missing;
    bool ok = bind(lib, "cublasCreate_v2", &g_api.create, &missing);
    ok &= bind(lib, "cublasDestroy_v2", &g_api.destroy, &missing);
    ok &= bind(lib, "cublasSetStream_v2", &g_api.set_stream, &missing);
    ok &= bind(lib, "cublasGemmStridedBatchedEx", &g_api.gemm_strided_batched, &missing);
    ok &= bind(lib, "cublasGetStatusString", &g_api.status_string, &missing);
    if (!ok) {
      tried += tfl::cat("\n  ", name, ": lacks ", missing);
      dlclose(lib);
      continue;
    }
    g_api.library = name;
    g_loaded = true;
    return;
  }
  g_error = tfl::cat("cuBLAS could not be loaded, so matrix products cannot run; tried:", tried,
                     "\nInstall cuBLAS for CUDA 13 (e.g. the nvidia-cublas wheel) and point FLCUDA_CUBLAS_LIBRARY at "
                     "its libcublas.so.13");
}

}  // namespace

std::string cublas_open() {
  std::call_once(g_once, open_once);
  return g_loaded ? "" : g_error;
}

const CublasApi& cublas() {
  std::call_once(g_once, open_once);
  if (!g_loaded) tfl::fail(TFL_ERR_UNAVAILABLE, g_error);
  return g_api;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == 0) return;
  const char* text = g_api.status_string != nullptr ? g_api.status_string(status) : "unknown";
  tfl::fail(status == 3 /* CUBLAS_STATUS_ALLOC_FAILED */ ? TFL_ERR_OUT_OF_MEMORY : TFL_ERR_DEVICE, what,
            " failed: cuBLAS status ", status, " (", text, ")");
}

cublasHandle_t cublas_handle(int32_t device, cudaStream_t stream) {
  // cuBLAS handles are not safe to share between threads that run at once
  // (the autograd engine runs backward on its own thread): one per thread.
  thread_local std::unordered_map<int32_t, cublasHandle_t> handles;
  const CublasApi& api = cublas();
  cublasHandle_t& h = handles[device];
  if (h == nullptr) {
    check_cublas(api.create(&h), "cublasCreate");
    std::lock_guard<std::mutex> lock(g_handles_mu);
    g_all_handles.push_back(h);
  }
  check_cublas(api.set_stream(h, stream), "cublasSetStream");
  return h;
}

void cublas_release_all() {
  // Handles of other threads stay valid until process exit; destroying them
  // while a thread might still use one would be worse than the leak.
  std::lock_guard<std::mutex> lock(g_handles_mu);
  g_all_handles.clear();
}

}  // namespace flcuda
