// Reductions: sum and mean over any set of dims, strided input, output
// already shaped by the host (keepdim or not). Floating results accumulate
// in double, integral ones in wrapping int64.
#include <algorithm>
#include <memory>
#include <vector>

#include "../thread_pool.h"
#include "support/launch.h"
#include "support/loop.h"
#include "support/registry.h"

namespace flemu {
namespace {

struct ReducePlan {
  // The input loop, dims ordered outer -> inner and merged where possible.
  int32_t ndim = 0;
  int64_t sizes[kMaxLoopDims];
  int64_t in_strides[kMaxLoopDims];   // bytes
  int64_t acc_strides[kMaxLoopDims];  // accumulator elements; 0 on reduced dims
  const char* in = nullptr;
  int32_t in_dtype = 0;
  int64_t in_numel = 0;
  // The accumulator is row-major over the kept dims; the output is written
  // from it through its own strides.
  int32_t out_ndim = 0;
  int64_t out_sizes[64];
  int64_t out_strides[64];  // bytes
  char* out = nullptr;
  int32_t out_dtype = 0;
  int64_t out_numel = 0;
  int64_t count = 0;  // elements reduced into each output
  bool mean = false;
  bool integral = false;  // accumulate in int64
};

// Calls run(in, a) for every inner run of the plan: `in` its first input
// element, `a` the accumulator index of that element.
template <class Run>
void for_each_inner_run(const ReducePlan& p, Run&& run) {
  const int inner = p.ndim - 1;
  int64_t idx[kMaxLoopDims] = {};
  const char* in = p.in;
  int64_t a = 0;
  for (;;) {
    run(in, a);
    int d = inner - 1;
    for (; d >= 0; --d) {
      in += p.in_strides[d];
      a += p.acc_strides[d];
      if (++idx[d] < p.sizes[d]) break;
      in -= p.in_strides[d] * p.sizes[d];
      a -= p.acc_strides[d] * p.sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <class Acc, class T>
void accumulate(const ReducePlan& p, Acc* acc) {
  if (p.in_numel == 0) return;
  const int inner = p.ndim - 1;
  const int64_t n = p.sizes[inner], is = p.in_strides[inner], as = p.acc_strides[inner];
  auto load = [](const char* q) { return convert<Acc>(*reinterpret_cast<const T*>(q)); };
  for_each_inner_run(p, [&](const char* in, int64_t a) {
    if (as == 0) {
      // A reduced inner run: independent partial sums let the adds overlap.
      Acc s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      const char* q = in;
      for (; i + 4 <= n; i += 4, q += 4 * is) {
        s0 += load(q);
        s1 += load(q + is);
        s2 += load(q + 2 * is);
        s3 += load(q + 3 * is);
      }
      for (; i < n; ++i, q += is) s0 += load(q);
      if constexpr (std::is_integral_v<Acc>)
        acc[a] = static_cast<Acc>(static_cast<uint64_t>(acc[a]) + static_cast<uint64_t>(s0) + static_cast<uint64_t>(s1) +
                                  static_cast<uint64_t>(s2) + static_cast<uint64_t>(s3));
      else acc[a] += (s0 + s1) + (s2 + s3);
    } else if (is == static_cast<int64_t>(sizeof(T)) && as == 1) {
      // A kept, dense inner run (x.sum(0) of a row-major x): a loop that vectorizes.
      const T* src = reinterpret_cast<const T*>(in);
      Acc* dst = acc + a;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral_v<Acc>)
          dst[i] = static_cast<Acc>(static_cast<uint64_t>(dst[i]) + static_cast<uint64_t>(convert<Acc>(src[i])));
        else dst[i] += convert<Acc>(src[i]);
      }
    } else {
      const char* q = in;
      Acc* dst = acc + a;
      for (int64_t i = 0; i < n; ++i, q += is, dst += as) {
        if constexpr (std::is_integral_v<Acc>)
          *dst = static_cast<Acc>(static_cast<uint64_t>(*dst) + static_cast<uint64_t>(load(q)));
        else *dst += load(q);
      }
    }
  });
}

template <class Acc, class Out>
void write_out(const ReducePlan& p, const Acc* acc) {
  int64_t idx[64] = {};
  char* o = p.out;
  for (int64_t j = 0; j < p.out_numel; ++j) {
    Out v;
    if constexpr (std::is_integral_v<Acc>) v = convert<Out>(acc[j]);
    else v = convert<Out>(p.mean ? acc[j] / static_cast<double>(p.count) : acc[j]);
    *reinterpret_cast<Out*>(o) = v;
    for (int d = p.out_ndim - 1; d >= 0; --d) {
      o += p.out_strides[d];
      if (++idx[d] < p.out_sizes[d]) break;
      o -= p.out_strides[d] * p.out_sizes[d];
      idx[d] = 0;
    }
  }
}

// Input elements per chunk when a reduction is split across threads.
constexpr int64_t kReduceGrain = int64_t{1} << 16;
constexpr int64_t kMaxReduceChunks = 64;

template <class Acc>
inline void add_into(Acc* dst, const Acc* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<Acc>)
      dst[i] = static_cast<Acc>(static_cast<uint64_t>(dst[i]) + static_cast<uint64_t>(src[i]));
    else dst[i] += src[i];
  }
}

// Accumulates the slice [begin, end) of the outermost loop dim.
template <class Acc, class T>
void accumulate_slice(const ReducePlan& p, int64_t begin, int64_t end, Acc* acc) {
  ReducePlan sub = p;
  sub.sizes[0] = end - begin;
  sub.in = p.in + begin * p.in_strides[0];
  sub.in_numel = p.in_numel / p.sizes[0] * (end - begin);
  accumulate<Acc, T>(sub, acc + begin * p.acc_strides[0]);
}

template <class Acc, class T>
void accumulate_parallel(const ReducePlan& p, Acc* acc) {
  // The chunking depends on the shape only, so results do not change with
  // the number of threads.
  const int64_t chunks = std::min({p.sizes[0], p.in_numel / kReduceGrain, kMaxReduceChunks});
  const bool disjoint = p.acc_strides[0] != 0;  // chunks write different outputs
  if (chunks < 2 || (!disjoint && p.out_numel * chunks > (int64_t{1} << 22))) {
    accumulate<Acc, T>(p, acc);
    return;
  }
  const int64_t per = (p.sizes[0] + chunks - 1) / chunks;
  std::vector<std::vector<Acc>> partial(disjoint ? 0 : static_cast<size_t>(chunks));
  ThreadPool::instance().parallel_for(chunks, [&](int64_t c) {
    const int64_t begin = c * per, end = std::min(p.sizes[0], begin + per);
    if (begin >= end) return;
    if (disjoint) {
      accumulate_slice<Acc, T>(p, begin, end, acc);
    } else {
      partial[static_cast<size_t>(c)].assign(static_cast<size_t>(p.out_numel), Acc(0));
      accumulate_slice<Acc, T>(p, begin, end, partial[static_cast<size_t>(c)].data());
    }
  });
  for (const auto& part : partial)
    if (!part.empty()) add_into(acc, part.data(), p.out_numel);
}

// FLEMU_FAULT=sum_fp16_accumulator: one running sum per output, rounded to
// float16 after every addition, as a float16 accumulator register would be.
template <class T>
void accumulate_in_half(const ReducePlan& p, double* acc) {
  const int inner = p.ndim - 1;
  for_each_inner_run(p, [&](const char* in, int64_t a) {
    const char* q = in;
    for (int64_t i = 0; i < p.sizes[inner]; ++i, q += p.in_strides[inner]) {
      double& dst = acc[a + i * p.acc_strides[inner]];
      dst = static_cast<float>(Half(static_cast<float>(dst) + *reinterpret_cast<const T*>(q)));
    }
  });
}

void run_reduce_in_half(const ReducePlan& p) {
  std::vector<double> acc(static_cast<size_t>(p.out_numel), 0.0);
  if (p.in_numel > 0) accumulate_in_half<float>(p, acc.data());
  write_out<double, float>(p, acc.data());
}

template <class Acc>
void run_reduce(const ReducePlan& p) {
  std::vector<Acc> acc(static_cast<size_t>(p.out_numel), Acc(0));
  dispatch_dtype(p.in_dtype, [&](auto tag) { accumulate_parallel<Acc, typename decltype(tag)::type>(p, acc.data()); });
  dispatch_dtype(p.out_dtype, [&](auto tag) { write_out<Acc, typename decltype(tag)::type>(p, acc.data()); });
}

// Which input dims are reduced: None or [] means all.
std::vector<bool> reduced_dims(const Launch& L, const TensorArg& self, bool has_dim_arg) {
  const int nd = self.ndim;
  std::vector<bool> reduced(static_cast<size_t>(nd), !has_dim_arg);
  if (!has_dim_arg || !L.has_input(1)) {
    std::fill(reduced.begin(), reduced.end(), true);
    return reduced;
  }
  const TFL_Value& v = L.input(1, "dim");
  const int64_t* dims = nullptr;
  size_t count = 0;
  if (v.tag == TFL_VALUE_INT_LIST) {
    dims = v.v.ints.data;
    count = v.v.ints.size;
  } else if (v.tag == TFL_VALUE_INT) {
    dims = &v.v.i;
    count = 1;
  } else {
    invalid_argument("argument 1 (dim) must be an int list or None, got tag ", v.tag);
  }
  if (count == 0) {
    std::fill(reduced.begin(), reduced.end(), true);
    return reduced;
  }
  const int64_t wrap = std::max(nd, 1);  // a 0-dim tensor accepts dim 0 and -1
  for (size_t i = 0; i < count; ++i) {
    int64_t d = dims[i];
    if (d < -wrap || d >= wrap)
      invalid_argument("dim ", d, " is out of range for a tensor with ", nd, " dims (expected ", -wrap, "..", wrap - 1, ")");
    if (d < 0) d += wrap;
    if (nd == 0) continue;
    if (reduced[static_cast<size_t>(d)]) invalid_argument("dim ", d, " appears more than once in the dim list");
    reduced[static_cast<size_t>(d)] = true;
  }
  return reduced;
}

TFL_Error* reduce(const TFL_Kernel_Args* args, int32_t id, bool mean, bool has_dim_arg) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    const TensorArg out = L.output(0, "out");
    const std::vector<bool> reduced = reduced_dims(L, self, has_dim_arg);
    const bool keepdim = has_dim_arg ? L.boolean_or(2, false, "keepdim") : false;
    if (mean && !dtype_is_floating(out.dtype))
      invalid_argument("mean needs a floating output dtype, got ", dtype_name(out.dtype), " (pass dtype=)");

