// Drives libflemu.so through TFL_GetPluginApi only and checks what the ABI
// promises. Usage: runtime_check [LIBRARY] [MODE]; LIBRARY defaults to
// $FLEMU_LIBRARY, MODE to "all". Other modes: init, kernels, inject-sync,
// inject-async, crash, strict-probe, bench.
#include "abi_driver.h"

// ---------------------------------------------------------------------------
// Tests: identity, versions, initialization
// ---------------------------------------------------------------------------

static void test_api_table() {
  CHECK(g_api != nullptr, "TFL_GetPluginApi returned NULL");
  CHECK_EQ(g_api->abi_major, uint32_t{TFL_ABI_MAJOR});
  CHECK_EQ(g_api->abi_minor, uint32_t{TFL_ABI_MINOR});
  CHECK(g_api->struct_size >= TFL_Api_STRUCT_SIZE, "struct_size ", g_api->struct_size, " < ", TFL_Api_STRUCT_SIZE);
  CHECK(g_api->core && g_api->device && g_api->memory && g_api->stream, "a required table is NULL");
  CHECK(g_api->kernels != nullptr, "flemu provides kernels");
  // flemu implements every optional group.
  CHECK(g_api->collectives && g_api->graph && g_api->tunables, "an optional group flemu implements is NULL");
  CHECK_EQ(g_api->collectives->struct_size, TFL_CollectivesApi_STRUCT_SIZE);
  CHECK_EQ(g_api->graph->struct_size, TFL_GraphApi_STRUCT_SIZE);
  CHECK_EQ(g_api->tunables->struct_size, TFL_TunablesApi_STRUCT_SIZE);
  CHECK_EQ(g_api->core->struct_size, TFL_CoreApi_STRUCT_SIZE);
  CHECK_EQ(g_api->device->struct_size, TFL_DeviceApi_STRUCT_SIZE);
  CHECK_EQ(g_api->memory->struct_size, TFL_MemoryApi_STRUCT_SIZE);
  CHECK_EQ(g_api->stream->struct_size, TFL_StreamApi_STRUCT_SIZE);
  CHECK_EQ(g_api->kernels->struct_size, TFL_KernelApi_STRUCT_SIZE);
  const void* required[] = {
      (void*)g_api->core->Error_Destroy, (void*)g_api->core->Error_Message, (void*)g_api->core->Error_GetCode,
      (void*)g_api->core->Plugin_GetInfo, (void*)g_api->core->Plugin_Initialize, (void*)g_api->core->Plugin_Shutdown,
      (void*)g_api->device->Device_Count, (void*)g_api->device->Device_GetProperties,
      (void*)g_api->device->Device_Synchronize, (void*)g_api->device->Device_CanAccessPeer,
      (void*)g_api->memory->Memory_Allocate, (void*)g_api->memory->Memory_Free, (void*)g_api->memory->Memory_GetInfo,
      (void*)g_api->memory->HostMemory_Allocate, (void*)g_api->memory->HostMemory_Free,
      (void*)g_api->memory->Memory_Copy, (void*)g_api->memory->Memory_Set, (void*)g_api->memory->Memory_MapToHost,
      (void*)g_api->memory->Memory_Unmap, (void*)g_api->stream->Stream_Create, (void*)g_api->stream->Stream_Destroy,
      (void*)g_api->stream->Stream_Synchronize, (void*)g_api->stream->Stream_Query,
      (void*)g_api->stream->Stream_WaitEvent, (void*)g_api->stream->Event_Create, (void*)g_api->stream->Event_Destroy,
      (void*)g_api->stream->Event_Record, (void*)g_api->stream->Event_Synchronize, (void*)g_api->stream->Event_Query,
      (void*)g_api->stream->Event_ElapsedTime, (void*)g_api->kernels->Kernels_List,
      (void*)g_api->kernels->Kernels_ListCustomOps};
  for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); ++i)
    CHECK(required[i] != nullptr, "function pointer #", i, " is NULL");

  TFL_Plugin_GetInfo_Args info{TFL_Plugin_GetInfo_Args_STRUCT_SIZE, nullptr, nullptr, nullptr, nullptr, nullptr};
  CHECK_OK(g_api->core->Plugin_GetInfo(&info));  // allowed before Initialize
  CHECK_EQ(std::string(info.name), std::string("flemu"));
  CHECK_EQ(std::string(info.vendor), std::string("torch-fl project"));
  CHECK_EQ(std::string(info.version), std::string("0.1.0"));
  CHECK_EQ(std::string(info.device_type), std::string("flemu"));
  CHECK_EQ(std::string(info.description), std::string("FL-2000 emulator: a CPU-emulated reference accelerator"));
}

static void test_before_init() {
  TFL_Device_Count_Args a{TFL_Device_Count_Args_STRUCT_SIZE, 0};
  CHECK_ERR(g_api->device->Device_Count(&a), TFL_ERR_INVALID_ARGUMENT, "not initialized");
  const std::string own = std::to_string(TFL_ABI_MAJOR) + "." + std::to_string(TFL_ABI_MINOR);
  CHECK_ERR(initialize(TFL_ABI_MAJOR + 1, 3), TFL_ERR_ABI_MISMATCH, "2.3", own.c_str(), "major");
  CHECK_ERR(initialize(TFL_ABI_MAJOR, 0, {{"FLEMU_MEMORY_BYTES", "12X"}}), TFL_ERR_INVALID_ARGUMENT,
            "FLEMU_MEMORY_BYTES", "12X", "expected");
  CHECK_ERR(initialize(TFL_ABI_MAJOR, 0, {{"FLEMU_INJECT_ERROR", "aten::nope:3"}}), TFL_ERR_INVALID_ARGUMENT,
            "FLEMU_INJECT_ERROR", "aten::nope");
  CHECK_ERR(initialize(TFL_ABI_MAJOR, 0, {{"FLEMU_FP64", "maybe"}}), TFL_ERR_INVALID_ARGUMENT, "FLEMU_FP64", "maybe",
            "0 or 1");
  CHECK_ERR(initialize(TFL_ABI_MAJOR, 0, {{"FLEMU_ISA", "sse"}}), TFL_ERR_INVALID_ARGUMENT, "FLEMU_ISA", "sse",
            "auto, baseline, avx2 or avx512");
}

// ---------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------

static void test_devices() {
  CHECK_EQ(device_count(), g_env.devices);
  for (int d = 0; d < g_env.devices; ++d) {
    TFL_DeviceProperties p{};
    p.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
    TFL_Device_GetProperties_Args a{TFL_Device_GetProperties_Args_STRUCT_SIZE, d, &p};
    CHECK_OK(g_api->device->Device_GetProperties(&a));
    CHECK_EQ(std::string(p.name), std::string("FL-2000 (emulated)"));
    CHECK_EQ(p.total_memory, (g_env.memory + 4095) / 4096 * 4096);
    CHECK_EQ(p.memory_alignment, 256u);
    CHECK_EQ(p.preferred_memory_format, int32_t{TFL_MEMORY_FORMAT_CONTIGUOUS});
    CHECK(p.compute_units >= 1, "compute_units ", p.compute_units);
    CHECK_EQ(p.version_major, 1);
    CHECK_EQ(p.version_minor, 0);
    uint64_t caps = TFL_CAP_HOST_MAPPING | TFL_CAP_TIMING_EVENTS | TFL_CAP_ASYNC_COPY;
    if (g_env.fp64) caps |= TFL_CAP_FP64;
    if (g_env.fp16) caps |= TFL_CAP_FP16;
    if (g_env.bf16) caps |= TFL_CAP_BF16;
    if (g_env.peer) caps |= TFL_CAP_PEER_ACCESS;
    CHECK_EQ(p.capabilities, caps);
    CHECK((p.capabilities & (TFL_CAP_UNIFIED_MEMORY | TFL_CAP_COMPLEX)) == 0, "no unified memory, no complex");
  }
  // A host with an older, smaller properties struct only gets what fits.
  {
    struct Small {
      size_t struct_size;
      char name[128];
      uint64_t total_memory;
      uint64_t guard;
    } s{};
    s.struct_size = offsetof(TFL_DeviceProperties, total_memory) + sizeof(uint64_t);
    s.guard = 0x1234;
    TFL_Device_GetProperties_Args a{TFL_Device_GetProperties_Args_STRUCT_SIZE, 0,
                                    reinterpret_cast<TFL_DeviceProperties*>(&s)};
    CHECK_OK(g_api->device->Device_GetProperties(&a));
    CHECK_EQ(s.guard, uint64_t{0x1234});
  }
  TFL_DeviceProperties p{};
  p.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
  TFL_Device_GetProperties_Args bad{TFL_Device_GetProperties_Args_STRUCT_SIZE, g_env.devices, &p};
  CHECK_ERR(g_api->device->Device_GetProperties(&bad), TFL_ERR_INVALID_ARGUMENT, "device index", "out of range");
  if (g_env.devices >= 2) {
    TFL_Device_CanAccessPeer_Args a{TFL_Device_CanAccessPeer_Args_STRUCT_SIZE, 0, 1, 7};
    CHECK_OK(g_api->device->Device_CanAccessPeer(&a));
    CHECK_EQ(int(a.can_access), g_env.peer ? 1 : 0);
  }
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------


static long rss_shmem_kb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "RssShmem: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb;
}

