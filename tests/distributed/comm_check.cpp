// Drives a plugin's collectives group through TFL_GetPluginApi alone (no
// torch): forks WORLD processes before the plugin initializes, hands rank 0's
// unique id to the others through pipes, and checks every collective, op and
// dtype against values computed here, plus the failure behaviour.
//
// Usage: comm_check LIBRARY MODE WORLD
//   MODE: correctness  every collective x op x dtype, uneven sizes, in place
//         timeout      one rank skips a collective: the others fail with
//                      TFL_ERR_TIMEOUT within the communicator's timeout
//         dead-rank    the last rank exits: the others fail naming it
//         abort        rank 0 aborts while the others wait in a collective
//         mismatch     ranks call different collectives / sizes
//         bench        all_reduce bus bandwidth, 1-64 MiB float32
// Exit status 0 when every rank passed; each failure is printed with the
// actual and expected values. COMM_CHECK_VERBOSE=1 prints every expected
// error message.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "torch_fl/plugin_api.h"

namespace {

const TFL_Api* g_api = nullptr;
int g_rank = 0, g_world = 1, g_failures = 0;

template <class... P>
std::string str(P&&... parts) {
  std::ostringstream os;
  os.precision(10);
  (os << ... << parts);
  return os.str();
}

void failure(int line, const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "FAIL rank %d line %d: %s\n", g_rank, line, what.c_str());
  if (g_failures > 30) std::_Exit(1);
}
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) failure(__LINE__, str(#cond, ": ", __VA_ARGS__)); \
  } while (0)

std::string message_of(TFL_Error* e) {
  TFL_Error_Message_Args m{TFL_Error_Message_Args_STRUCT_SIZE, e, nullptr, 0};
  g_api->core->Error_Message(&m);
  return std::string(m.message, m.message_size);
}
int32_t code_of(TFL_Error* e) {
  TFL_Error_GetCode_Args c{TFL_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  g_api->core->Error_GetCode(&c);
  return c.code;
}
void release(TFL_Error* e) {
  TFL_Error_Destroy_Args d{TFL_Error_Destroy_Args_STRUCT_SIZE, e};
  g_api->core->Error_Destroy(&d);
}
void ok(TFL_Error* e, int line, const char* what) {
  if (e != nullptr) {
    failure(line, str(what, ": expected success, got code ", code_of(e), ": ", message_of(e)));
    release(e);
  }
}
#define OK(call) ok((call), __LINE__, #call)

// An error with `code` whose message contains `fragment`; returns the message.
std::string expect_error(TFL_Error* e, int32_t code, const char* fragment, int line, const char* what) {
  if (e == nullptr) {
    failure(line, str(what, ": expected error code ", code, ", got success"));
    return "";
  }
  const std::string msg = message_of(e);
  if (std::getenv("COMM_CHECK_VERBOSE") != nullptr) std::printf("rank %d, %s: %s\n", g_rank, what, msg.c_str());
  if (code_of(e) != code) failure(line, str(what, ": expected code ", code, ", got ", code_of(e), ": ", msg));
  if (msg.find(fragment) == std::string::npos) failure(line, str(what, ": message lacks '", fragment, "': ", msg));
  release(e);
  return msg;
}
#define EXPECT_ERROR(call, code, fragment) expect_error((call), (code), (fragment), __LINE__, #call)

// ---------------------------------------------------------------------------
// Element values
// ---------------------------------------------------------------------------

uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if ((x & 0x7fffffffu) == 0) return static_cast<uint16_t>(sign);
  // Test values are normal and need at most 11 significant bits; round to nearest.
  mant = (mant + 0x1000u) >> 13;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | mant);
}
float from_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0 && mant == 0) {
    float z;
    std::memcpy(&z, &sign, 4);
    return z;
  }
  const uint32_t bits = sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

struct DType {
  int32_t id;
  const char* name;
  size_t size;
  bool floating;
};
const DType kDTypes[] = {
    {TFL_DTYPE_BOOL, "bool", 1, false},       {TFL_DTYPE_UINT8, "uint8", 1, false},
    {TFL_DTYPE_INT8, "int8", 1, false},       {TFL_DTYPE_INT16, "int16", 2, false},
    {TFL_DTYPE_INT32, "int32", 4, false},     {TFL_DTYPE_INT64, "int64", 8, false},
    {TFL_DTYPE_FLOAT16, "float16", 2, true},  {TFL_DTYPE_BFLOAT16, "bfloat16", 2, true},
    {TFL_DTYPE_FLOAT32, "float32", 4, true},  {TFL_DTYPE_FLOAT64, "float64", 8, true},
};

