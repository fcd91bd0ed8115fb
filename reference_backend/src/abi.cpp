// The C ABI: every TFL_* entry flemu provides, each a thin wrapper that
// checks its argument struct (TFL_CHECK_ARGS), calls into the runtime and
// converts any exception into a TFL_Error (guarded, plugin_helpers.h); and
// the tables TFL_GetPluginApi returns.
#include <cstring>
#include <mutex>
#include <thread>

#define TFL_BUILDING_PLUGIN 1
#include "torch_fl/plugin_api.h"

#include "comm/api.h"
#include "errors.h"
#include "faults.h"
#include "graph/graph_api.h"
#include "kernels/support/registry.h"
#include "runtime.h"
#include "thread_pool.h"
#include "tunables.h"

namespace flemu {
namespace {

namespace tfl = torch_fl::helpers;

constexpr const char* kVersion = "0.1.0";

std::mutex g_init_mu;

// ---------------------------------------------------------------------------
// core
// ---------------------------------------------------------------------------

TFL_Error* Plugin_GetInfo(TFL_Plugin_GetInfo_Args* args) {
  return guarded("Plugin_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_GetInfo_Args);
    args->name = "flemu";
    args->vendor = "torch-fl project";
    args->version = kVersion;
    args->device_type = "flemu";
    args->description = "FL-2000 emulator: a CPU-emulated reference accelerator";
  });
}

TFL_Error* Plugin_Initialize(TFL_Plugin_Initialize_Args* args) {
  return guarded("Plugin_Initialize", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Initialize_Args);
    if (args->host_abi_major != TFL_ABI_MAJOR)
      fail(TFL_ERR_ABI_MISMATCH,
           cat("the host speaks torch-fl ABI ", args->host_abi_major, ".", args->host_abi_minor,
               " but flemu was built for ABI ", TFL_ABI_MAJOR, ".", TFL_ABI_MINOR,
               "; the major versions must match (rebuild flemu against the host's headers)"));
    if (args->num_options > 0 && (args->option_keys == nullptr || args->option_values == nullptr))
      invalid_argument("num_options is ", args->num_options, " but option_keys or option_values is NULL");
    Config cfg = load_config(args->option_keys, args->option_values, args->num_options);
    std::lock_guard<std::mutex> lock(g_init_mu);
    if (Runtime* rt = runtime_or_null()) {
      // A repeated call with the same configuration is harmless; anything
      // else would pull memory out from under live allocations.
      Config effective = cfg;
      if (!effective.sanitize_seed_set) {
        effective.sanitize_seed = rt->config().sanitize_seed;
        effective.sanitize_seed_set = rt->config().sanitize_seed_set;
      }
      if (effective == rt->config()) return;
      invalid_argument("already initialized with a different configuration; call Plugin_Shutdown first");
    }
    configure_kernels(cfg);
    set_active_faults(cfg.faults);
    auto* rt = new Runtime(std::move(cfg), args->host);
    if (rt->config().check_contracts)
      rt->log(TFL_LOG_INFO, "flemu: contract checking on (FLEMU_CHECK_CONTRACTS=1): kernels verify the host's promises, "
                            "allocations carry guard regions");
    if (rt->config().minimal_profile) {
      const TFL_KernelDesc* const* kernels = nullptr;
      size_t count = 0;
      list_kernels(&kernels, &count);
      rt->log(TFL_LOG_INFO, cat("flemu: FLEMU_PROFILE=minimal: ", count,
                                " kernels with a new vendor's conservative flags, no custom ops, no graph compiler"));
    }
    if (rt->config().faults != 0)
      rt->log(TFL_LOG_WARNING, cat("flemu: emulating a faulty device (FLEMU_FAULT=", fault_names(rt->config().faults), ")"));
    set_runtime(rt);
  });
}

TFL_Error* Plugin_Shutdown(TFL_Plugin_Shutdown_Args* args) {
  return guarded("Plugin_Shutdown", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Shutdown_Args);
    std::lock_guard<std::mutex> lock(g_init_mu);
    Runtime* rt = runtime_or_null();
    if (rt == nullptr) return;
    set_runtime(nullptr);
    release_hung_work();  // FLEMU_FAULT=mm_hang: let the streams drain
    delete rt;
    ThreadPool::shutdown_instance();
  });
}

