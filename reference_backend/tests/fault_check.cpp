// Drives each FLEMU_FAULT through the ABI and checks that it does what the
// catalogue says, and only that: every scenario shows the fault through a
// public API and runs neighbouring calls that must stay exact.
// Usage: fault_check LIBRARY FAULT (the fault is passed as the FLEMU_FAULT
// Initialize option), or fault_check LIBRARY list (the faults that have a
// scenario).
#include <atomic>

#include "abi_driver.h"

namespace {

TFL_Value sv(const char* s) {
  TFL_Value v{};
  v.tag = TFL_VALUE_STRING;
  v.v.str.data = s;
  v.v.str.size = std::strlen(s);
  return v;
}

// A launch with the RNG fields a host fills for TFL_KERNEL_RANDOM kernels.
TFL_Error* launch_random(const std::string& op, const std::vector<TFL_Value>& in, const TFL_Tensor* out,
                         uint64_t seed, uint64_t offset) {
  const TFL_KernelDesc* desc = g_kernels.at(op);
  TFL_KernelContext ctx{};
  ctx.struct_size = TFL_KernelContext_STRUCT_SIZE;
  ctx.device = 0;
  ctx.variant = TFL_VARIANT_INPLACE;
  ctx.stream = g_streams[0];
  ctx.op_name = op.c_str();
  ctx.rng_seed = seed;
  ctx.rng_offset = offset;
  ctx.rng_span = static_cast<uint64_t>(out->numel);
  const TFL_Tensor* outs[] = {out};
  TFL_Kernel_Args args{TFL_Kernel_Args_STRUCT_SIZE, &ctx, in.data(), in.size(), outs, 1};
  return desc->fn(&args);
}

// A view of `base` (which must outlive it) with other sizes/strides/offset.
Tensor view_of(const Tensor& base, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  Tensor v = base;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  v.offset = offset;
  return v;
}

void shows(const char* fault, const std::string& evidence) {
  std::printf("FLEMU_FAULT=%s shows: %s\n", fault, evidence.c_str());
}

LD max_rel_error(const std::vector<LD>& actual, const std::vector<LD>& expected) {
  LD worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const LD scale = std::max<LD>(std::fabs(expected[i]), 1e-30L);
    worst = std::max(worst, std::fabs(actual[i] - expected[i]) / scale);
  }
  return worst;
}

std::vector<LD> exact_binary(const std::vector<LD>& a, const std::vector<LD>& b, LD (*f)(LD, LD), int dtype) {
  std::vector<LD> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = round_to(dtype, f(a[i], b[i]));
  return out;
}

// ---------------------------------------------------------------------------
// Kernel faults
// ---------------------------------------------------------------------------