void store(const DType& t, char* p, double v) {
  switch (t.id) {
    case TFL_DTYPE_BOOL: *reinterpret_cast<uint8_t*>(p) = v != 0; break;
    case TFL_DTYPE_UINT8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case TFL_DTYPE_INT8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case TFL_DTYPE_INT16: *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v); break;
    case TFL_DTYPE_INT32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case TFL_DTYPE_INT64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case TFL_DTYPE_FLOAT16: *reinterpret_cast<uint16_t*>(p) = to_half(static_cast<float>(v)); break;
    case TFL_DTYPE_BFLOAT16: *reinterpret_cast<uint16_t*>(p) = to_bf16(static_cast<float>(v)); break;
    case TFL_DTYPE_FLOAT32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case TFL_DTYPE_FLOAT64: *reinterpret_cast<double*>(p) = v; break;
  }
}
double load(const DType& t, const char* p) {
  switch (t.id) {
    case TFL_DTYPE_BOOL: return *reinterpret_cast<const uint8_t*>(p);
    case TFL_DTYPE_UINT8: return *reinterpret_cast<const uint8_t*>(p);
    case TFL_DTYPE_INT8: return *reinterpret_cast<const int8_t*>(p);
    case TFL_DTYPE_INT16: return *reinterpret_cast<const int16_t*>(p);
    case TFL_DTYPE_INT32: return *reinterpret_cast<const int32_t*>(p);
    case TFL_DTYPE_INT64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case TFL_DTYPE_FLOAT16: return from_half(*reinterpret_cast<const uint16_t*>(p));
    case TFL_DTYPE_BFLOAT16: return from_bf16(*reinterpret_cast<const uint16_t*>(p));
    case TFL_DTYPE_FLOAT32: return *reinterpret_cast<const float*>(p);
    case TFL_DTYPE_FLOAT64: return *reinterpret_cast<const double*>(p);
  }
  return NAN;
}

// Rank r's element i: small integers, exact in every dtype; products stay
// within 2^world.
double value(const DType& t, int32_t op, int r, size_t i) {
  if (t.id == TFL_DTYPE_BOOL) return ((static_cast<size_t>(r) + i) % 3) == 0;
  if (op == TFL_REDUCE_PRODUCT) return static_cast<double>((static_cast<size_t>(r) + i) % 2 + 1);
  return static_cast<double>((static_cast<size_t>(r) * 3 + i) % 5 + 1);
}

double expected_reduction(const DType& t, int32_t op, size_t i) {
  double acc = value(t, op, 0, i);
  for (int r = 1; r < g_world; ++r) {
    const double v = value(t, op, r, i);
    switch (op) {
      case TFL_REDUCE_SUM:
      case TFL_REDUCE_AVG: acc = t.id == TFL_DTYPE_BOOL ? (acc != 0 || v != 0) : acc + v; break;
      case TFL_REDUCE_PRODUCT: acc = t.id == TFL_DTYPE_BOOL ? (acc != 0 && v != 0) : acc * v; break;
      case TFL_REDUCE_MIN: acc = std::min(acc, v); break;
      case TFL_REDUCE_MAX: acc = std::max(acc, v); break;
    }
  }
  if (op == TFL_REDUCE_AVG) acc = t.floating ? acc / g_world : std::trunc(acc / g_world);
  return acc;
}

bool close_enough(const DType& t, double actual, double expected) {
  if (!t.floating) return actual == expected;
  const double tol = t.size == 2 ? 1e-2 : 1e-6;
  return std::fabs(actual - expected) <= tol * std::max(1.0, std::fabs(expected));
}

// ---------------------------------------------------------------------------
// Device buffers and streams
// ---------------------------------------------------------------------------