// ---------------------------------------------------------------------------
// device
// ---------------------------------------------------------------------------

TFL_Error* Device_Count(TFL_Device_Count_Args* args) {
  return guarded("Device_Count", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_Count_Args);
    args->count = runtime().device_count();
  });
}

uint64_t capabilities(const Config& cfg) {
  uint64_t caps = TFL_CAP_HOST_MAPPING | TFL_CAP_TIMING_EVENTS | TFL_CAP_ASYNC_COPY;
  if (cfg.fp64) caps |= TFL_CAP_FP64;
  if (cfg.fp16) caps |= TFL_CAP_FP16;
  if (cfg.bf16) caps |= TFL_CAP_BF16;
  if (cfg.peer_access) caps |= TFL_CAP_PEER_ACCESS;
  return caps;
}

// FLEMU_FAULT=memory_overreport claims four times the real capacity.
uint64_t reported_total(const Arena& arena) {
  return fault_on(Fault::kMemoryOverreport) ? 4 * arena.capacity() : arena.capacity();
}

TFL_Error* Device_GetProperties(TFL_Device_GetProperties_Args* args) {
  return guarded("Device_GetProperties", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_GetProperties_Args);
    Runtime& rt = runtime();
    Device& dev = rt.device(args->device);
    TFL_DeviceProperties* p = args->properties;
    if (p == nullptr) invalid_argument("properties is NULL");
    // Fill only what the host's struct has room for.
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, name)) {
      std::memset(p->name, 0, sizeof(p->name));
      std::strncpy(p->name, "FL-2000 (emulated)", sizeof(p->name) - 1);
    }
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, total_memory)) p->total_memory = reported_total(dev.arena);
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, capabilities)) p->capabilities = capabilities(rt.config());
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, memory_alignment))
      p->memory_alignment = static_cast<uint32_t>(Arena::kAlignment);
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, preferred_memory_format))
      p->preferred_memory_format = TFL_MEMORY_FORMAT_CONTIGUOUS;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, compute_units)) {
      const unsigned hw = std::thread::hardware_concurrency();
      p->compute_units = hw == 0 ? 1 : static_cast<int32_t>(hw);
    }
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_major)) p->version_major = 1;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_minor)) p->version_minor = 0;
  });
}

// Under FLEMU_CHECK_CONTRACTS a synchronize also checks every guard region
// of the device: a backstop for writes no kernel's own check saw. A pending
// stream error is reported first; the canaries stay broken until then.
TFL_Error* guard_backstop(Runtime& rt, int32_t device, const char* where, TFL_Error* async_error) {
  if (async_error != nullptr || !rt.config().check_contracts) return async_error;
  const std::vector<std::string> broken = rt.device(device).arena.check_all_guards();
  if (broken.empty()) return nullptr;
  std::string what = broken[0];
  for (size_t i = 1; i < broken.size(); ++i) what += "; " + broken[i];
  return make_error(TFL_ERR_INTERNAL, where,
                    cat("out-of-bounds write found when synchronizing: ", what, " (guard regions of FLEMU_CHECK_CONTRACTS=1)"));
}

TFL_Error* Device_Synchronize(TFL_Device_Synchronize_Args* args) {
  return guarded("Device_Synchronize", [&]() -> TFL_Error* {
    TFL_CHECK_ARGS(args, TFL_Device_Synchronize_Args);
    Runtime& rt = runtime();
    if (fault_on(Fault::kStreamSyncNoop)) {
      rt.device(args->device);
      return nullptr;
    }
    return guard_backstop(rt, args->device, "Device_Synchronize", rt.synchronize_device(args->device));
  });
}

TFL_Error* Device_CanAccessPeer(TFL_Device_CanAccessPeer_Args* args) {
  return guarded("Device_CanAccessPeer", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_CanAccessPeer_Args);
    Runtime& rt = runtime();
    rt.device(args->device);
    rt.device(args->peer);
    // A device always reaches its own memory; other devices only with peer access on.
    args->can_access = (args->device == args->peer || rt.config().peer_access) ? 1 : 0;
  });
}

// ---------------------------------------------------------------------------
// memory
// ---------------------------------------------------------------------------

