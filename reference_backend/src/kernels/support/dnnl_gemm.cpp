// dnnl_gemm.h: matmul primitives made once per shape, layout, alpha and beta
// (dnnl_support.h), on the caller's own layouts (no reorders).
#include "dnnl_gemm.h"

#include <algorithm>

#include "../../thread_pool.h"
#include "dnnl_support.h"
#include "launch.h"

namespace flemu {
namespace {

using dnnl::memory;

struct Gemm {
  dnnl::matmul matmul;
  memory::desc a, b, c, bias, scratch;
  bool scaled = false, biased = false;
};

// A [batch x rows x cols] operand (2-d when batch is 1): a size-1
// dimension's stride means nothing, and is given the value of a plain layout
// so oneDNN sees one.
memory::desc operand_md(int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
  if (rows == 1) rs = cs == 1 ? cols : 1;
  if (cols == 1) cs = rs == 1 ? rows : 1;
  if (batch == 1) return memory::desc({rows, cols}, memory::data_type::f32, {rs, cs});
  return memory::desc({batch, rows, cols}, memory::data_type::f32, {bs, rs, cs});
}

// One product's shape and layout: what a primitive is made for. A bias has
// its row and column strides; -1 for none.
struct Problem {
  int64_t batch, n, m, k, a_bs, a_rs, a_cs, b_bs, b_rs, b_cs, c_bs, ldc, bias_rs = -1, bias_cs = -1;
  bool biased() const { return bias_rs >= 0; }
};

// The bias as oneDNN takes it: size 1 along each broadcast (stride 0) dimension.
memory::desc bias_md(const Problem& p) {
  const int64_t rows = p.bias_rs == 0 ? 1 : p.n, cols = p.bias_cs == 0 ? 1 : p.m;
  return operand_md(1, rows, cols, 0, p.bias_rs, p.bias_cs);
}

Gemm make_gemm(const Problem& p, bool scaled, float beta) {
  Gemm g;
  g.a = operand_md(p.batch, p.n, p.k, p.a_bs, p.a_rs, p.a_cs);
  g.b = operand_md(p.batch, p.k, p.m, p.b_bs, p.b_rs, p.b_cs);
  g.c = operand_md(p.batch, p.n, p.m, p.c_bs, p.ldc, 1);
  g.scaled = scaled;
  g.biased = p.biased();
  if (g.biased) g.bias = bias_md(p);
  dnnl::primitive_attr attr = user_scratchpad();
  if (scaled) attr.set_scales_mask(DNNL_ARG_SRC, 0);
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const auto pd = g.biased ? dnnl::matmul::primitive_desc(dnnl_engine(), g.a, g.b, g.bias, g.c, attr)
                           : dnnl::matmul::primitive_desc(dnnl_engine(), g.a, g.b, g.c, attr);
  g.matmul = dnnl::matmul(pd);
  g.scratch = pd.scratchpad_desc();
  return g;
}

std::shared_ptr<const Gemm> primitive(const Problem& p, bool scaled, float beta) {
  static Cache<Gemm> cache;
  Key key('g');
  for (int64_t v : {p.batch, p.n, p.m, p.k, p.a_bs, p.a_rs, p.a_cs, p.b_bs, p.b_rs, p.b_cs, p.c_bs, p.ldc,
                    p.bias_rs, p.bias_cs, int64_t{scaled}})
    key.add(v);
  key.add(static_cast<double>(beta));
  return cache.get(key.str(), [&] { return make_gemm(p, scaled, beta); });
}

// The memory objects through which one thread hands a cached primitive its
// operands, made once and pointed at each call's buffers. Made afresh per
// call (four memory objects and a std::unordered_map of them) they cost a
// 1x1x1 product 2.1 us in oneDNN, against 0.57 us reused.
struct Bound {
  std::shared_ptr<const Gemm> gemm;  // holds the primitive, so its address keys no other
  memory a, b, c, scratch, bias, scale;
};

Bound& bound(const std::shared_ptr<const Gemm>& g) {
  thread_local std::unordered_map<const Gemm*, Bound> map;
  auto it = map.find(g.get());
  if (it != map.end()) return it->second;
  if (map.size() >= 64) map.clear();
  const dnnl::engine& e = dnnl_engine();
  Bound m;
  m.gemm = g;
  m.a = memory(g->a, e, DNNL_MEMORY_NONE);
  m.b = memory(g->b, e, DNNL_MEMORY_NONE);
  m.c = memory(g->c, e, DNNL_MEMORY_NONE);
  m.scratch = memory(g->scratch, e, DNNL_MEMORY_NONE);
  if (g->biased) m.bias = memory(g->bias, e, DNNL_MEMORY_NONE);
  if (g->scaled) m.scale = memory(memory::desc({1}, memory::data_type::f32, memory::format_tag::a), e, DNNL_MEMORY_NONE);
  return map.emplace(g.get(), std::move(m)).first->second;
}

}  // namespace

bool dnnl_gemm_batched(int64_t batch, int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_bs,
                       int64_t a_rs, int64_t a_cs, const float* b, int64_t b_bs, int64_t b_rs, int64_t b_cs,
                       float beta, float* c, int64_t c_bs, int64_t ldc, const GemmBias* bias) {
  if (!kernel_settings().dnnl || batch <= 0 || n <= 0 || m <= 0 || k <= 0) return false;
  if (batch > 1 && (a_bs == 0 || b_bs == 0 || c_bs == 0)) return false;
  if (bias && (batch > 1 || beta != 0.0f || alpha != 1.0f || bias->rs < 0 || bias->cs < 0)) return false;
  if (n == 1) ldc = std::max(ldc, m);
  if (ldc < m) return false;
  // Parts, one per thread, of the batch or else of the output's longer side
  // (in whole multiples of 16); a wake-up of the pool costs tens of
  // microseconds, so only products that dwarf it are split.
  ThreadPool& pool = ThreadPool::instance();
  const int64_t threads = pool.parallelism();
  const bool split = threads >= 2 && batch * n * m * k >= (int64_t{1} << 21);
  enum { kBatch, kRows, kCols } axis = batch > 1 ? kBatch : (n >= m ? kRows : kCols);
  const int64_t extent = axis == kBatch ? batch : (axis == kRows ? n : m);
  int64_t part = extent;
  if (split)
    part = axis == kBatch ? part_size(batch, threads) : std::min(extent, part_size(extent, threads, 16));
  const int64_t parts = (extent + part - 1) / part, last = extent - (parts - 1) * part;

  thread_exec();  // before a primitive is made (dnnl_support.h)
  const bool scaled = alpha != 1.0f;
  auto problem = [&](int64_t len) {
    Problem p{batch, n, m, k, a_bs, a_rs, a_cs, b_bs, b_rs, b_cs, c_bs, ldc};
    if (bias) {
      p.bias_rs = bias->rs;
      p.bias_cs = bias->cs;
    }
    (axis == kBatch ? p.batch : (axis == kRows ? p.n : p.m)) = len;
    return p;
  };
  const auto full = primitive(problem(part), scaled, beta);
  const auto tail = last == part ? full : primitive(problem(last), scaled, beta);
  if (!full || !tail) return false;

  auto run = [&](int64_t i) {
    const Exec y = thread_exec();
    Bound& m = bound(i == parts - 1 ? tail : full);
    const Gemm& g = *m.gemm;
    const int64_t lo = i * part;
    const float* pa = a + (axis == kBatch ? lo * a_bs : (axis == kRows ? lo * a_rs : 0));
    const float* pb = b + (axis == kBatch ? lo * b_bs : (axis == kCols ? lo * b_cs : 0));
    float* pc = c + (axis == kBatch ? lo * c_bs : (axis == kRows ? lo * ldc : lo));
    const size_t scratch_bytes = g.scratch.get_size();
    dnnl_exec_arg_t args[6];
    int nargs = 0;
    auto pass = [&](int arg, memory& mem, const void* data) {
      dnnl::error::wrap_c_api(dnnl_memory_set_data_handle(mem.get(), const_cast<void*>(data)),
                              "could not point a memory object at an operand");
      args[nargs++] = {arg, mem.get()};
    };
    pass(DNNL_ARG_SRC, m.a, pa);
    pass(DNNL_ARG_WEIGHTS, m.b, pb);
    pass(DNNL_ARG_DST, m.c, pc);
    pass(DNNL_ARG_SCRATCHPAD, m.scratch, scratch_bytes ? y.buffers.at(kScratch, scratch_bytes) : nullptr);
    if (g.biased)
      pass(DNNL_ARG_BIAS, m.bias, bias->data + (axis == kRows ? lo * bias->rs : (axis == kCols ? lo * bias->cs : 0)));
    if (g.scaled) pass(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, m.scale, &alpha);
    dnnl::error::wrap_c_api(dnnl_primitive_execute(g.matmul.get(), y.stream.get(), nargs, args),
                            "could not execute a matmul");
    y.stream.wait();
  };
  if (parts > 1) pool.parallel_for(parts, run);
  else run(0);
  return true;
}

bool dnnl_gemm(int64_t n, int64_t m, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
               const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
               const GemmBias* bias) {
  return dnnl_gemm_batched(1, n, m, k, alpha, a, 0, a_rs, a_cs, b, 0, b_rs, b_cs, beta, c, 0, ldc, bias);
}

}  // namespace flemu
