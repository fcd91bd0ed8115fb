// Contract checking (FLEMU_CHECK_CONTRACTS=1) through the ABI: a host that
// keeps its promises runs untroubled, each broken promise fails the launch
// with TFL_ERR_INTERNAL naming the op, the variant, the argument and the
// promise, before anything is enqueued; guard regions catch writes past an
// allocation after the kernel, at synchronize and at free.
// Usage: contract_check LIBRARY [all|guards]; `guards` runs with
// FLEMU_FAULT=oob_write. Works under FLEMU_STRICT=1 as well.
#include "abi_driver.h"

namespace {

Tensor view_of(const Tensor& base, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  Tensor v = base;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  v.offset = offset;
  return v;
}

constexpr const char* kViolated = "host contract violated: ";

// A launch that breaks a promise: INTERNAL, the message names everything,
// and nothing ran (the output keeps its sentinel bytes).
#define CHECK_VIOLATION(call, out, ...)                                                        \
  do {                                                                                         \
    CHECK_ERR(call, TFL_ERR_INTERNAL, kViolated, __VA_ARGS__);                                 \
    CHECK_OK(stream_sync(g_streams[0]));                                                       \
    check_untouched("the output of a refused launch", out);                                    \
  } while (0)

void honest_calls_pass() {
  std::vector<LD> a, row;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {4, 3}, &a), r = filled(TFL_DTYPE_FLOAT32, {3}, &row);
  Tensor expanded = view_of(r, {4, 3}, {0, 1}, 0);  // how the host broadcasts
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(expanded.t()), iv(1)}, {o.t()}));
  std::vector<LD> want(12);
  for (int i = 0; i < 12; ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, a[i] + row[i % 3]);
  CHECK_VALUES("add with a broadcast operand", download(o), want, TFL_DTYPE_FLOAT32);
  // In place: outputs[0] is self.
  CHECK_OK(launch("aten::add.Tensor", {tv(o.t()), tv(expanded.t()), iv(-1)}, {o.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_VALUES("in-place add", download(o), a, TFL_DTYPE_FLOAT32);
  // out= that is exactly an input is fine.
  CHECK_OK(launch("aten::mul.Tensor", {tv(o.t()), tv(x.t())}, {o.t()}, 0, TFL_VARIANT_OUT));
  // A strided view with an offset, inside its allocation.
  Tensor base = make_tensor(TFL_DTYPE_FLOAT32, {8, 8});
  Tensor col = view_of(base, {8}, {8}, 3);
  CHECK_OK(launch("aten::fill_.Scalar", {tv(col.t()), dv(2.0)}, {col.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_VALUES("fill_ of a column", download(col), std::vector<LD>(8, 2.0L), TFL_DTYPE_FLOAT32);
  // A host scalar to a TFL_KERNEL_HOST_SCALARS kernel.
  double two = 2.0;
  TFL_Tensor host{};
  host.struct_size = TFL_Tensor_STRUCT_SIZE;
  host.data = &two;
  host.dtype = TFL_DTYPE_FLOAT64;
  host.memory_kind = TFL_MEMORY_HOST;
  host.device = -1;
  host.numel = 1;
  CHECK_OK(launch("aten::mul.Tensor", {tv(x.t()), tv(&host)}, {o.t()}));
  for (int i = 0; i < 12; ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, 2 * a[i]);
  CHECK_VALUES("mul by a host scalar", download(o), want, TFL_DTYPE_FLOAT32);
  // Dense operands for a dense kernel, mixed dtypes where the kernel does not promote.
  Tensor s = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  CHECK_OK(launch("aten::_softmax", {tv(x.t()), iv(1), bv(false)}, {s.t()}));
  // Dense as PyTorch's is_contiguous() has it: a size-1 dim's stride does not
  // matter, nor do the strides of a tensor without elements ((1, 1, 1) is what
  // PyTorch gives an empty tensor of sizes (5, 0, 0)).
  Tensor rows = make_tensor(TFL_DTYPE_FLOAT32, {4, 1, 3}, {3, 99, 1});
  upload(rows, a);
  Tensor rows_out = make_tensor(TFL_DTYPE_FLOAT32, {4, 1, 3}, {3, 7, 1});
  CHECK_OK(launch("aten::_softmax", {tv(rows.t()), iv(-1), bv(false)}, {rows_out.t()}));
  Tensor rows_grad = make_tensor(TFL_DTYPE_FLOAT32, {4, 1, 3}, {3, 0, 1});
  CHECK_OK(launch("aten::_log_softmax_backward_data",
                  {tv(rows.t()), tv(rows_out.t()), iv(-1), stype(TFL_DTYPE_FLOAT32)}, {rows_grad.t()}));
  const std::pair<std::vector<int64_t>, std::vector<int64_t>> empty_layouts[] = {
      {{5, 0, 0}, {1, 1, 1}}, {{0, 3}, {7, 5}}, {{2, 0, 4}, {0, 9, 3}}};
  for (const auto& [sizes, strides] : empty_layouts) {
    Tensor e = make_tensor(TFL_DTYPE_FLOAT32, sizes, strides), eo = make_tensor(TFL_DTYPE_FLOAT32, sizes, strides);
    Tensor eg = make_tensor(TFL_DTYPE_FLOAT32, sizes, strides);
    CHECK_OK(launch("aten::_softmax", {tv(e.t()), iv(-1), bv(false)}, {eo.t()}));
    CHECK_OK(launch("aten::_softmax_backward_data", {tv(e.t()), tv(eo.t()), iv(0), stype(TFL_DTYPE_FLOAT32)}, {eg.t()}));
  }
  Tensor idx = make_tensor(TFL_DTYPE_INT64, {2});
  upload(idx, {0, 2});
  Tensor picked = make_tensor(TFL_DTYPE_FLOAT32, {2, 3});
  CHECK_OK(launch("aten::index_select", {tv(x.t()), iv(0), tv(idx.t())}, {picked.t()}));
  std::vector<LD> a_rows = {a[0], a[1], a[2], a[6], a[7], a[8]};
  CHECK_VALUES("index_select", download(picked), a_rows, TFL_DTYPE_FLOAT32);
  // Interleaved views of one buffer do not overlap.
  Tensor pair = make_tensor(TFL_DTYPE_FLOAT32, {6, 2});
  fill_f32(pair, 1.0);
  Tensor even = view_of(pair, {6}, {2}, 0), odd = view_of(pair, {6}, {2}, 1);
  CHECK_OK(launch("aten::add.Tensor", {tv(even.t()), tv(even.t()), iv(1)}, {odd.t()}, 0, TFL_VARIANT_OUT));
  CHECK_VALUES("out= beside its input", download(odd), std::vector<LD>(6, 2.0L), TFL_DTYPE_FLOAT32);
  CHECK_OK(stream_sync(g_streams[0]));
}

void broken_promises_are_refused() {
  std::vector<LD> a, b;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {4, 3}, &a), y = filled(TFL_DTYPE_FLOAT32, {4, 3}, &b);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  Tensor base = make_tensor(TFL_DTYPE_FLOAT32, {3, 4});
  Tensor xt = view_of(base, {4, 3}, {1, 4}, 0);

  // TFL_KERNEL_CONTIGUOUS_INPUTS / _OUTPUTS (_softmax declares both).
  CHECK_VIOLATION(launch("aten::_softmax", {tv(xt.t()), iv(1), bv(false)}, {o.t()}), o, "aten::_softmax",
                  "(functional variant)", "input 0 is not dense row-major (sizes [4, 3], strides [1, 4])",
                  "TFL_KERNEL_CONTIGUOUS_INPUTS");
  Tensor wide = make_tensor(TFL_DTYPE_FLOAT32, {4, 6});
  Tensor strided_out = view_of(wide, {4, 3}, {6, 2}, 0);
  CHECK_VIOLATION(launch("aten::_softmax", {tv(x.t()), iv(1), bv(false)}, {strided_out.t()}), wide,
                  "output 0 is not dense row-major", "TFL_KERNEL_CONTIGUOUS_OUTPUTS");

  // TFL_KERNEL_BROADCAST_INPUTS: the host expands inputs to the output's shape.
  std::vector<LD> row;
  Tensor r = filled(TFL_DTYPE_FLOAT32, {3}, &row);
  CHECK_VIOLATION(launch("aten::add.Tensor", {tv(x.t()), tv(r.t()), iv(1)}, {o.t()}), o, "aten::add.Tensor",
                  "input 1 has sizes [3], not output 0's [4, 3]", "TFL_KERNEL_BROADCAST_INPUTS");

  // TFL_KERNEL_PROMOTE_INPUTS: one dtype for every device input.
  std::vector<LD> d;
  Tensor y64 = filled(TFL_DTYPE_FLOAT64, {4, 3}, &d);
  CHECK_VIOLATION(launch("aten::mul.Tensor", {tv(x.t()), tv(y64.t())}, {o.t()}), o,
                  "input 1 has dtype float64 but input 0 has float32", "TFL_KERNEL_PROMOTE_INPUTS");

  // The declared dtypes: mm takes floating types only.
  std::vector<LD> ia;
  Tensor i32 = filled(TFL_DTYPE_INT32, {3, 3}, &ia);
  Tensor io = make_tensor(TFL_DTYPE_INT32, {3, 3});
  CHECK_VIOLATION(launch("aten::mm", {tv(i32.t()), tv(i32.t())}, {io.t()}), io, "aten::mm",
                  "dtype int32 (the result type of the tensor inputs) is not one the kernel declares");

  // In place: outputs[0] must be self.
  CHECK_VIOLATION(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(1)}, {o.t()}, 0, TFL_VARIANT_INPLACE), o,
                  "(in-place variant)", "output 0", "is not input 0", "an in-place variant writes self");

  // Functional: outputs are fresh memory.
  Tensor scratch = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  upload(scratch, a);
  CHECK_ERR(launch("aten::neg", {tv(scratch.t())}, {scratch.t()}), TFL_ERR_INTERNAL, kViolated, "aten::neg",
            "(functional variant)", "output 0", "overlaps input 0");
  CHECK_VALUES("a refused functional call leaves its operand alone", download(scratch), a, TFL_DTYPE_FLOAT32);

  // out=: an input or apart from it, never a shifted view of it.
  Tensor line = make_tensor(TFL_DTYPE_FLOAT32, {9});
  fill_f32(line, 1.0);
  Tensor head = view_of(line, {8}, {1}, 0), tail = view_of(line, {8}, {1}, 1);
  CHECK_ERR(launch("aten::add.Tensor", {tv(head.t()), tv(head.t()), iv(1)}, {tail.t()}, 0, TFL_VARIANT_OUT),
            TFL_ERR_INTERNAL, kViolated, "(out= variant)", "output 0", "partially overlaps input 0");

  // Every tensor inside one live allocation, its storage start included.
  Tensor small = make_tensor(TFL_DTYPE_FLOAT32, {4});
  Tensor too_long = view_of(small, {8}, {1}, 0);
  CHECK_VIOLATION(launch("aten::neg", {tv(too_long.t())}, {o.t()}), o, "input 0 (sizes [8], strides [1]) needs 32 bytes",
                  "but its allocation ends 16 bytes after it");
  Tensor bad_offset = view_of(small, {2}, {1}, 0);
  const TFL_Tensor* desc = bad_offset.t();
  const_cast<TFL_Tensor*>(desc)->storage_offset = 3;  // claims a storage that starts before the allocation
  CHECK_VIOLATION(launch("aten::neg", {tv(desc)}, {o.t()}), o, "input 0 has storage_offset 3");
  Tensor gone = make_tensor(TFL_DTYPE_FLOAT32, {4});
  const TFL_Tensor* gone_desc = gone.t();
  free_tensor(gone);
  CHECK_VIOLATION(launch("aten::neg", {tv(gone_desc)}, {o.t()}), o, "input 0 at", "is not inside a live allocation");

  // Host memory: only 0-dim scalars, only for TFL_KERNEL_HOST_SCALARS kernels.
  float host_value = 1.0f;
  TFL_Tensor host{};
  host.struct_size = TFL_Tensor_STRUCT_SIZE;
  host.data = &host_value;
  host.dtype = TFL_DTYPE_FLOAT32;
  host.memory_kind = TFL_MEMORY_HOST;
  host.device = -1;
  host.numel = 1;
  Tensor one = make_tensor(TFL_DTYPE_FLOAT32, {});
  CHECK_VIOLATION(launch("aten::neg", {tv(&host)}, {one.t()}), one, "input 0 is a host tensor",
                  "TFL_KERNEL_HOST_SCALARS");

  // The symbol convention's contract: dense float32 operands.
  auto abs_fn = reinterpret_cast<TFL_KernelFn>(dlsym(g_lib, "torch_fl_op_abs"));
  CHECK(abs_fn != nullptr, "torch_fl_op_abs is exported");
  if (abs_fn)
    CHECK_VIOLATION(launch_fn(abs_fn, "aten::abs", nullptr, {tv(xt.t())}, {o.t()}), o, "aten::abs",
                    "input 0 is not dense row-major", "TFL_KERNEL_CONTIGUOUS_INPUTS");
}

int mode_all() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR, {{"FLEMU_CHECK_CONTRACTS", "1"}}));
  setup_streams();
  honest_calls_pass();
  broken_promises_are_refused();
  return report();
}