static void test_memory() {
  const uint64_t total = (g_env.memory + 4095) / 4096 * 4096;
  const uint64_t before = free_bytes(0);
  void* p = alloc_ok(0, 1000);
  CHECK_EQ(reinterpret_cast<uintptr_t>(p) % 256, uintptr_t{0});
  CHECK_EQ(free_bytes(0), before - 1024);
  void* q = alloc_ok(0, 1);
  CHECK(q != p, "distinct allocations");
  CHECK_OK(dfree(0, q));
  CHECK_OK(dfree(0, p));
  CHECK_EQ(free_bytes(0), before);

  void* none = nullptr;
  CHECK_ERR(alloc(0, 0, &none), TFL_ERR_INVALID_ARGUMENT, "0 bytes");
  std::string msg = CHECK_ERR(alloc(0, total + 1, &none), TFL_ERR_OUT_OF_MEMORY, "requested", "free", "total");
  CHECK(msg.find(std::to_string(total + 1)) != std::string::npos, "OOM message names the request: ", msg);
  CHECK(none == nullptr, "ptr stays NULL on failure");
  // Fill most of the device, fail one that does not fit, then fit one that does.
  void* big = alloc_ok(0, total / 2);
  CHECK_ERR(alloc(0, total / 2 + 4096, &none), TFL_ERR_OUT_OF_MEMORY, "device 0");
  void* fits = alloc_ok(0, total / 4);
  CHECK(fits != nullptr, "an allocation that fits works after an OOM");
  CHECK_OK(dfree(0, fits));
  CHECK_OK(dfree(0, big));
  CHECK_EQ(free_bytes(0), before);

  int local = 0;
  CHECK_ERR(dfree(0, &local), TFL_ERR_INVALID_ARGUMENT, "not device memory");
  void* r = alloc_ok(0, 4096);
  CHECK_ERR(dfree(0, static_cast<char*>(r) + 256), TFL_ERR_INVALID_ARGUMENT, "no allocation");
  CHECK_OK(dfree(0, r));
  CHECK_ERR(dfree(0, r), TFL_ERR_INVALID_ARGUMENT, "no allocation");
  CHECK_ERR(alloc(g_env.devices, 16, &none), TFL_ERR_INVALID_ARGUMENT, "out of range");

  if (g_env.devices >= 2) {
    void* a0 = alloc_ok(0, 4096);
    void* a1 = alloc_ok(1, 4096);
    const auto x = reinterpret_cast<uintptr_t>(a0), y = reinterpret_cast<uintptr_t>(a1);
    CHECK(x + total <= y || y + total <= x || (x < y ? y - x >= 4096 : x - y >= 4096), "devices overlap");
    CHECK_ERR(dfree(0, a1), TFL_ERR_INVALID_ARGUMENT, "belongs to device 1");
    CHECK_OK(dfree(1, a1));
    CHECK_OK(dfree(0, a0));
  }

  // Large frees give their pages back.
  if (total >= (uint64_t{96} << 20)) {
    const size_t n = size_t{64} << 20;
    void* b = alloc_ok(0, n);
    CHECK_OK(memset_dev(0, b, 1, n, g_streams[0]));
    CHECK_OK(stream_sync(g_streams[0]));
    const long touched = rss_shmem_kb();
    CHECK_OK(dfree(0, b));
    const long released = rss_shmem_kb();
    CHECK(touched - released >= 48 * 1024, "RssShmem went from ", touched, " kB to ", released,
          " kB after freeing 64 MiB; expected a drop of at least 48 MiB");
  }

  // Pinned host memory.
  TFL_HostMemory_Allocate_Args ha{TFL_HostMemory_Allocate_Args_STRUCT_SIZE, 10000, nullptr};
  CHECK_OK(g_api->memory->HostMemory_Allocate(&ha));
  CHECK_EQ(reinterpret_cast<uintptr_t>(ha.ptr) % 4096, uintptr_t{0});
  std::memset(ha.ptr, 7, 10000);
  TFL_HostMemory_Free_Args hf{TFL_HostMemory_Free_Args_STRUCT_SIZE, ha.ptr};
  CHECK_OK(g_api->memory->HostMemory_Free(&hf));
  CHECK_ERR(g_api->memory->HostMemory_Free(&hf), TFL_ERR_INVALID_ARGUMENT, "not pinned");
}

// ---------------------------------------------------------------------------
// Copies
// ---------------------------------------------------------------------------

static void test_copies() {
  TFL_Stream* s = g_streams[0];
  const size_t n = 1 << 20;
  std::vector<unsigned char> src(n), back(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  void* d0 = alloc_ok(0, n);
  void* d1 = alloc_ok(0, n);
  CHECK_OK(copy(TFL_COPY_HOST_TO_DEVICE, d0, 0, src.data(), -1, n, s, true));
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_DEVICE, d1, 0, d0, 0, n, s, true));
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d1, 0, n, s, true));
  CHECK(back == src, "H2D -> D2D -> D2H round trip");
  // Offsets inside an allocation, and a no-op size 0.
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, static_cast<char*>(d1) + 1000, 0, 24, s, true));
  CHECK(std::memcmp(back.data(), src.data() + 1000, 24) == 0, "copy from an offset");
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, nullptr, -1, nullptr, 0, 0, s, true));
  // Memset.
  CHECK_OK(memset_dev(0, static_cast<char*>(d0) + 16, 0x5A, 100, s));
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d0, 0, 200, s, true));
  CHECK(back[15] == src[15] && back[16] == 0x5A && back[115] == 0x5A && back[116] == src[116], "memset range");

  // Validation.
  CHECK_ERR(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d0, 0, n + 1, s, true), TFL_ERR_INVALID_ARGUMENT,
            "past the end");
  CHECK_ERR(copy(TFL_COPY_HOST_TO_DEVICE, d0, 0, d1, -1, 16, s, true), TFL_ERR_INVALID_ARGUMENT, "device memory");
  CHECK_ERR(copy(TFL_COPY_HOST_TO_DEVICE, src.data(), 0, src.data(), -1, 16, s, true), TFL_ERR_INVALID_ARGUMENT,
            "not device memory");
  CHECK_ERR(copy(TFL_COPY_DEVICE_TO_DEVICE, d1, 1, d0, 0, 16, s, true), TFL_ERR_INVALID_ARGUMENT, "PEER");
  CHECK_ERR(copy(42, d1, 0, d0, 0, 16, s, true), TFL_ERR_INVALID_ARGUMENT, "unknown copy kind");
  CHECK_ERR(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d0, 0, 16, nullptr, true), TFL_ERR_INVALID_ARGUMENT,
            "stream is NULL");
  CHECK_ERR(memset_dev(0, static_cast<char*>(d0) + n - 8, 0, 16, s), TFL_ERR_INVALID_ARGUMENT, "past the end");

  // Peer copies.
  if (g_env.devices >= 2) {
    void* p1 = alloc_ok(1, n);
    if (g_env.peer) {
      CHECK_OK(copy(TFL_COPY_PEER, p1, 1, d0, 0, n, s, true));
      std::vector<unsigned char> from1(n);
      CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, from1.data(), -1, p1, 1, n, g_streams[1], true));
      CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d0, 0, n, s, true));
      CHECK(from1 == back, "peer copy device 0 -> 1");
      CHECK_ERR(copy(TFL_COPY_PEER, p1, 1, d0, 0, n, g_streams[1], true), TFL_ERR_INVALID_ARGUMENT,
                "stream of device 0");
    } else {
      CHECK_ERR(copy(TFL_COPY_PEER, p1, 1, d0, 0, n, s, true), TFL_ERR_INVALID_ARGUMENT, "FLEMU_PEER_ACCESS=0");
    }
    CHECK_OK(dfree(1, p1));
  }

  // Host mapping returns flemu's view of the memory.
  TFL_Memory_MapToHost_Args m{TFL_Memory_MapToHost_Args_STRUCT_SIZE, 0, d0, 64, nullptr};
  CHECK_OK(g_api->memory->Memory_MapToHost(&m));
  CHECK(m.host_ptr != nullptr, "MapToHost gives a pointer");
  if (m.host_ptr) {
    std::memset(m.host_ptr, 0x11, 64);
    CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d0, 0, 64, s, true));
    CHECK(back[0] == 0x11 && back[63] == 0x11, "writes through the host mapping are visible to copies");
    TFL_Memory_Unmap_Args u{TFL_Memory_Unmap_Args_STRUCT_SIZE, 0, m.host_ptr, 64};
    CHECK_OK(g_api->memory->Memory_Unmap(&u));
    TFL_Memory_Unmap_Args bad{TFL_Memory_Unmap_Args_STRUCT_SIZE, 0, back.data(), 64};
    CHECK_ERR(g_api->memory->Memory_Unmap(&bad), TFL_ERR_INVALID_ARGUMENT, "MapToHost");
  }

  // Blocking copies are ordered after queued work; async copies with pinned
  // memory return before the data has landed.
  const size_t big = size_t{32} << 20;
  void* scratch = alloc_ok(0, big);
  TFL_HostMemory_Allocate_Args ha{TFL_HostMemory_Allocate_Args_STRUCT_SIZE, n, nullptr};
  CHECK_OK(g_api->memory->HostMemory_Allocate(&ha));
  auto* pinned = static_cast<unsigned char*>(ha.ptr);
  std::memset(pinned, 0, n);
  busy(s, 0, scratch, big, 4);
  CHECK_OK(memset_dev(0, d0, 0x42, n, s));
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, pinned, -1, d0, 0, n, s, false));
  const bool landed_early = pinned[n - 1] == 0x42;
  CHECK(!stream_idle(s), "the stream still has the queued work after an async copy returns");
  CHECK_OK(stream_sync(s));
  CHECK(pinned[0] == 0x42 && pinned[n - 1] == 0x42, "async D2H into pinned memory after sync");
  CHECK(!landed_early, "an async copy into pinned memory behind 128 MiB of memsets landed before returning");
  // Pageable memory with blocking=0 is copied before returning.
  busy(s, 0, scratch, big, 2);
  CHECK_OK(memset_dev(0, d0, 0x43, n, s));
  std::vector<unsigned char> pageable(n, 0);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, pageable.data(), -1, d0, 0, n, s, false));
  CHECK(pageable[0] == 0x43 && pageable[n - 1] == 0x43, "non-blocking D2H into pageable memory behaves as blocking");
  // Async H2D from pinned memory, then a blocking read sees it.
  std::memset(pinned, 0x44, n);
  CHECK_OK(copy(TFL_COPY_HOST_TO_DEVICE, d1, 0, pinned, -1, n, s, false));
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, d1, 0, n, s, true));
  CHECK(back[0] == 0x44 && back[n - 1] == 0x44, "async H2D then blocking D2H on one stream");
  TFL_HostMemory_Free_Args hf{TFL_HostMemory_Free_Args_STRUCT_SIZE, ha.ptr};
  CHECK_OK(g_api->memory->HostMemory_Free(&hf));
  CHECK_OK(dfree(0, scratch));
  CHECK_OK(dfree(0, d0));
  CHECK_OK(dfree(0, d1));
}

// ---------------------------------------------------------------------------
// Streams and events
// ---------------------------------------------------------------------------


