// The plugin ABI over the CUDA runtime: every TFL_* function, grouped as in
// torch_fl/plugin_api.h, and the tables TFL_GetPluginApi hands the host.
// Streams and events are CUDA streams and events; device memory is plain
// cudaMalloc (the bridge caches it); pinned host memory is cudaHostAlloc.
// The kernels are in kernels/ (their table: kernels/kernel_table.cpp).
#include <cstring>

#include "cublas_loader.h"
#include "kernels/kernel_table.h"
#include "runtime.h"

namespace flcuda {

namespace {

constexpr const char* kPluginName = "flcuda";
constexpr const char* kVendor = "torch-fl project";
constexpr const char* kVersion = "0.1.0";
constexpr const char* kDeviceType = "flcuda";

// ===========================================================================
// core
// ===========================================================================

TFL_Error* Plugin_GetInfo(TFL_Plugin_GetInfo_Args* args) {
  return tfl::guarded("Plugin_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_GetInfo_Args);
    args->name = kPluginName;
    args->vendor = kVendor;
    args->version = kVersion;
    args->device_type = kDeviceType;
    args->description = "NVIDIA GPUs through the CUDA runtime and cuBLAS, written against the torch-fl ABI only";
  });
}

TFL_Error* Plugin_Initialize(TFL_Plugin_Initialize_Args* args) {
  return tfl::guarded("Plugin_Initialize", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Initialize_Args);
    if (args->host_abi_major != TFL_ABI_MAJOR)
      tfl::fail(TFL_ERR_ABI_MISMATCH, "the host speaks torch-fl ABI ", args->host_abi_major, ".",
                args->host_abi_minor, " but this plugin was built for ABI ", TFL_ABI_MAJOR, ".", TFL_ABI_MINOR,
                "; rebuild the plugin against the host's headers");
    if (args->num_options > 0 && (args->option_keys == nullptr || args->option_values == nullptr))
      tfl::invalid_argument("num_options is ", args->num_options, " but option_keys or option_values is NULL");
    if (!runtime_initialize(args)) return;
    const std::string why = cublas_open();
    if (!why.empty()) runtime().log(TFL_LOG_WARNING, "flcuda: " + why);
  });
}

TFL_Error* Plugin_Shutdown(TFL_Plugin_Shutdown_Args* args) {
  return tfl::guarded("Plugin_Shutdown", [&] {
    TFL_CHECK_ARGS(args, TFL_Plugin_Shutdown_Args);
    runtime_shutdown();
  });
}

// ===========================================================================
// device
// ===========================================================================

TFL_Error* Device_Count(TFL_Device_Count_Args* args) {
  return tfl::guarded("Device_Count", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_Count_Args);
    args->count = runtime().device_count;
  });
}

TFL_Error* Device_GetProperties(TFL_Device_GetProperties_Args* args) {
  return tfl::guarded("Device_GetProperties", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_GetProperties_Args);
    check_device(args->device);
    TFL_DeviceProperties* p = args->properties;
    if (p == nullptr) tfl::invalid_argument("properties is NULL");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, args->device), "cudaGetDeviceProperties");
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, name)) {
      std::memset(p->name, 0, sizeof(p->name));
      std::memcpy(p->name, prop.name, strnlen(prop.name, sizeof(p->name) - 1));
    }
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, total_memory)) p->total_memory = prop.totalGlobalMem;
    // Kernels declare the dtypes they compute; the others fall back.
    uint64_t caps = TFL_CAP_FP64 | TFL_CAP_FP16 | TFL_CAP_TIMING_EVENTS | TFL_CAP_ASYNC_COPY;
    if (prop.major >= 8) caps |= TFL_CAP_BF16;
    if (runtime().device_count > 1) caps |= TFL_CAP_PEER_ACCESS;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, capabilities)) p->capabilities = caps;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, memory_alignment)) p->memory_alignment = 256;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, preferred_memory_format))
      p->preferred_memory_format = TFL_MEMORY_FORMAT_CONTIGUOUS;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, compute_units)) p->compute_units = prop.multiProcessorCount;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_major)) p->version_major = prop.major;
    if (TFL_HAS_FIELD(p, TFL_DeviceProperties, version_minor)) p->version_minor = prop.minor;
  });
}

