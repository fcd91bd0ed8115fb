// The plugin ABI: every TFL_* function of {{ cookiecutter.chip_name }}'s plugin, grouped as in
// torch_fl/plugin_api.h, and the tables TFL_GetPluginApi hands the host. Each
// one checks its arguments (TFL_CHECK_ARGS), calls the runtime and turns any
// failure into a TFL_Error (tfl::guarded): nothing throws across the ABI. The
// error object and that plumbing come from the SDK's torch_fl/plugin_helpers.h.
//
// Reading order for a new engineer: core -> device -> memory -> streams and
// events; the kernels live in kernels.cpp.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "kernels.h"
#include "runtime.h"
#include "torch_fl/plugin_api.h"
#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

namespace {

constexpr const char* kPluginName = "{{ cookiecutter.device_name }}";
constexpr const char* kVendor = "{{ cookiecutter.vendor_name }}";
constexpr const char* kVersion = "{{ cookiecutter.version }}";
constexpr const char* kDeviceType = "{{ cookiecutter.device_name }}";
constexpr const char* kProductName = "{{ cookiecutter.chip_name }} (host-memory emulation)";

std::mutex g_init_mu;

// ===========================================================================
// core: identity, lifetime (the error functions are tfl::Error_*)
// ===========================================================================

TFL_Error* Plugin_GetInfo(TFL_Plugin_GetInfo_Args* args) {
  return tfl::guarded("Plugin_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_GetInfo_Args);
    args->name = kPluginName;
    args->vendor = kVendor;
    args->version = kVersion;
    args->device_type = kDeviceType;
    args->description = "{{ cookiecutter.vendor_name }} {{ cookiecutter.chip_name }} plugin for torch-fl";
  });
}

TFL_Error* Plugin_Initialize(TFL_Plugin_Initialize_Args* args) {
  return tfl::guarded("Plugin_Initialize", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Initialize_Args);
    // The second half of version negotiation: the host already checked ours.
    if (args->host_abi_major != TFL_ABI_MAJOR)
      tfl::fail(TFL_ERR_ABI_MISMATCH, "the host speaks torch-fl ABI ", args->host_abi_major, ".", args->host_abi_minor,
           " but this plugin was built for ABI ", TFL_ABI_MAJOR, ".", TFL_ABI_MINOR,
           "; rebuild the plugin against the host's headers");
    if (args->num_options > 0 && (args->option_keys == nullptr || args->option_values == nullptr))
      tfl::invalid_argument("num_options is ", args->num_options, " but option_keys or option_values is NULL");
    Config cfg = load_config(args->option_keys, args->option_values, args->num_options);
    std::lock_guard<std::mutex> lock(g_init_mu);
    if (Runtime* rt = runtime_or_null()) {
      // Initializing twice with the same settings is harmless; other settings
      // would pull memory out from under live tensors.
      if (rt->config() == cfg) return;
      tfl::invalid_argument("already initialized with different settings; call Plugin_Shutdown first");
    }
    set_runtime(new Runtime(cfg, args->host));
  });
}

TFL_Error* Plugin_Shutdown(TFL_Plugin_Shutdown_Args* args) {
  return tfl::guarded("Plugin_Shutdown", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Shutdown_Args);
    std::lock_guard<std::mutex> lock(g_init_mu);
    Runtime* rt = runtime_or_null();
    set_runtime(nullptr);
    delete rt;
  });
}

// ===========================================================================
// device: enumeration and properties
// ===========================================================================

TFL_Error* Device_Count(TFL_Device_Count_Args* args) {
  return tfl::guarded("Device_Count", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_Count_Args);
    args->count = runtime().device_count();
  });
}

TFL_Error* Device_GetProperties(TFL_Device_GetProperties_Args* args) {
  return tfl::guarded("Device_GetProperties", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_GetProperties_Args);
    Device& dev = runtime().device(args->device);
    TFL_DeviceProperties* p = args->properties;
    if (p == nullptr) tfl::invalid_argument("properties is NULL");
    // Fill only the fields the host's struct has room for.
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, name)) {
      std::memset(p->name, 0, sizeof(p->name));
      std::strncpy(p->name, kProductName, sizeof(p->name) - 1);
    }
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, total_memory)) p->total_memory = dev.memory.capacity();
    // VENDOR: report what your hardware does. A capability not reported here
    // is skipped by the conformance suite (with a reason), never assumed.
    //
    // Advertising a dtype (TFL_CAP_FP64, TFL_CAP_FP16, TFL_CAP_BF16) commits
    // the plugin to it: every kernel you register must either compute that
    // dtype correctly within the conformance tolerances or decline the call
    // with TFL_ERR_UNIMPLEMENTED (the bridge then runs it through its fallback
    // chain); a wrong result fails certification. The example kernels compute
    // float32 only, so only float32 is advertised. Once your kernels handle
    // the other dtypes, report them too:
    //   kCapabilities | TFL_CAP_FP64 | TFL_CAP_FP16 | TFL_CAP_BF16
    constexpr uint64_t kCapabilities =
        TFL_CAP_PEER_ACCESS | TFL_CAP_TIMING_EVENTS | TFL_CAP_ASYNC_COPY;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, capabilities)) p->capabilities = kCapabilities;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, memory_alignment))
      p->memory_alignment = static_cast<uint32_t>(DeviceMemory::kAlignment);
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, preferred_memory_format))
      p->preferred_memory_format = TFL_MEMORY_FORMAT_CONTIGUOUS;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, compute_units))
      p->compute_units = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_major)) p->version_major = 1;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_minor)) p->version_minor = 0;
  });
}