static void test_streams_and_events() {
  const size_t big = size_t{32} << 20;
  void* scratch = alloc_ok(0, big);

  // In-order execution: a long memset, then a fill of the first elements,
  // then a blocking read: the fill must land last.
  {
    Tensor x = make_tensor(TFL_DTYPE_FLOAT32, {16});
    void* region = x.base;
    busy(g_streams[0], 0, scratch, big, 3);
    CHECK_OK(memset_dev(0, region, 0x01, x.bytes, g_streams[0]));
    fill_f32(x, 5.0);
    auto v = download(x);
    CHECK_VALUES("fill after a memset on one stream", v, std::vector<LD>(16, 5.0L), TFL_DTYPE_FLOAT32);
    free_tensor(x);
  }

  // Streams are independent: a second stream runs while the first is busy.
  TFL_Stream* s2 = stream_create(0);
  {
    busy(g_streams[0], 0, scratch, big, 4);
    CHECK_OK(stream_sync(s2));
    CHECK(!stream_idle(g_streams[0]), "stream 1 is still busy while an empty stream 2 synchronizes");
    CHECK_OK(stream_sync(g_streams[0]));
  }

  // Cross-stream ordering through an event. Without the WaitEvent, stream 2
  // would read x before stream 1's fill (which sits behind 128 MiB of memsets).
#if defined(__SANITIZE_THREAD__)
  const int control_runs = 0;  // the run without the wait is a deliberate race
#else
  const int control_runs = 1;
#endif
  for (int with_wait = 1; with_wait >= 1 - control_runs; --with_wait) {
    Tensor x = make_tensor(TFL_DTYPE_FLOAT32, {1024});
    Tensor y = make_tensor(TFL_DTYPE_FLOAT32, {1024});
    fill_f32(x, 1.0);
    CHECK_OK(stream_sync(g_streams[0]));
    TFL_Event* e = event_create(0, 0);
    busy(g_streams[0], 0, scratch, big, 4);
    fill_f32(x, 3.0);
    CHECK_OK(event_record(e, g_streams[0]));
    if (with_wait) CHECK_OK(wait_event(s2, e));
    CHECK_OK(copy(TFL_COPY_DEVICE_TO_DEVICE, y.base, 0, x.base, 0, x.bytes, s2, false));
    std::vector<float> host(1024);
    CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, host.data(), -1, y.base, 0, y.bytes, s2, true));
    if (with_wait) {
      CHECK(host[0] == 3.0f && host[1023] == 3.0f, "stream 2 waited for the event: got ", host[0], ", expected 3");
      CHECK(event_query(e), "the event completed before stream 2 could copy");
    } else {
      // Informational: shows the wait is what orders the streams.
      std::printf("  without WaitEvent stream 2 read %g (stream 1 wrote 3 later)\n", host[0]);
    }
    CHECK_OK(event_sync(e));
    event_destroy(e);
    CHECK_OK(stream_sync(g_streams[0]));
    free_tensor(x);
    free_tensor(y);
  }

  // Events: never recorded = complete; query/synchronize; re-recording.
  {
    TFL_Event* e = event_create(0, 0);
    CHECK(event_query(e), "an event never recorded is complete");
    CHECK_OK(event_sync(e));
    busy(g_streams[0], 0, scratch, big, 3);
    CHECK_OK(event_record(e, g_streams[0]));
    CHECK(!event_query(e), "an event behind queued work is not complete");
    CHECK_OK(event_sync(e));
    CHECK(event_query(e), "complete after Event_Synchronize");
    CHECK_OK(event_record(e, g_streams[0]));
    CHECK_OK(stream_sync(g_streams[0]));
    CHECK(event_query(e), "re-recorded event completes with its stream");
    if (g_env.devices >= 2)
      CHECK_ERR(event_record(e, g_streams[1]), TFL_ERR_INVALID_ARGUMENT, "device 0", "device 1");
    // Destroying an event another stream waits on is fine.
    busy(g_streams[0], 0, scratch, big, 2);
    CHECK_OK(event_record(e, g_streams[0]));
    CHECK_OK(wait_event(s2, e));
    event_destroy(e);
    CHECK_OK(stream_sync(s2));
    CHECK_OK(stream_sync(g_streams[0]));
  }

  // Timing.
  {
    TFL_Event* a = event_create(0, TFL_EVENT_TIMING);
    TFL_Event* b = event_create(0, TFL_EVENT_TIMING);
    TFL_Event* plain = event_create(0, 0);
    double ms = -1;
    CHECK_ERR(elapsed(a, b, &ms), TFL_ERR_INVALID_ARGUMENT, "never recorded");
    CHECK_OK(event_record(a, g_streams[0]));
    CHECK_OK(event_sync(a));
    busy(g_streams[0], 0, scratch, big, 3);
    CHECK_OK(event_record(b, g_streams[0]));
    CHECK_ERR(elapsed(a, b, &ms), TFL_ERR_INVALID_ARGUMENT, "end event has not completed");
    CHECK_OK(event_sync(b));
    CHECK_OK(elapsed(a, b, &ms));
    CHECK(ms > 0.5 && ms < 60000, "elapsed time around 3 x 32 MiB of memset: ", ms, " ms");
    CHECK_OK(event_record(plain, g_streams[0]));
    CHECK_OK(event_sync(plain));
    CHECK_ERR(elapsed(a, plain, &ms), TFL_ERR_INVALID_ARGUMENT, "TFL_EVENT_TIMING");
    event_destroy(a);
    event_destroy(b);
    event_destroy(plain);
  }

  // Device_Synchronize waits for every stream of the device.
  void* scratch2 = alloc_ok(0, big);
  busy(s2, 0, scratch2, big, 2);
  busy(g_streams[0], 0, scratch, big, 2);
  CHECK_OK(device_sync(0));
  CHECK(stream_idle(s2) && stream_idle(g_streams[0]), "Device_Synchronize drained both streams");
  // Stream_Destroy drains first.
  busy(s2, 0, scratch2, big, 2);
  stream_destroy(s2);
  CHECK_OK(dfree(0, scratch2));
  CHECK_OK(dfree(0, scratch));
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

static void test_kernel_table() {
  load_kernel_table();
  const char* expected[] = {"aten::fill_.Scalar", "aten::zero_", "aten::add.Tensor", "aten::sub.Tensor",
                            "aten::mul.Tensor", "aten::div.Tensor", "aten::add.Scalar", "aten::sub.Scalar",
                            "aten::mul.Scalar", "aten::div.Scalar", "aten::neg", "aten::relu", "aten::sum",
                            "aten::sum.dim_IntList", "aten::mean", "aten::mean.dim", "aten::mm", "aten::addmm",
                            "aten::copy_"};
  for (const char* op : expected) CHECK(g_kernels.count(op) == 1, "Kernels_List lacks ", op);
  for (auto& [name, k] : g_kernels) {
    CHECK_EQ(k->struct_size, TFL_KernelDesc_STRUCT_SIZE);
    CHECK(k->fn != nullptr, name, " has no function");
    // Kernels over floating types (float32 is always on) follow the FLEMU_* switches.
    if ((k->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32)) != 0) {
      CHECK(((k->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64)) != 0) == g_env.fp64, name, " float64 bit must follow FLEMU_FP64");
      CHECK(((k->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_FLOAT16)) != 0) == g_env.fp16, name, " float16 bit must follow FLEMU_FP16");
      CHECK(((k->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_BFLOAT16)) != 0) == g_env.bf16, name, " bfloat16 bit must follow FLEMU_BF16");
    } else {
      CHECK((k->dtypes & TFL_DTYPES_FLOATING) == 0, name, " takes a floating type but not float32");
    }
    CHECK((k->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_COMPLEX64)) == 0, name, " claims complex64");
  }
  const uint32_t ew = TFL_KERNEL_BROADCAST_INPUTS | TFL_KERNEL_PROMOTE_INPUTS;
  CHECK_EQ(g_kernels["aten::add.Tensor"]->flags, ew | TFL_KERNEL_HOST_SCALARS);
  CHECK_EQ(g_kernels["aten::div.Tensor"]->flags, ew | TFL_KERNEL_HOST_SCALARS);
  CHECK_EQ(g_kernels["aten::relu"]->flags, 0u);
  CHECK_EQ(g_kernels["aten::copy_"]->flags, 0u);
  CHECK((g_kernels["aten::mm"]->dtypes & TFL_DTYPES_INTEGRAL) == 0, "mm is floating only");
  CHECK((g_kernels["aten::sub.Tensor"]->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_BOOL)) == 0, "sub takes no bool");
  CHECK((g_kernels["aten::div.Tensor"]->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_INT64)) != 0, "div takes int64 inputs");
}