void add_ignores_alpha() {
  std::vector<LD> a, b;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {8}, &a), y = filled(TFL_DTYPE_FLOAT32, {8}, &b);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {8});
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(3)}, {o.t()}));
  CHECK_VALUES("add.Tensor(alpha=3) ignores alpha", download(o), exact_binary(a, b, [](LD p, LD q) { return p + q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
  shows("add_ignores_alpha", "add.Tensor(x, y, alpha=3) == x + y");
  // Confined: the Scalar overload and sub keep their alpha.
  CHECK_OK(launch("aten::add.Scalar", {tv(x.t()), dv(2.0), iv(3)}, {o.t()}));
  std::vector<LD> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, a[i] + 6);
  CHECK_VALUES("add.Scalar keeps alpha", download(o), want, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::sub.Tensor", {tv(x.t()), tv(y.t()), iv(3)}, {o.t()}));
  CHECK_VALUES("sub.Tensor keeps alpha", download(o), exact_binary(a, b, [](LD p, LD q) { return p - 3 * q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
}

void mul_ignores_strides() {
  std::vector<LD> storage, b;
  Tensor base = filled(TFL_DTYPE_FLOAT32, {3, 4}, &storage);
  Tensor xt = view_of(base, {4, 3}, {1, 4}, 0);  // the transpose
  Tensor y = filled(TFL_DTYPE_FLOAT32, {4, 3}, &b);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  CHECK_OK(launch("aten::mul.Tensor", {tv(xt.t()), tv(y.t())}, {o.t()}));
  // Read as dense, the transpose is just the storage in order.
  CHECK_VALUES("mul.Tensor of a transpose reads its storage in order", download(o),
               exact_binary(storage, b, [](LD p, LD q) { return p * q; }, TFL_DTYPE_FLOAT32), TFL_DTYPE_FLOAT32);
  shows("mul_ignores_strides", "mul(x.t(), y) == x.flatten() * y");
  // Confined: dense mul and add of the transpose are exact.
  Tensor x = view_of(base, {3, 4}, {4, 1}, 0);
  std::vector<LD> c;
  Tensor z = filled(TFL_DTYPE_FLOAT32, {3, 4}, &c), o2 = make_tensor(TFL_DTYPE_FLOAT32, {3, 4});
  CHECK_OK(launch("aten::mul.Tensor", {tv(x.t()), tv(z.t())}, {o2.t()}));
  CHECK_VALUES("dense mul", download(o2), exact_binary(storage, c, [](LD p, LD q) { return p * q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::add.Tensor", {tv(xt.t()), tv(y.t()), iv(1)}, {o.t()}));
  std::vector<LD> want(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = round_to(TFL_DTYPE_FLOAT32, storage[j * 4 + i] + b[i * 3 + j]);
  CHECK_VALUES("add of a transpose", download(o), want, TFL_DTYPE_FLOAT32);
}

void exp_ignores_offset() {
  std::vector<LD> storage(16);
  Tensor base = make_tensor(TFL_DTYPE_FLOAT32, {16});
  for (int i = 0; i < 16; ++i) storage[i] = 0.1L * i - 0.5L;
  storage = upload(base, storage);
  Tensor slice = view_of(base, {8}, {1}, 4);  // elements 4..11
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {8});
  CHECK_OK(launch("aten::exp", {tv(slice.t())}, {o.t()}));
  std::vector<LD> want(8), right(8);
  for (int i = 0; i < 8; ++i) {
    want[i] = round_to(TFL_DTYPE_FLOAT32, std::exp(storage[i]));
    right[i] = round_to(TFL_DTYPE_FLOAT32, std::exp(storage[i + 4]));
  }
  CHECK_VALUES("exp of x[4:12] reads x[0:8]", download(o), want, TFL_DTYPE_FLOAT32);
  shows("exp_ignores_offset", "exp(x[4:12]) == exp(x[0:8])");
  // Confined: log of the slice and exp without an offset are exact.
  Tensor head = view_of(base, {8}, {1}, 0);
  CHECK_OK(launch("aten::exp", {tv(head.t())}, {o.t()}));
  CHECK_VALUES("exp without offset", download(o), want, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::neg", {tv(slice.t())}, {o.t()}));
  for (int i = 0; i < 8; ++i) right[i] = -storage[i + 4];
  CHECK_VALUES("neg of the slice", download(o), right, TFL_DTYPE_FLOAT32);
}

void sub_broadcast_wrong() {
  std::vector<LD> a, row;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {4, 3}, &a);
  // A row of 3 inside a buffer of 12, so that the misread stays in bounds.
  Tensor buffer = filled(TFL_DTYPE_FLOAT32, {12}, &row);
  Tensor expanded = view_of(buffer, {4, 3}, {0, 1}, 0);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {4, 3});
  CHECK_OK(launch("aten::sub.Tensor", {tv(x.t()), tv(expanded.t()), iv(1)}, {o.t()}));
  CHECK_VALUES("sub of an expanded row reads it as a dense [4, 3]", download(o),
               exact_binary(a, row, [](LD p, LD q) { return p - q; }, TFL_DTYPE_FLOAT32), TFL_DTYPE_FLOAT32);
  shows("sub_broadcast_wrong", "sub(x, row.expand(4, 3)) reads 12 elements where 3 repeat");
  // Confined: add and mul broadcast correctly, sub of a dense operand is exact.
  std::vector<LD> want(12);
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(expanded.t()), iv(1)}, {o.t()}));
  for (int i = 0; i < 12; ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, a[i] + row[i % 3]);
  CHECK_VALUES("add broadcasts", download(o), want, TFL_DTYPE_FLOAT32);
  Tensor dense = view_of(buffer, {4, 3}, {3, 1}, 0);
  CHECK_OK(launch("aten::sub.Tensor", {tv(x.t()), tv(dense.t()), iv(1)}, {o.t()}));
  CHECK_VALUES("dense sub", download(o), exact_binary(a, row, [](LD p, LD q) { return p - q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
}

void mul_out_ignored() {
  std::vector<LD> a, b;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {8}, &a), y = filled(TFL_DTYPE_FLOAT32, {8}, &b);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {8});
  fill_f32(o, 7.0);
  CHECK_OK(launch("aten::mul.Tensor", {tv(x.t()), tv(y.t())}, {o.t()}, 0, TFL_VARIANT_OUT));
  CHECK_VALUES("mul(out=) leaves out as it was", download(o), std::vector<LD>(8, 7.0L), TFL_DTYPE_FLOAT32);
  shows("mul_out_ignored", "mul(x, y, out=o) succeeds and o keeps its old values");
  // Confined: the functional and in-place variants compute.
  const auto prod = exact_binary(a, b, [](LD p, LD q) { return p * q; }, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::mul.Tensor", {tv(x.t()), tv(y.t())}, {o.t()}));
  CHECK_VALUES("functional mul", download(o), prod, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::mul.Tensor", {tv(x.t()), tv(y.t())}, {x.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_VALUES("in-place mul", download(x), prod, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::add.Tensor", {tv(y.t()), tv(y.t()), iv(1)}, {o.t()}, 0, TFL_VARIANT_OUT));
  CHECK_VALUES("add(out=)", download(o), exact_binary(b, b, [](LD p, LD q) { return p + q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
}

void add_inplace_aliasing() {
  std::vector<LD> a, b;
  Tensor x = filled(TFL_DTYPE_FLOAT32, {64}, &a), y = filled(TFL_DTYPE_FLOAT32, {64}, &b);
  const auto sum = exact_binary(a, b, [](LD p, LD q) { return p + 2 * q; }, TFL_DTYPE_FLOAT32);
  // The in-place variant into a separate buffer: no aliasing, exact.
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {64});
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(2)}, {o.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_VALUES("in-place kernel, separate output", download(o), sum, TFL_DTYPE_FLOAT32);
  // Output aliasing self: self is overwritten with 2 * other before it is read.
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(2)}, {x.t()}, 0, TFL_VARIANT_INPLACE));
  std::vector<LD> want(64);
  for (int i = 0; i < 64; ++i) want[i] = round_to(TFL_DTYPE_FLOAT32, 4 * b[i]);
  CHECK_VALUES("x.add_(y, alpha=2) gives 2 * (2 * y)", download(x), want, TFL_DTYPE_FLOAT32);
  shows("add_inplace_aliasing", "x.add_(y, alpha=2) == 4 * y; into another buffer the kernel is exact");
  // Confined: functional add and in-place sub are exact.
  upload(x, a);
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(2)}, {o.t()}));
  CHECK_VALUES("functional add", download(o), sum, TFL_DTYPE_FLOAT32);
  CHECK_OK(launch("aten::sub.Tensor", {tv(x.t()), tv(y.t()), iv(2)}, {x.t()}, 0, TFL_VARIANT_INPLACE));
  CHECK_VALUES("in-place sub", download(x), exact_binary(a, b, [](LD p, LD q) { return p - 2 * q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
}

LD gelu_grad(LD x) {
  return 0.5L * (1 + std::erf(x / std::sqrt(2.0L))) + x * std::exp(-x * x / 2) / std::sqrt(2 * 3.14159265358979323846L);
}

void gelu_backward_scaled() {
  std::vector<LD> g, x;
  Tensor gt = filled(TFL_DTYPE_FLOAT64, {32}, &g), xt = filled(TFL_DTYPE_FLOAT64, {32}, &x);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT64, {32});
  CHECK_OK(launch("aten::gelu_backward", {tv(gt.t()), tv(xt.t()), sv("none")}, {o.t()}));
  std::vector<LD> want(32), right(32);
  for (int i = 0; i < 32; ++i) {
    right[i] = g[i] * gelu_grad(x[i]);
    want[i] = 1.02L * right[i];
  }
  check_values(__FILE__, __LINE__, "gelu_backward is 1.02 times the gradient", download(o), want, 1e-9, 1e-12);
  shows("gelu_backward_scaled", "gelu_backward(g, x) == 1.02 * g * gelu'(x)");
  // Confined: the forward and other backward kernels are exact.
  CHECK_OK(launch("aten::gelu", {tv(xt.t()), sv("none")}, {o.t()}));
  for (int i = 0; i < 32; ++i) right[i] = 0.5L * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0L)));
  check_values(__FILE__, __LINE__, "gelu", download(o), right, 1e-12, 1e-14);
  CHECK_OK(launch("aten::tanh_backward", {tv(gt.t()), tv(xt.t())}, {o.t()}));
  for (int i = 0; i < 32; ++i) right[i] = g[i] * (1 - x[i] * x[i]);
  check_values(__FILE__, __LINE__, "tanh_backward", download(o), right, 1e-12, 1e-12);
}

