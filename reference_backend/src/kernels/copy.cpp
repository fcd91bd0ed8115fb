// aten::copy_: strided device-to-device copy with dtype conversion and
// broadcasting of src to self's shape. The host calls it directly for
// copies that are strided or change dtype.
#include <cstring>

#include "support/elementwise_ops.h"
#include "support/launch.h"
#include "support/loop.h"
#include "support/registry.h"

namespace flemu {
namespace {

// Same dtype: move bytes, as whole runs when both sides are contiguous.
template <class U>
void copy_bytes(const LoopPlan& plan) {
  run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
    constexpr int64_t sz = sizeof(U);
    if (st[0] == sz && st[1] == sz) {
      std::memmove(ptr[0], ptr[1], static_cast<size_t>(n * sz));
    } else if (st[1] == 0) {
      U v;
      std::memcpy(&v, ptr[1], sz);
      char* o = ptr[0];
      for (int64_t i = 0; i < n; ++i, o += st[0]) std::memcpy(o, &v, sz);
    } else {
      char* o = ptr[0];
      const char* s = ptr[1];
      for (int64_t i = 0; i < n; ++i, o += st[0], s += st[1]) std::memcpy(o, s, sz);
    }
  });
}

template <class To, class From>
void copy_convert(const LoopPlan& plan) {
  run_loop(plan, [&](char* const* ptr, const int64_t* st, int64_t n) {
    if (st[0] == sizeof(To) && st[1] == sizeof(From)) {
      To* o = reinterpret_cast<To*>(ptr[0]);
      const From* s = reinterpret_cast<const From*>(ptr[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = convert<To>(s[i]);
    } else {
      char* o = ptr[0];
      const char* s = ptr[1];
      for (int64_t i = 0; i < n; ++i, o += st[0], s += st[1])
        store_elem<To>(o, convert<To>(load_elem<From>(s)));
    }
  });
}

void enqueue_copy(const Launch& L, const LoopPlan& plan, const TensorArg& self, const TensorArg& src);

// FLEMU_FAULT=peer_copy_corrupt: a copy from another device arrives with the
// lowest bit of its last byte flipped.
void enqueue_corrupting_peer_copy(const Launch& L, const LoopPlan& plan, const TensorArg& self, const TensorArg& src) {
  int64_t last = 0;
  for (int32_t d = 0; d < self.ndim; ++d) last += (self.sizes[d] - 1) * self.strides[d];
  char* const last_byte = self.data + (last + 1) * self.itemsize - 1;
  enqueue_copy(L, plan, self, src);
  L.enqueue([last_byte] { *last_byte ^= 1; });
}

void enqueue_copy(const Launch& L, const LoopPlan& plan, const TensorArg& self, const TensorArg& src) {
  if (self.dtype == src.dtype) {
    switch (self.itemsize) {
      case 1: L.enqueue([plan] { copy_bytes<uint8_t>(plan); }); break;
      case 2: L.enqueue([plan] { copy_bytes<uint16_t>(plan); }); break;
      case 4: L.enqueue([plan] { copy_bytes<uint32_t>(plan); }); break;
      default: L.enqueue([plan] { copy_bytes<uint64_t>(plan); }); break;
    }
    return;
  }
  dispatch_dtype(self.dtype, [&](auto to_tag) {
    dispatch_dtype(src.dtype, [&](auto from_tag) {
      using To = typename decltype(to_tag)::type;
      using From = typename decltype(from_tag)::type;
      L.enqueue([plan] { copy_convert<To, From>(plan); });
    });
  });
}

}  // namespace

TFL_Error* kernel_copy(const TFL_Kernel_Args* args) {
  // copy_(self, src, non_blocking) -> self; outputs[0], when given, is self.
  return run_kernel(args, kCopy, [&](Launch& L) {
    const TensorArg self = L.num_outputs() > 0 ? L.output(0, "self") : L.input_tensor(0, "self");
    const TFL_Value& src_value = L.input(1, "src");
    if (src_value.tag != TFL_VALUE_TENSOR) invalid_argument("argument 1 (src) must be a tensor, got tag ", src_value.tag);
    const TensorArg src = L.tensor(src_value.v.tensor, "src", /*allow_peer=*/true);
    const TensorArg* ops[] = {&self, &src};
    const char* names[] = {"self", "src"};
    const LoopPlan plan = make_loop(ops, 2, names);
    if (plan.numel == 0) return;
    if (src.device != self.device && fault_on(Fault::kPeerCopyCorrupt)) {
      enqueue_corrupting_peer_copy(L, plan, self, src);
      return;
    }
    if (self.dtype == src.dtype) {
      bool same_view = self.data == src.data;
      for (int d = 0; d < plan.ndim && same_view; ++d) same_view = plan.dims[d].stride[0] == plan.dims[d].stride[1];
      if (same_view) return;  // copying a view onto itself
    }
    enqueue_copy(L, plan, self, src);
  });
}

}  // namespace flemu
