#include "dtype.h"

namespace flemu {

int64_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_BOOL:
    case TFL_DTYPE_UINT8:
    case TFL_DTYPE_INT8: return 1;
    case TFL_DTYPE_INT16:
    case TFL_DTYPE_FLOAT16:
    case TFL_DTYPE_BFLOAT16: return 2;
    case TFL_DTYPE_INT32:
    case TFL_DTYPE_FLOAT32: return 4;
    case TFL_DTYPE_INT64:
    case TFL_DTYPE_FLOAT64: return 8;
    default: return 0;
  }
}

int64_t element_size(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_COMPLEX64: return 8;
    case TFL_DTYPE_COMPLEX128: return 16;
    case TFL_DTYPE_UINT16: return 2;
    case TFL_DTYPE_UINT32: return 4;
    case TFL_DTYPE_UINT64: return 8;
    case TFL_DTYPE_FLOAT8_E4M3FN:
    case TFL_DTYPE_FLOAT8_E5M2: return 1;
    default: return dtype_size(dtype);
  }
}

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_BOOL: return "bool";
    case TFL_DTYPE_UINT8: return "uint8";
    case TFL_DTYPE_INT8: return "int8";
    case TFL_DTYPE_INT16: return "int16";
    case TFL_DTYPE_INT32: return "int32";
    case TFL_DTYPE_INT64: return "int64";
    case TFL_DTYPE_FLOAT16: return "float16";
    case TFL_DTYPE_BFLOAT16: return "bfloat16";
    case TFL_DTYPE_FLOAT32: return "float32";
    case TFL_DTYPE_FLOAT64: return "float64";
    case TFL_DTYPE_COMPLEX64: return "complex64";
    case TFL_DTYPE_COMPLEX128: return "complex128";
    case TFL_DTYPE_UINT16: return "uint16";
    case TFL_DTYPE_UINT32: return "uint32";
    case TFL_DTYPE_UINT64: return "uint64";
    case TFL_DTYPE_FLOAT8_E4M3FN: return "float8_e4m3fn";
    case TFL_DTYPE_FLOAT8_E5M2: return "float8_e5m2";
    default: return "an unknown dtype";
  }
}

bool dtype_is_floating(int32_t dtype) {
  return dtype == TFL_DTYPE_FLOAT16 || dtype == TFL_DTYPE_BFLOAT16 || dtype == TFL_DTYPE_FLOAT32 ||
         dtype == TFL_DTYPE_FLOAT64;
}

namespace {
template <class T>
double load_f64(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return convert<double>(v);
}
template <class T>
int64_t load_i64(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return convert<int64_t>(v);
}
template <class T>
void store_f64(char* p, double v) {
  const T t = convert<T>(v);
  std::memcpy(p, &t, sizeof(T));
}
template <class T>
void store_i64(char* p, int64_t v) {
  const T t = convert<T>(v);
  std::memcpy(p, &t, sizeof(T));
}
}  // namespace

LoadF64 loader_f64(int32_t dtype) {
  return dispatch_dtype(dtype, [](auto tag) -> LoadF64 { return &load_f64<typename decltype(tag)::type>; });
}
LoadI64 loader_i64(int32_t dtype) {
  return dispatch_dtype(dtype, [](auto tag) -> LoadI64 { return &load_i64<typename decltype(tag)::type>; });
}
StoreF64 storer_f64(int32_t dtype) {
  return dispatch_dtype(dtype, [](auto tag) -> StoreF64 { return &store_f64<typename decltype(tag)::type>; });
}
StoreI64 storer_i64(int32_t dtype) {
  return dispatch_dtype(dtype, [](auto tag) -> StoreI64 { return &store_i64<typename decltype(tag)::type>; });
}

}  // namespace flemu