TFL_Error* Device_Synchronize(TFL_Device_Synchronize_Args* args) {
  return tfl::guarded("Device_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_Synchronize_Args);
    check_device(args->device);
    use_device(args->device);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  });
}

TFL_Error* Device_CanAccessPeer(TFL_Device_CanAccessPeer_Args* args) {
  return tfl::guarded("Device_CanAccessPeer", [&] {
    TFL_CHECK_ARGS(args, TFL_Device_CanAccessPeer_Args);
    check_device(args->device);
    check_device(args->peer);
    if (args->device == args->peer) {
      args->can_access = 1;
      return;
    }
    int can = 0;
    check_cuda(cudaDeviceCanAccessPeer(&can, args->device, args->peer), "cudaDeviceCanAccessPeer");
    args->can_access = can != 0 ? 1 : 0;
  });
}

// ===========================================================================
// memory
// ===========================================================================

TFL_Error* Memory_Allocate(TFL_Memory_Allocate_Args* args) {
  return tfl::guarded("Memory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Allocate_Args);
    args->ptr = nullptr;
    check_device(args->device);
    use_device(args->device);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, args->size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      tfl::fail(TFL_ERR_OUT_OF_MEMORY, "cudaMalloc of ", args->size, " bytes on device ", args->device, " failed (",
                free_b, " of ", total_b, " bytes free)");
    }
    check_cuda(err, "cudaMalloc");
    args->ptr = ptr;
  });
}

TFL_Error* Memory_Free(TFL_Memory_Free_Args* args) {
  return tfl::guarded("Memory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Free_Args);
    if (args->ptr == nullptr) return;
    check_device(args->device);
    use_device(args->device);
    check_cuda(cudaFree(args->ptr), "cudaFree");
  });
}

TFL_Error* Memory_GetInfo(TFL_Memory_GetInfo_Args* args) {
  return tfl::guarded("Memory_GetInfo", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_GetInfo_Args);
    check_device(args->device);
    use_device(args->device);
    size_t free_b = 0, total_b = 0;
    check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    args->free_bytes = free_b;
    args->total_bytes = total_b;
  });
}

TFL_Error* HostMemory_Allocate(TFL_HostMemory_Allocate_Args* args) {
  return tfl::guarded("HostMemory_Allocate", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Allocate_Args);
    args->ptr = nullptr;
    runtime();
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, args->size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      tfl::fail(TFL_ERR_OUT_OF_MEMORY, "cudaHostAlloc of ", args->size, " pinned bytes failed");
    }
    check_cuda(err, "cudaHostAlloc");
    args->ptr = ptr;
  });
}

TFL_Error* HostMemory_Free(TFL_HostMemory_Free_Args* args) {
  return tfl::guarded("HostMemory_Free", [&] {
    TFL_CHECK_ARGS(args, TFL_HostMemory_Free_Args);
    if (args->ptr == nullptr) return;
    runtime();
    check_cuda(cudaFreeHost(args->ptr), "cudaFreeHost");
  });
}

TFL_Error* Memory_Copy(TFL_Memory_Copy_Args* args) {
  return tfl::guarded("Memory_Copy", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Copy_Args);
    runtime();
    if (args->size == 0) return;
    StreamRec& s = stream_rec(args->stream);
    int32_t stream_device = -1;
    cudaMemcpyKind kind = cudaMemcpyDefault;
    switch (args->kind) {
      case TFL_COPY_HOST_TO_DEVICE:
        stream_device = args->dst_device;
        kind = cudaMemcpyHostToDevice;
        break;
      case TFL_COPY_DEVICE_TO_HOST:
        stream_device = args->src_device;
        kind = cudaMemcpyDeviceToHost;
        break;
      case TFL_COPY_DEVICE_TO_DEVICE:
        if (args->src_device != args->dst_device)
          tfl::invalid_argument("DEVICE_TO_DEVICE needs src_device == dst_device, got ", args->src_device, " and ",
                                args->dst_device, " (use TFL_COPY_PEER across devices)");
        stream_device = args->src_device;
        kind = cudaMemcpyDeviceToDevice;
        break;
      case TFL_COPY_PEER:
        stream_device = args->src_device;
        break;
      default: tfl::invalid_argument("unknown copy kind ", args->kind);
    }
    check_device(stream_device);
    if (s.device != stream_device)
      tfl::invalid_argument("the copy must run on a stream of device ", stream_device,
                            ", but the stream belongs to device ", s.device);
    use_device(stream_device);
    if (args->kind == TFL_COPY_PEER) {
      check_device(args->dst_device);
      check_cuda(cudaMemcpyPeerAsync(args->dst, args->dst_device, args->src, args->src_device, args->size, s.stream),
                 "cudaMemcpyPeerAsync");
    } else {
      // Pageable host memory: cudaMemcpyAsync has read the source (H2D) or
      // written the destination (D2H) before it returns.
      check_cuda(cudaMemcpyAsync(args->dst, args->src, args->size, kind, s.stream), "cudaMemcpyAsync");
    }
    if (args->blocking != 0) check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  });
}