TFL_Error* Device_Synchronize(TFL_Device_Synchronize_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = tfl::guarded("Device_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_Synchronize_Args);
    async_error = runtime().synchronize(args->device);
  });
  return err != nullptr ? err : async_error;
}

TFL_Error* Device_CanAccessPeer(TFL_Device_CanAccessPeer_Args* args) {
  return tfl::guarded("Device_CanAccessPeer", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_CanAccessPeer_Args);
    Runtime& rt = runtime();
    rt.device(args->device);
    rt.device(args->peer);
    // VENDOR: ask your driver whether the link exists. Emulated devices all
    // share host memory, so every pair can copy directly.
    args->can_access = 1;
  });
}

// ===========================================================================
// memory: device and pinned host memory, copies, memset
// ===========================================================================

TFL_Error* Memory_Allocate(TFL_Memory_Allocate_Args* args) {
  return tfl::guarded("Memory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Allocate_Args);
    args->ptr = nullptr;
    args->ptr = runtime().device(args->device).memory.allocate(args->size);
  });
}

TFL_Error* Memory_Free(TFL_Memory_Free_Args* args) {
  return tfl::guarded("Memory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Free_Args);
    if (args->ptr == nullptr) return;
    runtime().device(args->device).memory.free(args->ptr);
  });
}

TFL_Error* Memory_GetInfo(TFL_Memory_GetInfo_Args* args) {
  return tfl::guarded("Memory_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_GetInfo_Args);
    DeviceMemory& memory = runtime().device(args->device).memory;
    args->free_bytes = memory.free_bytes();
    args->total_bytes = memory.capacity();
  });
}

TFL_Error* HostMemory_Allocate(TFL_HostMemory_Allocate_Args* args) {
  return tfl::guarded("HostMemory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Allocate_Args);
    args->ptr = nullptr;
    args->ptr = runtime().pinned().allocate(args->size);
  });
}

TFL_Error* HostMemory_Free(TFL_HostMemory_Free_Args* args) {
  return tfl::guarded("HostMemory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Free_Args);
    if (args->ptr == nullptr) return;
    runtime().pinned().free(args->ptr);
  });
}

// Checks the device side of a copy: a live range of that device's memory.
void check_device_side(Runtime& rt, const void* ptr, int32_t device, size_t size, const char* what) {
  Device& dev = rt.device(device);
  if (!dev.memory.owns(ptr)) {
    if (Device* other = rt.device_owning(ptr))
      tfl::invalid_argument(what, " ", ptr, " belongs to device ", other->index, ", not to device ", device);
    tfl::invalid_argument(what, " ", ptr, " is not device memory of device ", device);
  }
  dev.memory.check_range(ptr, size, what);
}

void check_host_side(Runtime& rt, const void* ptr, int32_t device, const char* what) {
  if (device != -1) tfl::invalid_argument(what, "_device must be -1 for host memory, got ", device);
  if (ptr == nullptr) tfl::invalid_argument(what, " is NULL");
  if (Device* other = rt.device_owning(ptr))
    tfl::invalid_argument(what, " ", ptr, " is device memory of device ", other->index, ", not host memory");
}

