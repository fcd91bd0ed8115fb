// Concatenation and indexing: cat, index_select/index_add, gather, scatter/scatter_add,
// advanced indexing with integer index tensors (index.Tensor, index_put),
// tril/triu, and arange. Index tensors are read on the stream (they are device data);
// an index out of range fails the stream task with a message naming it.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "../thread_pool.h"
#include "support/elementwise_launch.h"
#include "support/elementwise_ops.h"
#include "support/registry.h"

namespace flemu {
namespace {

// A view of a TensorArg with its own sizes/strides storage.
struct View {
  TensorArg arg;
  int64_t sizes[64] = {};
  int64_t strides[64] = {};

  View(const TensorArg& t) : arg(t) {  // NOLINT: implicit by design
    for (int32_t d = 0; d < t.ndim; ++d) {
      sizes[d] = t.sizes[d];
      strides[d] = t.strides[d];
    }
    arg.sizes = sizes;
    arg.strides = strides;
  }
  View(const View& o) : arg(o.arg) {
    std::memcpy(sizes, o.sizes, sizeof(sizes));
    std::memcpy(strides, o.strides, sizeof(strides));
    arg.sizes = sizes;
    arg.strides = strides;
  }
  View& operator=(const View&) = delete;

  void refresh_numel() {
    int64_t n = 1;
    for (int32_t d = 0; d < arg.ndim; ++d) n *= sizes[d];
    arg.numel = n;
  }
  // Removes dim d (as select does, at index 0).
  void drop(int32_t d) {
    for (int32_t i = d; i + 1 < arg.ndim; ++i) {
      sizes[i] = sizes[i + 1];
      strides[i] = strides[i + 1];
    }
    arg.ndim -= 1;
    refresh_numel();
  }
};

int64_t wrap_dim(int64_t dim, int32_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n) invalid_argument(op, ": dim ", dim, " is out of range for a tensor with ", ndim, " dims");
  return dim < 0 ? dim + n : dim;
}

void require_index(const TensorArg& t, const char* op) {
  if (t.dtype != TFL_DTYPE_INT64 && t.dtype != TFL_DTYPE_INT32)
    invalid_argument(op, ": index must be an int32 or int64 tensor, got ", dtype_name(t.dtype));
}

// gather and scatter, as PyTorch checks them: an index without elements
// selects nothing, so neither its dtype nor its shape is looked at.
void require_gather_index(const TensorArg& t, const char* op) {
  if (t.numel > 0) require_index(t, op);
}

inline int64_t load_index(const char* p, int32_t dtype) {
  return dtype == TFL_DTYPE_INT64 ? *reinterpret_cast<const int64_t*>(p) : *reinterpret_cast<const int32_t*>(p);
}

inline int64_t checked_index(int64_t v, int64_t size, const char* op) {
  if (v < -size || v >= size) invalid_argument(op, ": index ", v, " is out of bounds for dimension with size ", size);
  return v < 0 ? v + size : v;
}

// Copies the runs of a plan whose operands are (dst, src).
using CopyRuns = void (*)(char* const*, const int64_t*, int64_t);

template <size_t kSize>
void copy_runs_same(char* const* p, const int64_t* st, int64_t n) {
  if (st[0] == static_cast<int64_t>(kSize) && st[1] == static_cast<int64_t>(kSize)) {
    std::memcpy(p[0], p[1], static_cast<size_t>(n) * kSize);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * st[0], p[1] + i * st[1], kSize);
}

template <class O, class I>
void copy_runs_convert(char* const* p, const int64_t* st, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<O*>(p[0] + i * st[0]) = convert<O>(*reinterpret_cast<const I*>(p[1] + i * st[1]));
}

CopyRuns copy_runs_for(int32_t out_dtype, int32_t in_dtype) {
  if (out_dtype == in_dtype) {
    switch (dtype_size(out_dtype)) {
      case 1: return &copy_runs_same<1>;
      case 2: return &copy_runs_same<2>;
      case 4: return &copy_runs_same<4>;
      default: return &copy_runs_same<8>;
    }
  }
  return dispatch_dtype(out_dtype, [&](auto o) {
    return dispatch_dtype(in_dtype, [&](auto i) -> CopyRuns {
      return &copy_runs_convert<typename decltype(o)::type, typename decltype(i)::type>;
    });
  });
}

LoopPlan copy_plan(const TensorArg& dst, const TensorArg& src) {
  const TensorArg* ops[] = {&dst, &src};
  const char* names[] = {"out", "input"};
  return make_loop(ops, 2, names);
}

}  // namespace

