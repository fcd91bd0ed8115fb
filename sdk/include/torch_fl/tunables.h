/* torch-fl plugin ABI: the tunables group — parameters probed at load time.
 *
 * Optional. A plugin exposes integer parameters (GEMM block sizes, thread
 * counts, ...) with candidate values and a probe that times one candidate.
 * The host (`torchfl probe`, or an opt-in at load) times the candidates,
 * caches the winner per plugin version and device, and sets it again at the
 * next load.
 */
#ifndef TORCH_FL_TUNABLES_H_
#define TORCH_FL_TUNABLES_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tunable parameter. Owned by the plugin, valid until unload. */
typedef struct TFL_Tunable {
  size_t struct_size;
  const char* name;          /* e.g. "gemm.block_k" */
  const char* description;   /* one line */
  const int64_t* candidates; /* values worth probing */
  size_t num_candidates;
  int64_t default_value;
} TFL_Tunable;
#define TFL_Tunable_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Tunable, default_value)

typedef struct TFL_Tunables_List_Args {
  size_t struct_size;
  int32_t device;                      /* in */
  const TFL_Tunable* const* tunables;  /* out */
  size_t num_tunables;                 /* out */
} TFL_Tunables_List_Args;
#define TFL_Tunables_List_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Tunables_List_Args, num_tunables)
typedef TFL_Error* TFL_Tunables_List(TFL_Tunables_List_Args* args);

/* Get and set share one struct: Set reads `value`, Get writes it. */
typedef struct TFL_Tunables_Value_Args {
  size_t struct_size;
  int32_t device;   /* in */
  const char* name; /* in */
  int64_t value;    /* in for Set, out for Get */
} TFL_Tunables_Value_Args;
#define TFL_Tunables_Value_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Tunables_Value_Args, value)
typedef TFL_Error* TFL_Tunables_Set(TFL_Tunables_Value_Args* args);
typedef TFL_Error* TFL_Tunables_Get(TFL_Tunables_Value_Args* args);

/* Runs the plugin's probe workload for `name` with `value` and reports the
 * time it took (synchronously, the device otherwise idle). */
typedef struct TFL_Tunables_Probe_Args {
  size_t struct_size;
  int32_t device;   /* in */
  const char* name; /* in */
  int64_t value;    /* in */
  double seconds;   /* out */
} TFL_Tunables_Probe_Args;
#define TFL_Tunables_Probe_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Tunables_Probe_Args, seconds)
typedef TFL_Error* TFL_Tunables_Probe(TFL_Tunables_Probe_Args* args);

typedef struct TFL_TunablesApi {
  size_t struct_size;
  TFL_Tunables_List* Tunables_List;
  TFL_Tunables_Get* Tunables_Get;
  TFL_Tunables_Set* Tunables_Set;
  TFL_Tunables_Probe* Tunables_Probe;
} TFL_TunablesApi;
#define TFL_TunablesApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_TunablesApi, Tunables_Probe)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_TUNABLES_H_ */
