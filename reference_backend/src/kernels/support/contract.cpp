#include "contract.h"

#include <algorithm>
#include <string>

#include "../../errors.h"
#include "dtype.h"
#include "layout.h"

namespace flemu {

namespace {

const char* variant_name(int32_t variant) {
  switch (variant) {
    case TFL_VARIANT_FUNCTIONAL: return "functional variant";
    case TFL_VARIANT_INPLACE: return "in-place variant";
    case TFL_VARIANT_OUT: return "out= variant";
    default: return "unknown variant";
  }
}

std::string dims(int32_t ndim, const int64_t* v) {
  std::string s = "[";
  for (int32_t d = 0; d < ndim; ++d) s += cat(d ? ", " : "", v[d]);
  return s + "]";
}

// One tensor of the call, with where it came from.
struct Operand {
  const TFL_Tensor* t;
  int32_t index;       // argument or output position
  int32_t list_index;  // element of a tensor list, or -1
  bool input;
  const void* allocation = nullptr;  // start of the live allocation holding it
};

// "input 1", "input 0[2]", "output 0": made only for a message.
std::string name_of(const Operand& o) {
  if (o.list_index >= 0) return cat(o.input ? "input " : "output ", o.index, "[", o.list_index, "]");
  return cat(o.input ? "input " : "output ", o.index);
}

class ContractCheck {
 public:
  ContractCheck(const TFL_Kernel_Args& args, const KernelContract& c, Runtime& rt, std::vector<Operand>& operands)
      : args_(args), c_(c), rt_(rt), op_(op_name(args)), variant_(args.ctx->variant), operands_(operands) {
    operands_.clear();
  }

  void run(std::vector<GuardedAllocation>* guarded) {
    collect();
    for (Operand& o : operands_) check_tensor(o);
    check_flags();
    check_dtype();
    check_variant();
    for (const Operand& o : operands_) {
      const bool written = o.input ? !has_outputs_ : true;
      if (!written || o.allocation == nullptr) continue;
      bool seen = false;
      for (const GuardedAllocation& g : *guarded) seen = seen || g.start == o.allocation;
      if (!seen) guarded->push_back({&rt_.device(o.t->device).arena, o.allocation});
    }
  }

 private:
  static const char* op_name(const TFL_Kernel_Args& a) {
    return a.ctx->op_name != nullptr ? a.ctx->op_name : "an unnamed op";
  }

  template <class... Parts>
  [[noreturn]] void violated(const Operand& o, Parts&&... parts) const {
    violated(name_of(o), std::forward<Parts>(parts)...);
  }
  template <class... Parts>
  [[noreturn]] void violated(const std::string& argument, Parts&&... parts) const {
    fail(TFL_ERR_INTERNAL, cat("host contract violated: ", op_, " (", variant_name(variant_), "): ", argument,
                               " ", std::forward<Parts>(parts)...));
  }

  void collect() {
    for (size_t i = 0; i < args_.num_inputs; ++i) {
      const TFL_Value& v = args_.inputs[i];
      const auto index = static_cast<int32_t>(i);
      if (v.tag == TFL_VALUE_TENSOR) {
        if (v.v.tensor == nullptr) violated(cat("input ", i), "is a TFL_VALUE_TENSOR with a NULL descriptor");
        operands_.push_back({v.v.tensor, index, -1, true});
      } else if (v.tag == TFL_VALUE_TENSOR_LIST) {
        if (v.v.tensors.size > 0 && v.v.tensors.data == nullptr)
          violated(cat("input ", i), "is a tensor list of ", v.v.tensors.size, " with a NULL array");
        for (size_t j = 0; j < v.v.tensors.size; ++j)
          if (v.v.tensors.data[j] != nullptr)
            operands_.push_back({v.v.tensors.data[j], index, static_cast<int32_t>(j), true});
      }
    }
    for (size_t i = 0; i < args_.num_outputs; ++i)
      if (args_.outputs[i] != nullptr) {
        operands_.push_back({args_.outputs[i], static_cast<int32_t>(i), -1, false});
        has_outputs_ = true;
      }
  }

  static bool dense(const TFL_Tensor& t) { return row_major_dense(t.ndim, t.sizes, t.strides); }

  static std::string layout(const TFL_Tensor& t) {
    return cat("(sizes ", dims(t.ndim, t.sizes), ", strides ", dims(t.ndim, t.strides), ")");
  }