TFL_Error* Memory_Allocate(TFL_Memory_Allocate_Args* args) {
  return guarded("Memory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Allocate_Args);
    args->ptr = nullptr;
    args->ptr = runtime().device(args->device).arena.allocate(args->size);
  });
}

TFL_Error* Memory_Free(TFL_Memory_Free_Args* args) {
  return guarded("Memory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Free_Args);
    Runtime& rt = runtime();
    Device& dev = rt.device(args->device);
    if (args->ptr == nullptr) return;
    if (!dev.arena.owns(args->ptr)) {
      if (Arena* other = rt.arena_of(args->ptr))
        invalid_argument(args->ptr, " belongs to device ", other->device(), ", not to device ", args->device);
      invalid_argument(args->ptr, " is not device memory of device ", args->device);
    }
    // FLEMU_FAULT=free_leaks: the allocation is forgotten, its bytes never come back.
    dev.arena.free(args->ptr, /*leak=*/fault_on(Fault::kFreeLeaks));
  });
}

TFL_Error* Memory_GetInfo(TFL_Memory_GetInfo_Args* args) {
  return guarded("Memory_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_GetInfo_Args);
    Arena& arena = runtime().device(args->device).arena;
    args->free_bytes = arena.free_bytes();
    args->total_bytes = reported_total(arena);
  });
}

TFL_Error* HostMemory_Allocate(TFL_HostMemory_Allocate_Args* args) {
  return guarded("HostMemory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Allocate_Args);
    args->ptr = nullptr;
    args->ptr = runtime().host_memory().allocate(args->size);
  });
}

TFL_Error* HostMemory_Free(TFL_HostMemory_Free_Args* args) {
  return guarded("HostMemory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Free_Args);
    if (args->ptr == nullptr) return;
    runtime().host_memory().free(args->ptr);
  });
}

const char* copy_kind_name(int32_t kind) {
  switch (kind) {
    case TFL_COPY_HOST_TO_DEVICE: return "HOST_TO_DEVICE";
    case TFL_COPY_DEVICE_TO_HOST: return "DEVICE_TO_HOST";
    case TFL_COPY_DEVICE_TO_DEVICE: return "DEVICE_TO_DEVICE";
    case TFL_COPY_PEER: return "PEER";
    default: return "an unknown kind";
  }
}

// Resolves the device side of a copy to flemu's alias, checking that the
// range lies inside one live allocation of that device.
char* device_side(Runtime& rt, const void* ptr, int32_t device, size_t size, const char* what) {
  Device& dev = rt.device(device);
  if (!dev.arena.owns(ptr)) {
    if (Arena* other = rt.arena_of(ptr))
      invalid_argument(what, " ", ptr, " belongs to device ", other->device(), ", not to device ", device);
    invalid_argument(what, " ", ptr, " is not device memory of device ", device);
  }
  dev.arena.check_allocated(ptr, size, what);
  return dev.arena.to_host(ptr);
}

void host_side(Runtime& rt, const void* ptr, int32_t device, const char* what) {
  if (device != -1) invalid_argument(what, "_device must be -1 for host memory, got ", device);
  if (ptr == nullptr) invalid_argument(what, " is NULL");
  if (Arena* arena = rt.arena_of(ptr))
    invalid_argument(what, " ", ptr, " is device memory of device ", arena->device(),
                     ", not host memory (use a DEVICE_TO_DEVICE or PEER copy)");
}