void softmax_backward_wrong() {
  const int rows = 6, cols = 5;
  std::vector<LD> g, y;
  Tensor gt = filled(TFL_DTYPE_FLOAT64, {rows, cols}, &g), yt = filled(TFL_DTYPE_FLOAT64, {rows, cols}, &y);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT64, {rows, cols});
  CHECK_OK(launch("aten::_softmax_backward_data", {tv(gt.t()), tv(yt.t()), iv(1), stype(TFL_DTYPE_FLOAT64)}, {o.t()}));
  std::vector<LD> want(rows * cols);
  for (int r = 0; r < rows; ++r) {
    LD dot = 0;
    for (int c = 0; c < cols; ++c) dot += g[r * cols + c] * y[r * cols + c];
    if (r % 3 == 0) dot = 0;  // the dropped term
    for (int c = 0; c < cols; ++c) want[r * cols + c] = y[r * cols + c] * (g[r * cols + c] - dot);
  }
  check_values(__FILE__, __LINE__, "rows 0 and 3 lack the sum term, the others are exact", download(o), want, 1e-12, 1e-12);
  shows("softmax_backward_wrong", "_softmax_backward_data rows 0 and 3 of 6 are y * g");
  // Confined: log_softmax's backward is exact on every row.
  CHECK_OK(launch("aten::_log_softmax_backward_data", {tv(gt.t()), tv(yt.t()), iv(1), stype(TFL_DTYPE_FLOAT64)}, {o.t()}));
  for (int r = 0; r < rows; ++r) {
    LD total = 0;
    for (int c = 0; c < cols; ++c) total += g[r * cols + c];
    for (int c = 0; c < cols; ++c) want[r * cols + c] = g[r * cols + c] - std::exp(y[r * cols + c]) * total;
  }
  check_values(__FILE__, __LINE__, "_log_softmax_backward_data", download(o), want, 1e-12, 1e-12);
}