  // Bytes from data to one past the last element.
  static uint64_t extent(const TFL_Tensor& t) {
    int64_t last = 0;
    for (int32_t d = 0; d < t.ndim; ++d)
      if (t.sizes[d] > 0) last += (t.sizes[d] - 1) * t.strides[d];
    return static_cast<uint64_t>(last + 1) * static_cast<uint64_t>(element_size(t.dtype));
  }

  void check_tensor(Operand& o) const {
    const TFL_Tensor& t = *o.t;
    if (t.struct_size < TFL_Tensor_STRUCT_SIZE)
      violated(o, "has TFL_Tensor.struct_size ", t.struct_size, ", expected at least ", TFL_Tensor_STRUCT_SIZE);
    if (t.ndim < 0 || t.ndim > TFL_MAX_DIMS) violated(o, "has ndim ", t.ndim, "; the ABI allows 0..", TFL_MAX_DIMS);
    if (t.ndim > 0 && (t.sizes == nullptr || t.strides == nullptr))
      violated(o, "has ndim ", t.ndim, " but NULL sizes or strides");
    int64_t numel = 1;
    for (int32_t d = 0; d < t.ndim; ++d) {
      if (t.sizes[d] < 0 || t.strides[d] < 0) violated(o, "has a negative size or stride ", layout(t));
      numel *= t.sizes[d];
    }
    if (numel != t.numel) violated(o, "says numel ", t.numel, " but its sizes ", dims(t.ndim, t.sizes), " hold ", numel);
    if (element_size(t.dtype) == 0) violated(o, "has dtype ", t.dtype, ", which is not a TFL_DType");
    if (t.memory_kind == TFL_MEMORY_HOST) {
      if (!o.input) violated(o, "is in host memory; outputs are device tensors");
      if ((c_.flags & TFL_KERNEL_HOST_SCALARS) == 0)
        violated(o, "is a host tensor, but the kernel does not declare TFL_KERNEL_HOST_SCALARS (0-dim CPU operands "
                         "must be uploaded)");
      if (t.ndim != 0) violated(o, "is a host tensor with ", t.ndim, " dims; only 0-dim scalars may stay on the host");
      if (t.data == nullptr) violated(o, "is a host scalar with a NULL data pointer");
      return;
    }
    if (t.memory_kind != TFL_MEMORY_DEVICE) violated(o, "has memory_kind ", t.memory_kind, ", not a TFL_MemoryKind");
    if (t.device < 0 || t.device >= rt_.device_count())
      violated(o, "is on device ", t.device, ", which does not exist (", rt_.device_count(), " devices)");
    if (t.numel == 0) return;
    if (t.data == nullptr) violated(o, "has ", t.numel, " elements and a NULL data pointer");
    Arena& arena = rt_.device(t.device).arena;
    const void* start = nullptr;
    uint64_t size = 0;
    if (!arena.find_allocation(t.data, &start, &size))
      violated(o, "at ", t.data, " is not inside a live allocation of device ", t.device);
    o.allocation = start;
    const uint64_t at = static_cast<uint64_t>(static_cast<const char*>(t.data) - static_cast<const char*>(start));
    const uint64_t bytes = extent(t);
    if (bytes > size - at)
      violated(o, layout(t), " needs ", bytes, " bytes from ", t.data, " but its allocation ends ", size - at,
               " bytes after it");
    const uint64_t offset_bytes = static_cast<uint64_t>(t.storage_offset) * static_cast<uint64_t>(element_size(t.dtype));
    if (t.storage_offset < 0 || offset_bytes > at)
      violated(o, "has storage_offset ", t.storage_offset, ", which puts its storage before the start of its allocation (",
               at, " bytes before data)");
  }

  bool is_device_input(const Operand& o) const { return o.input && o.t->memory_kind == TFL_MEMORY_DEVICE; }

