// A host for driving libflemu.so through TFL_GetPluginApi alone, shared by
// the ABI-level test programs (runtime_check, fault_check, contract_check):
// assertions that print actual and expected values, thin wrappers over every
// ABI call, device tensors with their own element conversions, and kernel
// launches by schema name.
#ifndef FLEMU_TESTS_ABI_DRIVER_H_
#define FLEMU_TESTS_ABI_DRIVER_H_

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "torch_fl/plugin_api.h"

// ---------------------------------------------------------------------------
// Assertions: every failure prints the actual and expected values.
// ---------------------------------------------------------------------------

inline int g_failures = 0;
inline int g_checks = 0;

template <class... P>
std::string str(P&&... parts) {
  std::ostringstream os;
  os.precision(17);
  (os << ... << parts);
  return os.str();
}

inline void fail(const char* file, int line, const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what.c_str());
  if (g_failures > 50) {
    std::fprintf(stderr, "too many failures, stopping\n");
    std::exit(1);
  }
}

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    ++g_checks;                                                             \
    if (!(cond)) fail(__FILE__, __LINE__, str(#cond, ": ", __VA_ARGS__));   \
  } while (0)

#define CHECK_EQ(actual, expected)                                                              \
  do {                                                                                          \
    ++g_checks;                                                                                 \
    const auto a_ = (actual);                                                                   \
    const auto e_ = (expected);                                                                 \
    if (!(a_ == e_)) fail(__FILE__, __LINE__, str(#actual, ": actual ", a_, ", expected ", e_)); \
  } while (0)

inline const TFL_Api* g_api = nullptr;

inline std::string error_text(TFL_Error* e) {
  TFL_Error_Message_Args m{TFL_Error_Message_Args_STRUCT_SIZE, e, nullptr, 0};
  g_api->core->Error_Message(&m);
  TFL_Error_GetCode_Args c{TFL_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  g_api->core->Error_GetCode(&c);
  return str("[code ", c.code, "] ", std::string(m.message, m.message_size));
}

inline int32_t error_code(TFL_Error* e) {
  TFL_Error_GetCode_Args c{TFL_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  g_api->core->Error_GetCode(&c);
  return c.code;
}

inline void destroy(TFL_Error* e) {
  TFL_Error_Destroy_Args d{TFL_Error_Destroy_Args_STRUCT_SIZE, e};
  g_api->core->Error_Destroy(&d);
}

// Expects success; on failure prints the plugin's message.
#define CHECK_OK(call)                                                                  \
  do {                                                                                  \
    ++g_checks;                                                                         \
    TFL_Error* err_ = (call);                                                           \
    if (err_) {                                                                         \
      fail(__FILE__, __LINE__, str(#call, ": expected success, got ", error_text(err_))); \
      destroy(err_);                                                                    \
    }                                                                                   \
  } while (0)

// Expects an error with `code` whose message contains every fragment; returns the message.
inline std::string expect_error(const char* file, int line, const char* what, TFL_Error* err, int32_t code,
                                std::initializer_list<const char*> fragments) {
  ++g_checks;
  if (!err) {
    fail(file, line, str(what, ": expected error code ", code, ", got success"));
    return "";
  }
  const std::string text = error_text(err);
  TFL_Error_Message_Args m{TFL_Error_Message_Args_STRUCT_SIZE, err, nullptr, 0};
  g_api->core->Error_Message(&m);
  const std::string msg(m.message, m.message_size);
  if (error_code(err) != code) fail(file, line, str(what, ": expected code ", code, ", got ", text));
  if (msg.rfind("flemu: ", 0) != 0) fail(file, line, str(what, ": message does not start with 'flemu: ': ", msg));
  for (const char* f : fragments)
    if (msg.find(f) == std::string::npos) fail(file, line, str(what, ": message lacks '", f, "': ", msg));
  destroy(err);
  return msg;
}
#define CHECK_ERR(call, code, ...) expect_error(__FILE__, __LINE__, #call, (call), (code), {__VA_ARGS__})

// ---------------------------------------------------------------------------
// Thin wrappers over the ABI
// ---------------------------------------------------------------------------

inline TFL_Error* initialize(uint32_t major, uint32_t minor, std::vector<std::pair<std::string, std::string>> opts = {}) {
  std::vector<const char*> keys, values;
  for (auto& [k, v] : opts) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  static TFL_HostServices host{TFL_HostServices_STRUCT_SIZE, nullptr,
                               [](void*, int32_t level, const char* msg) { std::fprintf(stderr, "[host log %d] %s\n", level, msg); }};
  TFL_Plugin_Initialize_Args a{TFL_Plugin_Initialize_Args_STRUCT_SIZE, major, minor, &host,
                               keys.data(), values.data(), keys.size()};
  return g_api->core->Plugin_Initialize(&a);
}

inline TFL_Error* shutdown_plugin() {
  TFL_Plugin_Shutdown_Args a{TFL_Plugin_Shutdown_Args_STRUCT_SIZE};
  return g_api->core->Plugin_Shutdown(&a);
}

inline int device_count() {
  TFL_Device_Count_Args a{TFL_Device_Count_Args_STRUCT_SIZE, -1};
  CHECK_OK(g_api->device->Device_Count(&a));
  return a.count;
}

inline TFL_Error* alloc(int dev, size_t size, void** ptr) {
  TFL_Memory_Allocate_Args a{TFL_Memory_Allocate_Args_STRUCT_SIZE, dev, size, nullptr};
  TFL_Error* e = g_api->memory->Memory_Allocate(&a);
  *ptr = a.ptr;
  return e;
}
inline void* alloc_ok(int dev, size_t size) {
  void* p = nullptr;
  CHECK_OK(alloc(dev, size, &p));
  return p;
}
inline TFL_Error* dfree(int dev, void* ptr) {
  TFL_Memory_Free_Args a{TFL_Memory_Free_Args_STRUCT_SIZE, dev, ptr};
  return g_api->memory->Memory_Free(&a);
}
inline TFL_Error* copy(int kind, void* dst, int dd, const void* src, int sd, size_t size, TFL_Stream* s, bool blocking) {
  TFL_Memory_Copy_Args a{TFL_Memory_Copy_Args_STRUCT_SIZE, kind, dst, dd, src, sd, size, s, uint8_t(blocking ? 1 : 0)};
  return g_api->memory->Memory_Copy(&a);
}
inline TFL_Error* memset_dev(int dev, void* p, uint8_t v, size_t size, TFL_Stream* s) {
  TFL_Memory_Set_Args a{TFL_Memory_Set_Args_STRUCT_SIZE, dev, p, v, size, s};
  return g_api->memory->Memory_Set(&a);
}
inline TFL_Stream* stream_create(int dev) {
  TFL_Stream_Create_Args a{TFL_Stream_Create_Args_STRUCT_SIZE, dev, 0, nullptr};
  CHECK_OK(g_api->stream->Stream_Create(&a));
  return a.stream;
}
inline void stream_destroy(TFL_Stream* s) {
  TFL_Stream_Destroy_Args a{TFL_Stream_Destroy_Args_STRUCT_SIZE, s};
  CHECK_OK(g_api->stream->Stream_Destroy(&a));
}
inline TFL_Error* stream_sync(TFL_Stream* s) {
  TFL_Stream_Synchronize_Args a{TFL_Stream_Synchronize_Args_STRUCT_SIZE, s};
  return g_api->stream->Stream_Synchronize(&a);
}
inline bool stream_idle(TFL_Stream* s) {
  TFL_Stream_Query_Args a{TFL_Stream_Query_Args_STRUCT_SIZE, s, 0};
  CHECK_OK(g_api->stream->Stream_Query(&a));
  return a.idle != 0;
}
inline TFL_Event* event_create(int dev, uint32_t flags) {
  TFL_Event_Create_Args a{TFL_Event_Create_Args_STRUCT_SIZE, dev, flags, nullptr};
  CHECK_OK(g_api->stream->Event_Create(&a));
  return a.event;
}
inline void event_destroy(TFL_Event* e) {
  TFL_Event_Destroy_Args a{TFL_Event_Destroy_Args_STRUCT_SIZE, e};
  CHECK_OK(g_api->stream->Event_Destroy(&a));
}
inline TFL_Error* event_record(TFL_Event* e, TFL_Stream* s) {
  TFL_Event_Record_Args a{TFL_Event_Record_Args_STRUCT_SIZE, e, s};
  return g_api->stream->Event_Record(&a);
}
inline TFL_Error* event_sync(TFL_Event* e) {
  TFL_Event_Synchronize_Args a{TFL_Event_Synchronize_Args_STRUCT_SIZE, e};
  return g_api->stream->Event_Synchronize(&a);
}
inline bool event_query(TFL_Event* e) {
  TFL_Event_Query_Args a{TFL_Event_Query_Args_STRUCT_SIZE, e, 0};
  CHECK_OK(g_api->stream->Event_Query(&a));
  return a.complete != 0;
}
inline TFL_Error* wait_event(TFL_Stream* s, TFL_Event* e) {
  TFL_Stream_WaitEvent_Args a{TFL_Stream_WaitEvent_Args_STRUCT_SIZE, s, e};
  return g_api->stream->Stream_WaitEvent(&a);
}
inline TFL_Error* elapsed(TFL_Event* a, TFL_Event* b, double* ms) {
  TFL_Event_ElapsedTime_Args x{TFL_Event_ElapsedTime_Args_STRUCT_SIZE, a, b, 0.0};
  TFL_Error* e = g_api->stream->Event_ElapsedTime(&x);
  *ms = x.milliseconds;
  return e;
}
inline TFL_Error* device_sync(int dev) {
  TFL_Device_Synchronize_Args a{TFL_Device_Synchronize_Args_STRUCT_SIZE, dev};
  return g_api->device->Device_Synchronize(&a);
}

// ---------------------------------------------------------------------------
// The test's own element conversions (independent of flemu's)
// ---------------------------------------------------------------------------

inline float half_to_float(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 31, mant = h & 1023;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant + 1024), exp - 25);
  return sign ? -v : v;
}

// Round-to-nearest-even by searching the two neighbours: slow, obviously right.
inline uint16_t float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff;  // largest finite
  while (lo < hi) {  // first code whose value is >= a
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (half_to_float(mid) < a) lo = static_cast<uint16_t>(mid + 1);
    else hi = mid;
  }
  uint16_t best = lo;
  if (lo > 0) {
    const double up = half_to_float(lo) - a, down = a - half_to_float(static_cast<uint16_t>(lo - 1));
    if (down < up || (down == up && ((lo - 1) & 1) == 0)) best = static_cast<uint16_t>(lo - 1);
  }
  if (a > 65504.0 && best == 0x7bff && a - 65504.0 >= 16.0) best = 0x7c00;
  return sign | best;
}

inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xffff, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) return static_cast<uint16_t>(upper + 1);
  return static_cast<uint16_t>(upper);
}

using LD = long double;  // 64-bit mantissa: holds every int64 exactly

inline int itemsize(int dt) {
  switch (dt) {
    case TFL_DTYPE_BOOL: case TFL_DTYPE_UINT8: case TFL_DTYPE_INT8: return 1;
    case TFL_DTYPE_INT16: case TFL_DTYPE_FLOAT16: case TFL_DTYPE_BFLOAT16: return 2;
    case TFL_DTYPE_INT32: case TFL_DTYPE_FLOAT32: return 4;
    default: return 8;
  }
}
inline bool is_float(int dt) { return dt >= TFL_DTYPE_FLOAT16 && dt <= TFL_DTYPE_FLOAT64; }
inline const char* dt_name(int dt) {
  static const char* n[] = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  return dt >= 0 && dt <= 9 ? n[dt] : "?";
}

inline void encode(int dt, LD v, void* out) {
  switch (dt) {
    case TFL_DTYPE_BOOL: { uint8_t b = v != 0; std::memcpy(out, &b, 1); break; }
    case TFL_DTYPE_UINT8: { uint8_t b = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(out, &b, 1); break; }
    case TFL_DTYPE_INT8: { int8_t b = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(out, &b, 1); break; }
    case TFL_DTYPE_INT16: { int16_t b = static_cast<int16_t>(static_cast<int64_t>(v)); std::memcpy(out, &b, 2); break; }
    case TFL_DTYPE_INT32: { int32_t b = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(out, &b, 4); break; }
    case TFL_DTYPE_INT64: { int64_t b = static_cast<int64_t>(v); std::memcpy(out, &b, 8); break; }
    case TFL_DTYPE_FLOAT16: { uint16_t b = float_to_half(static_cast<float>(v)); std::memcpy(out, &b, 2); break; }
    case TFL_DTYPE_BFLOAT16: { uint16_t b = float_to_bf16(static_cast<float>(v)); std::memcpy(out, &b, 2); break; }
    case TFL_DTYPE_FLOAT32: { float b = static_cast<float>(v); std::memcpy(out, &b, 4); break; }
    default: { double b = static_cast<double>(v); std::memcpy(out, &b, 8); break; }
  }
}

inline LD decode(int dt, const void* in) {
  switch (dt) {
    case TFL_DTYPE_BOOL: { uint8_t b; std::memcpy(&b, in, 1); return b; }
    case TFL_DTYPE_UINT8: { uint8_t b; std::memcpy(&b, in, 1); return b; }
    case TFL_DTYPE_INT8: { int8_t b; std::memcpy(&b, in, 1); return b; }
    case TFL_DTYPE_INT16: { int16_t b; std::memcpy(&b, in, 2); return b; }
    case TFL_DTYPE_INT32: { int32_t b; std::memcpy(&b, in, 4); return b; }
    case TFL_DTYPE_INT64: { int64_t b; std::memcpy(&b, in, 8); return static_cast<LD>(b); }
    case TFL_DTYPE_FLOAT16: { uint16_t b; std::memcpy(&b, in, 2); return half_to_float(b); }
    case TFL_DTYPE_BFLOAT16: { uint16_t b; std::memcpy(&b, in, 2); return bf16_to_float(b); }
    case TFL_DTYPE_FLOAT32: { float b; std::memcpy(&b, in, 4); return b; }
    default: { double b; std::memcpy(&b, in, 8); return b; }
  }
}

// What storing v into dtype dt gives back.
inline LD round_to(int dt, LD v) {
  unsigned char buf[8];
  encode(dt, v, buf);
  return decode(dt, buf);
}

// ---------------------------------------------------------------------------
// Device tensors for kernel tests
// ---------------------------------------------------------------------------

struct Env {
  int devices = 2;
  uint64_t memory = uint64_t{8} << 30;
  bool fp64 = true, fp16 = true, bf16 = true, peer = true, strict = false;
};
inline Env g_env;
inline std::vector<TFL_Stream*> g_streams;

constexpr uint8_t kSentinel = 0xA5;

struct Tensor {
  int device = 0;
  int dtype = TFL_DTYPE_FLOAT32;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;  // elements
  void* base = nullptr;
  size_t bytes = 0;
  TFL_Tensor desc{};

  int64_t numel() const {
    int64_t n = 1;
    for (auto s : sizes) n *= s;
    return n;
  }
  const TFL_Tensor* t() {
    desc.struct_size = TFL_Tensor_STRUCT_SIZE;
    desc.data = static_cast<char*>(base) + offset * itemsize(dtype);
    desc.dtype = dtype;
    desc.memory_kind = TFL_MEMORY_DEVICE;
    desc.device = device;
    desc.ndim = static_cast<int32_t>(sizes.size());
    desc.sizes = sizes.data();
    desc.strides = strides.data();
    desc.numel = numel();
    desc.storage_offset = offset;
    return &desc;
  }
};

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

// A tensor with the given strides (contiguous when empty), its buffer
// filled with a sentinel byte so stray writes show.
inline Tensor make_tensor(int dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}, int64_t offset = 0,
                          int device = 0) {
  Tensor t;
  t.device = device;
  t.dtype = dtype;
  t.sizes = sizes;
  t.strides = strides.empty() ? contiguous_strides(sizes) : strides;
  t.offset = offset;
  int64_t extent = offset + 1;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 0) extent += (sizes[d] - 1) * t.strides[d];
  t.bytes = static_cast<size_t>(extent * itemsize(dtype));
  t.base = alloc_ok(device, t.bytes);
  CHECK_OK(memset_dev(device, t.base, kSentinel, t.bytes, g_streams[device]));
  return t;
}

