// Pieces the neural-network kernels (convolution, normalization, pooling,
// embedding, dropout, random, optimizers) share: argument readers for the
// list-shaped schema arguments, strided views of one sample, and splitting
// work over the thread pool.
#ifndef FLEMU_KERNELS_SUPPORT_NN_COMMON_H_
#define FLEMU_KERNELS_SUPPORT_NN_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../../thread_pool.h"
#include "dtype.h"
#include "launch.h"
#include "layout.h"
#include "loop.h"

namespace flemu {

// An int[] argument. A single entry is repeated `expand` times (PyTorch
// accepts `stride=2` for every spatial dim); otherwise the length must be
// `expand` (when expand > 0).
inline std::vector<int64_t> int_list(const Launch& L, size_t i, const char* what, size_t expand = 0) {
  const TFL_Value& v = L.input(i, what);
  std::vector<int64_t> out;
  if (v.tag == TFL_VALUE_INT) {
    out.assign(expand ? expand : 1, v.v.i);
    return out;
  }
  if (v.tag != TFL_VALUE_INT_LIST) invalid_argument("argument ", i, " (", what, ") must be an int list, got tag ", v.tag);
  out.assign(v.v.ints.data, v.v.ints.data + v.v.ints.size);
  if (expand > 0) {
    if (out.size() == 1) out.assign(expand, out[0]);
    else if (out.size() != expand)
      invalid_argument(what, " has ", out.size(), " entries; expected 1 or ", expand);
  }
  return out;
}

inline int64_t int_arg(const Launch& L, size_t i, const char* what) {
  const TFL_Value& v = L.input(i, what);
  if (v.tag != TFL_VALUE_INT && v.tag != TFL_VALUE_BOOL)
    invalid_argument("argument ", i, " (", what, ") must be an int, got tag ", v.tag);
  return v.v.i;
}

inline double double_arg(const Launch& L, size_t i, const char* what) {
  const TFL_Value& v = L.input(i, what);
  if (v.tag == TFL_VALUE_DOUBLE) return v.v.d;
  if (v.tag == TFL_VALUE_INT || v.tag == TFL_VALUE_BOOL) return static_cast<double>(v.v.i);
  invalid_argument("argument ", i, " (", what, ") must be a float, got tag ", v.tag);
}

// An optional tensor argument; has=false when None.
inline bool optional_tensor(const Launch& L, size_t i, const char* what, TensorArg* out) {
  if (!L.has_input(i)) return false;
  *out = L.input_tensor(i, what);
  return true;
}

// Output i, or has=false when the bridge passed fewer outputs or a NULL one
// (an output the caller did not ask for).
inline bool optional_output(const Launch& L, size_t i, const char* what, TensorArg* out) {
  if (!L.has_output(i)) return false;
  *out = L.output(i, what);
  return true;
}

// A tensor copied out of the host descriptor: sizes and strides (elements)
// stay valid after the launch returns, for the enqueued work.
struct Strided {
  char* data = nullptr;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxLoopDims] = {};
  int64_t strides[kMaxLoopDims] = {};

  // Byte offset of a multi-index (ndim entries).
  int64_t offset(const int64_t* idx) const {
    int64_t o = 0;
    for (int32_t d = 0; d < ndim; ++d) o += idx[d] * strides[d];
    return o * dtype_size(dtype);
  }
};

inline Strided strided(const TensorArg& t, const char* what) {
  if (t.ndim > kMaxLoopDims)
    fail(TFL_ERR_UNIMPLEMENTED, cat(what, " has ", t.ndim, " dims; this kernel takes at most ", kMaxLoopDims));
  Strided s;
  s.data = t.data;
  s.dtype = t.dtype;
  s.ndim = t.ndim;
  s.numel = t.numel;
  for (int32_t d = 0; d < t.ndim; ++d) {
    s.sizes[d] = t.sizes[d];
    s.strides[d] = t.strides[d];
  }
  return s;
}

// True when dims [from, ndim) are row-major dense (stride 1 innermost).
inline bool dense_from(const Strided& s, int32_t from) {
  return row_major_dense(s.ndim - from, s.sizes + from, s.strides + from);
}

inline bool dense(const Strided& s) { return dense_from(s, 0); }

// Walks a tensor in logical (row-major) element order from element `start`.
struct Cursor {
  const Strided* s;
  int64_t idx[kMaxLoopDims] = {};
  char* ptr;
  int64_t item;

  Cursor(const Strided& t, int64_t start) : s(&t), ptr(t.data), item(dtype_size(t.dtype)) {
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (t.sizes[d] == 0) return;
      idx[d] = start % t.sizes[d];
      start /= t.sizes[d];
      ptr += idx[d] * t.strides[d] * item;
    }
  }
  void next() {
    for (int32_t d = s->ndim - 1; d >= 0; --d) {
      ptr += s->strides[d] * item;
      if (++idx[d] < s->sizes[d]) return;
      ptr -= s->sizes[d] * s->strides[d] * item;
      idx[d] = 0;
    }
  }
};

// The grain of parallel_chunks for items of `elems` elements each: about 16K
// elements a chunk, below which waking the pool costs more than it saves.
inline int64_t grain_for(int64_t elems) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(elems, 1)); }

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` items,
// spread over the thread pool when there is more than one chunk.
template <class Fn>
void parallel_chunks(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, 4 * pool.parallelism());
  const int64_t per = (n + chunks - 1) / chunks;
  pool.parallel_for(chunks, [&](int64_t c) {
    const int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

// The compute type of a floating storage type: float, or double for double.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_NN_COMMON_H_