static void test_fill_zero() {
  for (int dt : all_dtypes()) {
    // A strided view: every other element of every other row of a 5x8 buffer.
    Tensor t = make_tensor(dt, {3, 4}, {16, 2}, 1);
    const double v = dt == TFL_DTYPE_BOOL ? 1 : 3;
    CHECK_OK(launch("aten::fill_.Scalar", {tv(t.t()), iv(static_cast<int64_t>(v))}, {t.t()}, 0, TFL_VARIANT_INPLACE));
    CHECK_VALUES(str("fill_ int ", dt_name(dt)), download(t), std::vector<LD>(12, v), dt);
    check_untouched(str("fill_ ", dt_name(dt)).c_str(), t);
    if (is_float(dt)) {
      CHECK_OK(launch("aten::fill_.Scalar", {tv(t.t()), dv(-2.5)}, {t.t()}, 0, TFL_VARIANT_INPLACE));
      CHECK_VALUES(str("fill_ double ", dt_name(dt)), download(t), std::vector<LD>(12, -2.5L), dt);
    }
    CHECK_OK(launch("aten::fill_.Scalar", {tv(t.t()), bv(true)}, {t.t()}, 0, TFL_VARIANT_INPLACE));
    CHECK_VALUES(str("fill_ bool ", dt_name(dt)), download(t), std::vector<LD>(12, 1.0L), dt);
    CHECK_OK(launch("aten::zero_", {tv(t.t())}, {t.t()}, 0, TFL_VARIANT_INPLACE));
    CHECK_VALUES(str("zero_ ", dt_name(dt)), download(t), std::vector<LD>(12, 0.0L), dt);
    check_untouched(str("zero_ ", dt_name(dt)).c_str(), t);
    free_tensor(t);
  }
  // int64 fill keeps every bit.
  Tensor t = make_tensor(TFL_DTYPE_INT64, {4});
  const int64_t big = (int64_t{1} << 62) + 12345;
  CHECK_OK(launch("aten::fill_.Scalar", {tv(t.t()), iv(big)}, {t.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_EQ(static_cast<int64_t>(download(t)[3]), big);
  free_tensor(t);
}

// Reference for one binary op on values already rounded to their dtypes.
static LD ref_binary(const std::string& op, LD a, LD b, LD alpha, int out_dt) {
  LD r = 0;
  if (op == "add") r = a + alpha * b;
  else if (op == "sub") r = a - alpha * b;
  else if (op == "mul") r = a * b;
  else r = a / b;
  if (out_dt == TFL_DTYPE_BOOL) return r != 0;
  return round_to(out_dt, r);
}

// Row-major broadcast of `in` (with its sizes) to `out_sizes`.
static std::vector<LD> broadcast(const std::vector<LD>& in, const std::vector<int64_t>& in_sizes,
                                 const std::vector<int64_t>& out_sizes) {
  int64_t n = 1;
  for (auto s : out_sizes) n *= s;
  std::vector<LD> out(static_cast<size_t>(n));
  const size_t nd = out_sizes.size(), off = nd - in_sizes.size();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = 0;
    for (size_t d = off; d < nd; ++d) j = j * in_sizes[d - off] + (in_sizes[d - off] == 1 ? 0 : idx[d]);
    out[i] = in[j];
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < out_sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

static void test_binary() {
  const char* ops[] = {"add", "sub", "mul", "div"};
  for (const char* op : ops) {
    for (int dt : all_dtypes()) {
      const std::string name = str(op, " ", dt_name(dt));
      const bool is_div = std::string(op) == "div";
      if (std::string(op) == "sub" && dt == TFL_DTYPE_BOOL) continue;
      const int out_dt = is_div && !is_float(dt) ? TFL_DTYPE_FLOAT32 : dt;
      const LD alpha = (std::string(op) == "add" || std::string(op) == "sub") && dt != TFL_DTYPE_BOOL ? 2 : 1;
      auto call = [&](Tensor& a, Tensor& b, Tensor& out) {
        std::vector<TFL_Value> in = {tv(a.t()), tv(b.t())};
        if (alpha != 1 || std::string(op) == "add") in.push_back(iv(static_cast<int64_t>(alpha)));
        return launch(str("aten::", op, ".Tensor"), in, {out.t()});
      };
      // Contiguous, same shape.
      {
        std::vector<LD> av, bvv;
        Tensor a = filled(dt, {7, 33}, &av), b = filled(dt, {7, 33}, &bvv, {}, 0, is_div);
        Tensor out = make_tensor(out_dt, {7, 33});
        CHECK_OK(call(a, b, out));
        std::vector<LD> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(op, av[i], bvv[i], alpha, out_dt);
        CHECK_VALUES(name + " contiguous", download(out), want, out_dt);
        free_tensor(a);
        free_tensor(b);
        free_tensor(out);
      }
      // Broadcast (stride 0) and transposed inputs, strided output.
      {
        std::vector<LD> av, bvv;
        Tensor a = filled(dt, {5, 6}, &av, {1, 5});  // column-major view
        Tensor b = filled(dt, {5, 6}, &bvv, {0, 1}, 0, is_div);  // one row repeated
        // Stored values of the broadcast b: row 0 written last wins; read them back.
        bvv = download(b);
        Tensor out = make_tensor(out_dt, {5, 6}, {14, 2}, 3);
        CHECK_OK(call(a, b, out));
        std::vector<LD> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(op, av[i], bvv[i], alpha, out_dt);
        CHECK_VALUES(name + " strided/broadcast", download(out), want, out_dt);
        check_untouched((name + " strided out").c_str(), out);
        free_tensor(a);
        free_tensor(b);
        free_tensor(out);
      }
      // Kernel-side broadcasting of a lower-rank and a 0-dim operand.
      {
        std::vector<LD> av, bvv;
        Tensor a = filled(dt, {4, 3}, &av);
        Tensor b = filled(dt, {}, &bvv, {}, 0, is_div);
        Tensor out = make_tensor(out_dt, {4, 3});
        CHECK_OK(call(a, b, out));
        std::vector<LD> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(op, av[i], bvv[0], alpha, out_dt);
        CHECK_VALUES(name + " 0-dim other", download(out), want, out_dt);
        Tensor c = filled(dt, {3}, &bvv, {}, 0, is_div);
        CHECK_OK(call(a, c, out));
        const auto bb = broadcast(bvv, {3}, {4, 3});
        for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(op, av[i], bb[i], alpha, out_dt);
        CHECK_VALUES(name + " row broadcast", download(out), want, out_dt);
        free_tensor(a);
        free_tensor(b);
        free_tensor(c);
        free_tensor(out);
      }
      // In-place: out is self.
      if (out_dt == dt) {
        std::vector<LD> av, bvv;
        Tensor a = filled(dt, {65}, &av), b = filled(dt, {65}, &bvv, {}, 0, is_div);
        CHECK_OK(call(a, b, a));
        std::vector<LD> want(av.size());
        for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(op, av[i], bvv[i], alpha, out_dt);
        CHECK_VALUES(name + " in-place", download(a), want, out_dt);
        free_tensor(a);
        free_tensor(b);
      }
    }
  }
  // Large contiguous add (threaded path) and int64 precision.
  {
    std::vector<LD> av, bvv;
    Tensor a = filled(TFL_DTYPE_FLOAT32, {300001}, &av), b = filled(TFL_DTYPE_FLOAT32, {300001}, &bvv);
    Tensor out = make_tensor(TFL_DTYPE_FLOAT32, {300001});
    CHECK_OK(launch("aten::add.Tensor", {tv(a.t()), tv(b.t()), iv(1)}, {out.t()}));
    std::vector<LD> want(av.size());
    for (size_t i = 0; i < av.size(); ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, av[i] + bvv[i]);
    CHECK_VALUES("large add", download(out), want, TFL_DTYPE_FLOAT32);
    free_tensor(a);
    free_tensor(b);
    free_tensor(out);
    Tensor x = make_tensor(TFL_DTYPE_INT64, {2}), y = make_tensor(TFL_DTYPE_INT64, {2}), z = make_tensor(TFL_DTYPE_INT64, {2});
    const int64_t big = (int64_t{1} << 53) + 1;
    upload(x, {static_cast<LD>(big), static_cast<LD>(-big)});
    upload(y, {1, 3});
    CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(1)}, {z.t()}));
    auto r = download(z);
    CHECK_EQ(static_cast<int64_t>(r[0]), big + 1);
    CHECK_EQ(static_cast<int64_t>(r[1]), -big + 3);
    // Integral alpha must be an integer.
    CHECK_ERR(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), dv(0.5)}, {z.t()}), TFL_ERR_INVALID_ARGUMENT, "alpha");
    free_tensor(x);
    free_tensor(y);
    free_tensor(z);
  }
  // Mixed dtypes: an int32 sum written to a float64/float32 out= tensor.
  {
    std::vector<LD> av, bvv;
    Tensor a = filled(TFL_DTYPE_INT32, {10}, &av), b = filled(TFL_DTYPE_INT32, {10}, &bvv);
    Tensor out = make_tensor(TFL_DTYPE_FLOAT32, {10});
    CHECK_OK(launch("aten::add.Tensor", {tv(a.t()), tv(b.t()), iv(3)}, {out.t()}, 0, TFL_VARIANT_OUT));
    std::vector<LD> want(10);
    for (size_t i = 0; i < 10; ++i) want[i] = av[i] + 3 * bvv[i];
    CHECK_VALUES("add int32 -> float32 out", download(out), want, TFL_DTYPE_FLOAT32);
    free_tensor(a);
    free_tensor(b);
    free_tensor(out);
  }
  // Sub with bool is refused.
  {
    Tensor a = make_tensor(TFL_DTYPE_BOOL, {3});
    CHECK_ERR(launch("aten::sub.Tensor", {tv(a.t()), tv(a.t()), iv(1)}, {a.t()}), TFL_ERR_INVALID_ARGUMENT, "bool");
    free_tensor(a);
  }
}

static void test_scalar_ops() {
  // Float tensors with float and int scalars.
  for (int dt : float_dtypes()) {
    std::vector<LD> av;
    Tensor a = filled(dt, {3, 5}, &av, {1, 3});
    Tensor out = make_tensor(dt, {3, 5});
    struct Case { const char* op; TFL_Value other; LD o; bool alpha; };
    const Case cases[] = {{"add", dv(0.25), 0.25L, true}, {"sub", iv(3), 3, true}, {"mul", dv(-1.5), -1.5L, false},
                          {"div", iv(4), 4, false}};
    for (const Case& c : cases) {
      std::vector<TFL_Value> in = {tv(a.t()), c.other};
      if (c.alpha) in.push_back(iv(2));
      CHECK_OK(launch(str("aten::", c.op, ".Scalar"), in, {out.t()}));
      std::vector<LD> want(av.size());
      // The scalar enters the computation in float (opmath), as PyTorch does.
      const LD o = is_float(dt) && dt != TFL_DTYPE_FLOAT64 ? static_cast<LD>(static_cast<float>(c.o)) : c.o;
      for (size_t i = 0; i < av.size(); ++i) want[i] = ref_binary(c.op, av[i], o, c.alpha ? 2 : 1, dt);
      CHECK_VALUES(str(c.op, ".Scalar ", dt_name(dt)), download(out), want, dt);
    }
    free_tensor(a);
    free_tensor(out);
  }
  // int64 tensors keep integer scalars exact.
  {
    Tensor a = make_tensor(TFL_DTYPE_INT64, {3}), out = make_tensor(TFL_DTYPE_INT64, {3});
    upload(a, {1, -7, static_cast<LD>(int64_t{1} << 40)});
    const int64_t s = (int64_t{1} << 60) + 3;
    CHECK_OK(launch("aten::add.Scalar", {tv(a.t()), iv(s), iv(1)}, {out.t()}));
    auto r = download(out);
    CHECK_EQ(static_cast<int64_t>(r[0]), s + 1);
    CHECK_EQ(static_cast<int64_t>(r[1]), s - 7);
    CHECK_OK(launch("aten::mul.Scalar", {tv(a.t()), iv(-3)}, {out.t()}));
    r = download(out);
    CHECK_EQ(static_cast<int64_t>(r[2]), -3 * (int64_t{1} << 40));
    CHECK_OK(launch("aten::sub.Scalar", {tv(a.t()), iv(5), iv(2)}, {a.t()}, 0, TFL_VARIANT_INPLACE));
    r = download(a);
    CHECK_EQ(static_cast<int64_t>(r[1]), -17);
    free_tensor(a);
    free_tensor(out);
  }
  // An int tensor with a float scalar promotes to a float output; int / int is true division.
  {
    Tensor a = make_tensor(TFL_DTYPE_INT32, {4}), out = make_tensor(TFL_DTYPE_FLOAT32, {4});
    upload(a, {1, 2, -3, 7});
    CHECK_OK(launch("aten::add.Scalar", {tv(a.t()), dv(2.5), iv(1)}, {out.t()}));
    CHECK_VALUES("int32 + 2.5", download(out), (std::vector<LD>{3.5L, 4.5L, -0.5L, 9.5L}), TFL_DTYPE_FLOAT32);
    CHECK_OK(launch("aten::div.Scalar", {tv(a.t()), iv(2)}, {out.t()}));
    CHECK_VALUES("int32 / 2", download(out), (std::vector<LD>{0.5L, 1.0L, -1.5L, 3.5L}), TFL_DTYPE_FLOAT32);
    free_tensor(a);
    free_tensor(out);
    Tensor b = make_tensor(TFL_DTYPE_BOOL, {3}), o64 = make_tensor(TFL_DTYPE_INT64, {3});
    upload(b, {1, 0, 1});
    CHECK_OK(launch("aten::add.Scalar", {tv(b.t()), iv(10), iv(1)}, {o64.t()}));
    CHECK_VALUES("bool + 10", download(o64), (std::vector<LD>{11, 10, 11}), TFL_DTYPE_INT64);
    free_tensor(b);
    free_tensor(o64);
  }
}