  void check_flags() const {
    const TFL_Tensor* out0 = args_.num_outputs > 0 ? args_.outputs[0] : nullptr;
    for (const Operand& o : operands_) {
      if (is_device_input(o)) {
        if ((c_.flags & TFL_KERNEL_CONTIGUOUS_INPUTS) && !dense(*o.t))
          violated(o, "is not dense row-major ", layout(*o.t), ", but the kernel declares TFL_KERNEL_CONTIGUOUS_INPUTS");
        if ((c_.flags & TFL_KERNEL_BROADCAST_INPUTS) && out0 != nullptr &&
            (o.t->ndim != out0->ndim || !std::equal(o.t->sizes, o.t->sizes + o.t->ndim, out0->sizes)))
          violated(o, "has sizes ", dims(o.t->ndim, o.t->sizes), ", not output 0's ", dims(out0->ndim, out0->sizes),
                   ", but the kernel declares TFL_KERNEL_BROADCAST_INPUTS");
      }
      if (!o.input && (c_.flags & TFL_KERNEL_CONTIGUOUS_OUTPUTS) && !dense(*o.t))
        violated(o, "is not dense row-major ", layout(*o.t), ", but the kernel declares TFL_KERNEL_CONTIGUOUS_OUTPUTS");
    }
    if (c_.flags & TFL_KERNEL_PROMOTE_INPUTS) {
      const Operand* first = nullptr;
      for (const Operand& o : operands_) {
        if (!is_device_input(o)) continue;
        if (first == nullptr) first = &o;
        else if (o.t->dtype != first->t->dtype)
          violated(o, "has dtype ", dtype_name(o.t->dtype), " but ", name_of(*first), " has ", dtype_name(first->t->dtype),
                   ", and the kernel declares TFL_KERNEL_PROMOTE_INPUTS");
      }
    }
  }

  // PyTorch's type promotion, as the host applies it to choose the kernel's dtype.
  static int rank(int32_t dt) {
    switch (dt) {
      case TFL_DTYPE_BOOL: return 0;
      case TFL_DTYPE_UINT8: case TFL_DTYPE_INT8: case TFL_DTYPE_FLOAT8_E4M3FN: case TFL_DTYPE_FLOAT8_E5M2: return 1;
      case TFL_DTYPE_INT16: case TFL_DTYPE_UINT16: case TFL_DTYPE_FLOAT16: case TFL_DTYPE_BFLOAT16: return 2;
      case TFL_DTYPE_INT32: case TFL_DTYPE_UINT32: case TFL_DTYPE_FLOAT32: return 3;
      default: return 4;
    }
  }
  static int category(int32_t dt) {
    if (dt < 0) return -1;
    if (dt == TFL_DTYPE_BOOL) return 0;
    if (dt == TFL_DTYPE_COMPLEX64 || dt == TFL_DTYPE_COMPLEX128) return 3;
    if (dt == TFL_DTYPE_FLOAT16 || dt == TFL_DTYPE_BFLOAT16 || dt == TFL_DTYPE_FLOAT32 || dt == TFL_DTYPE_FLOAT64 ||
        dt == TFL_DTYPE_FLOAT8_E4M3FN || dt == TFL_DTYPE_FLOAT8_E5M2)
      return 2;
    return 1;
  }
  static int32_t promote(int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0 || a == b) return a;
    const int ca = category(a), cb = category(b);
    if (ca != cb) return ca > cb ? a : b;
    if (ca == 2 && rank(a) == rank(b)) return TFL_DTYPE_FLOAT32;  // float16 with bfloat16
    if (ca == 1 && ((a == TFL_DTYPE_UINT8 && b == TFL_DTYPE_INT8) || (a == TFL_DTYPE_INT8 && b == TFL_DTYPE_UINT8)))
      return TFL_DTYPE_INT16;
    return rank(a) >= rank(b) ? a : b;
  }
  // PyTorch's combine_categories: a lower priority class only lifts the category.
  static int32_t combine(int32_t higher, int32_t lower) {
    if (higher < 0) return lower;
    if (lower < 0) return higher;
    if (category(higher) >= category(lower)) return higher;
    return promote(higher, lower);
  }

  void check_dtype() const {
    int32_t dim = -1, zero = -1, wrapped = -1;
    for (const Operand& o : operands_) {
      if (!o.input) continue;
      const int32_t dt = o.t->dtype;
      if (o.t->memory_kind == TFL_MEMORY_HOST) wrapped = promote(wrapped, category(dt) == 2 ? TFL_DTYPE_FLOAT32 : dt);
      else if (o.t->ndim == 0) zero = promote(zero, dt);
      else dim = promote(dim, dt);
    }
    int32_t result = combine(dim, combine(zero, wrapped));
    const char* from = "the tensor inputs";
    if (result < 0) {
      if (args_.num_outputs == 0 || args_.outputs[0] == nullptr) return;
      result = args_.outputs[0]->dtype;
      from = "output 0 (the kernel has no tensor inputs)";
    }
    if ((c_.dtypes & TFL_DTYPE_BIT(result)) == 0)
      violated(cat("dtype ", dtype_name(result)), "(the result type of ", from, ") is not one the kernel declares");
  }

  static bool same_view(const TFL_Tensor& a, const TFL_Tensor& b) {
    return a.data == b.data && a.ndim == b.ndim && std::equal(a.sizes, a.sizes + a.ndim, b.sizes) &&
           std::equal(a.strides, a.strides + a.ndim, b.strides) && element_size(a.dtype) == element_size(b.dtype);
  }