TFL_Error* Memory_Copy(TFL_Memory_Copy_Args* args) {
  return guarded("Memory_Copy", [&]() -> TFL_Error* {
    TFL_CHECK_ARGS(args, TFL_Memory_Copy_Args);
    Runtime& rt = runtime();
    const size_t size = args->size;
    Stream& stream = stream_from_handle(args->stream);
    char* dst = nullptr;
    const char* src = nullptr;
    int32_t stream_device = 0;
    bool touches_host = false, host_pinned = false;
    switch (args->kind) {
      case TFL_COPY_HOST_TO_DEVICE:
        if (size == 0) return nullptr;
        host_side(rt, args->src, args->src_device, "src");
        dst = device_side(rt, args->dst, args->dst_device, size, "dst");
        src = static_cast<const char*>(args->src);
        stream_device = args->dst_device;
        touches_host = true;
        host_pinned = rt.host_memory().is_pinned(args->src, size);
        break;
      case TFL_COPY_DEVICE_TO_HOST:
        if (size == 0) return nullptr;
        host_side(rt, args->dst, args->dst_device, "dst");
        src = device_side(rt, args->src, args->src_device, size, "src");
        dst = static_cast<char*>(args->dst);
        stream_device = args->src_device;
        touches_host = true;
        host_pinned = rt.host_memory().is_pinned(args->dst, size);
        break;
      case TFL_COPY_DEVICE_TO_DEVICE:
        if (args->src_device != args->dst_device)
          invalid_argument("DEVICE_TO_DEVICE needs src_device == dst_device, got ", args->src_device, " and ",
                           args->dst_device, " (use PEER across devices)");
        if (size == 0) return nullptr;
        src = device_side(rt, args->src, args->src_device, size, "src");
        dst = device_side(rt, args->dst, args->dst_device, size, "dst");
        stream_device = args->src_device;
        break;
      case TFL_COPY_PEER:
        rt.device(args->src_device);
        rt.device(args->dst_device);
        if (!rt.config().peer_access && args->src_device != args->dst_device)
          invalid_argument("PEER copy from device ", args->src_device, " to device ", args->dst_device,
                           " but peer access is disabled (FLEMU_PEER_ACCESS=0; Device_CanAccessPeer reports 0, "
                           "stage the copy through host memory)");
        if (size == 0) return nullptr;
        src = device_side(rt, args->src, args->src_device, size, "src");
        dst = device_side(rt, args->dst, args->dst_device, size, "dst");
        stream_device = args->src_device;
        break;
      default:
        invalid_argument("unknown copy kind ", args->kind);
    }
    if (stream.device() != stream_device)
      invalid_argument("a ", copy_kind_name(args->kind), " copy must run on a stream of device ", stream_device,
                       ", but the stream belongs to device ", stream.device());
    // FLEMU_FAULT=peer_copy_corrupt: across devices the last byte arrives with its lowest bit flipped.
    const bool corrupt = args->kind == TFL_COPY_PEER && args->src_device != args->dst_device &&
                         fault_on(Fault::kPeerCopyCorrupt);
    auto move = [dst, src, size, corrupt] {
      std::memmove(dst, src, size);
      if (corrupt) dst[size - 1] ^= 1;
    };
    // Pageable host memory is only safe while the caller waits.
    const bool blocking = args->blocking != 0 || (touches_host && !host_pinned);
    if (!blocking) {
      stream.submit("Memory_Copy", move);
      return nullptr;  // a failure is reported by a later synchronizing call
    }
    // The host never enqueues on one stream from two threads at once, so an
    // idle stream stays idle while the calling thread copies.
    if (stream.idle()) move();
    else stream.wait(stream.submit("Memory_Copy", move));
    return stream.take_error();
  });
}

TFL_Error* Memory_Set(TFL_Memory_Set_Args* args) {
  return guarded("Memory_Set", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Set_Args);
    Runtime& rt = runtime();
    Stream& stream = stream_from_handle(args->stream);
    if (stream.device() != args->device)
      invalid_argument("the stream belongs to device ", stream.device(), ", not to device ", args->device);
    if (args->size == 0) return;
    char* dst = device_side(rt, args->ptr, args->device, args->size, "ptr");
    const uint8_t value = args->value;
    const size_t size = args->size;
    stream.submit("Memory_Set", [dst, value, size] { std::memset(dst, value, size); });
  });
}

TFL_Error* Memory_MapToHost(TFL_Memory_MapToHost_Args* args) {
  return guarded("Memory_MapToHost", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_MapToHost_Args);
    args->host_ptr = nullptr;
    Runtime& rt = runtime();
    args->host_ptr = device_side(rt, args->ptr, args->device, args->size, "ptr");
  });
}

TFL_Error* Memory_Unmap(TFL_Memory_Unmap_Args* args) {
  return guarded("Memory_Unmap", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Unmap_Args);
    Arena& arena = runtime().device(args->device).arena;
    // The mapping is the arena's permanent alias: there is nothing to undo.
    if (!arena.owns_host_alias(args->host_ptr, args->size))
      invalid_argument("host_ptr ", args->host_ptr, " (+", args->size, " bytes) was not returned by Memory_MapToHost for device ",
                       args->device);
  });
}