static void test_unary() {
  for (int dt : all_dtypes()) {
    if (dt == TFL_DTYPE_BOOL) continue;
    std::vector<LD> av;
    Tensor a = filled(dt, {4, 9}, &av, {1, 4});
    Tensor out = make_tensor(dt, {4, 9});
    CHECK_OK(launch("aten::neg", {tv(a.t())}, {out.t()}));
    std::vector<LD> want(av.size());
    for (size_t i = 0; i < av.size(); ++i) want[i] = round_to(dt, -av[i]);
    CHECK_VALUES(str("neg ", dt_name(dt)), download(out), want, dt);
    CHECK_OK(launch("aten::relu", {tv(a.t())}, {out.t()}));
    for (size_t i = 0; i < av.size(); ++i) want[i] = av[i] > 0 ? av[i] : 0;
    CHECK_VALUES(str("relu ", dt_name(dt)), download(out), want, dt);
    CHECK_OK(launch("aten::relu", {tv(a.t())}, {a.t()}, 0, TFL_VARIANT_INPLACE));
    CHECK_VALUES(str("relu_ ", dt_name(dt)), download(a), want, dt);
    free_tensor(a);
    free_tensor(out);
  }
  Tensor f = make_tensor(TFL_DTYPE_FLOAT32, {3}), o = make_tensor(TFL_DTYPE_FLOAT64 * g_env.fp64 + TFL_DTYPE_FLOAT32 * !g_env.fp64, {3});
  upload(f, {NAN, -1, 2});
  CHECK_OK(launch("aten::relu", {tv(f.t())}, {o.t()}, 0, TFL_VARIANT_OUT));
  auto r = download(o);
  CHECK(std::isnan(static_cast<double>(r[0])) && r[1] == 0 && r[2] == 2, "relu keeps NaN: ", static_cast<double>(r[0]));
  Tensor b = make_tensor(TFL_DTYPE_BOOL, {2});
  CHECK_ERR(launch("aten::neg", {tv(b.t())}, {b.t()}), TFL_ERR_INVALID_ARGUMENT, "bool");
  free_tensor(f);
  free_tensor(o);
  free_tensor(b);
}

// Reference reduction over `dims` of a row-major value vector.
static std::vector<LD> ref_reduce(const std::vector<LD>& v, const std::vector<int64_t>& sizes, std::vector<bool> red,
                                  bool mean, int out_dt) {
  const size_t nd = sizes.size();
  std::vector<int64_t> kept;
  for (size_t d = 0; d < nd; ++d)
    if (!red[d]) kept.push_back(sizes[d]);
  int64_t nout = 1, count = 1;
  for (auto s : kept) nout *= s;
  for (size_t d = 0; d < nd; ++d)
    if (red[d]) count *= sizes[d];
  std::vector<LD> acc(static_cast<size_t>(nout), 0);
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t j = 0;
    for (size_t d = 0; d < nd; ++d)
      if (!red[d]) j = j * sizes[d] + idx[d];
    acc[j] += is_float(out_dt) ? v[i] : static_cast<LD>(static_cast<int64_t>(v[i]));
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  for (auto& x : acc) x = round_to(out_dt, mean ? x / count : x);
  return acc;
}

static void test_reductions() {
  struct Case {
    std::vector<int64_t> dims;  // empty = all (None)
    bool keepdim;
  };
  const std::vector<int64_t> sizes = {3, 4, 5};
  const Case cases[] = {{{}, false}, {{1}, false}, {{-1}, true}, {{0, 2}, false}, {{2, 0}, true}, {{-3, -2, -1}, false}};
  for (int dt : all_dtypes()) {
    const int sum_dt = is_float(dt) ? dt : TFL_DTYPE_INT64;
    std::vector<LD> av;
    // A permuted (non-contiguous) input: logical [3,4,5] over a [5,3,4] buffer.
    Tensor a = filled(dt, sizes, &av, {4, 1, 12});
    for (const Case& c : cases) {
      std::vector<bool> red(3, c.dims.empty());
      for (auto d : c.dims) red[static_cast<size_t>((d + 3) % 3)] = true;
      std::vector<int64_t> out_sizes;
      for (size_t d = 0; d < 3; ++d)
        if (!red[d]) out_sizes.push_back(sizes[d]);
        else if (c.keepdim) out_sizes.push_back(1);
      for (int mean = 0; mean < 2; ++mean) {
        const int out_dt = mean ? (is_float(dt) ? dt : TFL_DTYPE_FLOAT32) : sum_dt;
        Tensor out = make_tensor(out_dt, out_sizes);
        const std::string op = mean ? "aten::mean" : "aten::sum";
        const std::vector<TFL_Value> dtype_arg = {out_dt == dt ? nonev() : stype(out_dt)};
        if (c.dims.empty() && !c.keepdim) {
          CHECK_OK(launch(op, {tv(a.t()), dtype_arg[0]}, {out.t()}));
        }
        const TFL_Value dim_value = c.dims.empty() ? nonev() : ilist(c.dims);
        CHECK_OK(launch(mean ? "aten::mean.dim" : "aten::sum.dim_IntList", {tv(a.t()), dim_value, bv(c.keepdim), dtype_arg[0]},
                        {out.t()}));
        const auto want = ref_reduce(av, sizes, red, mean, out_dt);
        const double tol = is_float(dt) ? std::max(tolerance(out_dt), tolerance(dt)) : tolerance(out_dt);
        check_values(__FILE__, __LINE__, str(op, " ", dt_name(dt), " dims", c.dims.size(), " keepdim", c.keepdim),
                     download(out), want, tol, tol);
        free_tensor(out);
      }
    }
    free_tensor(a);
  }
  // Float32 accuracy over many elements, and the dtype= argument.
  {
    std::vector<LD> av;
    Tensor a = filled(TFL_DTYPE_FLOAT32, {1000, 257}, &av);
    Tensor s = make_tensor(TFL_DTYPE_FLOAT32, {});
    CHECK_OK(launch("aten::sum", {tv(a.t()), nonev()}, {s.t()}));
    LD exact = 0;
    for (auto x : av) exact += x;
    check_values(__FILE__, __LINE__, "sum of 257000 float32", download(s), {round_to(TFL_DTYPE_FLOAT32, exact)}, 1e-5, 1e-3);
    Tensor cols = make_tensor(TFL_DTYPE_FLOAT32, {257});
    CHECK_OK(launch("aten::mean.dim", {tv(a.t()), ilist({0}), bv(false), nonev()}, {cols.t()}));
    check_values(__FILE__, __LINE__, "mean over dim 0", download(cols), ref_reduce(av, {1000, 257}, {true, false}, true, TFL_DTYPE_FLOAT32),
                 1e-5, 1e-6);
    // Rows reduced in parallel chunks write disjoint outputs.
    Tensor rows = make_tensor(TFL_DTYPE_FLOAT32, {1000});
    CHECK_OK(launch("aten::sum.dim_IntList", {tv(a.t()), ilist({1}), bv(false), nonev()}, {rows.t()}));
    check_values(__FILE__, __LINE__, "sum over dim 1 (parallel rows)", download(rows),
                 ref_reduce(av, {1000, 257}, {false, true}, false, TFL_DTYPE_FLOAT32), 1e-5, 1e-5);
    free_tensor(a);
    free_tensor(s);
    free_tensor(cols);
    free_tensor(rows);
    std::vector<LD> iv32;
    Tensor ints = filled(TFL_DTYPE_INT32, {300, 1000}, &iv32, {1, 300});
    Tensor total = make_tensor(TFL_DTYPE_INT64, {}), per_col = make_tensor(TFL_DTYPE_INT64, {1, 1000});
    CHECK_OK(launch("aten::sum", {tv(ints.t()), stype(TFL_DTYPE_INT64)}, {total.t()}));
    check_values(__FILE__, __LINE__, "sum of 300000 int32", download(total),
                 ref_reduce(iv32, {300, 1000}, {true, true}, false, TFL_DTYPE_INT64), 0, 0);
    CHECK_OK(launch("aten::sum.dim_IntList", {tv(ints.t()), ilist({0}), bv(true), stype(TFL_DTYPE_INT64)}, {per_col.t()}));
    check_values(__FILE__, __LINE__, "int32 column sums, keepdim", download(per_col),
                 ref_reduce(iv32, {300, 1000}, {true, false}, false, TFL_DTYPE_INT64), 0, 0);
    free_tensor(ints);
    free_tensor(total);
    free_tensor(per_col);
    Tensor f = make_tensor(TFL_DTYPE_FLOAT32, {2}), i = make_tensor(TFL_DTYPE_INT64, {});
    upload(f, {1.75, -2.5});
    CHECK_OK(launch("aten::sum", {tv(f.t()), stype(TFL_DTYPE_INT64)}, {i.t()}));
    CHECK_EQ(static_cast<int64_t>(download(i)[0]), int64_t{-1});  // each element truncates first
    CHECK_ERR(launch("aten::mean", {tv(f.t()), nonev()}, {i.t()}), TFL_ERR_INVALID_ARGUMENT, "floating");
    Tensor wrong = make_tensor(TFL_DTYPE_FLOAT32, {3});
    CHECK_ERR(launch("aten::sum.dim_IntList", {tv(f.t()), ilist({0}), bv(false), nonev()}, {wrong.t()}),
              TFL_ERR_INVALID_ARGUMENT, "out");
    CHECK_ERR(launch("aten::sum.dim_IntList", {tv(f.t()), ilist({3}), bv(false), nonev()}, {i.t()}),
              TFL_ERR_INVALID_ARGUMENT, "out of range");
    free_tensor(f);
    free_tensor(i);
    free_tensor(wrong);
  }
}

// Naive C = beta * self + alpha * A @ B over row-major value vectors.
static std::vector<LD> ref_gemm(const std::vector<LD>& a, const std::vector<LD>& b, int64_t n, int64_t k, int64_t m,
                                const std::vector<LD>* self, LD beta, LD alpha, int out_dt) {
  std::vector<LD> c(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      LD s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * m + j];
      LD v = alpha * s;
      if (self && beta != 0) v += beta * (*self)[i * m + j];
      c[i * m + j] = round_to(out_dt, v);
    }
  return c;
}