TFL_Error* Memory_Copy(TFL_Memory_Copy_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = tfl::guarded("Memory_Copy", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Copy_Args);
    Runtime& rt = runtime();
    std::shared_ptr<Stream> stream = rt.stream(args->stream);
    const size_t size = args->size;
    if (size == 0) return;  // a no-op, whatever the pointers
    int32_t stream_device = -1;  // the device whose stream must run the copy
    const void* pageable_host = nullptr;
    switch (args->kind) {
      case TFL_COPY_HOST_TO_DEVICE:
        check_host_side(rt, args->src, args->src_device, "src");
        check_device_side(rt, args->dst, args->dst_device, size, "dst");
        stream_device = args->dst_device;
        if (!rt.pinned().is_pinned(args->src, size)) pageable_host = args->src;
        break;
      case TFL_COPY_DEVICE_TO_HOST:
        check_device_side(rt, args->src, args->src_device, size, "src");
        check_host_side(rt, args->dst, args->dst_device, "dst");
        stream_device = args->src_device;
        if (!rt.pinned().is_pinned(args->dst, size)) pageable_host = args->dst;
        break;
      case TFL_COPY_DEVICE_TO_DEVICE:
        if (args->src_device != args->dst_device)
          tfl::invalid_argument("DEVICE_TO_DEVICE needs src_device == dst_device, got ", args->src_device, " and ",
                           args->dst_device, " (use TFL_COPY_PEER across devices)");
        [[fallthrough]];
      case TFL_COPY_PEER:
        check_device_side(rt, args->src, args->src_device, size, "src");
        check_device_side(rt, args->dst, args->dst_device, size, "dst");
        stream_device = args->src_device;
        break;
      default:
        tfl::invalid_argument("unknown copy kind ", args->kind);
    }
    if (stream->device() != stream_device)
      tfl::invalid_argument("the copy must run on a stream of device ", stream_device, ", but the stream belongs to device ",
                       stream->device());
    // VENDOR: enqueue your driver's DMA here.
    void* dst = args->dst;
    const void* src = args->src;
    const uint64_t ticket = stream->submit([dst, src, size] { std::memcpy(dst, src, size); });
    // Pageable host memory may change as soon as we return: wait for it.
    if (args->blocking != 0 || pageable_host != nullptr) {
      stream->wait(ticket);
      async_error = stream->take_error();
    }
  });
  return err != nullptr ? err : async_error;
}

TFL_Error* Memory_Set(TFL_Memory_Set_Args* args) {
  return tfl::guarded("Memory_Set", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Set_Args);
    Runtime& rt = runtime();
    std::shared_ptr<Stream> stream = rt.stream(args->stream);
    if (stream->device() != args->device)
      tfl::invalid_argument("the stream belongs to device ", stream->device(), ", not to device ", args->device);
    if (args->size == 0) return;
    check_device_side(rt, args->ptr, args->device, args->size, "ptr");
    void* ptr = args->ptr;
    const uint8_t value = args->value;
    const size_t size = args->size;
    // VENDOR: your driver's memset (or a fill kernel) goes here.
    stream->submit([ptr, value, size] { std::memset(ptr, value, size); });
  });
}

// ===========================================================================
// streams and events
// ===========================================================================

TFL_Error* Stream_Create(TFL_Stream_Create_Args* args) {
  return tfl::guarded("Stream_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Create_Args);
    args->stream = nullptr;
    // Priorities are a hint the emulation ignores.
    args->stream = runtime().create_stream(args->device);
  });
}

TFL_Error* Stream_Destroy(TFL_Stream_Destroy_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = tfl::guarded("Stream_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Destroy_Args);
    std::shared_ptr<Stream> stream = runtime().remove_stream(args->stream);
    stream->stop();  // completes the pending work first
    async_error = stream->take_error();
  });
  return err != nullptr ? err : async_error;
}

TFL_Error* Stream_Synchronize(TFL_Stream_Synchronize_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = tfl::guarded("Stream_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Synchronize_Args);
    std::shared_ptr<Stream> stream = runtime().stream(args->stream);
    stream->wait(stream->tail());
    async_error = stream->take_error();
  });
  return err != nullptr ? err : async_error;
}

TFL_Error* Stream_Query(TFL_Stream_Query_Args* args) {
  return tfl::guarded("Stream_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Query_Args);
    args->idle = runtime().stream(args->stream)->idle() ? 1 : 0;
  });
}

TFL_Error* Stream_WaitEvent(TFL_Stream_WaitEvent_Args* args) {
  return tfl::guarded("Stream_WaitEvent", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_WaitEvent_Args);
    Runtime& rt = runtime();
    std::shared_ptr<Stream> stream = rt.stream(args->stream);
    const Event::Mark mark = rt.event(args->event, "event").mark();
    if (mark.stream == nullptr || mark.stream == stream) return;  // never recorded, or already in order
    // The waiting stream's worker blocks until the other stream gets there;
    // the host thread does not wait. VENDOR: a hardware wait-on-event.
    stream->submit([mark] { mark.stream->wait(mark.ticket); });
  });
}

TFL_Error* Event_Create(TFL_Event_Create_Args* args) {
  return tfl::guarded("Event_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Create_Args);
    args->event = nullptr;
    // Flag bits this plugin does not know (a newer host's) are ignored.
    args->event = runtime().create_event(args->device, (args->flags & TFL_EVENT_TIMING) != 0);
  });
}