// ---------------------------------------------------------------------------
// cat
// ---------------------------------------------------------------------------

TFL_Error* kernel_cat(const TFL_Kernel_Args* args) {
  // cat(Tensor[] tensors, int dim=0); tensors may differ in dtype (promoted into out).
  return run_kernel(args, kCat, [&](Launch& L) {
    const TFL_Value& list = L.input(0, "tensors");
    if (list.tag != TFL_VALUE_TENSOR_LIST) invalid_argument("cat: argument 0 (tensors) must be a tensor list");
    const TensorArg out = L.output(0, "out");
    const int64_t dim = wrap_dim(L.scalar_or(1, 0, "dim").to_int(), out.ndim, "cat");
    struct Piece {
      LoopPlan plan;
      CopyRuns copy;
    };
    auto pieces = std::make_shared<std::vector<Piece>>();
    int64_t offset = 0;
    for (size_t k = 0; k < list.v.tensors.size; ++k) {
      const TensorArg in = L.tensor(list.v.tensors.data[k], "tensors[k]");
      if (in.ndim == 1 && in.sizes[0] == 0 && out.ndim != 1) continue;  // legacy: empty 1-D inputs are skipped
      if (in.ndim != out.ndim)
        invalid_argument("cat: tensor ", k, " has ", in.ndim, " dims but the result has ", out.ndim);
      View slice(out);
      slice.sizes[dim] = in.sizes[dim];
      slice.refresh_numel();
      slice.arg.data = out.data == nullptr ? nullptr : out.data + offset * out.strides[dim] * out.itemsize;
      for (int32_t d = 0; d < out.ndim; ++d)
        if (d != dim && in.sizes[d] != out.sizes[d])
          invalid_argument("cat: tensor ", k, " has size ", in.sizes[d], " in dim ", d, "; expected ", out.sizes[d]);
      offset += in.sizes[dim];
      if (in.numel == 0) continue;
      pieces->push_back({copy_plan(slice.arg, in), copy_runs_for(out.dtype, in.dtype)});
    }
    if (offset != (out.ndim ? out.sizes[dim] : 0) && out.numel != 0)
      invalid_argument("cat: inputs add up to ", offset, " in dim ", dim, " but out has ", out.sizes[dim]);
    if (pieces->empty()) return;
    L.enqueue([pieces] {
      for (const Piece& p : *pieces) run_loop(p.plan, p.copy);
    });
  });
}

// ---------------------------------------------------------------------------
// index_select
// ---------------------------------------------------------------------------

TFL_Error* kernel_index_select(const TFL_Kernel_Args* args) {
  // index_select(self, dim, index): out.select(dim, i) = self.select(dim, index[i])
  return run_kernel(args, kIndexSelect, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), index = L.input_tensor(2, "index"), out = L.output(0, "out");
    require_index(index, "index_select");
    require_same_dtype("index_select", out, {&self});
    if (index.ndim > 1) invalid_argument("index_select: index must be 0-D or 1-D, got ", index.ndim, " dims");
    const int64_t dim = wrap_dim(L.scalar(1, "dim").to_int(), self.ndim, "index_select");
    const int64_t n = index.numel;
    View os(out), ss(self);
    int64_t out_step = 0, self_step = 0, self_size = 1;
    if (self.ndim > 0) {
      out_step = out.strides[dim] * out.itemsize;
      self_step = self.strides[dim] * self.itemsize;
      self_size = self.sizes[dim];
      os.drop(static_cast<int32_t>(dim));
      ss.drop(static_cast<int32_t>(dim));
    }
    if (out.numel == 0 || n == 0) return;
    if (self_size == 0) invalid_argument("index_select: cannot select from a dimension of size 0");
    const LoopPlan plan = copy_plan(os.arg, ss.arg);
    const CopyRuns copy = copy_runs_for(out.dtype, self.dtype);
    const char* idx = index.data;
    const int64_t idx_step = (index.ndim ? index.strides[0] : 0) * index.itemsize;
    const int32_t idx_dtype = index.dtype;
    char* out0 = out.data;
    const char* self0 = self.data;
    L.enqueue([=] {
      const int64_t slice = std::max<int64_t>(plan.numel, 1);
      const int64_t per = std::max<int64_t>(1, (int64_t{1} << 15) / slice);
      const int64_t tasks = (n + per - 1) / per;
      auto body = [&](int64_t t) {
        LoopPlan p = plan;
        for (int64_t i = t * per, e = std::min(n, (t + 1) * per); i < e; ++i) {
          const int64_t k = checked_index(load_index(idx + i * idx_step, idx_dtype), self_size, "index_select");
          p.data[0] = out0 + i * out_step;
          p.data[1] = const_cast<char*>(self0) + k * self_step;
          for_each_run(p, 0, p.numel, copy);
        }
      };
      if (tasks == 1) body(0);
      else ThreadPool::instance().parallel_for(tasks, body);
    });
  });
}