inline void free_tensor(Tensor& t) {
  CHECK_OK(stream_sync(g_streams[t.device]));
  CHECK_OK(dfree(t.device, t.base));
  t.base = nullptr;
}

inline std::vector<unsigned char> read_buffer(const Tensor& t) {
  std::vector<unsigned char> buf(t.bytes);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, buf.data(), -1, t.base, t.device, t.bytes, g_streams[t.device], true));
  return buf;
}

// Visits logical indices in row-major order with their element offsets.
inline void for_each_index(const Tensor& t, const std::function<void(int64_t linear, int64_t elem)>& f) {
  const int64_t n = t.numel();
  std::vector<int64_t> idx(t.sizes.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t e = t.offset;
    for (size_t d = 0; d < idx.size(); ++d) e += idx[d] * t.strides[d];
    f(i, e);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

inline std::vector<LD> download(const Tensor& t) {
  const auto buf = read_buffer(t);
  std::vector<LD> out(static_cast<size_t>(t.numel()));
  for_each_index(t, [&](int64_t i, int64_t e) { out[i] = decode(t.dtype, buf.data() + e * itemsize(t.dtype)); });
  return out;
}

// Writes values (row-major logical order); returns them as stored.
inline std::vector<LD> upload(Tensor& t, const std::vector<LD>& values) {
  auto buf = read_buffer(t);
  std::vector<LD> stored(values.size());
  for_each_index(t, [&](int64_t i, int64_t e) {
    encode(t.dtype, values[i], buf.data() + e * itemsize(t.dtype));
    stored[i] = decode(t.dtype, buf.data() + e * itemsize(t.dtype));
  });
  CHECK_OK(copy(TFL_COPY_HOST_TO_DEVICE, t.base, t.device, buf.data(), -1, t.bytes, g_streams[t.device], true));
  return stored;
}

inline std::mt19937_64 g_rng(12345);

inline std::vector<LD> random_values(int dt, int64_t n, bool nonzero = false) {
  std::vector<LD> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> uf(-4.0, 4.0);
  for (auto& x : v) {
    if (dt == TFL_DTYPE_BOOL) x = g_rng() & 1;
    else if (dt == TFL_DTYPE_UINT8) x = static_cast<LD>(g_rng() % 200);
    else if (is_float(dt)) x = uf(g_rng);
    else x = static_cast<LD>(static_cast<int64_t>(g_rng() % 200) - 100);
    if (nonzero && x == 0) x = (dt == TFL_DTYPE_BOOL) ? 1 : 3;
  }
  return v;
}

inline Tensor filled(int dtype, std::vector<int64_t> sizes, std::vector<LD>* stored, std::vector<int64_t> strides = {},
                     int64_t offset = 0, bool nonzero = false, int device = 0) {
  Tensor t = make_tensor(dtype, sizes, strides, offset, device);
  *stored = upload(t, random_values(dtype, t.numel(), nonzero));
  return t;
}

inline double tolerance(int dt) {
  switch (dt) {
    case TFL_DTYPE_FLOAT16: return 2e-3;
    case TFL_DTYPE_BFLOAT16: return 1.6e-2;
    case TFL_DTYPE_FLOAT32: return 1e-5;
    case TFL_DTYPE_FLOAT64: return 1e-12;
    default: return 0.0;
  }
}

inline bool close_enough(LD actual, LD expected, double rel, double abs_tol) {
  if (std::isnan(static_cast<double>(expected))) return std::isnan(static_cast<double>(actual));
  if (std::isinf(static_cast<double>(expected))) return actual == expected;
  return std::fabs(static_cast<double>(actual - expected)) <= abs_tol + rel * std::fabs(static_cast<double>(expected));
}

#define CHECK_VALUES(what, actual, expected, dtype)                                                                  \
  check_values(__FILE__, __LINE__, what, actual, expected, tolerance(dtype), tolerance(dtype) * 1e-1)

inline void check_values(const char* file, int line, const std::string& what, const std::vector<LD>& actual,
                         const std::vector<LD>& expected, double rel, double abs_tol) {
  ++g_checks;
  if (actual.size() != expected.size()) {
    fail(file, line, str(what, ": ", actual.size(), " values, expected ", expected.size()));
    return;
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close_enough(actual[i], expected[i], rel, abs_tol)) {
      fail(file, line, str(what, ": element ", i, " is ", static_cast<double>(actual[i]), ", expected ",
                           static_cast<double>(expected[i])));
      return;
    }
  }
}

// Checks that the bytes of the buffer outside the view still hold the sentinel.
inline void check_untouched(const char* what, const Tensor& t) {
  auto buf = read_buffer(t);
  std::vector<bool> inside(t.bytes, false);
  for_each_index(t, [&](int64_t, int64_t e) {
    for (int b = 0; b < itemsize(t.dtype); ++b) inside[e * itemsize(t.dtype) + b] = true;
  });
  for (size_t i = 0; i < t.bytes; ++i)
    if (!inside[i] && buf[i] != kSentinel) {
      fail(__FILE__, __LINE__, str(what, ": byte ", i, " outside the view changed to ", int(buf[i]), ", expected ", int(kSentinel)));
      return;
    }
}

// ---------------------------------------------------------------------------
// Kernel invocation
// ---------------------------------------------------------------------------

inline TFL_Value tv(const TFL_Tensor* t) {
  TFL_Value v{};
  v.tag = TFL_VALUE_TENSOR;
  v.v.tensor = t;
  return v;
}
inline TFL_Value iv(int64_t i) {
  TFL_Value v{};
  v.tag = TFL_VALUE_INT;
  v.v.i = i;
  return v;
}
inline TFL_Value dv(double d) {
  TFL_Value v{};
  v.tag = TFL_VALUE_DOUBLE;
  v.v.d = d;
  return v;
}
inline TFL_Value bv(bool b) {
  TFL_Value v{};
  v.tag = TFL_VALUE_BOOL;
  v.v.i = b;
  return v;
}
inline TFL_Value nonev() { return TFL_Value{}; }
inline TFL_Value ilist(const std::vector<int64_t>& xs) {
  TFL_Value v{};
  v.tag = TFL_VALUE_INT_LIST;
  v.v.ints.data = xs.data();
  v.v.ints.size = xs.size();
  return v;
}
inline TFL_Value stype(int dt) {
  TFL_Value v{};
  v.tag = TFL_VALUE_SCALAR_TYPE;
  v.v.i = dt;
  return v;
}

inline std::map<std::string, const TFL_KernelDesc*> g_kernels;
inline void* g_lib = nullptr;

inline void load_kernel_table() {
  g_kernels.clear();
  TFL_Kernels_List_Args a{TFL_Kernels_List_Args_STRUCT_SIZE, nullptr, 0};
  CHECK_OK(g_api->kernels->Kernels_List(&a));
  for (size_t i = 0; i < a.num_kernels; ++i) g_kernels[a.kernels[i]->op] = a.kernels[i];
}

inline TFL_Error* launch_fn(TFL_KernelFn fn, const char* op, void* user_data, const std::vector<TFL_Value>& in,
                            const std::vector<const TFL_Tensor*>& out, int device = 0, int variant = TFL_VARIANT_FUNCTIONAL) {
  TFL_KernelContext ctx{};
  ctx.struct_size = TFL_KernelContext_STRUCT_SIZE;
  ctx.device = device;
  ctx.variant = variant;
  ctx.stream = g_streams[device];
  ctx.op_name = op;
  ctx.user_data = user_data;
  TFL_Kernel_Args args{TFL_Kernel_Args_STRUCT_SIZE, &ctx, in.data(), in.size(), out.data(), out.size()};
  return fn(&args);
}

inline TFL_Error* launch(const std::string& op, const std::vector<TFL_Value>& in, const std::vector<const TFL_Tensor*>& out,
                         int device = 0, int variant = TFL_VARIANT_FUNCTIONAL) {
  auto it = g_kernels.find(op);
  if (it == g_kernels.end()) {
    fail(__FILE__, __LINE__, str("kernel ", op, " is not in Kernels_List"));
    return nullptr;
  }
  return launch_fn(it->second->fn, op.c_str(), it->second->user_data, in, out, device, variant);
}

// ---------------------------------------------------------------------------
// Environment the run was started with (the expectations follow it)
// ---------------------------------------------------------------------------

inline bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::string(v) != "0";
}