static void test_gemm() {
  for (int dt : float_dtypes()) {
    const double tol = dt == TFL_DTYPE_FLOAT32 ? 1e-4 : dt == TFL_DTYPE_FLOAT64 ? 1e-10 : tolerance(dt) * 4;
    struct Shape { int64_t n, k, m; bool ta, tb; };
    const Shape shapes[] = {{1, 1, 1, false, false}, {37, 53, 29, false, false}, {37, 53, 29, true, false},
                            {37, 53, 29, false, true}, {17, 300, 23, true, true}, {130, 70, 150, false, false},
                            {5, 0, 7, false, false}};
    for (const Shape& s : shapes) {
      const std::string name = str("mm ", dt_name(dt), " ", s.n, "x", s.k, "x", s.m, s.ta ? " A^T" : "", s.tb ? " B^T" : "");
      std::vector<LD> av, bvv;
      // A transposed view stores the matrix column-major: strides (1, n).
      Tensor a = filled(dt, {s.n, s.k}, &av, s.ta ? std::vector<int64_t>{1, std::max<int64_t>(s.n, 1)} : std::vector<int64_t>{});
      Tensor b = filled(dt, {s.k, s.m}, &bvv, s.tb ? std::vector<int64_t>{1, std::max<int64_t>(s.k, 1)} : std::vector<int64_t>{});
      Tensor out = make_tensor(dt, {s.n, s.m}, {1, s.n});  // column-major output
      CHECK_OK(launch("aten::mm", {tv(a.t()), tv(b.t())}, {out.t()}));
      const auto want = ref_gemm(av, bvv, s.n, s.k, s.m, nullptr, 0, 1, dt);
      check_values(__FILE__, __LINE__, name, download(out), want, tol, tol * std::sqrt(double(std::max<int64_t>(s.k, 1))));
      free_tensor(a);
      free_tensor(b);
      free_tensor(out);
    }
    // addmm with a bias row, alpha/beta, and beta == 0 ignoring NaN.
    {
      const int64_t n = 19, k = 31, m = 45;
      std::vector<LD> av, bvv, biasv;
      Tensor a = filled(dt, {n, k}, &av), b = filled(dt, {k, m}, &bvv), bias = filled(dt, {m}, &biasv);
      Tensor out = make_tensor(dt, {n, m});
      CHECK_OK(launch("aten::addmm", {tv(bias.t()), tv(a.t()), tv(b.t()), dv(0.5), iv(2)}, {out.t()}));
      const auto full_bias = broadcast(biasv, {m}, {n, m});
      check_values(__FILE__, __LINE__, str("addmm ", dt_name(dt)), download(out),
                   ref_gemm(av, bvv, n, k, m, &full_bias, 0.5, 2, dt), tol, tol * 6);
      Tensor nan_self = make_tensor(dt, {n, m});
      upload(nan_self, std::vector<LD>(static_cast<size_t>(n * m), NAN));
      CHECK_OK(launch("aten::addmm", {tv(nan_self.t()), tv(a.t()), tv(b.t()), iv(0), iv(1)}, {out.t()}));
      check_values(__FILE__, __LINE__, str("addmm beta=0 ignores NaN ", dt_name(dt)), download(out),
                   ref_gemm(av, bvv, n, k, m, nullptr, 0, 1, dt), tol, tol * 6);
      // In place: self is the output.
      std::vector<LD> cv;
      Tensor c = filled(dt, {n, m}, &cv);
      CHECK_OK(launch("aten::addmm", {tv(c.t()), tv(a.t()), tv(b.t()), iv(1), dv(-1.0)}, {c.t()}, 0, TFL_VARIANT_INPLACE));
      check_values(__FILE__, __LINE__, str("addmm_ ", dt_name(dt)), download(c),
                   ref_gemm(av, bvv, n, k, m, &cv, 1, -1, dt), tol, tol * 6);
      free_tensor(a);
      free_tensor(b);
      free_tensor(bias);
      free_tensor(out);
      free_tensor(nan_self);
      free_tensor(c);
    }
  }
  // Large enough for the threaded path.
  {
    const int64_t n = 256, k = 300, m = 200;
    std::vector<LD> av, bvv;
    Tensor a = filled(TFL_DTYPE_FLOAT32, {n, k}, &av), b = filled(TFL_DTYPE_FLOAT32, {k, m}, &bvv, {1, k});
    Tensor out = make_tensor(TFL_DTYPE_FLOAT32, {n, m});
    CHECK_OK(launch("aten::mm", {tv(a.t()), tv(b.t())}, {out.t()}));
    check_values(__FILE__, __LINE__, "mm 256x300x200 threaded", download(out), ref_gemm(av, bvv, n, k, m, nullptr, 0, 1, TFL_DTYPE_FLOAT32),
                 1e-4, 2e-3);
    free_tensor(a);
    free_tensor(b);
    free_tensor(out);
  }
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {3, 4}), b = make_tensor(TFL_DTYPE_FLOAT32, {5, 6}), o = make_tensor(TFL_DTYPE_FLOAT32, {3, 6});
  CHECK_ERR(launch("aten::mm", {tv(a.t()), tv(b.t())}, {o.t()}), TFL_ERR_INVALID_ARGUMENT, "inner sizes");
  free_tensor(a);
  free_tensor(b);
  free_tensor(o);
}

static void test_copy_kernel() {
  const auto dts = all_dtypes();
  for (int from : dts)
    for (int to : dts) {
      std::vector<LD> sv;
      Tensor src = filled(from, {4, 6}, &sv);
      Tensor dst = make_tensor(to, {4, 6}, {1, 5}, 2);  // strided destination
      CHECK_OK(launch("aten::copy_", {tv(dst.t()), tv(src.t()), bv(false)}, {dst.t()}, 0, TFL_VARIANT_INPLACE));
      std::vector<LD> want(sv.size());
      for (size_t i = 0; i < sv.size(); ++i) {
        LD v = sv[i];
        if (is_float(from) && !is_float(to) && to != TFL_DTYPE_BOOL) v = static_cast<LD>(static_cast<int64_t>(v));  // truncation
        want[i] = round_to(to, v);
      }
      const double tol = std::max(tolerance(to), is_float(from) ? tolerance(from) : 0.0);
      check_values(__FILE__, __LINE__, str("copy_ ", dt_name(from), " -> ", dt_name(to)), download(dst), want, tol, tol);
      check_untouched(str("copy_ ", dt_name(from), " -> ", dt_name(to)).c_str(), dst);
      free_tensor(src);
      free_tensor(dst);
    }
  // Broadcast a row into a matrix; copy from another device when peers can.
  std::vector<LD> row;
  Tensor src = filled(TFL_DTYPE_FLOAT32, {5}, &row);
  Tensor dst = make_tensor(TFL_DTYPE_FLOAT32, {3, 5});
  CHECK_OK(launch("aten::copy_", {tv(dst.t()), tv(src.t()), bv(false)}, {dst.t()}));
  CHECK_VALUES("copy_ broadcast", download(dst), broadcast(row, {5}, {3, 5}), TFL_DTYPE_FLOAT32);
  if (g_env.devices >= 2) {
    std::vector<LD> other;
    Tensor remote = filled(TFL_DTYPE_FLOAT32, {3, 5}, &other, {}, 0, false, 1);
    CHECK_OK(stream_sync(g_streams[1]));
    if (g_env.peer) {
      CHECK_OK(launch("aten::copy_", {tv(dst.t()), tv(remote.t()), bv(false)}, {dst.t()}));
      CHECK_VALUES("copy_ from device 1", download(dst), other, TFL_DTYPE_FLOAT32);
    } else {
      CHECK_ERR(launch("aten::copy_", {tv(dst.t()), tv(remote.t()), bv(false)}, {dst.t()}), TFL_ERR_INVALID_ARGUMENT,
                "peer access is disabled");
    }
    CHECK_ERR(launch("aten::add.Tensor", {tv(dst.t()), tv(remote.t()), iv(1)}, {dst.t()}), TFL_ERR_INVALID_ARGUMENT,
              "device 1");
    free_tensor(remote);
  }
  free_tensor(src);
  free_tensor(dst);
}

static void test_symbols_and_custom_ops() {
  using Fn = TFL_Error* (*)(const TFL_Kernel_Args*);
  auto abs_fn = reinterpret_cast<Fn>(dlsym(g_lib, "torch_fl_op_abs"));
  auto max_fn = reinterpret_cast<Fn>(dlsym(g_lib, "torch_fl_op_maximum"));
  CHECK(abs_fn && max_fn, "torch_fl_op_abs and torch_fl_op_maximum are exported");
  if (abs_fn && max_fn) {
    std::vector<LD> av, bvv;
    Tensor a = filled(TFL_DTYPE_FLOAT32, {40}, &av), b = filled(TFL_DTYPE_FLOAT32, {40}, &bvv), out = make_tensor(TFL_DTYPE_FLOAT32, {40});
    CHECK_OK(launch_fn(abs_fn, "aten::abs", nullptr, {tv(a.t())}, {out.t()}));
    std::vector<LD> want(40);
    for (size_t i = 0; i < 40; ++i) want[i] = std::fabs(static_cast<double>(av[i]));
    CHECK_VALUES("torch_fl_op_abs", download(out), want, TFL_DTYPE_FLOAT32);
    av[3] = NAN;
    bvv[5] = NAN;
    upload(a, av);
    upload(b, bvv);
    CHECK_OK(launch_fn(max_fn, "aten::maximum", nullptr, {tv(a.t()), tv(b.t())}, {out.t()}));
    for (size_t i = 0; i < 40; ++i) want[i] = (i == 3 || i == 5) ? NAN : std::max(av[i], bvv[i]);
    CHECK_VALUES("torch_fl_op_maximum propagates NaN", download(out), want, TFL_DTYPE_FLOAT32);
    Tensor i32 = make_tensor(TFL_DTYPE_INT32, {40});
    CHECK_ERR(launch_fn(abs_fn, "aten::abs", nullptr, {tv(i32.t())}, {i32.t()}), TFL_ERR_INVALID_ARGUMENT, "float32");
    free_tensor(a);
    free_tensor(b);
    free_tensor(out);
    free_tensor(i32);
  }

  TFL_Kernels_ListCustomOps_Args l{TFL_Kernels_ListCustomOps_Args_STRUCT_SIZE, nullptr, 0};
  CHECK_OK(g_api->kernels->Kernels_ListCustomOps(&l));
  CHECK_EQ(l.num_ops, size_t{1});
  if (l.num_ops != 1) return;
  const TFL_CustomOpDesc* op = l.ops[0];
  CHECK_EQ(std::string(op->schema), std::string("flemu::scale_add(Tensor x, Tensor y, float alpha) -> Tensor"));
  CHECK_EQ(op->num_outputs, size_t{1});
  CHECK_EQ(op->output_like[0], 0);
  CHECK_EQ(op->dtypes, TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32));
  CHECK_EQ(op->flags, uint32_t{TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS});
  CHECK(op->forward && op->backward, "scale_add has forward and backward");
  std::vector<LD> xv, yv, gv;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {6, 7}, &xv), y = filled(TFL_DTYPE_FLOAT32, {6, 7}, &yv);
  Tensor out = make_tensor(TFL_DTYPE_FLOAT32, {6, 7});
  CHECK_OK(launch_fn(op->forward, "flemu::scale_add", op->user_data, {tv(x.t()), tv(y.t()), dv(-0.5)}, {out.t()}));
  std::vector<LD> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, xv[i] - 0.5L * yv[i]);
  CHECK_VALUES("scale_add forward", download(out), want, TFL_DTYPE_FLOAT32);
  Tensor g = filled(TFL_DTYPE_FLOAT32, {6, 7}, &gv);
  Tensor gx = make_tensor(TFL_DTYPE_FLOAT32, {6, 7}), gy = make_tensor(TFL_DTYPE_FLOAT32, {6, 7});
  CHECK_OK(launch_fn(op->backward, "flemu::scale_add", op->user_data,
                     {tv(g.t()), tv(x.t()), tv(y.t()), dv(-0.5), tv(out.t())}, {gx.t(), gy.t()}));
  CHECK_VALUES("scale_add grad_x", download(gx), gv, TFL_DTYPE_FLOAT32);
  for (size_t i = 0; i < gv.size(); ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, -0.5L * gv[i]);
  CHECK_VALUES("scale_add grad_y", download(gy), want, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch_fn(op->backward, "flemu::scale_add", op->user_data,
                     {nonev(), tv(x.t()), tv(y.t()), dv(-0.5), tv(out.t())}, {gx.t(), gy.t()}));
  CHECK_VALUES("scale_add undefined grad", download(gy), std::vector<LD>(42, 0.0L), TFL_DTYPE_FLOAT32);
  for (Tensor* t : {&x, &y, &out, &g, &gx, &gy}) free_tensor(*t);
}

