// Elementwise iteration over strided operands: operand 0 fixes the shape,
// the others are broadcast to it; dimensions are reordered to follow the
// memory order of the operands and merged where they are contiguous, so
// most loops end up one long inner run.
#ifndef FLEMU_KERNELS_SUPPORT_LOOP_H_
#define FLEMU_KERNELS_SUPPORT_LOOP_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../thread_pool.h"
#include "isa.h"
#include "launch.h"

namespace flemu {

constexpr int kMaxLoopDims = 16;
constexpr int kMaxOperands = 4;  // out plus up to three inputs (where, addcmul)

// One loop dimension: its size and each operand's byte stride along it.
struct LoopDim {
  int64_t size;
  int64_t stride[kMaxOperands];  // bytes
};

// A kernel's task holds its plan, written by the host and read by a stream
// worker on another core: what a copy writes is what crosses between the
// cores. The fields in use lie together at the front, each dimension's size
// and strides side by side (the last dim is the inner one), so that a copy
// writes only the dims in use: a 1-d binary op's plan is 88 contiguous bytes,
// two cache lines, where size and stride arrays of kMaxLoopDims had it touch
// five lines apart.
struct LoopPlan {
  int32_t ndim = 0;  // >= 1 unless numel == 0
  int32_t nops = 0;
  int64_t numel = 0;
  char* data[kMaxOperands];
  LoopDim dims[kMaxLoopDims];

  LoopPlan() = default;
  LoopPlan(const LoopPlan& o) { *this = o; }
  LoopPlan& operator=(const LoopPlan& o) {
    ndim = o.ndim;
    nops = o.nops;
    numel = o.numel;
    for (int k = 0; k < nops; ++k) data[k] = o.data[k];
    for (int d = 0; d < ndim; ++d) dims[d] = o.dims[d];
    return *this;
  }
};
static_assert(offsetof(LoopPlan, dims) + sizeof(LoopDim) == 88, "a 1-d plan's fields in use are its first 88 bytes");

// Operand 0 (normally the output) gives the iteration shape; each other
// operand must be broadcastable to it. Throws on a mismatch.
LoopPlan make_loop(const TensorArg* const* operands, int nops, const char* const* names);

inline int64_t loop_inner_size(const LoopPlan& p) { return p.dims[p.ndim - 1].size; }

namespace loop_detail {

template <class F>
[[gnu::always_inline]] inline void runs(const LoopPlan& p, int64_t begin, int64_t end, F& f) {
  if (begin >= end) return;
  const int inner = p.ndim - 1;
  const int64_t n = p.dims[inner].size;
  int64_t row = begin / n, col = begin % n;
  int64_t idx[kMaxLoopDims];
  char* ptr[kMaxOperands];
  int64_t inner_stride[kMaxOperands];
  for (int k = 0; k < p.nops; ++k) {
    ptr[k] = p.data[k];
    inner_stride[k] = p.dims[inner].stride[k];
  }
  for (int d = inner - 1; d >= 0; --d) {
    idx[d] = row % p.dims[d].size;
    row /= p.dims[d].size;
    for (int k = 0; k < p.nops; ++k) ptr[k] += idx[d] * p.dims[d].stride[k];
  }
  int64_t remaining = end - begin;
  for (;;) {
    const int64_t len = std::min(n - col, remaining);
    char* run[kMaxOperands];
    for (int k = 0; k < p.nops; ++k) run[k] = ptr[k] + col * inner_stride[k];
    f(run, inner_stride, len);
    remaining -= len;
    if (remaining == 0) return;
    col = 0;
    int d = inner - 1;
    for (; d >= 0; --d) {
      for (int k = 0; k < p.nops; ++k) ptr[k] += p.dims[d].stride[k];
      if (++idx[d] < p.dims[d].size) break;
      for (int k = 0; k < p.nops; ++k) ptr[k] -= p.dims[d].stride[k] * p.dims[d].size;
      idx[d] = 0;
    }
  }
}

}  // namespace loop_detail

// Calls f(ptrs, inner_strides, n) for the runs that cover flattened
// elements [begin, end) in loop order. f is inlined into the loop, once per
// instruction set (isa.h): mark a lambda that holds the element loop
// always_inline (__attribute__((always_inline)) after its parameters, as
// map_loop does) so its element loop is vectorized for each.
template <class F>
void for_each_run(const LoopPlan& p, int64_t begin, int64_t end, F&& f) {
  with_isa([&]() __attribute__((always_inline)) { loop_detail::runs(p, begin, end, f); });
}

// Elements below which a loop is not worth splitting across threads.
constexpr int64_t kParallelGrain = int64_t{1} << 16;
// The same for loops that evaluate exp, erf or tanh per element (about 1 ns
// an element on one AVX-512 core against 0.05 for an add): 32K elements of
// gelu took 31 us on one thread, 15 on PyTorch's two.
constexpr int64_t kTranscendentalGrain = int64_t{1} << 12;

// Runs the whole loop, splitting it across the thread pool in chunks of at
// least `grain` elements.
template <class F>
void run_loop(const LoopPlan& p, F&& f, int64_t grain = kParallelGrain) {
  if (p.numel == 0) return;
  if (p.numel < 2 * grain) {
    for_each_run(p, 0, p.numel, f);
    return;
  }
  ThreadPool& pool = ThreadPool::instance();
  const int64_t chunks = std::min<int64_t>(p.numel / grain, 4 * pool.parallelism());
  const int64_t per = (p.numel + chunks - 1) / chunks;
  pool.parallel_for(chunks, [&](int64_t c) { for_each_run(p, c * per, std::min(p.numel, (c + 1) * per), f); });
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_LOOP_H_