struct Buffer {
  void* ptr = nullptr;
  size_t size = 0;
  explicit Buffer(size_t bytes) : size(bytes) {
    TFL_Memory_Allocate_Args a{TFL_Memory_Allocate_Args_STRUCT_SIZE, 0, std::max<size_t>(bytes, 1), nullptr};
    OK(g_api->memory->Memory_Allocate(&a));
    ptr = a.ptr;
  }
  ~Buffer() {
    TFL_Memory_Free_Args f{TFL_Memory_Free_Args_STRUCT_SIZE, 0, ptr};
    OK(g_api->memory->Memory_Free(&f));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* at(size_t off) const { return static_cast<char*>(ptr) + off; }
};

TFL_Stream* g_stream = nullptr;

void copy(void* dst, int32_t dst_dev, const void* src, int32_t src_dev, size_t bytes, int32_t kind) {
  if (bytes == 0) return;
  TFL_Memory_Copy_Args c{};
  c.struct_size = TFL_Memory_Copy_Args_STRUCT_SIZE;
  c.dst = dst;
  c.dst_device = dst_dev;
  c.src = src;
  c.src_device = src_dev;
  c.size = bytes;
  c.kind = kind;
  c.stream = g_stream;
  c.blocking = 1;
  OK(g_api->memory->Memory_Copy(&c));
}
void upload(const Buffer& b, size_t off, const std::vector<char>& host) {
  copy(b.at(off), 0, host.data(), -1, host.size(), TFL_COPY_HOST_TO_DEVICE);
}
std::vector<char> download(const Buffer& b, size_t off, size_t bytes) {
  std::vector<char> host(bytes);
  copy(host.data(), -1, b.at(off), 0, bytes, TFL_COPY_DEVICE_TO_HOST);
  return host;
}

TFL_Stream* make_stream() {
  TFL_Stream_Create_Args s{TFL_Stream_Create_Args_STRUCT_SIZE, 0, 0, nullptr};
  OK(g_api->stream->Stream_Create(&s));
  return s.stream;
}
TFL_Error* sync(TFL_Stream* stream) {
  TFL_Stream_Synchronize_Args s{TFL_Stream_Synchronize_Args_STRUCT_SIZE, stream};
  return g_api->stream->Stream_Synchronize(&s);
}

const TFL_CollectivesApi& coll() { return *g_api->collectives; }

TFL_Communicator* init_comm(const TFL_CommUniqueId& id, int64_t timeout_ms) {
  TFL_Comm_Init_Args a{};
  a.struct_size = TFL_Comm_Init_Args_STRUCT_SIZE;
  a.device = 0;
  a.world_size = g_world;
  a.rank = g_rank;
  a.id = &id;
  a.timeout_ms = timeout_ms;
  OK(coll().Comm_Init(&a));
  return a.comm;
}
void destroy_comm(TFL_Communicator* c) {
  TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
  OK(coll().Comm_Destroy(&d));
}

TFL_Comm_Collective_Args cargs(TFL_Communicator* c, const void* send, void* recv, size_t count, int32_t dtype,
                               int32_t op = 0, int32_t root = 0) {
  TFL_Comm_Collective_Args a{};
  a.struct_size = TFL_Comm_Collective_Args_STRUCT_SIZE;
  a.comm = c;
  a.sendbuf = send;
  a.recvbuf = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  a.stream = g_stream;
  return a;
}

// ---------------------------------------------------------------------------
// Correctness
// ---------------------------------------------------------------------------

const int32_t kOps[] = {TFL_REDUCE_SUM, TFL_REDUCE_PRODUCT, TFL_REDUCE_MIN, TFL_REDUCE_MAX, TFL_REDUCE_AVG};
const char* kOpNames[] = {"sum", "product", "min", "max", "avg"};

void check_all_reduce(TFL_Communicator* c) {
  // 1, an uneven 7, a size below the ring threshold, and one above it.
  const size_t counts[] = {0, 1, 7, 1003, 150001};
  int variant = 0;
  for (const DType& t : kDTypes) {
    for (int oi = 0; oi < 5; ++oi) {
      const int32_t op = kOps[oi];
      if (t.id == TFL_DTYPE_BOOL && op == TFL_REDUCE_AVG) continue;
      for (size_t count : counts) {
        const bool in_place = (variant++ % 2) == 0;
        const size_t bytes = count * t.size;
        Buffer send(bytes), recv(bytes);
        std::vector<char> host(bytes);
        for (size_t i = 0; i < count; ++i) store(t, host.data() + i * t.size, value(t, op, g_rank, i));
        upload(send, 0, host);
        auto a = cargs(c, send.ptr, in_place ? send.ptr : recv.ptr, count, t.id, op);
        OK(coll().Comm_AllReduce(&a));
        OK(sync(g_stream));
        const std::vector<char> out = download(in_place ? send : recv, 0, bytes);
        for (size_t i = 0; i < count; ++i) {
          const double got = load(t, out.data() + i * t.size);
          double want = expected_reduction(t, op, i);
          if (!t.floating && t.id != TFL_DTYPE_BOOL) {  // wrap like the dtype
            std::vector<char> w(t.size);
            store(t, w.data(), want);
            want = load(t, w.data());
          }
          if (!close_enough(t, got, want)) {
            failure(__LINE__, str("all_reduce ", kOpNames[oi], " ", t.name, " count ", count,
                                  in_place ? " in place" : " out of place", " element ", i, ": actual ", got,
                                  ", expected ", want));
            break;
          }
        }
      }
    }
  }
}

void check_reduce_scatter(TFL_Communicator* c) {
  const size_t counts[] = {1, 5, 40001};
  int variant = 0;
  for (const DType& t : kDTypes) {
    for (int oi = 0; oi < 5; ++oi) {
      const int32_t op = kOps[oi];
      if (t.id == TFL_DTYPE_BOOL && op == TFL_REDUCE_AVG) continue;
      for (size_t count : counts) {
        const bool in_place = (variant++ % 2) == 0;
        const size_t total = count * static_cast<size_t>(g_world);
        Buffer send(total * t.size), recv(count * t.size);
        std::vector<char> host(total * t.size);
        for (size_t i = 0; i < total; ++i) store(t, host.data() + i * t.size, value(t, op, g_rank, i));
        upload(send, 0, host);
        void* out_ptr = in_place ? send.at(static_cast<size_t>(g_rank) * count * t.size) : recv.ptr;
        auto a = cargs(c, send.ptr, out_ptr, count, t.id, op);
        OK(coll().Comm_ReduceScatter(&a));
        OK(sync(g_stream));
        std::vector<char> out(count * t.size);
        copy(out.data(), -1, out_ptr, 0, out.size(), TFL_COPY_DEVICE_TO_HOST);
        for (size_t i = 0; i < count; ++i) {
          const size_t gi = static_cast<size_t>(g_rank) * count + i;
          const double got = load(t, out.data() + i * t.size);
          double want = expected_reduction(t, op, gi);
          if (!t.floating && t.id != TFL_DTYPE_BOOL) {
            std::vector<char> w(t.size);
            store(t, w.data(), want);
            want = load(t, w.data());
          }
          if (!close_enough(t, got, want)) {
            failure(__LINE__, str("reduce_scatter ", kOpNames[oi], " ", t.name, " count ", count, " element ", i,
                                  ": actual ", got, ", expected ", want));
            break;
          }
        }
      }
    }
  }
}

void check_all_gather(TFL_Communicator* c) {
  const DType& t = kDTypes[8];  // float32; data movement is dtype-blind
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{70001}}) {
    for (bool in_place : {false, true}) {
      const size_t total = count * static_cast<size_t>(g_world);
      Buffer send(count * t.size), recv(total * t.size);
      std::vector<char> host(count * t.size);
      for (size_t i = 0; i < count; ++i) store(t, host.data() + i * t.size, g_rank * 100000.0 + i);
      const void* src = send.ptr;
      if (in_place) {
        upload(recv, static_cast<size_t>(g_rank) * count * t.size, host);
        src = recv.at(static_cast<size_t>(g_rank) * count * t.size);
      } else {
        upload(send, 0, host);
      }
      auto a = cargs(c, src, recv.ptr, count, t.id);
      OK(coll().Comm_AllGather(&a));
      OK(sync(g_stream));
      const std::vector<char> out = download(recv, 0, total * t.size);
      for (size_t i = 0; i < total; ++i) {
        const double want = static_cast<double>(i / count) * 100000.0 + static_cast<double>(i % count);
        const double got = load(t, out.data() + i * t.size);
        if (got != want) {
          failure(__LINE__, str("all_gather count ", count, in_place ? " in place" : "", " element ", i, ": actual ", got,
                                ", expected ", want));
          break;
        }
      }
    }
  }
}