inline Env read_env() {
  Env e;
  if (const char* v = std::getenv("FLEMU_DEVICE_COUNT"); v && *v) e.devices = std::atoi(v);
  if (const char* v = std::getenv("FLEMU_MEMORY_BYTES"); v && *v) {
    char* end = nullptr;
    uint64_t n = std::strtoull(v, &end, 10);
    switch (end && *end ? std::tolower(*end) : 0) {
      case 'k': n <<= 10; break;
      case 'm': n <<= 20; break;
      case 'g': n <<= 30; break;
      default: break;
    }
    e.memory = n;
  }
  e.fp64 = env_flag("FLEMU_FP64", true);
  e.fp16 = env_flag("FLEMU_FP16", true);
  e.bf16 = env_flag("FLEMU_BF16", true);
  e.peer = env_flag("FLEMU_PEER_ACCESS", true);
  e.strict = env_flag("FLEMU_STRICT", false);
  return e;
}

inline std::vector<int> float_dtypes() {
  std::vector<int> d = {TFL_DTYPE_FLOAT32};
  if (g_env.fp64) d.push_back(TFL_DTYPE_FLOAT64);
  if (g_env.fp16) d.push_back(TFL_DTYPE_FLOAT16);
  if (g_env.bf16) d.push_back(TFL_DTYPE_BFLOAT16);
  return d;
}