// FLEMU_FAULT=oob_write: relu's stray element lands in the guard region.
int mode_guards() {
  CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR, {{"FLEMU_CHECK_CONTRACTS", "1"}, {"FLEMU_FAULT", "oob_write"}}));
  setup_streams();
  std::vector<LD> v;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {10}, &v);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {10});  // 40 bytes: element 10 is a canary
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK_OK(launch("aten::relu", {tv(x.t())}, {o.t()}));  // the launch itself is fine
  CHECK_ERR(stream_sync(g_streams[0]), TFL_ERR_INTERNAL, "aten::relu failed asynchronously", "wrote out of bounds",
            "the guard region after the 40-byte allocation", "at byte 40 (0 bytes past its end)");
  CHECK_OK(stream_sync(g_streams[0]));  // reported once; the canaries are painted again
  std::vector<LD> relu(v.size());
  for (size_t i = 0; i < v.size(); ++i) relu[i] = v[i] > 0 ? v[i] : 0;
  CHECK_VALUES("relu's own elements", download(o), relu, TFL_DTYPE_FLOAT32);
  // neg stays in bounds: nothing to report.
  CHECK_OK(launch("aten::neg", {tv(x.t())}, {o.t()}));
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK_OK(dfree(0, o.base));

  // Writes no kernel made: through a host mapping, past the end and before the start.
  void* p = alloc_ok(0, 100);
  TFL_Memory_MapToHost_Args m{TFL_Memory_MapToHost_Args_STRUCT_SIZE, 0, p, 100, nullptr};
  CHECK_OK(g_api->memory->Memory_MapToHost(&m));
  static_cast<char*>(m.host_ptr)[100] = 0;
  CHECK_ERR(stream_sync(g_streams[0]), TFL_ERR_INTERNAL, "Stream_Synchronize", "found when synchronizing",
            "the guard region after the 100-byte allocation", "at byte 100");
  CHECK_OK(device_sync(0));
  static_cast<char*>(m.host_ptr)[-1] = 0;
  CHECK_ERR(dfree(0, p), TFL_ERR_INTERNAL, "Memory_Free", "found when the memory was freed",
            "the guard region before the 100-byte allocation", "1 bytes before its start");
  CHECK_ERR(dfree(0, p), TFL_ERR_INVALID_ARGUMENT, "no allocation");  // the free itself happened
  return report();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = open_plugin(argc, argv, "contract_check");
  if (mode.empty()) return 2;
  if (mode == "all") return mode_all();
  if (mode == "guards") return mode_guards();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