TFL_Error* Memory_Set(TFL_Memory_Set_Args* args) {
  return tfl::guarded("Memory_Set", [&] {
    TFL_CHECK_ARGS(args, TFL_Memory_Set_Args);
    check_device(args->device);
    StreamRec& s = stream_rec(args->stream);
    if (s.device != args->device)
      tfl::invalid_argument("the stream belongs to device ", s.device, ", not to device ", args->device);
    if (args->size == 0) return;
    use_device(args->device);
    check_cuda(cudaMemsetAsync(args->ptr, args->value, args->size, s.stream), "cudaMemsetAsync");
  });
}

// ===========================================================================
// streams and events
// ===========================================================================

TFL_Error* Stream_Create(TFL_Stream_Create_Args* args) {
  return tfl::guarded("Stream_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Create_Args);
    args->stream = nullptr;
    check_device(args->device);
    use_device(args->device);
    int least = 0, greatest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    // ABI: 0 normal, negative higher; CUDA: lower numbers are higher too.
    int priority = args->priority < 0 ? args->priority : 0;
    if (priority < greatest) priority = greatest;
    cudaStream_t stream = nullptr;
    // Non-blocking: never serialized against the legacy default stream,
    // which this plugin never uses.
    check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority), "cudaStreamCreateWithPriority");
    args->stream = reinterpret_cast<TFL_Stream*>(new StreamRec{kStreamMagic, args->device, stream});
  });
}

TFL_Error* Stream_Destroy(TFL_Stream_Destroy_Args* args) {
  return tfl::guarded("Stream_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Destroy_Args);
    StreamRec& s = stream_rec(args->stream);
    use_device(s.device);
    const cudaError_t pending = cudaStreamSynchronize(s.stream);
    (void)cudaStreamDestroy(s.stream);
    s.magic = 0;
    delete &s;
    check_cuda(pending, "cudaStreamSynchronize (before destroying the stream)");
  });
}

TFL_Error* Stream_Synchronize(TFL_Stream_Synchronize_Args* args) {
  return tfl::guarded("Stream_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Synchronize_Args);
    check_cuda(cudaStreamSynchronize(stream_rec(args->stream).stream), "cudaStreamSynchronize");
  });
}

TFL_Error* Stream_Query(TFL_Stream_Query_Args* args) {
  return tfl::guarded("Stream_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_Query_Args);
    const cudaError_t err = cudaStreamQuery(stream_rec(args->stream).stream);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      args->idle = 0;
      return;
    }
    check_cuda(err, "cudaStreamQuery");
    args->idle = 1;
  });
}

TFL_Error* Stream_WaitEvent(TFL_Stream_WaitEvent_Args* args) {
  return tfl::guarded("Stream_WaitEvent", [&] {
    TFL_CHECK_ARGS(args, TFL_Stream_WaitEvent_Args);
    StreamRec& s = stream_rec(args->stream);
    EventRec& e = event_rec(args->event);
    if (!e.recorded) return;  // a never-recorded event is complete
    use_device(s.device);
    check_cuda(cudaStreamWaitEvent(s.stream, e.event, 0), "cudaStreamWaitEvent");
  });
}

TFL_Error* Event_Create(TFL_Event_Create_Args* args) {
  return tfl::guarded("Event_Create", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Create_Args);
    args->event = nullptr;
    check_device(args->device);
    use_device(args->device);
    const bool timing = (args->flags & TFL_EVENT_TIMING) != 0;  // other bits: ignored
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming),
               "cudaEventCreateWithFlags");
    args->event = reinterpret_cast<TFL_Event*>(new EventRec{kEventMagic, args->device, timing, false, event});
  });
}