TFL_Error* kernel_index_add(const TFL_Kernel_Args* args) {
  // index_add(self, dim, index, source, *, alpha=1): out = self;
  // out.select(dim, index[i]) += alpha * source.select(dim, i). index_select's backward.
  return run_kernel(args, kIndexAdd, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), index = L.input_tensor(2, "index"),
                    source = L.input_tensor(3, "source"), out = L.output(0, "out");
    const ScalarArg alpha = L.scalar_or(4, 1, "alpha");
    require_index(index, "index_add");
    require_same_dtype("index_add", out, {&self, &source});
    if (index.ndim > 1) invalid_argument("index_add: index must be 0-D or 1-D, got ", index.ndim, " dims");
    const int64_t dim = wrap_dim(L.scalar(1, "dim").to_int(), self.ndim, "index_add");
    const int64_t n = index.numel;
    if (source.ndim != self.ndim || (self.ndim > 0 && source.sizes[dim] != n))
      invalid_argument("index_add: source must have self's dims with ", n, " entries in dim ", dim);
    std::shared_ptr<const LoopPlan> copy;
    if (out.data != self.data && out.numel > 0) copy = std::make_shared<const LoopPlan>(copy_plan(out, self));
    const CopyRuns copy_runs = copy_runs_for(out.dtype, self.dtype);
    View os(out), ss(source);
    int64_t out_step = 0, src_step = 0, size = 1;
    if (self.ndim > 0) {
      out_step = out.strides[dim] * out.itemsize;
      src_step = source.strides[dim] * source.itemsize;
      size = out.sizes[dim];
      os.drop(static_cast<int32_t>(dim));
      ss.drop(static_cast<int32_t>(dim));
    }
    std::shared_ptr<const LoopPlan> plan;
    if (n > 0 && os.arg.numel > 0) plan = std::make_shared<const LoopPlan>(copy_plan(os.arg, ss.arg));
    if (!copy && !plan) return;
    const char* idx = index.data;
    const int64_t idx_step = (index.ndim ? index.strides[0] : 0) * index.itemsize;
    const int32_t idt = index.dtype;
    char* out0 = out.data;
    char* src0 = source.data;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C a = alpha.as<C>();
      L.enqueue([=] {
        if (copy) run_loop(*copy, copy_runs);
        if (!plan) return;
        LoopPlan p = *plan;
        // Serial over the index: repeated entries accumulate into one slice.
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = checked_index(load_index(idx + i * idx_step, idt), size, "index_add");
          p.data[0] = out0 + k * out_step;
          p.data[1] = src0 + i * src_step;
          for_each_run(p, 0, p.numel, [a](char* const* q, const int64_t* st, int64_t m) {
            for (int64_t j = 0; j < m; ++j) {
              T* d = reinterpret_cast<T*>(q[0] + j * st[0]);
              const C v = to_compute(*reinterpret_cast<const T*>(q[1] + j * st[1]));
              *d = from_compute<T>(add_wrap(to_compute(*d), mul_wrap(a, v)));
            }
          });
        }
      });
    });
  });
}

// ---------------------------------------------------------------------------
// tril / triu
// ---------------------------------------------------------------------------