void fp64_computed_in_fp32() {
  std::vector<LD> a(16), b(16);
  Tensor x = make_tensor(TFL_DTYPE_FLOAT64, {16}), y = make_tensor(TFL_DTYPE_FLOAT64, {16});
  for (int i = 0; i < 16; ++i) {
    a[i] = 1.0L / (i + 3);  // no float32 represents these exactly
    b[i] = 1.0L / (i + 7);
  }
  a = upload(x, a);
  b = upload(y, b);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT64, {16});
  CHECK_OK(launch("aten::add.Tensor", {tv(x.t()), tv(y.t()), iv(1)}, {o.t()}));
  std::vector<LD> want(16);
  for (int i = 0; i < 16; ++i) want[i] = static_cast<double>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  check_values(__FILE__, __LINE__, "float64 add is float32 add, widened", download(o), want, 0, 0);
  CHECK(max_rel_error(download(o), exact_binary(a, b, [](LD p, LD q) { return p + q; }, TFL_DTYPE_FLOAT64)) > 1e-9,
        "float64 add should be off by float32 rounding");
  CHECK_OK(launch("aten::exp", {tv(x.t())}, {o.t()}));
  for (int i = 0; i < 16; ++i) want[i] = static_cast<double>(std::exp(static_cast<float>(a[i])));
  check_values(__FILE__, __LINE__, "float64 exp is float32 exp, widened", download(o), want, 2e-7, 0);
  shows("fp64_computed_in_fp32", "float64 add and exp carry float32 rounding errors (~1e-8)");
  // Confined: float64 reductions and GEMM, float32 arithmetic are exact.
  Tensor s = make_tensor(TFL_DTYPE_FLOAT64, {});
  CHECK_OK(launch("aten::sum.dim_IntList", {tv(x.t()), ilist({0}), bv(false), nonev()}, {s.t()}));
  LD total = 0;
  for (LD v : a) total += v;
  check_values(__FILE__, __LINE__, "float64 sum", download(s), {total}, 1e-15, 0);
  std::vector<LD> fa, fb;
  Tensor fx = filled(TFL_DTYPE_FLOAT32, {16}, &fa), fy = filled(TFL_DTYPE_FLOAT32, {16}, &fb);
  Tensor fo = make_tensor(TFL_DTYPE_FLOAT32, {16});
  CHECK_OK(launch("aten::mul.Tensor", {tv(fx.t()), tv(fy.t())}, {fo.t()}));
  CHECK_VALUES("float32 mul", download(fo), exact_binary(fa, fb, [](LD p, LD q) { return p * q; }, TFL_DTYPE_FLOAT32),
               TFL_DTYPE_FLOAT32);
}

