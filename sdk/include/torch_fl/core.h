/* torch-fl plugin ABI: the core group — errors, plugin identity, lifetime.
 *
 * Required. Every function here must be provided.
 */
#ifndef TORCH_FL_CORE_H_
#define TORCH_FL_CORE_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================
 * Error objects
 * ======================================================================== */

/* Releases an error returned by any plugin function. Thread-safe. */
typedef struct TFL_Error_Destroy_Args {
  size_t struct_size;
  TFL_Error* error; /* in: the error to release; NULL is a no-op */
} TFL_Error_Destroy_Args;
#define TFL_Error_Destroy_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Error_Destroy_Args, error)
typedef void TFL_Error_Destroy(TFL_Error_Destroy_Args* args);

/* Reads an error's message. */
typedef struct TFL_Error_Message_Args {
  size_t struct_size;
  const TFL_Error* error; /* in */
  const char* message;    /* out: owned by `error`, valid until it is destroyed */
  size_t message_size;    /* out: length without the terminating NUL */
} TFL_Error_Message_Args;
#define TFL_Error_Message_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Error_Message_Args, message_size)
typedef void TFL_Error_Message(TFL_Error_Message_Args* args);

/* Reads an error's code. */
typedef struct TFL_Error_GetCode_Args {
  size_t struct_size;
  const TFL_Error* error; /* in */
  int32_t code;           /* out: a TFL_ErrorCode */
} TFL_Error_GetCode_Args;
#define TFL_Error_GetCode_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Error_GetCode_Args, code)
typedef void TFL_Error_GetCode(TFL_Error_GetCode_Args* args);

/* ========================================================================
 * Plugin identity and lifetime
 * ======================================================================== */

/* Identifies the plugin. May be called before TFL_Plugin_Initialize. All
 * strings are owned by the plugin and live until the library is unloaded. */
typedef struct TFL_Plugin_GetInfo_Args {
  size_t struct_size;
  const char* name;        /* out: short plugin name, e.g. "flemu" */
  const char* vendor;      /* out: e.g. "torch-fl project" */
  const char* version;     /* out: the plugin's own version, e.g. "1.2.0" */
  const char* device_type; /* out: suggested PyTorch device name, [a-z_]+ */
  const char* description; /* out: one line for humans; may be "" */
} TFL_Plugin_GetInfo_Args;
#define TFL_Plugin_GetInfo_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Plugin_GetInfo_Args, description)
typedef TFL_Error* TFL_Plugin_GetInfo(TFL_Plugin_GetInfo_Args* args);

/* Log levels for TFL_HostServices.log. */
typedef enum TFL_LogLevel {
  TFL_LOG_DEBUG = 0,
  TFL_LOG_INFO = 1,
  TFL_LOG_WARNING = 2,
  TFL_LOG_ERROR = 3
} TFL_LogLevel;

/* Services the host offers the plugin. Owned by the host; valid from
 * TFL_Plugin_Initialize until TFL_Plugin_Shutdown returns. Thread-safe. */
typedef struct TFL_HostServices {
  size_t struct_size;
  void* host_data; /* pass back as the first argument of every callback */
  /* Routes a message to the host's logging. `message` is copied. */
  void (*log)(void* host_data, int32_t level, const char* message);
} TFL_HostServices;
#define TFL_HostServices_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_HostServices, log)

/* Brings the plugin up. Called once per process, before any function outside
 * this group. Plugin state does not survive fork(): in a child process
 * forked after Initialize every function outside this group fails with
 * TFL_ERR_UNAVAILABLE (the host marks such children as unusable).
 * This is the second half of version negotiation: the plugin sees the host's
 * ABI version and may refuse it with TFL_ERR_ABI_MISMATCH. Options are
 * key/value strings the user passed at registration (e.g. from
 * torch_fl.register_device_plugin(..., metadata=...)); unknown keys are
 * ignored. A plugin whose hardware or driver is absent on this machine
 * returns TFL_ERR_UNAVAILABLE with a message naming what is missing: the host
 * then reports it as unavailable here (torch_fl.PluginUnavailableError), not
 * as a broken plugin, and `import torch` does not warn about it. */
typedef struct TFL_Plugin_Initialize_Args {
  size_t struct_size;
  uint32_t host_abi_major;           /* in */
  uint32_t host_abi_minor;           /* in */
  const TFL_HostServices* host;      /* in: see TFL_HostServices */
  const char* const* option_keys;    /* in: num_options entries */
  const char* const* option_values;  /* in: num_options entries */
  size_t num_options;                /* in */
} TFL_Plugin_Initialize_Args;
#define TFL_Plugin_Initialize_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Plugin_Initialize_Args, num_options)
typedef TFL_Error* TFL_Plugin_Initialize(TFL_Plugin_Initialize_Args* args);

/* Tears the plugin down at process exit. The host has synchronized every
 * device and released its cached memory and its streams; allocations still
 * held by live tensors are abandoned and the plugin may reclaim them. The host
 * calls nothing afterwards (a plugin may still accept a new Initialize). */
typedef struct TFL_Plugin_Shutdown_Args {
  size_t struct_size;
} TFL_Plugin_Shutdown_Args;
#define TFL_Plugin_Shutdown_Args_STRUCT_SIZE sizeof(TFL_Plugin_Shutdown_Args)
typedef TFL_Error* TFL_Plugin_Shutdown(TFL_Plugin_Shutdown_Args* args);

/* ========================================================================
 * The group table
 * ======================================================================== */

typedef struct TFL_CoreApi {
  size_t struct_size;
  TFL_Error_Destroy* Error_Destroy;
  TFL_Error_Message* Error_Message;
  TFL_Error_GetCode* Error_GetCode;
  TFL_Plugin_GetInfo* Plugin_GetInfo;
  TFL_Plugin_Initialize* Plugin_Initialize;
  TFL_Plugin_Shutdown* Plugin_Shutdown;
} TFL_CoreApi;
#define TFL_CoreApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_CoreApi, Plugin_Shutdown)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_CORE_H_ */