namespace {

template <bool kLower>
void launch_triangle(const Launch& L, const char* op) {
  // tril(self, diagonal=0): keeps [..., i, j] with j - i <= diagonal (triu: >=).
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  const int64_t diagonal = L.scalar_or(1, 0, "diagonal").to_int();
  require_same_dtype(op, out, {&self});
  if (self.ndim < 2) invalid_argument(op, ": input must have at least 2 dims, got ", self.ndim);
  if (out.numel == 0) return;
  struct Job {
    View src, dst;
    int64_t diagonal;
    int64_t item;
  };
  auto job = std::make_shared<Job>(Job{View(self), View(out), diagonal, self.itemsize});
  L.enqueue([job] {
    const View& s = job->src;
    const View& d = job->dst;
    const int32_t nd = s.arg.ndim;
    const int64_t rows = s.sizes[nd - 2], cols = s.sizes[nd - 1];
    int64_t batch = 1;
    for (int32_t k = 0; k < nd - 2; ++k) batch *= s.sizes[k];
    const int64_t item = job->item;
    for (int64_t b = 0; b < batch; ++b) {
      int64_t rem = b, so = 0, dof = 0;
      for (int32_t k = nd - 3; k >= 0; --k) {
        const int64_t i = rem % s.sizes[k];
        rem /= s.sizes[k];
        so += i * s.strides[k];
        dof += i * d.strides[k];
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          char* dp = d.arg.data + (dof + i * d.strides[nd - 2] + j * d.strides[nd - 1]) * item;
          const bool keep = kLower ? j - i <= job->diagonal : j - i >= job->diagonal;
          if (keep) {
            const char* sp = s.arg.data + (so + i * s.strides[nd - 2] + j * s.strides[nd - 1]) * item;
            if (sp != dp) std::memcpy(dp, sp, static_cast<size_t>(item));
          } else {
            std::memset(dp, 0, static_cast<size_t>(item));  // zero in every dtype flemu has
          }
        }
    }
  });
}

}  // namespace

TFL_Error* kernel_tril(const TFL_Kernel_Args* args) {
  return run_kernel(args, kTril, [&](Launch& L) { launch_triangle<true>(L, "tril"); });
}
TFL_Error* kernel_triu(const TFL_Kernel_Args* args) {
  return run_kernel(args, kTriu, [&](Launch& L) { launch_triangle<false>(L, "triu"); });
}

// ---------------------------------------------------------------------------
// gather / scatter
// ---------------------------------------------------------------------------

namespace {

// `t` seen with the sizes of `shape` and a zero stride in `dim`. As in
// PyTorch, a 0-dim tensor counts as one dim of size 1 here: a 0-dim self takes
// a one-element 1-D index, a 1-D self a 0-dim index.
View along_index(const TensorArg& t, const TensorArg& shape, int64_t dim, const char* op, const char* what) {
  View v(t);
  if (std::max(t.ndim, 1) != std::max(shape.ndim, 1))
    invalid_argument(op, ": index has ", shape.ndim, " dims but ", what, " has ", t.ndim, "; they must match");
  if (t.ndim != shape.ndim) {  // one of them is 0-dim: one element along one dim at most
    v.arg.ndim = shape.ndim;
    for (int32_t d = 0; d < shape.ndim; ++d) {
      if (shape.sizes[d] > 1 && t.ndim == 0)
        invalid_argument(op, ": index has size ", shape.sizes[d], " but ", what, " is 0-dim");
      v.sizes[d] = shape.sizes[d];
      v.strides[d] = 0;
    }
    v.refresh_numel();
    return v;
  }
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (d != dim && shape.sizes[d] > t.sizes[d])
      invalid_argument(op, ": index has size ", shape.sizes[d], " in dim ", d, " but ", what, " only ", t.sizes[d]);
    v.sizes[d] = shape.sizes[d];
  }
  if (t.ndim > 0) v.strides[dim] = 0;
  v.refresh_numel();
  return v;
}

}  // namespace

