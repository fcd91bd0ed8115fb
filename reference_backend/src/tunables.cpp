// The tunables group: the GEMM blocking per device, its candidates, and a
// probe that times one fp32 GEMM with a candidate in place.
#include "tunables.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "errors.h"
#include "runtime.h"

namespace flemu {
namespace {

// Bounds a Set accepts: beyond them packing buffers grow without any gain.
constexpr int64_t kMaxTiles = 1024;
constexpr int64_t kMaxBlockK = 8192;

// Probe workload: large enough that blocking decides the time, small enough
// that a full sweep of every candidate stays around a second on two cores.
constexpr int64_t kProbeN = 512, kProbeM = 512, kProbeK = 512;
constexpr int kProbeRuns = 3;  // best of, after one warm-up run

constexpr int64_t kBlockMCandidates[] = {2, 4, 8, 16, 24, 32, 64};
constexpr int64_t kBlockNCandidates[] = {4, 8, 16, 32, 64, 128};
constexpr int64_t kBlockKCandidates[] = {16, 32, 64, 128, 256, 384, 512};

// Defaults mirror gemm.cpp's built-in constants for the fp32 compute path.
const TFL_Tunable kBlockM = {
    TFL_Tunable_STRUCT_SIZE, "gemm.block_m_tiles",
    "fp32 GEMM: rows of a packed A block, in micro-tile rows (6 with AVX2, else 4)", kBlockMCandidates,
    sizeof(kBlockMCandidates) / sizeof(kBlockMCandidates[0]), 24};
const TFL_Tunable kBlockN = {
    TFL_Tunable_STRUCT_SIZE, "gemm.block_n_tiles",
    "fp32 GEMM: columns of a packed B panel, in micro-tile columns (16 with AVX2, else 8)", kBlockNCandidates,
    sizeof(kBlockNCandidates) / sizeof(kBlockNCandidates[0]), 64};
const TFL_Tunable kBlockK = {
    TFL_Tunable_STRUCT_SIZE, "gemm.block_k", "fp32 GEMM: depth of the packed A and B panels", kBlockKCandidates,
    sizeof(kBlockKCandidates) / sizeof(kBlockKCandidates[0]), 256};

const TFL_Tunable* const kTunables[] = {&kBlockM, &kBlockN, &kBlockK};
constexpr size_t kNumTunables = sizeof(kTunables) / sizeof(kTunables[0]);

std::mutex g_mu;
std::map<int32_t, GemmBlocking>& settings() {
  static auto* s = new std::map<int32_t, GemmBlocking>();
  return *s;
}

// The tunable called `name`; throws for NULL or an unknown name.
const TFL_Tunable& tunable(const char* name) {
  if (name == nullptr) invalid_argument("name is NULL");
  for (const TFL_Tunable* t : kTunables)
    if (std::strcmp(name, t->name) == 0) return *t;
  invalid_argument("unknown tunable '", name, "'; flemu has ", kBlockM.name, ", ", kBlockN.name, ", ", kBlockK.name);
}

// The field of `b` that `t` controls.
int64_t& field(GemmBlocking& b, const TFL_Tunable& t) {
  if (&t == &kBlockM) return b.block_m_tiles;
  if (&t == &kBlockN) return b.block_n_tiles;
  return b.block_k;
}

void check_value(const TFL_Tunable& t, int64_t value) {
  const int64_t max = &t == &kBlockK ? kMaxBlockK : kMaxTiles;
  if (value < 1 || value > max)
    invalid_argument("tunable '", t.name, "' takes values from 1 to ", max, ", got ", value);
}

TFL_Error* Tunables_List(TFL_Tunables_List_Args* args) {
  return guarded("Tunables_List", [&] {
    TFL_CHECK_ARGS(args, TFL_Tunables_List_Args);
    runtime().device(args->device);
    args->tunables = kTunables;
    args->num_tunables = kNumTunables;
  });
}

TFL_Error* Tunables_Get(TFL_Tunables_Value_Args* args) {
  return guarded("Tunables_Get", [&] {
    TFL_CHECK_ARGS(args, TFL_Tunables_Value_Args);
    runtime().device(args->device);
    const TFL_Tunable& t = tunable(args->name);
    GemmBlocking b = gemm_blocking(args->device);
    const int64_t v = field(b, t);
    args->value = v != 0 ? v : t.default_value;
  });
}

TFL_Error* Tunables_Set(TFL_Tunables_Value_Args* args) {
  return guarded("Tunables_Set", [&] {
    TFL_CHECK_ARGS(args, TFL_Tunables_Value_Args);
    runtime().device(args->device);
    const TFL_Tunable& t = tunable(args->name);
    check_value(t, args->value);
    std::lock_guard<std::mutex> lock(g_mu);
    field(settings()[args->device], t) = args->value;
  });
}

TFL_Error* Tunables_Probe(TFL_Tunables_Probe_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = guarded("Tunables_Probe", [&] {
    TFL_CHECK_ARGS(args, TFL_Tunables_Probe_Args);
    Runtime& rt = runtime();
    rt.device(args->device);
    const TFL_Tunable& t = tunable(args->name);
    check_value(t, args->value);
    GemmBlocking blocking = gemm_blocking(args->device);
    field(blocking, t) = args->value;
    // The device must be idle so the probe measures the candidate alone.
    async_error = rt.synchronize_device(args->device);
    if (async_error != nullptr) return;
    std::vector<float> a(static_cast<size_t>(kProbeN * kProbeK)), b(static_cast<size_t>(kProbeK * kProbeM));
    std::vector<float> c(static_cast<size_t>(kProbeN * kProbeM));
    uint32_t state = 12345u;
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / static_cast<float>(1u << 24) - 0.5f;
    };
    for (float& x : a) x = next();
    for (float& x : b) x = next();
    double best = 0.0;
    for (int run = 0; run <= kProbeRuns; ++run) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm_probe_f32(kProbeN, kProbeM, kProbeK, a.data(), b.data(), c.data(), blocking);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (run == 1 || (run > 1 && s < best)) best = s;  // run 0 warms caches and the pool
    }
    args->seconds = best;
  });
  return err != nullptr ? err : async_error;
}

}  // namespace

GemmBlocking gemm_blocking(int32_t device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = settings().find(device);
  return it == settings().end() ? GemmBlocking{} : it->second;
}

extern const TFL_TunablesApi kTunablesApi = {
    TFL_TunablesApi_STRUCT_SIZE, Tunables_List, Tunables_Get, Tunables_Set, Tunables_Probe,
};

}  // namespace flemu