  // Whether two device tensors share a byte: their extents first, element
  // by element only when those intersect (interleaved views need not).
  static bool overlap(const TFL_Tensor& a, const TFL_Tensor& b) {
    if (a.numel == 0 || b.numel == 0 || a.memory_kind != TFL_MEMORY_DEVICE || b.memory_kind != TFL_MEMORY_DEVICE)
      return false;
    const char* pa = static_cast<const char*>(a.data);
    const char* pb = static_cast<const char*>(b.data);
    if (pa + extent(a) <= pb || pb + extent(b) <= pa) return false;
    if (dense(a) && dense(b)) return true;  // two blocks whose ranges meet
    constexpr int64_t kMaxExact = int64_t{1} << 20;
    if (a.numel + b.numel > kMaxExact) return true;  // too large to tell: assume the worst
    auto bytes_of = [](const TFL_Tensor& t) {
      std::vector<std::pair<uintptr_t, uintptr_t>> spans;
      const int64_t es = element_size(t.dtype);
      std::vector<int64_t> idx(static_cast<size_t>(t.ndim), 0);
      for (int64_t i = 0; i < t.numel; ++i) {
        int64_t e = 0;
        for (int32_t d = 0; d < t.ndim; ++d) e += idx[static_cast<size_t>(d)] * t.strides[d];
        const auto p = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(e * es);
        spans.emplace_back(p, p + static_cast<uintptr_t>(es));
        for (int32_t d = t.ndim - 1; d >= 0; --d) {
          if (++idx[static_cast<size_t>(d)] < t.sizes[d]) break;
          idx[static_cast<size_t>(d)] = 0;
        }
      }
      std::sort(spans.begin(), spans.end());
      return spans;
    };
    const auto sa = bytes_of(a), sb = bytes_of(b);
    size_t i = 0, j = 0;
    while (i < sa.size() && j < sb.size()) {
      if (sa[i].second <= sb[j].first) ++i;
      else if (sb[j].second <= sa[i].first) ++j;
      else return true;
    }
    return false;
  }

  void check_variant() const {
    if (variant_ == TFL_VARIANT_INPLACE) {
      const TFL_Tensor* out0 = args_.num_outputs > 0 ? args_.outputs[0] : nullptr;
      if (out0 == nullptr || args_.num_inputs == 0 || args_.inputs[0].tag != TFL_VALUE_TENSOR) return;
      const TFL_Tensor& self = *args_.inputs[0].v.tensor;
      if (!same_view(*out0, self))
        violated("output 0", layout(*out0), " at ", out0->data, " is not input 0 ", layout(self), " at ", self.data,
                 "; an in-place variant writes self");
      return;
    }
    for (const Operand& out : operands_) {
      if (out.input) continue;
      for (const Operand& in : operands_) {
        if (!in.input || !overlap(*out.t, *in.t)) continue;
        if (variant_ == TFL_VARIANT_FUNCTIONAL)
          violated(out, layout(*out.t), " at ", out.t->data, " overlaps ", name_of(in), " at ", in.t->data,
                   "; a functional variant's outputs are fresh memory");
        if (variant_ == TFL_VARIANT_OUT && !same_view(*out.t, *in.t))
          violated(out, layout(*out.t), " at ", out.t->data, " partially overlaps ", name_of(in), " ",
                   layout(*in.t), " at ", in.t->data, "; an out= tensor is either an input or apart from it");
      }
    }
  }

  const TFL_Kernel_Args& args_;
  const KernelContract& c_;
  Runtime& rt_;
  const char* op_;
  int32_t variant_;
  std::vector<Operand>& operands_;
  bool has_outputs_ = false;
};

}  // namespace

void check_host_contract(const TFL_Kernel_Args& args, const KernelContract& contract, Runtime& rt,
                         std::vector<GuardedAllocation>* guarded) {
  // One list per thread, reused: the check runs on every launch.
  static thread_local std::vector<Operand> operands;
  ContractCheck(args, contract, rt, operands).run(guarded);
}

void check_guards_after_task(const std::vector<GuardedAllocation>& guarded) {
  for (const GuardedAllocation& g : guarded) {
    const std::string broken = g.arena->check_guards(g.start);
    if (!broken.empty())
      fail(TFL_ERR_INTERNAL,
           cat("wrote out of bounds: ", broken, " (guard regions of FLEMU_CHECK_CONTRACTS=1)"));
  }
}

}  // namespace flemu