TFL_Error* kernel_gather(const TFL_Kernel_Args* args) {
  // gather(self, dim, index, *, sparse_grad=False): out[p] = self[p with dim -> index[p]]
  return run_kernel(args, kGather, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), index = L.input_tensor(2, "index"), out = L.output(0, "out");
    require_gather_index(index, "gather");
    require_same_dtype("gather", out, {&self});
    const int64_t dim = wrap_dim(L.scalar(1, "dim").to_int(), self.ndim, "gather");
    if (out.numel == 0) return;
    if (index.ndim != out.ndim) invalid_argument("gather: out must have the shape of index");
    const View src = along_index(self, index, dim, "gather", "self");
    const TensorArg* ops[] = {&out, &index, &src.arg};
    const char* names[] = {"out", "index", "self"};
    const LoopPlan plan = make_loop(ops, 3, names);
    const int64_t size = self.ndim ? self.sizes[dim] : 1;
    const int64_t step = (self.ndim ? self.strides[dim] : 0) * self.itemsize;
    const int32_t idt = index.dtype;
    const int64_t item = self.itemsize;
    L.enqueue([size, step, idt, item, plan] {
      run_loop(plan, [&](char* const* p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = checked_index(load_index(p[1] + i * st[1], idt), size, "gather");
          std::memcpy(p[0] + i * st[0], p[2] + i * st[2] + k * step, static_cast<size_t>(item));
        }
      });
    });
  });
}

namespace {

enum class Scatter { Assign, Add, Value };

void launch_scatter(const Launch& L, Scatter kind, const char* op) {
  // scatter*(self, dim, index, src|value): out = self, then out[p with dim -> index[p]] (+)= src[p]
  const TensorArg self = L.input_tensor(0, "self"), index = L.input_tensor(2, "index"), out = L.output(0, "out");
  require_gather_index(index, op);
  require_same_dtype(op, out, {&self});
  const int64_t dim = wrap_dim(L.scalar(1, "dim").to_int(), self.ndim, op);
  if (out.numel != self.numel) invalid_argument(op, ": out must have the shape of self");
  std::shared_ptr<const LoopPlan> copy;
  if (out.data != self.data && out.numel > 0) copy = std::make_shared<const LoopPlan>(copy_plan(out, self));
  ScalarArg value;
  View src(kind == Scatter::Value ? self : L.input_tensor(3, "src"));
  if (kind == Scatter::Value) value = L.scalar(3, "value");
  else require_same_dtype(op, out, {&src.arg});
  std::shared_ptr<const LoopPlan> plan;
  if (index.numel > 0) {  // an empty index writes nothing, whatever its shape (out is self's copy)
    if (kind != Scatter::Value) {
      if (src.arg.ndim != index.ndim) invalid_argument(op, ": index and src must have the same number of dims");
      for (int32_t d = 0; d < index.ndim; ++d)
        if (index.sizes[d] > src.sizes[d])
          invalid_argument(op, ": index has size ", index.sizes[d], " in dim ", d, " but src only ", src.sizes[d]);
      for (int32_t d = 0; d < index.ndim; ++d) src.sizes[d] = index.sizes[d];
      src.refresh_numel();
    }
    const View dst = along_index(out, index, dim, op, "self");
    const TensorArg* ops[] = {&index, &dst.arg, &src.arg};
    const char* names[] = {"index", "self", "src"};
    plan = std::make_shared<const LoopPlan>(make_loop(ops, kind == Scatter::Value ? 2 : 3, names));
  }
  const int64_t size = out.ndim ? out.sizes[dim] : 1;
  const int64_t step = (out.ndim ? out.strides[dim] : 0) * out.itemsize;
  const int32_t idt = index.dtype;
  if (!copy && !plan) return;
  const CopyRuns copy_runs = copy_runs_for(out.dtype, self.dtype);
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = kind == Scatter::Value ? (value.tag == TFL_VALUE_DOUBLE ? convert<T>(value.d) : convert<T>(value.i)) : T{};
    L.enqueue([copy, copy_runs, plan, size, step, idt, kind, v, op] {
      if (copy) run_loop(*copy, copy_runs);
      if (!plan) return;
      // Serial: several positions may write the same element.
      for_each_run(*plan, 0, plan->numel, [&](char* const* p, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = checked_index(load_index(p[0] + i * st[0], idt), size, op);
          T* d = reinterpret_cast<T*>(p[1] + i * st[1] + k * step);
          if (kind == Scatter::Value) *d = v;
          else if (kind == Scatter::Assign) *d = *reinterpret_cast<const T*>(p[2] + i * st[2]);
          else *d = from_compute<T>(to_compute(*d) + to_compute(*reinterpret_cast<const T*>(p[2] + i * st[2])));
        }
      });
    });
  });
}

}  // namespace