void check_broadcast(TFL_Communicator* c) {
  const DType& t = kDTypes[5];  // int64
  for (int root : {0, g_world - 1}) {
    for (size_t count : {size_t{1}, size_t{9}, size_t{300001}}) {
      Buffer buf(count * t.size);
      std::vector<char> host(count * t.size);
      for (size_t i = 0; i < count; ++i)
        store(t, host.data() + i * t.size, g_rank == root ? static_cast<double>(i * 7 + 3) : -1.0);
      upload(buf, 0, host);
      auto a = cargs(c, buf.ptr, buf.ptr, count, t.id, 0, root);
      OK(coll().Comm_Broadcast(&a));
      OK(sync(g_stream));
      const std::vector<char> out = download(buf, 0, count * t.size);
      for (size_t i = 0; i < count; ++i) {
        const double got = load(t, out.data() + i * t.size);
        if (got != static_cast<double>(i * 7 + 3)) {
          failure(__LINE__, str("broadcast root ", root, " count ", count, " element ", i, ": actual ", got,
                                ", expected ", i * 7 + 3));
          break;
        }
      }
    }
  }
}

void check_all_to_all(TFL_Communicator* c) {
  const DType& t = kDTypes[4];  // int32
  for (size_t scale : {size_t{1}, size_t{20000}}) {
    // Rank r sends (r + p) % 3 + 1 (times scale) elements to rank p: uneven.
    auto n_of = [&](int from, int to) { return (static_cast<size_t>(from + to) % 3 + 1) * scale; };
    std::vector<size_t> sc(g_world), so(g_world), rc(g_world), ro(g_world);
    size_t stot = 0, rtot = 0;
    for (int p = 0; p < g_world; ++p) {
      sc[p] = n_of(g_rank, p);
      so[p] = stot;
      stot += sc[p];
      rc[p] = n_of(p, g_rank);
      ro[p] = rtot;
      rtot += rc[p];
    }
    Buffer send(stot * t.size), recv(rtot * t.size);
    std::vector<char> host(stot * t.size);
    for (int p = 0; p < g_world; ++p)
      for (size_t i = 0; i < sc[p]; ++i)
        store(t, host.data() + (so[p] + i) * t.size, g_rank * 1000000.0 + p * 100000.0 + static_cast<double>(i));
    upload(send, 0, host);
    TFL_Comm_AllToAll_Args a{};
    a.struct_size = TFL_Comm_AllToAll_Args_STRUCT_SIZE;
    a.comm = c;
    a.sendbuf = send.ptr;
    a.recvbuf = recv.ptr;
    a.send_counts = sc.data();
    a.send_offsets = so.data();
    a.recv_counts = rc.data();
    a.recv_offsets = ro.data();
    a.dtype = t.id;
    a.stream = g_stream;
    OK(coll().Comm_AllToAll(&a));
    OK(sync(g_stream));
    const std::vector<char> out = download(recv, 0, rtot * t.size);
    for (int p = 0; p < g_world; ++p) {
      for (size_t i = 0; i < rc[p]; ++i) {
        const double want = p * 1000000.0 + g_rank * 100000.0 + static_cast<double>(i);
        const double got = load(t, out.data() + (ro[p] + i) * t.size);
        if (got != want) {
          failure(__LINE__, str("all_to_all from rank ", p, " element ", i, ": actual ", got, ", expected ", want));
          break;
        }
      }
    }
  }
}