    ReducePlan p;
    p.mean = mean;
    p.integral = !dtype_is_floating(out.dtype);
    p.in = self.data;
    p.in_dtype = self.dtype;
    p.in_numel = self.numel;
    p.out = out.data;
    p.out_dtype = out.dtype;

    // Kept dims, and the output stride that goes with each.
    const int nd = self.ndim;
    int nkept = 0, nreduced = 0;
    for (int d = 0; d < nd; ++d) (reduced[static_cast<size_t>(d)] ? nreduced : nkept)++;
    const bool out_keeps_dims = out.ndim == nd && (keepdim || nreduced == 0 || nkept != nd);
    if (!out_keeps_dims && out.ndim != nkept)
      invalid_argument("out has ", out.ndim, " dims; reducing ", nreduced, " of ", nd, " dims of self gives ",
                       keepdim ? nd : nkept, " (keepdim=", keepdim ? "True" : "False", ")");
    int64_t kept_numel = 1, count = 1;
    int k = 0;
    for (int d = 0; d < nd; ++d) {
      const int64_t size = self.sizes[d];
      if (reduced[static_cast<size_t>(d)]) {
        count *= size;
        if (out_keeps_dims && out.sizes[d] != 1)
          invalid_argument("out has size ", out.sizes[d], " in reduced dim ", d, "; expected 1");
        continue;
      }
      const int od = out_keeps_dims ? d : k;
      if (out.sizes[od] != size)
        invalid_argument("out has size ", out.sizes[od], " in dim ", od, "; expected ", size, " (dim ", d, " of self)");
      p.out_sizes[k] = size;
      p.out_strides[k] = out.strides[od] * out.itemsize;
      kept_numel *= size;
      ++k;
    }
    p.out_ndim = nkept;
    p.out_numel = kept_numel;
    p.count = count;
    if (out.numel != kept_numel) invalid_argument("out has ", out.numel, " elements; expected ", kept_numel);
    if (kept_numel == 0) return;