void exp_low_precision() {
  std::vector<LD> v(4096);
  Tensor x = make_tensor(TFL_DTYPE_FLOAT32, {4096});
  for (int i = 0; i < 4096; ++i) v[i] = -10.0L + 20.0L * i / 4095;
  v = upload(x, v);
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {4096});
  CHECK_OK(launch("aten::exp", {tv(x.t())}, {o.t()}));
  std::vector<LD> exact(4096);
  for (int i = 0; i < 4096; ++i) exact[i] = std::exp(v[i]);
  const LD err = max_rel_error(download(o), exact);
  CHECK(err > 1e-5 && err < 2e-4, "relative error of the fast exp: ", static_cast<double>(err));
  shows("exp_low_precision", str("float32 exp relative error ", static_cast<double>(err)));
  // Confined: float64 exp and float32 log are exact.
  Tensor d = make_tensor(TFL_DTYPE_FLOAT64, {4096}), od = make_tensor(TFL_DTYPE_FLOAT64, {4096});
  upload(d, v);
  CHECK_OK(launch("aten::exp", {tv(d.t())}, {od.t()}));
  check_values(__FILE__, __LINE__, "float64 exp", download(od), exact, 1e-14, 0);
  CHECK_OK(launch("aten::sigmoid", {tv(x.t())}, {o.t()}));
  for (int i = 0; i < 4096; ++i) exact[i] = round_to(TFL_DTYPE_FLOAT32, 1 / (1 + std::exp(-v[i])));
  CHECK_VALUES("float32 sigmoid", download(o), exact, TFL_DTYPE_FLOAT32);
}

void sum_fp16_accumulator() {
  const int n = 4096;
  Tensor x = make_tensor(TFL_DTYPE_FLOAT32, {n});
  std::vector<LD> v = upload(x, std::vector<LD>(n, 0.1L));
  Tensor s = make_tensor(TFL_DTYPE_FLOAT32, {});
  CHECK_OK(launch("aten::sum.dim_IntList", {tv(x.t()), ilist({0}), bv(false), nonev()}, {s.t()}));
  LD exact = 0;
  for (LD e : v) exact += e;
  const LD got = download(s)[0];
  CHECK(std::fabs(got - exact) / exact > 1e-2, "sum of 4096 x 0.1 with a float16 accumulator: got ",
        static_cast<double>(got), ", exact ", static_cast<double>(exact));
  shows("sum_fp16_accumulator", str("sum(4096 x 0.1) = ", static_cast<double>(got), " instead of ", static_cast<double>(exact)));
  // Confined: mean, the full sum and float64 sums are exact.
  CHECK_OK(launch("aten::sum", {tv(x.t()), nonev()}, {s.t()}));
  check_values(__FILE__, __LINE__, "aten::sum", download(s), {exact}, 1e-6, 0);
  CHECK_OK(launch("aten::mean.dim", {tv(x.t()), ilist({0}), bv(false), nonev()}, {s.t()}));
  check_values(__FILE__, __LINE__, "mean.dim", download(s), {exact / n}, 1e-6, 0);
}

void mm_crash() {
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {4, 4}), o = make_tensor(TFL_DTYPE_FLOAT32, {4, 4});
  fill_f32(a, 1.0);
  CHECK_OK(launch("aten::addmm", {tv(o.t()), tv(a.t()), tv(a.t()), iv(0), iv(1)}, {o.t()}));
  CHECK_OK(stream_sync(g_streams[0]));
  std::printf("addmm ok, launching mm\n");
  std::fflush(stdout);
  TFL_Error* e = launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()});
  std::printf("still alive after mm: %s\n", e ? error_text(e).c_str() : "success");
}