void check_send_recv(TFL_Communicator* c) {
  // A ring shift with sends and receives on separate streams, both enqueued
  // before either is waited for.
  TFL_Stream* recv_stream = make_stream();
  const DType& t = kDTypes[9];  // float64
  for (size_t count : {size_t{1}, size_t{500000}}) {
    Buffer out(count * t.size), in(count * t.size);
    std::vector<char> host(count * t.size);
    for (size_t i = 0; i < count; ++i) store(t, host.data() + i * t.size, g_rank + 0.5 * static_cast<double>(i));
    upload(out, 0, host);
    const int next = (g_rank + 1) % g_world, prev = (g_rank + g_world - 1) % g_world;
    TFL_Comm_SendRecv_Args s{TFL_Comm_SendRecv_Args_STRUCT_SIZE, c, out.ptr, count, t.id, next, g_stream};
    TFL_Comm_SendRecv_Args r{TFL_Comm_SendRecv_Args_STRUCT_SIZE, c, in.ptr, count, t.id, prev, recv_stream};
    OK(coll().Comm_Send(&s));
    OK(coll().Comm_Recv(&r));
    OK(sync(g_stream));
    OK(sync(recv_stream));
    std::vector<char> got(count * t.size);
    copy(got.data(), -1, in.ptr, 0, got.size(), TFL_COPY_DEVICE_TO_HOST);
    for (size_t i = 0; i < count; ++i) {
      const double want = prev + 0.5 * static_cast<double>(i);
      if (load(t, got.data() + i * t.size) != want) {
        failure(__LINE__, str("recv from rank ", prev, " element ", i, ": actual ", load(t, got.data() + i * t.size),
                              ", expected ", want));
        break;
      }
    }
  }
  TFL_Stream_Destroy_Args d{TFL_Stream_Destroy_Args_STRUCT_SIZE, recv_stream};
  OK(g_api->stream->Stream_Destroy(&d));
}

