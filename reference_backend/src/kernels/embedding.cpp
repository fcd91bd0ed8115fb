// embedding (row gather) and embedding_dense_backward (row scatter-add, with
// padding_idx and scale_grad_by_freq). Indices are int64 or int32 of any
// shape and strides; an index out of range fails on the stream, naming it.
#include <cstring>
#include <vector>

#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// The indices, flattened in logical order, as int64.
std::vector<int64_t> read_indices(const Strided& idx) {
  std::vector<int64_t> out(static_cast<size_t>(idx.numel));
  const LoadI64 load = loader_i64(idx.dtype);
  Cursor c(idx, 0);
  for (int64_t i = 0; i < idx.numel; ++i, c.next()) out[static_cast<size_t>(i)] = load(c.ptr);
  return out;
}

void require_index_dtype(const TensorArg& t) {
  if (t.dtype != TFL_DTYPE_INT64 && t.dtype != TFL_DTYPE_INT32)
    invalid_argument("indices must be int64 or int32, got ", dtype_name(t.dtype));
}

struct Rows {
  char* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t rs = 0, cs = 0;  // bytes
};

Rows rows_of(const TensorArg& t, const char* what) {
  if (t.ndim != 2) invalid_argument(what, " must be 2-d, got ", t.ndim, " dims");
  return {t.data, t.sizes[0], t.sizes[1], t.strides[0] * t.itemsize, t.strides[1] * t.itemsize};
}

}  // namespace

TFL_Error* kernel_embedding(const TFL_Kernel_Args* args) {
  // embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False) -> out
  return run_kernel(args, kEmbedding, [&](Launch& L) {
    const TensorArg weight = L.input_tensor(0, "weight"), indices = L.input_tensor(1, "indices");
    const TensorArg out = L.output(0, "out");
    require_index_dtype(indices);
    const Rows w = rows_of(weight, "weight");
    if (out.dtype != weight.dtype) invalid_argument("out must have the weight's dtype");
    if (out.numel != indices.numel * w.cols) invalid_argument("out must have shape indices.shape + [", w.cols, "]");
    if (out.numel == 0) return;
    const Strided idx = strided(indices, "indices");
    // out as (num_indices, D): its leading dims follow the indices' order.
    TensorArg lead = out;
    lead.ndim = out.ndim - 1;
    Strided o = strided(lead, "out");
    o.numel = indices.numel;
    const int64_t ocs = out.strides[out.ndim - 1] * out.itemsize;
    const int64_t item = weight.itemsize;
    L.enqueue([w, idx, o, ocs, item] {
      const std::vector<int64_t> ids = read_indices(idx);
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= w.rows)
          invalid_argument("embedding index ", ids[i], " at position ", i, " is out of range for a table of ", w.rows,
                           " rows");
      parallel_chunks(static_cast<int64_t>(ids.size()), std::max<int64_t>(1, 8192 / std::max<int64_t>(w.cols, 1)),
                      [&](int64_t b, int64_t e) {
                        Cursor c(o, b);
                        for (int64_t i = b; i < e; ++i, c.next()) {
                          const char* src = w.data + ids[static_cast<size_t>(i)] * w.rs;
                          char* dst = c.ptr;
                          if (w.cs == item && ocs == item) {
                            std::memcpy(dst, src, static_cast<size_t>(w.cols * item));
                          } else {
                            for (int64_t k = 0; k < w.cols; ++k) std::memcpy(dst + k * ocs, src + k * w.cs, static_cast<size_t>(item));
                          }
                        }
                      });
    });
  });
}

TFL_Error* kernel_embedding_dense_backward(const TFL_Kernel_Args* args) {
  // embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) -> grad_weight
  return run_kernel(args, kEmbeddingDenseBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), indices = L.input_tensor(1, "indices");
    const int64_t num_weights = int_arg(L, 2, "num_weights");
    const int64_t padding_idx = int_arg(L, 3, "padding_idx");
    const bool by_freq = L.boolean_or(4, false, "scale_grad_by_freq");
    const TensorArg out = L.output(0, "grad_weight");
    require_index_dtype(indices);
    if (!dtype_is_floating(grad.dtype)) invalid_argument("grad_output must be floating, got ", dtype_name(grad.dtype));
    if (out.dtype != grad.dtype) invalid_argument("grad_weight must have grad_output's dtype");
    const Rows gw = rows_of(out, "grad_weight");
    if (gw.rows != num_weights) invalid_argument("grad_weight has ", gw.rows, " rows; expected num_weights=", num_weights);
    if (grad.ndim < 1 || grad.sizes[grad.ndim - 1] != gw.cols || grad.numel != indices.numel * gw.cols)
      invalid_argument("grad_output must have shape indices.shape + [", gw.cols, "]");
    if (out.numel == 0) return;
    const Strided idx = strided(indices, "indices");
    TensorArg lead = grad;
    lead.ndim = grad.ndim - 1;
    Strided g = strided(lead, "grad_output");
    g.numel = indices.numel;
    const int64_t gcs = grad.strides[grad.ndim - 1] * grad.itemsize;
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([gw, idx, g, gcs, padding_idx, by_freq] {
        using C = acc_t<T>;
        const std::vector<int64_t> ids = read_indices(idx);
        const int64_t n = static_cast<int64_t>(ids.size());
        for (int64_t i = 0; i < n; ++i)
          if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= gw.rows)
            invalid_argument("embedding index ", ids[static_cast<size_t>(i)], " at position ", i,
                             " is out of range for a table of ", gw.rows, " rows");
        std::vector<int64_t> counts;
        if (by_freq) {
          counts.assign(static_cast<size_t>(gw.rows), 0);
          for (int64_t id : ids) ++counts[static_cast<size_t>(id)];
        }
        // Row pointers of grad_output, in index order.
        std::vector<const char*> src(static_cast<size_t>(n));
        {
          Cursor c(g, 0);
          for (int64_t i = 0; i < n; ++i, c.next()) src[static_cast<size_t>(i)] = c.ptr;
        }
        // Each chunk owns a range of table rows, so no two threads add into one row.
        parallel_chunks(gw.rows, std::max<int64_t>(1, gw.rows / 64), [&](int64_t r0, int64_t r1) {
          std::vector<C> acc(static_cast<size_t>((r1 - r0) * gw.cols), C(0));
          for (int64_t i = 0; i < n; ++i) {
            const int64_t id = ids[static_cast<size_t>(i)];
            if (id < r0 || id >= r1 || id == padding_idx) continue;
            const C scale = by_freq ? C(1) / static_cast<C>(counts[static_cast<size_t>(id)]) : C(1);
            C* row = acc.data() + (id - r0) * gw.cols;
            const char* s = src[static_cast<size_t>(i)];
            for (int64_t k = 0; k < gw.cols; ++k)
              row[k] += scale * static_cast<C>(to_compute(*reinterpret_cast<const T*>(s + k * gcs)));
          }
          for (int64_t r = r0; r < r1; ++r) {
            char* dst = gw.data + r * gw.rs;
            const C* row = acc.data() + (r - r0) * gw.cols;
            for (int64_t k = 0; k < gw.cols; ++k) *reinterpret_cast<T*>(dst + k * gw.cs) = convert<T>(row[k]);
          }
        });
      });
    });
  });
}

}  // namespace flemu
