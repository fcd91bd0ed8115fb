/* Drives a plugin generated from templates/plugin through TFL_GetPluginApi
 * alone (no torch): its host-memory emulation must keep the ABI's contract.
 *
 *   runtime_check <lib.so> <C_PREFIX>
 *
 * Prints one "ok <what>" line per check; exits non-zero with "FAIL ..." on the
 * first broken one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch_fl/plugin_api.h>

static const TFL_Api* api;

#define FAIL(...)                                           \
  do {                                                      \
    fprintf(stderr, "FAIL line %d: ", __LINE__);            \
    fprintf(stderr, __VA_ARGS__);                           \
    fprintf(stderr, "\n");                                  \
    exit(1);                                                \
  } while (0)
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) FAIL(__VA_ARGS__); \
  } while (0)

static int32_t code_of(TFL_Error* e) {
  TFL_Error_GetCode_Args a = {TFL_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  api->core->Error_GetCode(&a);
  return a.code;
}

static const char* message_of(TFL_Error* e) {
  TFL_Error_Message_Args a = {TFL_Error_Message_Args_STRUCT_SIZE, e, NULL, 0};
  api->core->Error_Message(&a);
  return a.message;
}

static void destroy(TFL_Error* e) {
  TFL_Error_Destroy_Args a = {TFL_Error_Destroy_Args_STRUCT_SIZE, e};
  api->core->Error_Destroy(&a);
}

/* The call must succeed. */
static void ok(TFL_Error* e, const char* what) {
  if (e != NULL) FAIL("%s failed with code %d: %s", what, code_of(e), message_of(e));
}

/* The call must fail with `code` and a message containing `fragment`. */
static void expect(TFL_Error* e, int32_t code, const char* fragment, const char* what) {
  if (e == NULL) FAIL("%s succeeded; expected error code %d", what, code);
  if (code_of(e) != code || strstr(message_of(e), fragment) == NULL)
    FAIL("%s: expected code %d mentioning '%s', got code %d: %s", what, code, fragment, code_of(e), message_of(e));
  destroy(e);
  printf("ok %s -> code %d\n", what, code);
}

static int32_t device_count(void) {
  TFL_Device_Count_Args a = {TFL_Device_Count_Args_STRUCT_SIZE, -1};
  ok(api->device->Device_Count(&a), "Device_Count");
  return a.count;
}

static TFL_Error* initialize(uint32_t major, const char* const* keys, const char* const* values, size_t n) {
  TFL_Plugin_Initialize_Args a = {TFL_Plugin_Initialize_Args_STRUCT_SIZE, major, TFL_ABI_MINOR, NULL, keys, values, n};
  return api->core->Plugin_Initialize(&a);
}

static void* allocate(int32_t device, size_t size) {
  TFL_Memory_Allocate_Args a = {TFL_Memory_Allocate_Args_STRUCT_SIZE, device, size, NULL};
  ok(api->memory->Memory_Allocate(&a), "Memory_Allocate");
  return a.ptr;
}

static TFL_Error* free_device(int32_t device, void* ptr) {
  TFL_Memory_Free_Args a = {TFL_Memory_Free_Args_STRUCT_SIZE, device, ptr};
  return api->memory->Memory_Free(&a);
}

static TFL_Stream* create_stream(int32_t device) {
  TFL_Stream_Create_Args a = {TFL_Stream_Create_Args_STRUCT_SIZE, device, 0, NULL};
  ok(api->stream->Stream_Create(&a), "Stream_Create");
  return a.stream;
}

static TFL_Error* copy(int32_t kind, void* dst, int32_t dst_device, const void* src, int32_t src_device, size_t size,
                       TFL_Stream* stream, uint8_t blocking) {
  TFL_Memory_Copy_Args a = {TFL_Memory_Copy_Args_STRUCT_SIZE, kind, dst, dst_device, src, src_device, size, stream,
                            blocking};
  return api->memory->Memory_Copy(&a);
}

static TFL_Event* create_event(int32_t device, uint32_t flags) {
  TFL_Event_Create_Args a = {TFL_Event_Create_Args_STRUCT_SIZE, device, flags, NULL};
  ok(api->stream->Event_Create(&a), "Event_Create");
  return a.event;
}