void check_bad_arguments(TFL_Communicator* c) {
  Buffer buf(64);
  int host = 0;
  auto a = cargs(c, &host, buf.ptr, 1, TFL_DTYPE_INT32, TFL_REDUCE_SUM);
  EXPECT_ERROR(coll().Comm_AllReduce(&a), TFL_ERR_INVALID_ARGUMENT, "not device memory");
  a = cargs(c, buf.ptr, buf.ptr, 100, TFL_DTYPE_INT32, TFL_REDUCE_SUM);
  EXPECT_ERROR(coll().Comm_AllReduce(&a), TFL_ERR_INVALID_ARGUMENT, "sendbuf");
  a = cargs(c, buf.ptr, buf.ptr, 1, TFL_DTYPE_BOOL, TFL_REDUCE_AVG);
  EXPECT_ERROR(coll().Comm_AllReduce(&a), TFL_ERR_INVALID_ARGUMENT, "avg is not defined for bool");
  a = cargs(c, buf.ptr, buf.ptr, 1, TFL_DTYPE_COMPLEX64, TFL_REDUCE_SUM);
  EXPECT_ERROR(coll().Comm_AllReduce(&a), TFL_ERR_UNIMPLEMENTED, "cannot reduce complex64");
  a = cargs(c, buf.ptr, buf.ptr, 1, TFL_DTYPE_FLOAT32, 17);
  EXPECT_ERROR(coll().Comm_AllReduce(&a), TFL_ERR_INVALID_ARGUMENT, "not a TFL_ReduceOp");
  a = cargs(c, buf.ptr, buf.ptr, 1, TFL_DTYPE_FLOAT32, 0, g_world);
  EXPECT_ERROR(coll().Comm_Broadcast(&a), TFL_ERR_INVALID_ARGUMENT, "root");
  TFL_Comm_SendRecv_Args s{TFL_Comm_SendRecv_Args_STRUCT_SIZE, c, buf.ptr, 1, TFL_DTYPE_FLOAT32, g_rank, g_stream};
  EXPECT_ERROR(coll().Comm_Send(&s), TFL_ERR_INVALID_ARGUMENT, "is this rank");
}

void barrier(TFL_Communicator* c) {
  TFL_Comm_Barrier_Args b{TFL_Comm_Barrier_Args_STRUCT_SIZE, c, g_stream};
  OK(coll().Comm_Barrier(&b));
  OK(sync(g_stream));
}

// Back-to-back barriers let a fast rank run ahead into the next operation
// while a slow one still finishes the last: nothing may mistake that for
// mismatched calls.
void check_back_to_back(TFL_Communicator* c) {
  Buffer buf(sizeof(int64_t));
  for (int i = 0; i < 60; ++i) {
    TFL_Comm_Barrier_Args b{TFL_Comm_Barrier_Args_STRUCT_SIZE, c, g_stream};
    OK(coll().Comm_Barrier(&b));
    if (i % 3 == 0) {
      std::vector<char> host(sizeof(int64_t));
      store(kDTypes[5], host.data(), i);
      upload(buf, 0, host);
      auto a = cargs(c, buf.ptr, buf.ptr, 1, TFL_DTYPE_INT64, TFL_REDUCE_SUM);
      OK(coll().Comm_AllReduce(&a));
      const double got = load(kDTypes[5], download(buf, 0, sizeof(int64_t)).data());
      CHECK(got == static_cast<double>(i) * g_world, "all_reduce after barrier ", i, ": actual ", got, ", expected ",
            i * g_world);
    }
  }
  OK(sync(g_stream));
}