static void test_kernel_validation() {
  Tensor f = make_tensor(TFL_DTYPE_FLOAT32, {8});
  // A descriptor pointing past the allocation's device range.
  TFL_Tensor bogus = *f.t();
  int64_t big_size = int64_t{1} << 45;
  bogus.sizes = &big_size;
  bogus.numel = big_size;
  CHECK_ERR(launch("aten::zero_", {tv(&bogus)}, {&bogus}), TFL_ERR_INVALID_ARGUMENT, "not inside the memory");
  float host = 0;
  TFL_Tensor hostptr = *f.t();
  hostptr.data = &host;
  int64_t one = 1;
  hostptr.sizes = &one;
  hostptr.numel = 1;
  CHECK_ERR(launch("aten::zero_", {tv(&hostptr)}, {&hostptr}), TFL_ERR_INVALID_ARGUMENT, "not inside the memory");
  TFL_Tensor bad_numel = *f.t();
  bad_numel.numel = 9;
  CHECK_ERR(launch("aten::zero_", {tv(&bad_numel)}, {&bad_numel}), TFL_ERR_INVALID_ARGUMENT, "numel");
  // A stream of another device.
  if (g_env.devices >= 2) {
    auto k = g_kernels["aten::zero_"];
    TFL_KernelContext ctx{};
    ctx.struct_size = TFL_KernelContext_STRUCT_SIZE;
    ctx.device = 0;
    ctx.stream = g_streams[1];
    ctx.op_name = "aten::zero_";
    TFL_Value in[] = {tv(f.t())};
    const TFL_Tensor* out[] = {f.t()};
    TFL_Kernel_Args args{TFL_Kernel_Args_STRUCT_SIZE, &ctx, in, 1, out, 1};
    CHECK_ERR(k->fn(&args), TFL_ERR_INVALID_ARGUMENT, "stream belongs to device 1");
  }
  // Disabled dtypes are refused at launch, naming the switch.
  if (!g_env.fp64) {
    Tensor d = make_tensor(TFL_DTYPE_FLOAT32, {2});
    TFL_Tensor as64 = *d.t();
    as64.dtype = TFL_DTYPE_FLOAT64;
    int64_t n1 = 1;
    as64.sizes = &n1;
    as64.numel = 1;
    CHECK_ERR(launch("aten::neg", {tv(&as64)}, {&as64}), TFL_ERR_UNIMPLEMENTED, "FLEMU_FP64=0");
    free_tensor(d);
  }
  if (!g_env.fp16) {
    Tensor h = make_tensor(TFL_DTYPE_FLOAT32, {2});
    TFL_Tensor as16 = *h.t();
    as16.dtype = TFL_DTYPE_FLOAT16;
    CHECK_ERR(launch("aten::neg", {tv(&as16)}, {&as16}), TFL_ERR_UNIMPLEMENTED, "FLEMU_FP16=0");
    free_tensor(h);
  }
  // gather and scatter look at an index's dtype only when it has elements, as
  // PyTorch does; an int32/int64 index is what they expect.
  {
    Tensor self = make_tensor(TFL_DTYPE_FLOAT32, {3, 4});
    Tensor empty_u8 = make_tensor(TFL_DTYPE_UINT8, {0}), none = make_tensor(TFL_DTYPE_FLOAT32, {0});
    CHECK_OK(launch("aten::gather", {tv(self.t()), iv(0), tv(empty_u8.t()), bv(false)}, {none.t()}));
    Tensor u8 = make_tensor(TFL_DTYPE_UINT8, {3, 2}), picked = make_tensor(TFL_DTYPE_FLOAT32, {3, 2});
    CHECK_ERR(launch("aten::gather", {tv(self.t()), iv(1), tv(u8.t()), bv(false)}, {picked.t()}),
              TFL_ERR_INVALID_ARGUMENT, "gather: index must be an int32 or int64 tensor, got uint8");
    Tensor out = make_tensor(TFL_DTYPE_FLOAT32, {3, 4});
    CHECK_ERR(launch("aten::scatter.value", {tv(self.t()), iv(1), tv(u8.t()), dv(1.0)}, {out.t()}),
              TFL_ERR_INVALID_ARGUMENT, "scatter: index must be an int32 or int64 tensor, got uint8");
    CHECK_OK(stream_sync(g_streams[0]));
    for (Tensor* t : {&self, &empty_u8, &none, &u8, &picked, &out}) free_tensor(*t);
  }
  // Complex is never taken.
  TFL_Tensor cplx = *f.t();
  cplx.dtype = TFL_DTYPE_COMPLEX64;
  CHECK_ERR(launch("aten::neg", {tv(&cplx)}, {&cplx}), TFL_ERR_UNIMPLEMENTED, "complex64");
  free_tensor(f);
}

// ---------------------------------------------------------------------------
// fork(): the child does not inherit the devices, and can bring up its own
// ---------------------------------------------------------------------------

// Graph_Compile reads and writes every field of ABI 1.0's argument struct,
// declined_node included.
static void test_graph_compile_args() {
  const int64_t sizes[] = {4};
  const int64_t strides[] = {1};
  const TFL_GraphValue in{TFL_GraphValue_STRUCT_SIZE, TFL_GRAPH_INPUT, TFL_DTYPE_FLOAT32, 1, sizes, strides};
  const TFL_GraphValue out{TFL_GraphValue_STRUCT_SIZE, TFL_GRAPH_OUTPUT, TFL_DTYPE_FLOAT32, 1, sizes, strides};
  const TFL_GraphValue* values[] = {&in, &out};
  TFL_Value ref{};
  ref.tag = TFL_VALUE_GRAPH_REF;
  ref.v.i = 0;
  const TFL_Value args[] = {ref, ref};
  const int32_t node_out[] = {1};
  const TFL_GraphNode node{TFL_GraphNode_STRUCT_SIZE, "aten::mm", args, 2, node_out, 1};  // not elementwise
  const TFL_GraphNode* nodes[] = {&node};
  const int32_t inputs[] = {0}, outputs[] = {1};
  const TFL_Graph graph{TFL_Graph_STRUCT_SIZE, 0, values, 2, nodes, 1, inputs, 1, outputs, 1};
  TFL_Graph_Compile_Args a{};
  a.struct_size = TFL_Graph_Compile_Args_STRUCT_SIZE;
  a.graph = &graph;
  a.declined_node = 12345;
  CHECK_OK(g_api->graph->Graph_Compile(&a));
  CHECK_EQ(int(a.accepted), 0);
  CHECK(a.decline_reason != nullptr && std::strstr(a.decline_reason, "aten::mm") != nullptr,
        "decline reason names the op: ", a.decline_reason ? a.decline_reason : "NULL");
  CHECK_EQ(a.declined_node, int64_t{0});
  // A host built without declined_node is not a 1.0 host.
  a.struct_size = TFL_STRUCT_SIZE(TFL_Graph_Compile_Args, decline_reason);
  CHECK_ERR(g_api->graph->Graph_Compile(&a), TFL_ERR_INVALID_ARGUMENT, "TFL_Graph_Compile_Args.struct_size");
}

static void test_fork() {
#if defined(__SANITIZE_THREAD__)
  return;  // ThreadSanitizer cannot start threads in a child of a threaded process
#endif
  void* parent_buf = alloc_ok(0, 4096);
  CHECK_OK(memset_dev(0, parent_buf, 0x33, 4096, g_streams[0]));
  CHECK_OK(stream_sync(g_streams[0]));
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    int bad = 0;
    TFL_Device_Count_Args a{TFL_Device_Count_Args_STRUCT_SIZE, 0};
    TFL_Error* e = g_api->device->Device_Count(&a);
    if (!e || error_code(e) != TFL_ERR_UNAVAILABLE || error_text(e).find("forked") == std::string::npos) bad |= 1;
    if (e) destroy(e);
    TFL_Memory_Free_Args f{TFL_Memory_Free_Args_STRUCT_SIZE, 0, parent_buf};
    e = g_api->memory->Memory_Free(&f);  // must not touch the parent's arena
    if (!e) bad |= 2;
    else destroy(e);
    e = initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR, {{"FLEMU_DEVICE_COUNT", "1"}, {"FLEMU_MEMORY_BYTES", "16M"}});
    if (e) {
      bad |= 4;
      destroy(e);
    } else {
      TFL_Stream_Create_Args sc{TFL_Stream_Create_Args_STRUCT_SIZE, 0, 0, nullptr};
      void* p = nullptr;
      unsigned char back[16] = {};
      if (g_api->stream->Stream_Create(&sc) || alloc(0, 1 << 20, &p) || memset_dev(0, p, 9, 1 << 20, sc.stream) ||
          copy(TFL_COPY_DEVICE_TO_HOST, back, -1, p, 0, 16, sc.stream, true) || back[15] != 9)
        bad |= 8;
    }
    _exit(bad);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child: status ", status,
        " (bits: 1 = Device_Count did not say forked, 2 = freed the parent's memory, 4 = re-init failed, 8 = child device failed)");
  unsigned char back[4096];
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back, -1, parent_buf, 0, 4096, g_streams[0], true));
  CHECK(back[0] == 0x33 && back[4095] == 0x33, "the parent's memory survives the child");
  CHECK_OK(dfree(0, parent_buf));
  // The parent's pool and streams still work.
  Tensor t = make_tensor(TFL_DTYPE_FLOAT32, {256, 256}), o = make_tensor(TFL_DTYPE_FLOAT32, {256, 256});
  fill_f32(t, 1.0);
  CHECK_OK(launch("aten::mm", {tv(t.t()), tv(t.t())}, {o.t()}));
  CHECK_EQ(static_cast<double>(download(o)[0]), 256.0);
  free_tensor(t);
  free_tensor(o);
}

// ---------------------------------------------------------------------------
// Re-initialization with options overriding the environment
// ---------------------------------------------------------------------------

static void test_reinitialize() {
  for (TFL_Stream* s : g_streams) stream_destroy(s);
  g_streams.clear();
  CHECK_OK(shutdown_plugin());
  TFL_Device_Count_Args a{TFL_Device_Count_Args_STRUCT_SIZE, 0};
  CHECK_ERR(g_api->device->Device_Count(&a), TFL_ERR_INVALID_ARGUMENT, "not initialized");
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR,
                      {{"FLEMU_DEVICE_COUNT", "1"}, {"FLEMU_FP64", "0"}, {"FLEMU_MEMORY_BYTES", "64M"},
                       {"some.unknown.key", "ignored"}}));
  CHECK_EQ(device_count(), 1);
  TFL_DeviceProperties p{};
  p.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
  TFL_Device_GetProperties_Args pa{TFL_Device_GetProperties_Args_STRUCT_SIZE, 0, &p};
  CHECK_OK(g_api->device->Device_GetProperties(&pa));
  CHECK_EQ(p.total_memory, uint64_t{64} << 20);
  CHECK((p.capabilities & TFL_CAP_FP64) == 0, "FLEMU_FP64=0 option clears TFL_CAP_FP64");
  // The same options again are accepted; different ones are refused while initialized.
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR,
                      {{"FLEMU_DEVICE_COUNT", "1"}, {"FLEMU_FP64", "0"}, {"FLEMU_MEMORY_BYTES", "64M"}}));
  CHECK_ERR(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR, {{"FLEMU_DEVICE_COUNT", "3"}}), TFL_ERR_INVALID_ARGUMENT,
            "already initialized");
  load_kernel_table();
  CHECK((g_kernels["aten::mm"]->dtypes & TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64)) == 0, "mm drops float64 after FLEMU_FP64=0");
  CHECK_OK(shutdown_plugin());
}