static void record(TFL_Event* event, TFL_Stream* stream) {
  TFL_Event_Record_Args a = {TFL_Event_Record_Args_STRUCT_SIZE, event, stream};
  ok(api->stream->Event_Record(&a), "Event_Record");
}

static void stream_sync(TFL_Stream* stream) {
  TFL_Stream_Synchronize_Args a = {TFL_Stream_Synchronize_Args_STRUCT_SIZE, stream};
  ok(api->stream->Stream_Synchronize(&a), "Stream_Synchronize");
}

static TFL_Tensor vector_f32(void* data, int32_t dtype, const int64_t* sizes, const int64_t* strides, int64_t n) {
  TFL_Tensor t = {TFL_Tensor_STRUCT_SIZE, data, dtype, TFL_MEMORY_DEVICE, 0, 1, sizes, strides, n, 0};
  return t;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <plugin.so> <C_PREFIX>\n", argv[0]);
    return 2;
  }
  char count_key[128], memory_key[128];
  snprintf(count_key, sizeof count_key, "%s_DEVICE_COUNT", argv[2]);
  snprintf(memory_key, sizeof memory_key, "%s_MEMORY_BYTES", argv[2]);

  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(lib != NULL, "dlopen: %s", dlerror());
  TFL_GetPluginApiFn get_api = (TFL_GetPluginApiFn)dlsym(lib, TFL_ENTRY_SYMBOL);
  CHECK(get_api != NULL, "no %s", TFL_ENTRY_SYMBOL);
  api = get_api();
  CHECK(api->struct_size >= TFL_Api_STRUCT_SIZE && api->abi_major == TFL_ABI_MAJOR, "bad TFL_Api header");
  CHECK(api->core && api->device && api->memory && api->stream && api->kernels, "a required group is NULL");
  CHECK(api->memory->Memory_MapToHost == NULL, "host mapping is not advertised, so it must be NULL");
  printf("ok entry point, ABI %u.%u\n", api->abi_major, api->abi_minor);

  /* core: identity before initialization, refusals, options */
  TFL_Plugin_GetInfo_Args info = {TFL_Plugin_GetInfo_Args_STRUCT_SIZE, NULL, NULL, NULL, NULL, NULL};
  ok(api->core->Plugin_GetInfo(&info), "Plugin_GetInfo");
  CHECK(info.name && info.device_type && strcmp(info.name, info.device_type) == 0, "name and device type differ");
  printf("ok Plugin_GetInfo: %s %s by %s\n", info.name, info.version, info.vendor);
  TFL_Device_Count_Args count_args = {TFL_Device_Count_Args_STRUCT_SIZE, -1};
  expect(api->device->Device_Count(&count_args), TFL_ERR_INVALID_ARGUMENT, "not initialized",
         "Device_Count before Plugin_Initialize");
  expect(initialize(TFL_ABI_MAJOR + 1, NULL, NULL, 0), TFL_ERR_ABI_MISMATCH, "ABI", "Initialize with a newer major");
  const char* bad_keys[] = {count_key};
  const char* bad_values[] = {"three"};
  expect(initialize(TFL_ABI_MAJOR, bad_keys, bad_values, 1), TFL_ERR_INVALID_ARGUMENT, count_key,
         "Initialize with a malformed option");
  const char* keys[] = {count_key, memory_key, "some_other_plugin_option"};
  const char* values[] = {"3", "1M", "ignored"};
  ok(initialize(TFL_ABI_MAJOR, keys, values, 3), "Plugin_Initialize");
  ok(initialize(TFL_ABI_MAJOR, keys, values, 3), "Plugin_Initialize again, same options");
  CHECK(device_count() == 3, "options asked for 3 devices, Device_Count says %d", device_count());
  printf("ok options: 3 devices of 1 MiB\n");

  /* device: a host struct older than ours is filled only as far as it reaches */
  TFL_DeviceProperties props;
  memset(&props, 0, sizeof props);
  props.capabilities = 0xabcdu;
  props.struct_size = TFL_STRUCT_SIZE(TFL_DeviceProperties, total_memory);
  TFL_Device_GetProperties_Args pa = {TFL_Device_GetProperties_Args_STRUCT_SIZE, 0, &props};
  ok(api->device->Device_GetProperties(&pa), "Device_GetProperties (short struct)");
  CHECK(props.total_memory == (1u << 20) && props.capabilities == 0xabcdu,
        "short struct: total_memory %llu, capabilities %llx", (unsigned long long)props.total_memory,
        (unsigned long long)props.capabilities);
  props.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
  ok(api->device->Device_GetProperties(&pa), "Device_GetProperties");
  CHECK(props.memory_alignment >= 64 && (props.memory_alignment & (props.memory_alignment - 1)) == 0,
        "alignment %u is not a power of two >= 64", props.memory_alignment);
  printf("ok properties: '%s', alignment %u, capabilities %llx\n", props.name, props.memory_alignment,
         (unsigned long long)props.capabilities);
  pa.device = 3;
  expect(api->device->Device_GetProperties(&pa), TFL_ERR_INVALID_ARGUMENT, "out of range", "properties of device 3");

  /* memory */
  char* a = allocate(0, 1000);
  CHECK(((uintptr_t)a % props.memory_alignment) == 0, "allocation %p is not aligned", (void*)a);
  TFL_Memory_GetInfo_Args mi = {TFL_Memory_GetInfo_Args_STRUCT_SIZE, 0, 0, 0};
  ok(api->memory->Memory_GetInfo(&mi), "Memory_GetInfo");
  CHECK(mi.total_bytes == (1u << 20) && mi.free_bytes <= mi.total_bytes - 1000, "GetInfo free %llu total %llu",
        (unsigned long long)mi.free_bytes, (unsigned long long)mi.total_bytes);
  TFL_Memory_Allocate_Args big = {TFL_Memory_Allocate_Args_STRUCT_SIZE, 0, 2u << 20, NULL};
  expect(api->memory->Memory_Allocate(&big), TFL_ERR_OUT_OF_MEMORY, "requested", "allocating 2 MiB of 1 MiB");
  int on_stack = 0;
  expect(free_device(0, &on_stack), TFL_ERR_INVALID_ARGUMENT, "not returned by Memory_Allocate",
         "freeing a host pointer");
  char* b = allocate(1, 256);
  expect(free_device(0, b), TFL_ERR_INVALID_ARGUMENT, "not returned", "freeing device 1 memory as device 0's");
  ok(free_device(1, b), "Memory_Free");
  expect(free_device(1, b), TFL_ERR_INVALID_ARGUMENT, "freed already", "double free");

  /* copies */
  TFL_Stream* s0 = create_stream(0);
  TFL_Stream* s1 = create_stream(1);
  char host[1000], back[1000];
  for (int i = 0; i < 1000; ++i) host[i] = (char)(i * 7);
  ok(copy(TFL_COPY_HOST_TO_DEVICE, a, 0, host, -1, 1000, s0, 1), "H2D");
  memset(back, 0, sizeof back);
  ok(copy(TFL_COPY_DEVICE_TO_HOST, back, -1, a, 0, 1000, s0, 1), "D2H");
  CHECK(memcmp(host, back, 1000) == 0, "round trip changed the bytes");
  printf("ok copy round trip\n");
  expect(copy(TFL_COPY_HOST_TO_DEVICE, a, 0, host, -1, 1000, s1, 1), TFL_ERR_INVALID_ARGUMENT, "stream of device 0",
         "a copy on another device's stream");
  expect(copy(TFL_COPY_DEVICE_TO_HOST, back, -1, a + 500, 0, 1000, s0, 1), TFL_ERR_INVALID_ARGUMENT, "past the end",
         "a copy past the end of an allocation");
  expect(copy(TFL_COPY_DEVICE_TO_DEVICE, a, 0, a, 1, 10, s0, 1), TFL_ERR_INVALID_ARGUMENT, "PEER",
         "DEVICE_TO_DEVICE across devices");
  ok(copy(TFL_COPY_HOST_TO_DEVICE, NULL, 0, NULL, -1, 0, s0, 1), "a zero-byte copy is a no-op");

  /* stream order across streams, through an event, with pinned host memory */
  TFL_HostMemory_Allocate_Args ha = {TFL_HostMemory_Allocate_Args_STRUCT_SIZE, 1u << 16, NULL};
  ok(api->memory->HostMemory_Allocate(&ha), "HostMemory_Allocate");
  unsigned char* pinned = ha.ptr;
  memset(pinned, 0, 1u << 16);
  char* c = allocate(0, 1u << 16);
  TFL_Stream* s0b = create_stream(0);
  TFL_Memory_Set_Args set = {TFL_Memory_Set_Args_STRUCT_SIZE, 0, c, 0x5a, 1u << 16, s0};
  ok(api->memory->Memory_Set(&set), "Memory_Set");
  TFL_Event* ready = create_event(0, 0);
  record(ready, s0);
  TFL_Stream_WaitEvent_Args wait = {TFL_Stream_WaitEvent_Args_STRUCT_SIZE, s0b, ready};
  ok(api->stream->Stream_WaitEvent(&wait), "Stream_WaitEvent");
  ok(copy(TFL_COPY_DEVICE_TO_HOST, pinned, -1, c, 0, 1u << 16, s0b, 0), "non-blocking D2H into pinned memory");
  stream_sync(s0b);
  for (size_t i = 0; i < (1u << 16); ++i) CHECK(pinned[i] == 0x5a, "byte %zu is %d after an event-ordered copy", i, pinned[i]);
  printf("ok cross-stream order through an event\n");

  /* events */
  TFL_Event* never = create_event(0, 0);
  TFL_Event_Query_Args q = {TFL_Event_Query_Args_STRUCT_SIZE, never, 0};
  ok(api->stream->Event_Query(&q), "Event_Query");
  CHECK(q.complete == 1, "a never-recorded event must be complete");
  TFL_Event* t0 = create_event(0, TFL_EVENT_TIMING);
  TFL_Event* t1 = create_event(0, TFL_EVENT_TIMING | 0x80000000u); /* unknown bits are ignored */
  record(t0, s0);
  ok(api->memory->Memory_Set(&set), "Memory_Set");
  record(t1, s0);
  TFL_Event_Synchronize_Args es = {TFL_Event_Synchronize_Args_STRUCT_SIZE, t1};
  ok(api->stream->Event_Synchronize(&es), "Event_Synchronize");
  TFL_Event_ElapsedTime_Args el = {TFL_Event_ElapsedTime_Args_STRUCT_SIZE, t0, t1, -1.0};
  ok(api->stream->Event_ElapsedTime(&el), "Event_ElapsedTime");
  CHECK(el.milliseconds >= 0.0, "elapsed %f ms", el.milliseconds);
  printf("ok elapsed time %.3f ms\n", el.milliseconds);
  el.start = ready;
  expect(api->stream->Event_ElapsedTime(&el), TFL_ERR_INVALID_ARGUMENT, "TFL_EVENT_TIMING",
         "elapsed time from a non-timing event");
  TFL_Event_Record_Args cross = {TFL_Event_Record_Args_STRUCT_SIZE, t0, s1};
  expect(api->stream->Event_Record(&cross), TFL_ERR_INVALID_ARGUMENT, "device", "recording on another device's stream");

  /* kernels: the table entry and the symbol, called as the bridge would */
  TFL_Kernels_List_Args kl = {TFL_Kernels_List_Args_STRUCT_SIZE, NULL, 0};
  ok(api->kernels->Kernels_List(&kl), "Kernels_List");
  CHECK(kl.num_kernels == 1 && strcmp(kl.kernels[0]->op, "aten::add.Tensor") == 0, "kernel table");
  TFL_KernelFn mul = (TFL_KernelFn)dlsym(lib, "torch_fl_op_mul_Tensor");
  CHECK(mul != NULL, "torch_fl_op_mul_Tensor is not exported");
  float xs[4] = {1, 2, 3, 4}, ys[4] = {10, 20, 30, 40}, out[4];
  float* dx = allocate(0, sizeof xs);
  float* dy = allocate(0, sizeof ys);
  float* dout = allocate(0, sizeof out);
  ok(copy(TFL_COPY_HOST_TO_DEVICE, dx, 0, xs, -1, sizeof xs, s0, 1), "H2D x");
  ok(copy(TFL_COPY_HOST_TO_DEVICE, dy, 0, ys, -1, sizeof ys, s0, 1), "H2D y");
  const int64_t sizes[1] = {4}, strides[1] = {1};
  TFL_Tensor tx = vector_f32(dx, TFL_DTYPE_FLOAT32, sizes, strides, 4);
  TFL_Tensor ty = vector_f32(dy, TFL_DTYPE_FLOAT32, sizes, strides, 4);
  TFL_Tensor tout = vector_f32(dout, TFL_DTYPE_FLOAT32, sizes, strides, 4);
  const TFL_Tensor* outputs[1] = {&tout};
  TFL_Value inputs[3];
  memset(inputs, 0, sizeof inputs);
  inputs[0].tag = TFL_VALUE_TENSOR;
  inputs[0].v.tensor = &tx;
  inputs[1].tag = TFL_VALUE_TENSOR;
  inputs[1].v.tensor = &ty;
  inputs[2].tag = TFL_VALUE_INT; /* alpha = 2, an integer Scalar */
  inputs[2].v.i = 2;
  TFL_KernelContext ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.struct_size = TFL_KernelContext_STRUCT_SIZE;
  ctx.stream = s0;
  ctx.op_name = "aten::add.Tensor";
  TFL_Kernel_Args ka = {TFL_Kernel_Args_STRUCT_SIZE, &ctx, inputs, 3, outputs, 1};
  ok(kl.kernels[0]->fn(&ka), "aten::add.Tensor");
  ok(copy(TFL_COPY_DEVICE_TO_HOST, out, -1, dout, 0, sizeof out, s0, 1), "D2H add");
  for (int i = 0; i < 4; ++i) CHECK(out[i] == xs[i] + 2 * ys[i], "add[%d] = %f", i, out[i]);
  ka.num_inputs = 2;
  ok(mul(&ka), "torch_fl_op_mul_Tensor");
  ok(copy(TFL_COPY_DEVICE_TO_HOST, out, -1, dout, 0, sizeof out, s0, 1), "D2H mul");
  for (int i = 0; i < 4; ++i) CHECK(out[i] == xs[i] * ys[i], "mul[%d] = %f", i, out[i]);
  printf("ok kernels: table add and symbol mul\n");
  tx.dtype = TFL_DTYPE_FLOAT64;
  expect(mul(&ka), TFL_ERR_UNIMPLEMENTED, "float32", "a kernel declines a dtype it does not run");

  /* fork: the child's state stays with the parent */
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    TFL_Device_Count_Args child = {TFL_Device_Count_Args_STRUCT_SIZE, -1};
    TFL_Error* e = api->device->Device_Count(&child);
    _exit(e != NULL && code_of(e) == TFL_ERR_UNAVAILABLE ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a forked child did not get TFL_ERR_UNAVAILABLE");
  CHECK(device_count() == 3, "the parent lost its devices after fork");
  printf("ok fork: the child gets TFL_ERR_UNAVAILABLE\n");

  /* teardown */
  TFL_Stream_Destroy_Args sd = {TFL_Stream_Destroy_Args_STRUCT_SIZE, s0b};
  ok(api->stream->Stream_Destroy(&sd), "Stream_Destroy");
  expect(api->stream->Stream_Destroy(&sd), TFL_ERR_INVALID_ARGUMENT, "not a live stream", "destroying a stream twice");
  TFL_Event_Destroy_Args ed = {TFL_Event_Destroy_Args_STRUCT_SIZE, never};
  ok(api->stream->Event_Destroy(&ed), "Event_Destroy");
  TFL_HostMemory_Free_Args hf = {TFL_HostMemory_Free_Args_STRUCT_SIZE, pinned};
  ok(api->memory->HostMemory_Free(&hf), "HostMemory_Free");
  TFL_Device_Synchronize_Args ds = {TFL_Device_Synchronize_Args_STRUCT_SIZE, 0};
  ok(api->device->Device_Synchronize(&ds), "Device_Synchronize");
  TFL_Plugin_Shutdown_Args sh = {TFL_Plugin_Shutdown_Args_STRUCT_SIZE};
  ok(api->core->Plugin_Shutdown(&sh), "Plugin_Shutdown");
  expect(api->device->Device_Count(&count_args), TFL_ERR_INVALID_ARGUMENT, "not initialized",
         "Device_Count after Plugin_Shutdown");
  printf("PASS\n");
  return 0;
}
