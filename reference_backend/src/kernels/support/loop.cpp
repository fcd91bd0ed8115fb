#include "loop.h"

#include "isa.h"
#include "layout.h"

namespace flemu {

Isa cpu_isa() {
#if defined(FLEMU_ISA_BUILDS)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("fma")) return Isa::kBaseline;  // both builds use it (isa.h)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

Isa active_isa() { return kernel_settings().isa; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kBaseline: break;
  }
  return "baseline";
}

namespace {
// True when `t` has the shape of `out` and is dense row-major (layout.h).
bool dense_like(const TensorArg& t, const TensorArg& out) {
  if (t.ndim != out.ndim) return false;
  for (int32_t d = 0; d < t.ndim; ++d)  // not std::equal: that is a call to memcmp
    if (t.sizes[d] != out.sizes[d]) return false;
  return row_major_dense(t.ndim, t.sizes, t.strides);
}
}  // namespace

LoopPlan make_loop(const TensorArg* const* operands, int nops, const char* const* names) {
  LoopPlan p;
  p.nops = nops;
  const TensorArg& out = *operands[0];
  p.numel = out.numel;
  for (int k = 0; k < nops; ++k) p.data[k] = operands[k]->data;
  if (p.numel == 0) return p;

  // The common case, every operand dense with the output's shape, is one run
  // of numel elements: what the general path below merges it into.
  bool dense = true;
  for (int k = 0; k < nops && dense; ++k) dense = dense_like(*operands[k], out);
  if (dense) {
    p.ndim = 1;
    p.dims[0].size = p.numel;
    for (int k = 0; k < nops; ++k) p.dims[0].stride[k] = p.numel == 1 ? 0 : operands[k]->itemsize;
    return p;
  }

  // Broadcast every operand to operand 0's shape (byte strides, 0 where broadcast).
  const int nd = out.ndim;
  int64_t sizes[64];
  int64_t strides[kMaxOperands][64];
  for (int d = 0; d < nd; ++d) {
    sizes[d] = out.sizes[d];
    strides[0][d] = out.strides[d] * out.itemsize;
  }
  for (int k = 1; k < nops; ++k) {
    const TensorArg& in = *operands[k];
    if (in.ndim > nd) {
      for (int d = 0; d < in.ndim - nd; ++d)
        if (in.sizes[d] != 1)
          invalid_argument(names[k], " with ", in.ndim, " dims cannot be broadcast to ", names[0], " with ", nd, " dims");
    }
    for (int d = 0; d < nd; ++d) {
      const int di = d - (nd - in.ndim);
      if (di < 0) {
        strides[k][d] = 0;
      } else if (in.sizes[di] == sizes[d]) {
        strides[k][d] = in.strides[di] * in.itemsize;
      } else if (in.sizes[di] == 1) {
        strides[k][d] = 0;
      } else {
        invalid_argument(names[k], " has size ", in.sizes[di], " in dim ", di, " which cannot be broadcast to size ",
                         sizes[d], " of ", names[0]);
      }
    }
  }

  // Drop size-1 dims, then order the rest so the innermost moves fastest
  // through memory (operand 0 decides, later operands break ties).
  int order[64];
  int n = 0;
  for (int d = 0; d < nd; ++d)
    if (sizes[d] != 1) order[n++] = d;
  auto inner_first = [&](int a, int b) {  // true when dim a should be inside dim b
    for (int k = 0; k < nops; ++k) {
      const int64_t sa = strides[k][a], sb = strides[k][b];
      if (sa == 0 || sb == 0 || sa == sb) continue;
      return sa < sb;
    }
    return false;
  };
  // Insertion sort from the innermost end keeps the original order on ties.
  for (int i = n - 2; i >= 0; --i) {
    const int cur = order[i];
    int j = i;
    while (j + 1 < n && inner_first(cur, order[j + 1])) {
      order[j] = order[j + 1];
      ++j;
    }
    order[j] = cur;
  }

  // Merge neighbours that are contiguous for every operand.
  int64_t msizes[64];
  int64_t mstrides[kMaxOperands][64];
  int m = 0;
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    if (m > 0) {
      bool mergeable = true;
      for (int k = 0; k < nops; ++k)
        if (mstrides[k][m - 1] != strides[k][d] * sizes[d]) mergeable = false;
      if (mergeable) {
        msizes[m - 1] *= sizes[d];
        for (int k = 0; k < nops; ++k) mstrides[k][m - 1] = strides[k][d];
        continue;
      }
    }
    msizes[m] = sizes[d];
    for (int k = 0; k < nops; ++k) mstrides[k][m] = strides[k][d];
    ++m;
  }
  if (m == 0) {  // a single element
    msizes[0] = 1;
    for (int k = 0; k < nops; ++k) mstrides[k][0] = 0;
    m = 1;
  }
  if (m > kMaxLoopDims)
    fail(TFL_ERR_UNIMPLEMENTED, cat("the operands need ", m, " loop dimensions after merging; flemu handles up to ",
                                    kMaxLoopDims));
  p.ndim = m;
  for (int i = 0; i < m; ++i) {
    p.dims[i].size = msizes[i];
    for (int k = 0; k < nops; ++k) p.dims[i].stride[k] = mstrides[k][i];
  }
  return p;
}

}  // namespace flemu