int64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since).count();
}

void run_mode(const std::string& mode, const TFL_CommUniqueId& id) {
  if (mode == "correctness") {
    TFL_Communicator* c = init_comm(id, 60000);
    check_bad_arguments(c);
    check_all_reduce(c);
    check_reduce_scatter(c);
    check_all_gather(c);
    check_broadcast(c);
    check_all_to_all(c);
    check_send_recv(c);
    check_back_to_back(c);
    barrier(c);
    TFL_Comm_GetAsyncError_Args e{TFL_Comm_GetAsyncError_Args_STRUCT_SIZE, c, nullptr};
    OK(coll().Comm_GetAsyncError(&e));
    CHECK(e.error == nullptr, "a healthy communicator reports no async error");
    destroy_comm(c);
    return;
  }
  if (mode == "timeout") {
    // Rank 0 enters an all_reduce nobody else joins.
    const int64_t timeout = 1500;
    TFL_Communicator* c = init_comm(id, timeout);
    Buffer buf(4096);
    if (g_rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      auto a = cargs(c, buf.ptr, buf.ptr, 1024, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
      OK(coll().Comm_AllReduce(&a));
      EXPECT_ERROR(sync(g_stream), TFL_ERR_TIMEOUT, "timed out after 1500 ms");
      const int64_t ms = elapsed_ms(t0);
      CHECK(ms >= timeout && ms < timeout + 3000, "the timeout fired after ", ms, " ms, expected about ", timeout);
      // The communicator stays broken.
      auto b = cargs(c, buf.ptr, buf.ptr, 1024, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
      EXPECT_ERROR(coll().Comm_AllReduce(&b), TFL_ERR_TIMEOUT, "unusable after an earlier failure");
    } else {
      // The others learn about rank 0's failure without calling anything.
      const auto t0 = std::chrono::steady_clock::now();
      TFL_Comm_GetAsyncError_Args e{TFL_Comm_GetAsyncError_Args_STRUCT_SIZE, c, nullptr};
      while (elapsed_ms(t0) < timeout + 5000) {
        OK(coll().Comm_GetAsyncError(&e));
        if (e.error != nullptr) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      CHECK(e.error != nullptr, "rank ", g_rank, " never heard of rank 0's timeout");
      // The caller's first operation is #1 whichever transport carries it
      // (the shared-memory set-up exchanges are not counted).
      if (e.error != nullptr)
        EXPECT_ERROR(e.error, TFL_ERR_TIMEOUT, "rank 0: all_reduce #1: timed out after 1500 ms: rank 1 has not");
    }
    TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
    TFL_Comm_Abort* abort_fn = coll().Comm_Abort;
    OK(abort_fn(&d));
    return;
  }
  if (mode == "dead-rank") {
    TFL_Communicator* c = init_comm(id, 20000);
    barrier(c);
    if (g_rank == g_world - 1) {
      // Dies without a goodbye, once the others are past the barrier.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::_Exit(0);
    }
    Buffer buf(1 << 20);
    const auto t0 = std::chrono::steady_clock::now();
    auto a = cargs(c, buf.ptr, buf.ptr, (1 << 20) / 4, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
    OK(coll().Comm_AllReduce(&a));
    const std::string msg =
        EXPECT_ERROR(sync(g_stream), TFL_ERR_UNAVAILABLE, str("rank ", g_world - 1, " disconnected").c_str());
    const int64_t ms = elapsed_ms(t0);
    CHECK(ms < 5000, "noticing the dead rank took ", ms, " ms (the timeout is 20000 ms): ", msg);
    TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
    OK(coll().Comm_Abort(&d));
    return;
  }
  if (mode == "abort") {
    TFL_Communicator* c = init_comm(id, 20000);
    barrier(c);
    Buffer buf(4096);
    if (g_rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
      const auto t0 = std::chrono::steady_clock::now();
      OK(coll().Comm_Abort(&d));
      CHECK(elapsed_ms(t0) < 500, "Comm_Abort blocked for ", elapsed_ms(t0), " ms");
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto a = cargs(c, buf.ptr, buf.ptr, 1024, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
    OK(coll().Comm_AllReduce(&a));
    EXPECT_ERROR(sync(g_stream), TFL_ERR_ABORTED, "rank 0 aborted the communicator");
    CHECK(elapsed_ms(t0) < 5000, "noticing the abort took ", elapsed_ms(t0), " ms");
    TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
    OK(coll().Comm_Abort(&d));
    return;
  }
  if (mode == "mismatch") {
    TFL_Communicator* c = init_comm(id, 20000);
    Buffer buf(4096);
    auto a = cargs(c, buf.ptr, buf.ptr, g_rank == 0 ? 16 : 32, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
    OK(coll().Comm_AllReduce(&a));
    TFL_Error* e = sync(g_stream);
    const std::string msg = EXPECT_ERROR(e, TFL_ERR_INVALID_ARGUMENT, "all_reduce #1");
    CHECK(msg.find("different counts or dtypes") != std::string::npos, "the message does not say what differs: ", msg);
    CHECK(msg.find(str("rank ", 1 - g_rank)) != std::string::npos, "the message does not name the other rank: ", msg);
    TFL_Comm_Destroy_Args d{TFL_Comm_Destroy_Args_STRUCT_SIZE, c};
    OK(coll().Comm_Abort(&d));
    return;
  }
  if (mode == "bench") {
    TFL_Communicator* c = init_comm(id, 120000);
    for (size_t mib : {1, 4, 16, 64}) {
      const size_t bytes = mib << 20;
      Buffer buf(bytes);
      std::vector<char> host(bytes, 0);
      upload(buf, 0, host);
      auto a = cargs(c, buf.ptr, buf.ptr, bytes / 4, TFL_DTYPE_FLOAT32, TFL_REDUCE_SUM);
      OK(coll().Comm_AllReduce(&a));
      OK(sync(g_stream));
      const int iters = mib >= 16 ? 5 : 20;
      barrier(c);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) OK(coll().Comm_AllReduce(&a));
      OK(sync(g_stream));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double busbw = 2.0 * (g_world - 1) / g_world * static_cast<double>(bytes) / s / 1e9;
      if (g_rank == 0) std::printf("all_reduce %3zu MiB x %d ranks: %8.3f ms  bus %.2f GB/s\n", mib, g_world, s * 1e3, busbw);
    }
    destroy_comm(c);
    return;
  }
  failure(__LINE__, str("unknown mode ", mode));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: comm_check LIBRARY MODE WORLD\n");
    return 2;
  }
  const std::string mode = argv[2];
  g_world = std::atoi(argv[3]);
  std::vector<int> pipes(2 * static_cast<size_t>(g_world));
  for (int r = 0; r < g_world; ++r)
    if (pipe(&pipes[2 * static_cast<size_t>(r)]) != 0) return 2;
  std::vector<pid_t> children;
  for (int r = 1; r < g_world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      g_rank = r;
      break;
    }
    children.push_back(pid);
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  auto get = reinterpret_cast<TFL_GetPluginApiFn>(dlsym(lib, TFL_ENTRY_SYMBOL));
  g_api = get();
  if (g_api->collectives == nullptr) {
    std::fprintf(stderr, "the plugin has no collectives group\n");
    return 3;
  }
  TFL_Plugin_Initialize_Args init{};
  init.struct_size = TFL_Plugin_Initialize_Args_STRUCT_SIZE;
  init.host_abi_major = TFL_ABI_MAJOR;
  init.host_abi_minor = TFL_ABI_MINOR;
  OK(g_api->core->Plugin_Initialize(&init));
  g_stream = make_stream();

  TFL_CommUniqueId id{};
  if (g_rank == 0) {
    TFL_Comm_GetUniqueId_Args u{TFL_Comm_GetUniqueId_Args_STRUCT_SIZE, {}};
    OK(coll().Comm_GetUniqueId(&u));
    id = u.id;
    for (int r = 1; r < g_world; ++r)
      if (write(pipes[2 * static_cast<size_t>(r) + 1], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 2;
  } else if (read(pipes[2 * static_cast<size_t>(g_rank)], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) {
    return 2;
  }
  run_mode(mode, id);
  if (g_rank != 0) std::_Exit(g_failures == 0 ? 0 : 1);
  int status = g_failures == 0 ? 0 : 1;
  for (size_t i = 0; i < children.size(); ++i) {
    int st = 0;
    waitpid(children[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "rank %zu exited with status %d\n", i + 1, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      status = 1;
    }
  }
  if (status == 0) std::printf("comm_check %s world %d: ok\n", mode.c_str(), g_world);
  return status;
}