// ---------------------------------------------------------------------------
// streams and events
// ---------------------------------------------------------------------------

Event& event_from_handle(TFL_Event* handle, const char* what) {
  auto* holder = reinterpret_cast<std::shared_ptr<Event>*>(handle);
  if (holder == nullptr) invalid_argument(what, " is NULL");
  if (!*holder || !(*holder)->valid()) invalid_argument(what, " ", static_cast<void*>(handle), " is not a live flemu event");
  return **holder;
}

TFL_Error* Stream_Create(TFL_Stream_Create_Args* args) {
  return guarded("Stream_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Create_Args);
    args->stream = nullptr;
    args->stream = handle_of(runtime().create_stream(args->device).get());
  });
}

TFL_Error* Stream_Destroy(TFL_Stream_Destroy_Args* args) {
  return guarded("Stream_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Destroy_Args);
    Runtime& rt = runtime();
    std::shared_ptr<Stream> stream = rt.remove_stream(&stream_from_handle(args->stream));
    stream->wait_idle();
    // The handle is gone after this call, so an unreported failure can only be logged.
    if (TFL_Error* err = stream->take_error()) {
      rt.log(TFL_LOG_WARNING, cat(err->message, " (unreported when the stream was destroyed)"));
      destroy_error(err);
    }
  });
}

TFL_Error* Stream_Synchronize(TFL_Stream_Synchronize_Args* args) {
  return guarded("Stream_Synchronize", [&]() -> TFL_Error* {
    TFL_CHECK_ARGS(args, TFL_Stream_Synchronize_Args);
    Runtime& rt = runtime();
    Stream& stream = stream_from_handle(args->stream);
    if (fault_on(Fault::kStreamSyncNoop)) return nullptr;
    stream.wait_idle();
    return guard_backstop(rt, stream.device(), "Stream_Synchronize", stream.take_error());
  });
}

TFL_Error* Stream_Query(TFL_Stream_Query_Args* args) {
  return guarded("Stream_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Query_Args);
    runtime();
    args->idle = stream_from_handle(args->stream).idle() ? 1 : 0;
  });
}

TFL_Error* Stream_WaitEvent(TFL_Stream_WaitEvent_Args* args) {
  return guarded("Stream_WaitEvent", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_WaitEvent_Args);
    runtime();
    Stream& stream = stream_from_handle(args->stream);
    event_from_handle(args->event, "event").enqueue_wait(stream);
  });
}

TFL_Error* Event_Create(TFL_Event_Create_Args* args) {
  return guarded("Event_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Create_Args);
    args->event = nullptr;
    runtime().device(args->device);
    // Flags from a newer minor version are ignored, as the ABI's append-only rule expects.
    auto* holder = new std::shared_ptr<Event>(std::make_shared<Event>(args->device, args->flags));
    args->event = reinterpret_cast<TFL_Event*>(holder);
  });
}

TFL_Error* Event_Destroy(TFL_Event_Destroy_Args* args) {
  return guarded("Event_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Destroy_Args);
    if (args->event == nullptr) return;
    event_from_handle(args->event, "event");
    // Markers and waits already enqueued hold their own references.
    delete reinterpret_cast<std::shared_ptr<Event>*>(args->event);
  });
}

TFL_Error* Event_Record(TFL_Event_Record_Args* args) {
  return guarded("Event_Record", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Record_Args);
    runtime();
    Event& event = event_from_handle(args->event, "event");
    Stream& stream = stream_from_handle(args->stream);
    if (stream.device() != event.device())
      invalid_argument("the event belongs to device ", event.device(), " but the stream to device ", stream.device());
    event.record(stream);
  });
}

TFL_Error* Event_Synchronize(TFL_Event_Synchronize_Args* args) {
  return guarded("Event_Synchronize", [&]() -> TFL_Error* {
    TFL_CHECK_ARGS(args, TFL_Event_Synchronize_Args);
    runtime();
    Event& event = event_from_handle(args->event, "event");
    if (fault_on(Fault::kEventEarly)) return nullptr;  // FLEMU_FAULT=event_early
    return event.synchronize();
  });
}