inline std::vector<int> all_dtypes() {
  std::vector<int> d = {TFL_DTYPE_BOOL, TFL_DTYPE_UINT8, TFL_DTYPE_INT8, TFL_DTYPE_INT16, TFL_DTYPE_INT32, TFL_DTYPE_INT64};
  for (int f : float_dtypes()) d.push_back(f);
  return d;
}

// Keeps a stream busy for a while (several large memsets).
inline void busy(TFL_Stream* s, int dev, void* scratch, size_t bytes, int rounds) {
  for (int i = 0; i < rounds; ++i) CHECK_OK(memset_dev(dev, scratch, static_cast<uint8_t>(i), bytes, s));
}

// Free memory of a device (its total is checked against FLEMU_MEMORY_BYTES).
inline uint64_t free_bytes(int dev) {
  TFL_Memory_GetInfo_Args a{TFL_Memory_GetInfo_Args_STRUCT_SIZE, dev, 0, 0};
  CHECK_OK(g_api->memory->Memory_GetInfo(&a));
  CHECK_EQ(a.total_bytes, (g_env.memory + 4095) / 4096 * 4096);
  return a.free_bytes;
}

inline void fill_f32(Tensor& t, double value) {
  CHECK_OK(launch("aten::fill_.Scalar", {tv(t.t()), dv(value)}, {t.t()}, t.device, TFL_VARIANT_INPLACE));
}