TFL_Error* kernel_scatter_add(const TFL_Kernel_Args* args) {
  return run_kernel(args, kScatterAdd, [&](Launch& L) { launch_scatter(L, Scatter::Add, "scatter_add"); });
}
TFL_Error* kernel_scatter_src(const TFL_Kernel_Args* args) {
  return run_kernel(args, kScatterSrc, [&](Launch& L) { launch_scatter(L, Scatter::Assign, "scatter"); });
}
TFL_Error* kernel_scatter_value(const TFL_Kernel_Args* args) {
  return run_kernel(args, kScatterValue, [&](Launch& L) { launch_scatter(L, Scatter::Value, "scatter"); });
}

// ---------------------------------------------------------------------------
// Advanced indexing: index.Tensor and index_put with integer index tensors
// ---------------------------------------------------------------------------

namespace {

constexpr int kMaxIndexTensors = 8;

// The result space of self[indices]: each result dim comes either from an
// unindexed dim of self or from the broadcast shape of the index tensors.
struct AdvIndex {
  int32_t nd = 0;
  int64_t sizes[64] = {};
  int64_t self_strides[64] = {};  // bytes; 0 on index dims
  int nidx = 0;
  const char* idx_data[kMaxIndexTensors] = {};
  int32_t idx_dtype[kMaxIndexTensors] = {};
  int64_t idx_strides[kMaxIndexTensors][64] = {};  // bytes over the result dims
  int64_t dim_size[kMaxIndexTensors] = {};
  int64_t dim_step[kMaxIndexTensors] = {};  // bytes in self
  const char* self = nullptr;
  int64_t numel = 1;
};

AdvIndex plan_index(const Launch& L, const TensorArg& self, size_t list_arg, const char* op) {
  const TFL_Value& list = L.input(list_arg, "indices");
  if (list.tag != TFL_VALUE_TENSOR_LIST) invalid_argument(op, ": indices must be a list of optional tensors");
  if (static_cast<int64_t>(list.v.tensors.size) > self.ndim)
    invalid_argument(op, ": too many indices (", list.v.tensors.size, ") for a tensor with ", self.ndim, " dims");
  AdvIndex a;
  a.self = self.data;
  std::vector<TensorArg> idx;
  std::vector<int32_t> dims;
  for (size_t d = 0; d < list.v.tensors.size; ++d) {
    if (list.v.tensors.data[d] == nullptr) continue;
    const TensorArg t = L.tensor(list.v.tensors.data[d], "indices[i]");
    if (t.dtype == TFL_DTYPE_BOOL || t.dtype == TFL_DTYPE_UINT8)
      decline(op, ": boolean mask indices (the result shape depends on the data)");
    require_index(t, op);
    idx.push_back(t);
    dims.push_back(static_cast<int32_t>(d));
  }
  if (idx.empty()) decline(op, ": no index tensors");
  if (idx.size() > kMaxIndexTensors) decline(op, ": more than ", kMaxIndexTensors, " index tensors");
  // Broadcast shape of the index tensors, right-aligned.
  int32_t bnd = 0;
  for (const TensorArg& t : idx) bnd = std::max(bnd, t.ndim);
  std::vector<int64_t> bshape(static_cast<size_t>(bnd), 1);
  for (const TensorArg& t : idx)
    for (int32_t d = 0; d < t.ndim; ++d) {
      int64_t& b = bshape[static_cast<size_t>(bnd - t.ndim + d)];
      if (t.sizes[d] != 1) {
        if (b != 1 && b != t.sizes[d]) invalid_argument(op, ": index tensors cannot be broadcast together");
        b = t.sizes[d];
      }
    }
  bool adjacent = true;
  for (size_t i = 1; i < dims.size(); ++i) adjacent = adjacent && dims[i] == dims[i - 1] + 1;
  auto push_self_dim = [&](int32_t d) {
    a.sizes[a.nd] = self.sizes[d];
    a.self_strides[a.nd] = self.strides[d] * self.itemsize;
    ++a.nd;
  };
  auto push_index_dims = [&] {
    for (int32_t b = 0; b < bnd; ++b) {
      a.sizes[a.nd] = bshape[static_cast<size_t>(b)];
      for (size_t k = 0; k < idx.size(); ++k) {
        const TensorArg& t = idx[k];
        const int32_t td = b - (bnd - t.ndim);
        a.idx_strides[k][a.nd] = (td >= 0 && t.sizes[td] != 1) ? t.strides[td] * t.itemsize : 0;
      }
      ++a.nd;
    }
  };
  auto indexed = [&](int32_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  if (adjacent) {
    for (int32_t d = 0; d < dims.front(); ++d) push_self_dim(d);
    push_index_dims();
    for (int32_t d = dims.back() + 1; d < self.ndim; ++d) push_self_dim(d);
  } else {
    push_index_dims();
    for (int32_t d = 0; d < self.ndim; ++d)
      if (!indexed(d)) push_self_dim(d);
  }
  a.nidx = static_cast<int>(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    a.idx_data[k] = idx[k].data;
    a.idx_dtype[k] = idx[k].dtype;
    a.dim_size[k] = self.sizes[dims[k]];
    a.dim_step[k] = self.strides[dims[k]] * self.itemsize;
  }
  for (int32_t d = 0; d < a.nd; ++d) a.numel *= a.sizes[d];
  return a;
}

// Calls f(self_element, result_offsets...) for result elements [b, e) in
// row-major order; `extra` are byte strides of other operands over the result dims.
template <int kExtra, class F>
void walk_index(const AdvIndex& a, const int64_t (*extra)[64], char* const* extra_base, int64_t b, int64_t e,
                const char* op, F f) {
  int64_t idx[64] = {};
  int64_t rem = b;
  for (int32_t d = a.nd - 1; d >= 0; --d) {
    idx[d] = a.sizes[d] ? rem % a.sizes[d] : 0;
    rem = a.sizes[d] ? rem / a.sizes[d] : 0;
  }
  for (int64_t i = b; i < e; ++i) {
    const char* s = a.self;
    char* ex[kExtra > 0 ? kExtra : 1];
    for (int k = 0; k < kExtra; ++k) ex[k] = extra_base[k];
    for (int32_t d = 0; d < a.nd; ++d) {
      s += idx[d] * a.self_strides[d];
      for (int k = 0; k < kExtra; ++k) ex[k] += idx[d] * extra[k][d];
    }
    for (int k = 0; k < a.nidx; ++k) {
      const char* ip = a.idx_data[k];
      for (int32_t d = 0; d < a.nd; ++d) ip += idx[d] * a.idx_strides[k][d];
      s += checked_index(load_index(ip, a.idx_dtype[k]), a.dim_size[k], op) * a.dim_step[k];
    }
    f(s, ex);
    for (int32_t d = a.nd - 1; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

TFL_Error* kernel_index_tensor(const TFL_Kernel_Args* args) {
  // index.Tensor(self, Tensor?[] indices)
  return run_kernel(args, kIndexTensor, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype("index", out, {&self});
    auto a = std::make_shared<AdvIndex>(plan_index(L, self, 1, "index"));
    if (out.ndim != a->nd) invalid_argument("index: out has ", out.ndim, " dims; expected ", a->nd);
    auto ost = std::make_shared<std::array<int64_t, 64>>();
    for (int32_t d = 0; d < out.ndim; ++d) {
      if (out.sizes[d] != a->sizes[d]) invalid_argument("index: out has size ", out.sizes[d], " in dim ", d);
      (*ost)[static_cast<size_t>(d)] = out.strides[d] * out.itemsize;
    }
    if (a->numel == 0) return;
    char* o = out.data;
    const int64_t item = out.itemsize;
    L.enqueue([a, ost, o, item] {
      const int64_t (*extra)[64] = reinterpret_cast<const int64_t(*)[64]>(ost->data());
      char* base[1] = {o};
      const int64_t per = int64_t{1} << 14;
      const int64_t tasks = (a->numel + per - 1) / per;
      auto body = [&](int64_t t) {
        walk_index<1>(*a, extra, base, t * per, std::min(a->numel, (t + 1) * per), "index",
                      [item](const char* s, char* const* ex) { std::memcpy(ex[0], s, static_cast<size_t>(item)); });
      };
      if (tasks == 1) body(0);
      else ThreadPool::instance().parallel_for(tasks, body);
    });
  });
}

TFL_Error* kernel_index_put(const TFL_Kernel_Args* args) {
  // index_put(self, Tensor?[] indices, values, accumulate=False): out = self; out[indices] (+)= values
  return run_kernel(args, kIndexPut, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), values = L.input_tensor(2, "values"), out = L.output(0, "out");
    const bool accumulate = L.boolean_or(3, false, "accumulate");
    require_same_dtype("index_put", out, {&self, &values});
    // Index into out (self's copy), laid out like out.
    auto a = std::make_shared<AdvIndex>(plan_index(L, out, 1, "index_put"));
    std::shared_ptr<const LoopPlan> copy;
    if (out.data != self.data && out.numel > 0) copy = std::make_shared<const LoopPlan>(copy_plan(out, self));
    // values broadcast to the result shape, right-aligned.
    auto vst = std::make_shared<std::array<int64_t, 64>>();
    if (values.ndim > a->nd) invalid_argument("index_put: values with ", values.ndim, " dims cannot be broadcast to ", a->nd);
    for (int32_t d = 0; d < values.ndim; ++d) {
      const int32_t rd = a->nd - values.ndim + d;
      if (values.sizes[d] != 1 && values.sizes[d] != a->sizes[rd])
        invalid_argument("index_put: values of size ", values.sizes[d], " in dim ", d, " cannot be broadcast to ",
                         a->sizes[rd]);
      (*vst)[static_cast<size_t>(rd)] = values.sizes[d] == 1 ? 0 : values.strides[d] * values.itemsize;
    }
    char* vdata = values.data;
    if (a->numel == 0 && !copy) return;
    const CopyRuns copy_runs = copy_runs_for(out.dtype, self.dtype);
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([a, copy, copy_runs, vst, vdata, accumulate] {
        if (copy) run_loop(*copy, copy_runs);
        if (a->numel == 0) return;
        const int64_t (*extra)[64] = reinterpret_cast<const int64_t(*)[64]>(vst->data());
        char* base[1] = {vdata};
        // Serial: duplicate indices must all land (accumulate) or the last win.
        walk_index<1>(*a, extra, base, 0, a->numel, "index_put", [accumulate](const char* s, char* const* ex) {
          T* d = reinterpret_cast<T*>(const_cast<char*>(s));
          const T v = *reinterpret_cast<const T*>(ex[0]);
          *d = accumulate ? from_compute<T>(to_compute(*d) + to_compute(v)) : v;
        });
      });
    });
  });
}