void mm_hang() {
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {4, 4}), o = make_tensor(TFL_DTYPE_FLOAT32, {4, 4});
  fill_f32(a, 1.0);
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK_OK(launch("aten::mm", {tv(a.t()), tv(a.t())}, {o.t()}));  // the launch itself succeeds
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    TFL_Error* e = stream_sync(g_streams[0]);
    if (e) destroy(e);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(!returned.load(), "Stream_Synchronize returned although mm hangs");
  CHECK(!stream_idle(g_streams[0]), "the stream says it is idle although mm hangs");
  // Other streams keep working.
  TFL_Stream* other = stream_create(0);
  void* scratch = alloc_ok(0, 4096);
  CHECK_OK(memset_dev(0, scratch, 3, 4096, other));
  CHECK_OK(stream_sync(other));
  shows("mm_hang", "Stream_Synchronize after mm has not returned after 500 ms");
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  std::fflush(stdout);
  // The stream never drains: leave without shutting down (or joining the waiter).
  _exit(g_failures == 0 ? 0 : 1);
}

// ---------------------------------------------------------------------------
// Runtime faults
// ---------------------------------------------------------------------------

// Enqueues enough work to keep the stream busy for a while.
void keep_busy(TFL_Stream* s, void* scratch, size_t bytes) { busy(s, 0, scratch, bytes, 16); }

void event_early() {
  const size_t bytes = size_t{256} << 20;
  void* scratch = alloc_ok(0, bytes);
  TFL_Event* e = event_create(0, 0);
  keep_busy(g_streams[0], scratch, bytes);
  CHECK_OK(event_record(e, g_streams[0]));
  CHECK(event_query(e), "Event_Query should report completion at once");
  CHECK_OK(event_sync(e));
  CHECK(!stream_idle(g_streams[0]), "the work before the event should still be running");
  shows("event_early", "Event_Query and Event_Synchronize report completion while the stream is busy");
  // Confined: Stream_Synchronize waits.
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK(stream_idle(g_streams[0]), "Stream_Synchronize must wait");
  event_destroy(e);
  CHECK_OK(dfree(0, scratch));
}

void stream_sync_noop() {
  const size_t bytes = size_t{256} << 20;
  void* scratch = alloc_ok(0, bytes);
  keep_busy(g_streams[0], scratch, bytes);
  CHECK_OK(stream_sync(g_streams[0]));
  CHECK(!stream_idle(g_streams[0]), "Stream_Synchronize should return before the stream drains");
  CHECK_OK(device_sync(0));
  CHECK(!stream_idle(g_streams[0]), "Device_Synchronize should return before the stream drains");
  shows("stream_sync_noop", "Stream_Synchronize and Device_Synchronize return while the stream is busy");
  // Confined: events and blocking copies still wait.
  TFL_Event* e = event_create(0, 0);
  CHECK_OK(event_record(e, g_streams[0]));
  CHECK_OK(event_sync(e));
  CHECK(event_query(e), "Event_Synchronize must wait");
  keep_busy(g_streams[0], scratch, bytes);
  std::vector<uint8_t> host(16);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, host.data(), -1, scratch, 0, host.size(), g_streams[0], true));
  CHECK_EQ(int(host[0]), 15);  // the last memset's value
  event_destroy(e);
  CHECK_OK(dfree(0, scratch));
}

void free_leaks() {
  const uint64_t before = free_bytes(0);
  void* p = alloc_ok(0, size_t{1} << 20);
  const uint64_t during = free_bytes(0);
  CHECK(during < before, "allocating must lower free memory: ", before, " -> ", during);
  CHECK_OK(dfree(0, p));
  const uint64_t after = free_bytes(0);
  CHECK_EQ(after, during);
  shows("free_leaks", str("free memory ", before, " -> ", during, " -> ", after, " after Memory_Free"));
  // Confined: the pointer is gone for good (a second free is an error), allocation still works.
  CHECK_ERR(dfree(0, p), TFL_ERR_INVALID_ARGUMENT, "no allocation");
  void* q = alloc_ok(0, 4096);
  CHECK(q != p, "leaked memory must not be handed out again");
  CHECK_OK(dfree(0, q));
}

void memory_overreport() {
  TFL_DeviceProperties props{};
  props.struct_size = TFL_DeviceProperties_STRUCT_SIZE;
  TFL_Device_GetProperties_Args a{TFL_Device_GetProperties_Args_STRUCT_SIZE, 0, &props};
  CHECK_OK(g_api->device->Device_GetProperties(&a));
  CHECK_EQ(props.total_memory, 4 * g_env.memory);
  TFL_Memory_GetInfo_Args info{TFL_Memory_GetInfo_Args_STRUCT_SIZE, 0, 0, 0};
  CHECK_OK(g_api->memory->Memory_GetInfo(&info));
  CHECK_EQ(info.total_bytes, 4 * g_env.memory);
  CHECK(info.free_bytes <= g_env.memory, "free memory stays real: ", info.free_bytes);
  shows("memory_overreport", str("total_memory ", props.total_memory, " for a ", g_env.memory, "-byte device"));
  // Confined: the real capacity is what allocation gets.
  void* p = nullptr;
  CHECK_ERR(alloc(0, g_env.memory + 4096, &p), TFL_ERR_OUT_OF_MEMORY, "out of memory");
}