// One stream per device, and the kernel table.
inline void setup_streams() {
  g_streams.clear();
  for (int d = 0; d < device_count(); ++d) g_streams.push_back(stream_create(d));
  load_kernel_table();
}

// dlopens the library named by argv[1] (or $FLEMU_LIBRARY) and reads its API
// table; returns the mode argv[2] ("all" by default), or "" after printing
// why the library could not be used.
inline std::string open_plugin(int argc, char** argv, const char* program) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* path = argc > 1 && argv[1][0] != '\0' ? argv[1] : std::getenv("FLEMU_LIBRARY");
  const std::string mode = argc > 2 ? argv[2] : "all";
  if (!path) {
    std::fprintf(stderr, "usage: %s LIBRARY [MODE] (or set FLEMU_LIBRARY)\n", program);
    return "";
  }
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    std::fprintf(stderr, "dlopen(%s) failed: %s\n", path, dlerror());
    return "";
  }
  auto entry = reinterpret_cast<TFL_GetPluginApiFn>(dlsym(g_lib, TFL_ENTRY_SYMBOL));
  if (!entry) {
    std::fprintf(stderr, "%s does not export %s\n", path, TFL_ENTRY_SYMBOL);
    return "";
  }
  g_api = entry();
  g_env = read_env();
  return mode;
}

inline int report() {
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

#endif  // FLEMU_TESTS_ABI_DRIVER_H_