// ---------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------


static int mode_all() {
  test_api_table();
  test_before_init();
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  struct Step { const char* name; void (*fn)(); };
  const Step steps[] = {{"devices", test_devices},
                        {"memory", test_memory},
                        {"copies", test_copies},
                        {"streams and events", test_streams_and_events},
                        {"kernel table", test_kernel_table},
                        {"fill_/zero_", test_fill_zero},
                        {"add/sub/mul/div .Tensor", test_binary},
                        {"add/sub/mul/div .Scalar", test_scalar_ops},
                        {"neg/relu", test_unary},
                        {"sum/mean", test_reductions},
                        {"mm/addmm", test_gemm},
                        {"copy_", test_copy_kernel},
                        {"symbols and custom ops", test_symbols_and_custom_ops},
                        {"kernel validation", test_kernel_validation},
                        {"Graph_Compile arguments", test_graph_compile_args},
                        {"fork", test_fork},
                        {"re-initialize", test_reinitialize}};
  for (const Step& s : steps) {
    const int before = g_failures;
    const auto t0 = std::chrono::steady_clock::now();
    s.fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s %s (%.0f ms)\n", g_failures == before ? "PASS" : "FAIL", s.name, ms);
    std::fflush(stdout);
  }
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// FLEMU_INJECT_ERROR=aten::mm:<code>: the launch itself fails.
static int mode_inject_sync() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  load_kernel_table();
  const int code = std::atoi(std::getenv("FLEMU_EXPECT_CODE") ? std::getenv("FLEMU_EXPECT_CODE") : "5");
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {4, 4}), o = make_tensor(TFL_DTYPE_FLOAT32, {4, 4});
  CHECK_ERR(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}), code, "injected", "aten::mm");
  CHECK_OK(stream_sync(g_streams[0]));  // nothing pending: the failure was synchronous
  fill_f32(o, 2.0);
  CHECK_VALUES("other kernels still run", download(o), std::vector<LD>(16, 2.0L), TFL_DTYPE_FLOAT32);
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// FLEMU_INJECT_ERROR=aten::mm:<code>:async: the stream reports it once.
static int mode_inject_async() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  load_kernel_table();
  const int code = std::atoi(std::getenv("FLEMU_EXPECT_CODE") ? std::getenv("FLEMU_EXPECT_CODE") : "5");
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {4, 4}), o = make_tensor(TFL_DTYPE_FLOAT32, {4, 4});
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));  // launch succeeds
  fill_f32(o, 7.0);                                               // later work still runs
  CHECK_ERR(stream_sync(g_streams[0]), code, "injected", "aten::mm", "asynchronously");
  CHECK_OK(stream_sync(g_streams[0]));  // reported once
  CHECK_VALUES("work after the failure ran", download(o), std::vector<LD>(16, 7.0L), TFL_DTYPE_FLOAT32);
  // A blocking copy reports it too.
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));
  std::vector<float> host(16);
  CHECK_ERR(copy(TFL_COPY_DEVICE_TO_HOST, host.data(), -1, o.base, 0, 64, g_streams[0], true), code, "injected");
  CHECK_OK(stream_sync(g_streams[0]));
  // Event_Synchronize reports a failure from before the event, not after.
  TFL_Event* e = event_create(0, 0);
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));
  CHECK_OK(event_record(e, g_streams[0]));
  CHECK_ERR(event_sync(e), code, "injected");
  CHECK_OK(event_record(e, g_streams[0]));
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));
  TFL_Error* later = event_sync(e);
  CHECK(later == nullptr, "the failure after the event is not the event's: ", later ? error_text(later) : "");
  if (later) destroy(later);
  CHECK_ERR(stream_sync(g_streams[0]), code, "injected");  // the stream still has it
  event_destroy(e);
  // Device_Synchronize reports it as well.
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));
  CHECK_ERR(device_sync(0), code, "injected");
  CHECK_OK(device_sync(0));
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// FLEMU_INJECT_CRASH=<op>: the process must die in the kernel.
static int mode_crash() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  load_kernel_table();
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {4});
  std::printf("launching\n");
  std::fflush(stdout);
  TFL_Error* e = launch("aten::add.Tensor", {tv(a.t()), tv(a.t()), iv(1)}, {a.t()});
  std::printf("still alive after the crashing kernel: %s\n", e ? error_text(e).c_str() : "success");
  return 0;
}

// A host read of a device pointer: fine normally, SIGSEGV under FLEMU_STRICT=1.
static int mode_strict_probe() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  load_kernel_table();
  Tensor t = make_tensor(TFL_DTYPE_FLOAT32, {256});
  std::vector<LD> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<LD>(i);
  upload(t, v);
  CHECK_OK(launch("aten::mul.Scalar", {tv(t.t()), iv(2)}, {t.t()}, 0, TFL_VARIANT_INPLACE));
  for (auto& x : v) x *= 2;
  CHECK_VALUES("kernel and copies work", download(t), v, TFL_DTYPE_FLOAT32);
  if (g_failures) return 1;
  std::printf("copies ok\n");
  std::fflush(stdout);
  const volatile float* p = static_cast<const volatile float*>(t.base);
  const float x = p[3];
  std::printf("host read of a device pointer returned %g\n", static_cast<double>(x));
  return 0;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int mode_bench() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  setup_streams();
  load_kernel_table();
  TFL_Stream* s = g_streams[0];
  // Enqueue cost of a tiny kernel.
  Tensor x = make_tensor(TFL_DTYPE_FLOAT32, {16}), y = make_tensor(TFL_DTYPE_FLOAT32, {16});
  Tensor z = make_tensor(TFL_DTYPE_FLOAT32, {16});
  const auto* fill = g_kernels["aten::fill_.Scalar"];
  const auto* add = g_kernels["aten::add.Tensor"];
  CHECK_OK(stream_sync(s));
  for (int which = 0; which < 2; ++which) {
    std::vector<double> ns;
    for (int i = 0; i < 20000; ++i) {
      TFL_KernelContext ctx{};
      ctx.struct_size = TFL_KernelContext_STRUCT_SIZE;
      ctx.stream = s;
      ctx.op_name = which ? "aten::add.Tensor" : "aten::fill_.Scalar";
      ctx.variant = which ? TFL_VARIANT_FUNCTIONAL : TFL_VARIANT_INPLACE;  // as a host calls them
      TFL_Value in_fill[] = {tv(x.t()), dv(1.0)};
      TFL_Value in_add[] = {tv(x.t()), tv(y.t()), iv(1)};
      const TFL_Tensor* out[] = {which ? z.t() : x.t()};
      TFL_Kernel_Args args{TFL_Kernel_Args_STRUCT_SIZE, &ctx, which ? in_add : in_fill, size_t(which ? 3 : 2), out, 1};
      const auto t0 = std::chrono::steady_clock::now();
      TFL_Error* e = (which ? add : fill)->fn(&args);
      const auto t1 = std::chrono::steady_clock::now();
      if (e) destroy(e);
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      if (i % 1000 == 999) CHECK_OK(stream_sync(s));
    }
    CHECK_OK(stream_sync(s));
    std::printf("enqueue %s 16 x float32: median %.0f ns\n", which ? "aten::add.Tensor" : "aten::fill_.Scalar", median(ns));
  }
  // float32 GEMM throughput.
  for (int64_t n : {128, 512}) {
    Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {n, n}), b = make_tensor(TFL_DTYPE_FLOAT32, {n, n}), c = make_tensor(TFL_DTYPE_FLOAT32, {n, n});
    fill_f32(a, 0.5);
    fill_f32(b, 0.25);
    std::vector<double> secs;
    for (int r = 0; r < 12; ++r) {
      CHECK_OK(stream_sync(s));
      const auto t0 = std::chrono::steady_clock::now();
      CHECK_OK(launch("aten::mm", {tv(a.t()), tv(b.t())}, {c.t()}));
      CHECK_OK(stream_sync(s));
      if (r >= 2) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double flops = 2.0 * n * n * n;
    std::printf("mm float32 %lldx%lld: median %.2f GFLOP/s, best %.2f GFLOP/s (%u hardware threads)\n",
                static_cast<long long>(n), static_cast<long long>(n), flops / median(secs) / 1e9,
                flops / *std::min_element(secs.begin(), secs.end()) / 1e9, std::thread::hardware_concurrency());
    free_tensor(a);
    free_tensor(b);
    free_tensor(c);
  }
  return g_failures == 0 ? 0 : 1;
}

// Initializes with the environment and lists what the host would register:
// "kernel <op> <dtypes mask> <flags>" and "custom <schema>" lines.
static int mode_kernels() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR));
  TFL_Kernels_List_Args list{TFL_Kernels_List_Args_STRUCT_SIZE, nullptr, 0};
  CHECK_OK(g_api->kernels->Kernels_List(&list));
  for (size_t i = 0; i < list.num_kernels; ++i)
    std::printf("kernel %s 0x%llx 0x%x\n", list.kernels[i]->op, static_cast<unsigned long long>(list.kernels[i]->dtypes),
                list.kernels[i]->flags);
  TFL_Kernels_ListCustomOps_Args custom{TFL_Kernels_ListCustomOps_Args_STRUCT_SIZE, nullptr, 0};
  CHECK_OK(g_api->kernels->Kernels_ListCustomOps(&custom));
  for (size_t i = 0; i < custom.num_ops; ++i) std::printf("custom %s\n", custom.ops[i]->schema);
  return g_failures == 0 ? 0 : 1;
}

// Initializes with the environment and reports the result.
static int mode_init() {
  TFL_Error* e = initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR);
  if (e) {
    std::printf("init failed: %s\n", error_text(e).c_str());
    destroy(e);
    return 3;
  }
  std::printf("init ok: %d devices\n", device_count());
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = open_plugin(argc, argv, "runtime_check");
  if (mode.empty()) return 2;
  if (mode == "all") return mode_all();
  if (mode == "init") return mode_init();
  if (mode == "kernels") return mode_kernels();
  if (mode == "inject-sync") return mode_inject_sync();
  if (mode == "inject-async") return mode_inject_async();
  if (mode == "crash") return mode_crash();
  if (mode == "strict-probe") return mode_strict_probe();
  if (mode == "bench") return mode_bench();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
