/* torch-fl plugin ABI: the entry point and the top-level function table.
 *
 * Include this one header to write a plugin. A plugin is a shared library
 * that exports exactly one required symbol, TFL_GetPluginApi, and links
 * neither libtorch nor libpython.
 *
 * Loading, step by step (what the host does):
 *   1. dlopen the library; dlsym TFL_GetPluginApi; call it.
 *   2. Refuse the plugin if abi_major != the host's TFL_ABI_MAJOR (the error
 *      names both versions). Read every table through its struct_size.
 *   3. Check that every required function is present; refuse with the list
 *      of missing ones otherwise. Required: all of core, device and stream;
 *      all of memory except MapToHost/Unmap. Optional groups may be NULL.
 *   4. Call core->Plugin_Initialize with the host's version and services.
 *   5. Read Plugin_GetInfo, Device_Count, Device_GetProperties and the kernel
 *      lists, create a default stream per device, register the device.
 *
 * Version mismatch procedure: a plugin built against an older minor works
 * with a newer host unchanged; a plugin built against a newer minor works
 * with an older host as long as it does not depend on host fields the
 * older host's structs lack (check TFL_HAS_FIELD). A new major needs a
 * rebuild of the plugin against the new headers.
 */
#ifndef TORCH_FL_PLUGIN_API_H_
#define TORCH_FL_PLUGIN_API_H_

#include "torch_fl/types.h"
#include "torch_fl/core.h"
#include "torch_fl/device.h"
#include "torch_fl/memory.h"
#include "torch_fl/stream.h"
#include "torch_fl/kernel.h"
#include "torch_fl/collectives.h"
#include "torch_fl/graph.h"
#include "torch_fl/tunables.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The function table a plugin returns. Static, owned by the plugin, valid
 * until the library is unloaded. Append-only. */
typedef struct TFL_Api {
  size_t struct_size;
  uint32_t abi_major;                     /* TFL_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;                     /* TFL_ABI_MINOR the plugin was built with */
  const TFL_CoreApi* core;                /* required */
  const TFL_DeviceApi* device;            /* required */
  const TFL_MemoryApi* memory;            /* required */
  const TFL_StreamApi* stream;            /* required */
  const TFL_KernelApi* kernels;           /* optional: NULL = no kernel table */
  const TFL_CollectivesApi* collectives;  /* optional */
  const TFL_GraphApi* graph;              /* optional */
  const TFL_TunablesApi* tunables;        /* optional */
} TFL_Api;
#define TFL_Api_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Api, tunables)

/* The one exported entry symbol. Must not fail and must not allocate device
 * resources: real work starts in Plugin_Initialize. */
#define TFL_ENTRY_SYMBOL "TFL_GetPluginApi"
typedef const TFL_Api* (*TFL_GetPluginApiFn)(void);

#ifdef TFL_BUILDING_PLUGIN
TFL_EXPORT const TFL_Api* TFL_GetPluginApi(void);
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_PLUGIN_API_H_ */