TFL_Error* Event_Destroy(TFL_Event_Destroy_Args* args) {
  return tfl::guarded("Event_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Destroy_Args);
    if (args->event == nullptr) return;
    runtime().destroy_event(args->event);
  });
}

TFL_Error* Event_Record(TFL_Event_Record_Args* args) {
  return tfl::guarded("Event_Record", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Record_Args);
    Runtime& rt = runtime();
    Event& event = rt.event(args->event, "event");
    std::shared_ptr<Stream> stream = rt.stream(args->stream);
    if (stream->device() != event.device())
      tfl::invalid_argument("the event belongs to device ", event.device(), " but the stream to device ", stream->device());
    event.record(stream);
  });
}

TFL_Error* Event_Synchronize(TFL_Event_Synchronize_Args* args) {
  TFL_Error* async_error = nullptr;
  TFL_Error* err = tfl::guarded("Event_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Synchronize_Args);
    async_error = runtime().event(args->event, "event").synchronize();
  });
  return err != nullptr ? err : async_error;
}

TFL_Error* Event_Query(TFL_Event_Query_Args* args) {
  return tfl::guarded("Event_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Query_Args);
    args->complete = runtime().event(args->event, "event").query() ? 1 : 0;
  });
}

TFL_Error* Event_ElapsedTime(TFL_Event_ElapsedTime_Args* args) {
  return tfl::guarded("Event_ElapsedTime", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_ElapsedTime_Args);
    Runtime& rt = runtime();
    int64_t ns[2] = {0, 0};
    const char* names[2] = {"start", "end"};
    TFL_Event* handles[2] = {args->start, args->end};
    for (int i = 0; i < 2; ++i) {
      Event& event = rt.event(handles[i], names[i]);
      const Event::Mark mark = event.mark();
      if (!event.timing()) tfl::invalid_argument("the ", names[i], " event was not created with TFL_EVENT_TIMING");
      if (mark.stream == nullptr) tfl::invalid_argument("the ", names[i], " event was never recorded");
      if (!mark.stream->reached(mark.ticket))
        tfl::invalid_argument("the ", names[i], " event has not completed yet (synchronize it first)");
      ns[i] = mark.time_ns->load();
    }
    args->milliseconds = static_cast<double>(ns[1] - ns[0]) / 1e6;
  });
}

// ===========================================================================
// kernels (the kernel table itself is in kernels.cpp)
// ===========================================================================

TFL_Error* Kernels_List(TFL_Kernels_List_Args* args) {
  return tfl::guarded("Kernels_List", [&] {
    TFL_CHECK_ARGS(args, TFL_Kernels_List_Args);
    list_kernels(&args->kernels, &args->num_kernels);
  });
}

// ===========================================================================
// the tables
// ===========================================================================

const TFL_CoreApi kCore = {
    TFL_CoreApi_STRUCT_SIZE, tfl::Error_Destroy, tfl::Error_Message, tfl::Error_GetCode,
    Plugin_GetInfo,          Plugin_Initialize,  Plugin_Shutdown,
};

const TFL_DeviceApi kDevice = {
    TFL_DeviceApi_STRUCT_SIZE, Device_Count, Device_GetProperties, Device_Synchronize, Device_CanAccessPeer,
};

const TFL_MemoryApi kMemory = {
    TFL_MemoryApi_STRUCT_SIZE, Memory_Allocate, Memory_Free, Memory_GetInfo, HostMemory_Allocate,
    HostMemory_Free,           Memory_Copy,     Memory_Set,
    nullptr,  // Memory_MapToHost: optional, only with TFL_CAP_HOST_MAPPING
    nullptr,  // Memory_Unmap
};

const TFL_StreamApi kStream = {
    TFL_StreamApi_STRUCT_SIZE, Stream_Create, Stream_Destroy, Stream_Synchronize, Stream_Query,
    Stream_WaitEvent,          Event_Create,  Event_Destroy,  Event_Record,       Event_Synchronize,
    Event_Query,               Event_ElapsedTime,
};

const TFL_KernelApi kKernels = {
    TFL_KernelApi_STRUCT_SIZE, Kernels_List,
    nullptr,  // Kernels_ListCustomOps: optional
};

const TFL_Api kApi = {
    TFL_Api_STRUCT_SIZE, TFL_ABI_MAJOR, TFL_ABI_MINOR, &kCore, &kDevice, &kMemory, &kStream, &kKernels,
    nullptr,  // collectives: optional (torch.distributed)
    nullptr,  // graph: optional (torch.compile)
    nullptr,  // tunables: optional
};

}  // namespace
}  // namespace {{ cookiecutter.package_slug }}

// The one required export. It must not fail or touch the device: real work
// starts in Plugin_Initialize.
extern "C" TFL_EXPORT const TFL_Api* TFL_GetPluginApi(void) { return &{{ cookiecutter.package_slug }}::kApi; }