void oob_write() {
  std::vector<LD> v;
  Tensor buffer = make_tensor(TFL_DTYPE_FLOAT32, {12});  // 10 elements and room behind them
  Tensor x = view_of(buffer, {10}, {1}, 0);
  v = upload(x, random_values(TFL_DTYPE_FLOAT32, 10));
  Tensor o = make_tensor(TFL_DTYPE_FLOAT32, {12});
  Tensor out = view_of(o, {10}, {1}, 0);
  CHECK_OK(launch("aten::relu", {tv(x.t())}, {out.t()}));
  const auto bytes = read_buffer(o);
  float e10 = 0, e9 = 0;
  std::memcpy(&e9, bytes.data() + 36, 4);
  std::memcpy(&e10, bytes.data() + 40, 4);
  CHECK_EQ(e10, e9);
  CHECK_EQ(int(bytes[44]), int(kSentinel));
  shows("oob_write", "relu of 10 elements also wrote element 10 (a copy of element 9)");
  // Confined: neg stays in bounds.
  Tensor o2 = make_tensor(TFL_DTYPE_FLOAT32, {12});
  Tensor out2 = view_of(o2, {10}, {1}, 0);
  CHECK_OK(launch("aten::neg", {tv(x.t())}, {out2.t()}));
  check_untouched("neg", out2);
}

void uniform_range_wrong() {
  Tensor t = make_tensor(TFL_DTYPE_FLOAT64, {100000});
  CHECK_OK(launch_random("aten::uniform_", {tv(t.t()), dv(2.0), dv(4.0)}, t.t(), 7, 0));
  const auto v = download(t);
  const LD lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  CHECK(lo >= 2.0L && hi > 4.1L && hi < 4.2L, "uniform_(2, 4) drew from [", static_cast<double>(lo), ", ",
        static_cast<double>(hi), "]");
  shows("uniform_range_wrong", str("uniform_(2, 4) drew up to ", static_cast<double>(hi)));
  // Confined: normal_ keeps its parameters.
  CHECK_OK(launch_random("aten::normal_", {tv(t.t()), dv(3.0), dv(0.5)}, t.t(), 7, 0));
  const auto n = download(t);
  LD mean = 0, var = 0;
  for (LD x : n) mean += x / n.size();
  for (LD x : n) var += (x - mean) * (x - mean) / n.size();
  CHECK(std::fabs(mean - 3) < 0.01 && std::fabs(std::sqrt(var) - 0.5) < 0.01, "normal_(3, 0.5): mean ",
        static_cast<double>(mean), " std ", static_cast<double>(std::sqrt(var)));
}

void seed_ignored() {
  Tensor a = make_tensor(TFL_DTYPE_FLOAT32, {256}), b = make_tensor(TFL_DTYPE_FLOAT32, {256});
  CHECK_OK(launch_random("aten::uniform_", {tv(a.t()), dv(0.0), dv(1.0)}, a.t(), 42, 16));
  CHECK_OK(launch_random("aten::uniform_", {tv(b.t()), dv(0.0), dv(1.0)}, b.t(), 42, 16));
  CHECK(download(a) != download(b), "the same seed and offset must give different numbers under seed_ignored");
  shows("seed_ignored", "uniform_ twice with seed 42, offset 16 gives two different tensors");
  // Confined: the numbers are still uniform on [0, 1).
  const auto v = download(a);
  CHECK(*std::min_element(v.begin(), v.end()) >= 0 && *std::max_element(v.begin(), v.end()) < 1, "uniform range");
}