    // The input loop: acc strides are row-major over the kept dims.
    int64_t sizes[64], in_strides[64], acc_strides[64];
    int64_t acc_stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      sizes[d] = self.sizes[d];
      in_strides[d] = self.strides[d] * self.itemsize;
      if (reduced[static_cast<size_t>(d)]) {
        acc_strides[d] = 0;
      } else {
        acc_strides[d] = acc_stride;
        acc_stride *= self.sizes[d];
      }
    }
    // Walk the input in memory order: innermost = smallest input stride.
    int order[64];
    int n = 0;
    for (int d = 0; d < nd; ++d)
      if (sizes[d] != 1) order[n++] = d;
    std::stable_sort(order, order + n, [&](int a, int b) { return in_strides[a] > in_strides[b]; });
    int m = 0;
    for (int i = 0; i < n; ++i) {
      const int d = order[i];
      if (m > 0 && p.in_strides[m - 1] == in_strides[d] * sizes[d] &&
          p.acc_strides[m - 1] == acc_strides[d] * sizes[d]) {
        p.sizes[m - 1] *= sizes[d];
        p.in_strides[m - 1] = in_strides[d];
        p.acc_strides[m - 1] = acc_strides[d];
        continue;
      }
      if (m == kMaxLoopDims)
        fail(TFL_ERR_UNIMPLEMENTED, cat("self needs more than ", kMaxLoopDims, " loop dimensions"));
      p.sizes[m] = sizes[d];
      p.in_strides[m] = in_strides[d];
      p.acc_strides[m] = acc_strides[d];
      ++m;
    }
    if (m == 0) {
      p.sizes[0] = 1;
      p.in_strides[0] = 0;
      p.acc_strides[0] = 0;
      m = 1;
    }
    p.ndim = m;
    auto plan = std::make_shared<const ReducePlan>(p);  // large; shared rather than copied into the task
    if (L.faulty(Fault::kSumFp16Accumulator) && p.in_dtype == TFL_DTYPE_FLOAT32 && p.out_dtype == TFL_DTYPE_FLOAT32)
      L.enqueue([plan] { run_reduce_in_half(*plan); });
    else if (p.integral) L.enqueue([plan] { run_reduce<int64_t>(*plan); });
    else L.enqueue([plan] { run_reduce<double>(*plan); });
  });
}

}  // namespace

TFL_Error* kernel_sum(const TFL_Kernel_Args* a) { return reduce(a, kSum, false, false); }
TFL_Error* kernel_sum_dim(const TFL_Kernel_Args* a) { return reduce(a, kSumDim, false, true); }
TFL_Error* kernel_mean(const TFL_Kernel_Args* a) { return reduce(a, kMean, true, false); }
TFL_Error* kernel_mean_dim(const TFL_Kernel_Args* a) { return reduce(a, kMeanDim, true, true); }

}  // namespace flemu