TFL_Error* Event_Query(TFL_Event_Query_Args* args) {
  return guarded("Event_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Query_Args);
    runtime();
    Event& event = event_from_handle(args->event, "event");
    args->complete = fault_on(Fault::kEventEarly) || event.query() ? 1 : 0;
  });
}

TFL_Error* Event_ElapsedTime(TFL_Event_ElapsedTime_Args* args) {
  return guarded("Event_ElapsedTime", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_ElapsedTime_Args);
    runtime();
    Event& start = event_from_handle(args->start, "start");
    Event& end = event_from_handle(args->end, "end");
    for (const auto& [e, name] : {std::pair<Event*, const char*>{&start, "start"}, {&end, "end"}}) {
      if (!e->timing()) invalid_argument("the ", name, " event was not created with TFL_EVENT_TIMING");
      if (!e->recorded()) invalid_argument("the ", name, " event was never recorded");
      if (!e->query()) invalid_argument("the ", name, " event has not completed yet (synchronize it first)");
    }
    args->milliseconds = static_cast<double>(end.timestamp_ns() - start.timestamp_ns()) / 1e6;
  });
}

// ---------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------

TFL_Error* Kernels_List(TFL_Kernels_List_Args* args) {
  return guarded("Kernels_List", [&] {
    TFL_CHECK_ARGS(args, TFL_Kernels_List_Args);
    runtime();
    list_kernels(&args->kernels, &args->num_kernels);
  });
}

TFL_Error* Kernels_ListCustomOps(TFL_Kernels_ListCustomOps_Args* args) {
  return guarded("Kernels_ListCustomOps", [&] {
    TFL_CHECK_ARGS(args, TFL_Kernels_ListCustomOps_Args);
    runtime();
    list_custom_ops(&args->ops, &args->num_ops);
  });
}

// ---------------------------------------------------------------------------
// tables
// ---------------------------------------------------------------------------

const TFL_CoreApi kCore = {
    TFL_CoreApi_STRUCT_SIZE, tfl::Error_Destroy, tfl::Error_Message, tfl::Error_GetCode, Plugin_GetInfo,
    Plugin_Initialize,       Plugin_Shutdown,
};

const TFL_DeviceApi kDevice = {
    TFL_DeviceApi_STRUCT_SIZE, Device_Count, Device_GetProperties, Device_Synchronize, Device_CanAccessPeer,
};

const TFL_MemoryApi kMemory = {
    TFL_MemoryApi_STRUCT_SIZE, Memory_Allocate, Memory_Free, Memory_GetInfo, HostMemory_Allocate,
    HostMemory_Free,           Memory_Copy,     Memory_Set,  Memory_MapToHost, Memory_Unmap,
};

const TFL_StreamApi kStream = {
    TFL_StreamApi_STRUCT_SIZE, Stream_Create, Stream_Destroy, Stream_Synchronize, Stream_Query,
    Stream_WaitEvent,          Event_Create,  Event_Destroy,  Event_Record,       Event_Synchronize,
    Event_Query,               Event_ElapsedTime,
};

const TFL_KernelApi kKernels = {TFL_KernelApi_STRUCT_SIZE, Kernels_List, Kernels_ListCustomOps};

const TFL_GraphApi kGraph = {TFL_GraphApi_STRUCT_SIZE, Graph_Compile, Graph_Execute, Graph_Destroy};

const TFL_Api kApi = {
    TFL_Api_STRUCT_SIZE, TFL_ABI_MAJOR, TFL_ABI_MINOR, &kCore, &kDevice, &kMemory, &kStream, &kKernels,
    &comm::kCollectivesApi,
    &kGraph,
    &kTunablesApi,
};

}  // namespace
}  // namespace flemu

extern "C" TFL_EXPORT const TFL_Api* TFL_GetPluginApi(void) {
  // Before any error is made: the host calls this first. A function-local
  // static runs once, whichever thread gets here first.
  static const bool prefixed = (torch_fl::helpers::set_error_prefix("flemu: "), true);
  (void)prefixed;
  return &flemu::kApi;
}