void peer_copy_corrupt() {
  if (g_env.devices < 2) {
    fail(__FILE__, __LINE__, "peer_copy_corrupt needs two devices");
    return;
  }
  std::vector<uint8_t> src_bytes(64);
  for (size_t i = 0; i < src_bytes.size(); ++i) src_bytes[i] = static_cast<uint8_t>(i * 7);
  void* src = alloc_ok(1, 64);
  void* dst = alloc_ok(0, 64);
  CHECK_OK(copy(TFL_COPY_HOST_TO_DEVICE, src, 1, src_bytes.data(), -1, 64, g_streams[1], true));
  CHECK_OK(copy(TFL_COPY_PEER, dst, 0, src, 1, 64, g_streams[1], true));
  std::vector<uint8_t> got(64);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, got.data(), -1, dst, 0, 64, g_streams[0], true));
  std::vector<uint8_t> want = src_bytes;
  want[63] ^= 1;
  CHECK(got == want, "a PEER copy should arrive with the lowest bit of its last byte flipped");
  // copy_ across devices does the same.
  std::vector<LD> v;
  Tensor remote = filled(TFL_DTYPE_INT32, {4}, &v, {}, 0, false, 1);
  CHECK_OK(stream_sync(g_streams[1]));
  Tensor local = make_tensor(TFL_DTYPE_INT32, {4});
  CHECK_OK(launch("aten::copy_", {tv(local.t()), tv(remote.t()), bv(false)}, {local.t()}, 0, TFL_VARIANT_INPLACE));
  std::vector<LD> flipped = v;
  flipped[3] = static_cast<LD>(static_cast<int32_t>(v[3]) ^ (1 << 24));  // little endian: the last byte is the top one
  CHECK_VALUES("copy_ from device 1", download(local), flipped, TFL_DTYPE_INT32);
  shows("peer_copy_corrupt", "PEER copies and copy_ across devices flip bit 0 of the last byte");
  // Confined: copies on one device and with the host are exact.
  void* same = alloc_ok(0, 64);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_DEVICE, same, 0, dst, 0, 64, g_streams[0], true));
  std::vector<uint8_t> back(64);
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, same, 0, 64, g_streams[0], true));
  CHECK(back == got, "a DEVICE_TO_DEVICE copy must be exact");
  CHECK_OK(copy(TFL_COPY_PEER, same, 0, dst, 0, 64, g_streams[0], true));  // PEER within one device
  CHECK_OK(copy(TFL_COPY_DEVICE_TO_HOST, back.data(), -1, same, 0, 64, g_streams[0], true));
  CHECK(back == got, "a PEER copy within one device must be exact");
}

struct Scenario {
  const char* fault;
  void (*run)();
};

const Scenario kScenarios[] = {
    {"add_ignores_alpha", add_ignores_alpha},
    {"mul_ignores_strides", mul_ignores_strides},
    {"exp_ignores_offset", exp_ignores_offset},
    {"sub_broadcast_wrong", sub_broadcast_wrong},
    {"mul_out_ignored", mul_out_ignored},
    {"add_inplace_aliasing", add_inplace_aliasing},
    {"gelu_backward_scaled", gelu_backward_scaled},
    {"softmax_backward_wrong", softmax_backward_wrong},
    {"fp64_computed_in_fp32", fp64_computed_in_fp32},
    {"exp_low_precision", exp_low_precision},
    {"sum_fp16_accumulator", sum_fp16_accumulator},
    {"mm_crash", mm_crash},
    {"mm_hang", mm_hang},
    {"event_early", event_early},
    {"stream_sync_noop", stream_sync_noop},
    {"free_leaks", free_leaks},
    {"memory_overreport", memory_overreport},
    {"oob_write", oob_write},
    {"uniform_range_wrong", uniform_range_wrong},
    {"seed_ignored", seed_ignored},
    {"peer_copy_corrupt", peer_copy_corrupt},
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = open_plugin(argc, argv, "fault_check");
  if (mode.empty()) return 2;
  if (mode == "list") {
    for (const Scenario& s : kScenarios) std::printf("%s\n", s.fault);
    return 0;
  }
  for (const Scenario& s : kScenarios) {
    if (mode != s.fault) continue;
    // The fault comes as the Initialize option; an environment that names another one is a mistake.
    const char* env = std::getenv("FLEMU_FAULT");
    if (env != nullptr && mode != env) {
      std::fprintf(stderr, "fault_check LIB %s runs with FLEMU_FAULT unset or =%s\n", s.fault, s.fault);
      return 2;
    }
    CHECK_OK(initialize(TFL_ABI_MAJOR, TFL_ABI_MINOR, {{"FLEMU_FAULT", s.fault}}));
    setup_streams();
    s.run();
    return report();
  }
  std::fprintf(stderr, "no scenario for fault '%s' (fault_check LIB list shows them)\n", mode.c_str());
  return 2;
}