// ---------------------------------------------------------------------------
// arange
// ---------------------------------------------------------------------------

TFL_Error* kernel_arange_start_out(const TFL_Kernel_Args* args) {
  // arange.start_out(start, end, step=1, *, out): out is already sized by the host.
  return run_kernel(args, kArangeStartOut, [&](Launch& L) {
    const ScalarArg start = L.scalar(0, "start"), step = L.scalar_or(2, 1, "step");
    const TensorArg out = L.output(0, "out");
    if (out.ndim != 1) invalid_argument("arange: out must be 1-D, got ", out.ndim, " dims");
    if (step.to_double() == 0.0) invalid_argument("arange: step must be nonzero");
    const int64_t n = out.numel, stride = out.strides[0];
    if (n == 0) return;
    char* o = out.data;
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_floating_v<T>) {
        const double s = start.to_double(), st = step.to_double();
        L.enqueue([o, n, stride, s, st] {
          T* p = reinterpret_cast<T*>(o);
          for (int64_t i = 0; i < n; ++i) p[i * stride] = convert<T>(s + st * static_cast<double>(i));
        });
      } else {
        if (start.is_floating() || step.is_floating()) {
          const double s = start.to_double(), st = step.to_double();
          L.enqueue([o, n, stride, s, st] {
            T* p = reinterpret_cast<T*>(o);
            for (int64_t i = 0; i < n; ++i) p[i * stride] = convert<T>(s + st * static_cast<double>(i));
          });
        } else {
          const int64_t s = start.to_int(), st = step.to_int();
          L.enqueue([o, n, stride, s, st] {
            T* p = reinterpret_cast<T*>(o);
            for (int64_t i = 0; i < n; ++i) p[i * stride] = convert<T>(s + st * i);
          });
        }
      }
    });
  });
}

}  // namespace flemu