TFL_Error* Event_Destroy(TFL_Event_Destroy_Args* args) {
  return tfl::guarded("Event_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Destroy_Args);
    EventRec& e = event_rec(args->event);
    use_device(e.device);
    // Waits already enqueued on it still complete (CUDA defers the release).
    const cudaError_t err = cudaEventDestroy(e.event);
    e.magic = 0;
    delete &e;
    check_cuda(err, "cudaEventDestroy");
  });
}

TFL_Error* Event_Record(TFL_Event_Record_Args* args) {
  return tfl::guarded("Event_Record", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Record_Args);
    EventRec& e = event_rec(args->event);
    StreamRec& s = stream_rec(args->stream);
    if (s.device != e.device)
      tfl::invalid_argument("the event belongs to device ", e.device, " but the stream to device ", s.device);
    use_device(s.device);
    check_cuda(cudaEventRecord(e.event, s.stream), "cudaEventRecord");
    e.recorded = true;
  });
}

TFL_Error* Event_Synchronize(TFL_Event_Synchronize_Args* args) {
  return tfl::guarded("Event_Synchronize", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Synchronize_Args);
    EventRec& e = event_rec(args->event);
    if (!e.recorded) return;
    check_cuda(cudaEventSynchronize(e.event), "cudaEventSynchronize");
  });
}

TFL_Error* Event_Query(TFL_Event_Query_Args* args) {
  return tfl::guarded("Event_Query", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_Query_Args);
    EventRec& e = event_rec(args->event);
    if (!e.recorded) {
      args->complete = 1;
      return;
    }
    const cudaError_t err = cudaEventQuery(e.event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      args->complete = 0;
      return;
    }
    check_cuda(err, "cudaEventQuery");
    args->complete = 1;
  });
}

TFL_Error* Event_ElapsedTime(TFL_Event_ElapsedTime_Args* args) {
  return tfl::guarded("Event_ElapsedTime", [&] {
    TFL_CHECK_ARGS(args, TFL_Event_ElapsedTime_Args);
    EventRec& a = event_rec(args->start);
    EventRec& b = event_rec(args->end);
    if (!a.timing || !b.timing) tfl::invalid_argument("both events must be created with TFL_EVENT_TIMING");
    if (!a.recorded || !b.recorded) tfl::invalid_argument("both events must be recorded first");
    float ms = 0.0f;
    const cudaError_t err = cudaEventElapsedTime(&ms, a.event, b.event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      tfl::invalid_argument("an event has not completed yet (synchronize it first)");
    }
    check_cuda(err, "cudaEventElapsedTime");
    args->milliseconds = static_cast<double>(ms);
  });
}

// ===========================================================================
// kernels
// ===========================================================================

TFL_Error* Kernels_List(TFL_Kernels_List_Args* args) {
  return tfl::guarded("Kernels_List", [&] {
    TFL_CHECK_ARGS(args, TFL_Kernels_List_Args);
    // Static data: readable before Plugin_Initialize, so tools (and the
    // GPU-free tests) can inspect the table on any machine.
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
    nullptr,  // Memory_MapToHost: device memory is not host-mapped
    nullptr,  // Memory_Unmap
};

const TFL_StreamApi kStream = {
    TFL_StreamApi_STRUCT_SIZE, Stream_Create, Stream_Destroy, Stream_Synchronize, Stream_Query,
    Stream_WaitEvent,          Event_Create,  Event_Destroy,  Event_Record,       Event_Synchronize,
    Event_Query,               Event_ElapsedTime,
};

const TFL_KernelApi kKernels = {
    TFL_KernelApi_STRUCT_SIZE, Kernels_List,
    nullptr,  // Kernels_ListCustomOps
};

const TFL_Api kApi = {
    TFL_Api_STRUCT_SIZE, TFL_ABI_MAJOR, TFL_ABI_MINOR, &kCore, &kDevice, &kMemory, &kStream, &kKernels,
    nullptr,  // collectives
    nullptr,  // graph
    nullptr,  // tunables
};

}  // namespace
}  // namespace flcuda

extern "C" TFL_EXPORT const TFL_Api* TFL_GetPluginApi(void) {
  ::torch_fl::helpers::set_error_prefix("flcuda: ");
  return &flcuda::kApi;
}
