// dnnl_conv.h: convolution primitives from oneDNN, made once per geometry
// and layout (dnnl_support.h). A batch splits into equal sub-batches, one per
// pool thread.
#include "dnnl_conv.h"

#include <algorithm>
#include <cstring>

#include "../../thread_pool.h"
#include "dnnl_support.h"
#include "launch.h"

namespace flemu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

memory::desc user_md(const Strided& t) {
  return memory::desc(Dims(t.sizes, t.sizes + t.ndim), memory::data_type::f32, Dims(t.strides, t.strides + t.ndim));
}

// The weight as oneDNN sees a grouped one: [G, O/G, I/G, k...].
memory::desc user_weight_md(const Strided& w, int64_t groups) {
  if (groups == 1) return user_md(w);
  const int64_t per = w.sizes[0] / groups;
  Dims d{groups, per}, s{w.strides[0] * per, w.strides[0]};
  for (int32_t i = 1; i < w.ndim; ++i) {
    d.push_back(w.sizes[i]);
    s.push_back(w.strides[i]);
  }
  return memory::desc(d, memory::data_type::f32, s);
}

memory::desc any_md(const memory::desc& md) {
  return memory::desc(md.get_dims(), memory::data_type::f32, memory::format_tag::any);
}

memory::desc dense_vector_md(int64_t n) { return memory::desc({n}, memory::data_type::f32, memory::format_tag::a); }

// A row-major dense descriptor of md's dims.
memory::desc dense_md(const memory::desc& md) {
  const Dims dims = md.get_dims();
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return memory::desc(dims, memory::data_type::f32, strides);
}

// One operand of a primitive: the caller's layout, the primitive's, and the
// reorder between them (towards the primitive for an input, back for an
// output) when they differ.
struct Operand {
  memory::desc user, prim;
  bool reorder = false;
  dnnl::reorder move;
  memory::desc move_scratch;
};

Operand make_operand(const memory::desc& user, const memory::desc& prim, bool input) {
  Operand o;
  o.user = user;
  o.prim = prim;
  o.reorder = user != prim;
  if (o.reorder) {
    const auto attr = user_scratchpad();
    const auto pd = input ? dnnl::reorder::primitive_desc(dnnl_engine(), user, dnnl_engine(), prim, attr)
                          : dnnl::reorder::primitive_desc(dnnl_engine(), prim, dnnl_engine(), user, attr);
    o.move = dnnl::reorder(pd);
    o.move_scratch = pd.scratchpad_desc();
  }
  return o;
}

// How a call splits over the pool: `chunks` sub-batches of `per` samples.
struct Split {
  int64_t chunks = 1, per = 0;
};

Split split_batch(int64_t batch, int64_t macs) {
  const int64_t threads = ThreadPool::instance().parallelism();
  if (macs >= (int64_t{1} << 20))
    for (int64_t c = std::min(threads, batch); c > 1; --c)
      if (batch % c == 0) return {c, batch / c};
  return {1, batch};
}

// Multiply-accumulates of a convolution: one per output element and weight
// element of its group.
int64_t conv_macs(const Strided& dst, const Strided& w) { return dst.numel * (w.numel / w.sizes[0]); }

// A tensor's first `per` samples, starting at sample n0 (for a sub-batch).
Strided samples(const Strided& t, int64_t n0, int64_t per) {
  Strided s = t;
  s.data += n0 * t.strides[0] * static_cast<int64_t>(sizeof(float));
  s.sizes[0] = per;
  s.numel = t.numel / t.sizes[0] * per;
  return s;
}

// The primitive-side memory of an input, reordered from the caller's data when needed.
memory input(const Exec& x, const Operand& o, const void* data, DnnlSlot slot) {
  memory user(o.user, dnnl_engine(), const_cast<void*>(data));
  if (!o.reorder) return user;
  memory prim(o.prim, dnnl_engine(), x.buffers.at(slot, o.prim.get_size()));
  o.move.execute(x.stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, prim},
                            {DNNL_ARG_SCRATCHPAD, scratch_memory(x, o.move_scratch, kMoveScratch)}});
  return prim;
}

// Where the primitive writes an output: the caller's data, or a buffer that finish() reorders back.
memory output(const Exec& x, const Operand& o, void* data, DnnlSlot slot) {
  if (!o.reorder) return memory(o.user, dnnl_engine(), data);
  return memory(o.prim, dnnl_engine(), x.buffers.at(slot, o.prim.get_size()));
}

void finish(const Exec& x, const Operand& o, const memory& prim, void* data) {
  if (!o.reorder) return;
  o.move.execute(x.stream, {{DNNL_ARG_FROM, prim}, {DNNL_ARG_TO, memory(o.user, dnnl_engine(), data)},
                            {DNNL_ARG_SCRATCHPAD, scratch_memory(x, o.move_scratch, kMoveScratch)}});
}

struct Geometry {
  Dims strides, dilates, pad_l, pad_r;
};

Geometry geometry(const ConvParams& p, const Strided& src, const Strided& w, const Strided& dst) {
  Geometry g;
  for (int32_t d = 0; d < p.nd; ++d) {
    const int64_t k = w.sizes[2 + d], in = src.sizes[2 + d], out = dst.sizes[2 + d];
    g.strides.push_back(p.stride[d]);
    g.dilates.push_back(p.dil[d] - 1);
    g.pad_l.push_back(p.pad[d]);
    // PyTorch pads symmetrically; the right side is what the output size leaves.
    g.pad_r.push_back((out - 1) * p.stride[d] + (k - 1) * p.dil[d] + 1 - in - p.pad[d]);
  }
  return g;
}

struct Forward {
  dnnl::convolution_forward conv;
  memory::desc scratch;
  Operand src, w, bias, dst;
  bool has_bias = false;
};

// With partial sums (a split batch), each sub-batch writes its weight and
// bias gradients dense into its own buffer; their sum is then stored by
// store_dw and store_db.
struct Backward {
  bool data = false, weights = false, bias = false, partial = false;
  dnnl::convolution_backward_data conv_data;
  dnnl::convolution_backward_weights conv_weights;
  memory::desc scratch_data, scratch_weights;
  Operand dd_data, w, dsrc;           // backward data
  Operand dd_weights, src, dw, db;    // backward weights
  Operand store_dw, store_db;         // partial sums: dense -> the caller's layout
};

void add_params(Key& key, const ConvParams& p) {
  key.add(int64_t{p.nd});
  key.add(p.groups);
  for (int32_t d = 0; d < p.nd; ++d) {
    key.add(p.stride[d]);
    key.add(p.pad[d]);
    key.add(p.dil[d]);
  }
}

bool usable(const ConvParams& p, std::initializer_list<const Strided*> tensors) {
  if (!kernel_settings().dnnl || p.nd < 1 || p.nd > 3) return false;
  for (const Strided* t : tensors)
    if (t && (t->dtype != TFL_DTYPE_FLOAT32 || t->numel == 0)) return false;
  return true;
}

Forward make_forward(const ConvParams& p, const Strided& src, const Strided& w, const Strided* bias,
                     const Strided& dst) {
  const Geometry g = geometry(p, src, w, dst);
  const memory::desc s = user_md(src), wt = user_weight_md(w, p.groups), d = user_md(dst);
  const memory::desc b = bias ? dense_vector_md(bias->sizes[0]) : memory::desc();
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl_engine(), dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any_md(s), any_md(wt), b,
      any_md(d), g.strides, g.dilates, g.pad_l, g.pad_r, user_scratchpad());
  Forward f;
  f.conv = dnnl::convolution_forward(pd);
  f.scratch = pd.scratchpad_desc();
  f.src = make_operand(s, pd.src_desc(), true);
  f.w = make_operand(wt, pd.weights_desc(), true);
  f.dst = make_operand(d, pd.dst_desc(), false);
  if (bias) {
    f.has_bias = true;
    f.bias = make_operand(user_md(*bias), pd.bias_desc(), true);
  }
  return f;
}

Backward make_backward(const ConvParams& p, const Strided& diff_dst, const Strided& src, const Strided& w,
                       const Strided* diff_src, const Strided* diff_w, const Strided* diff_b, bool partial) {
  const Geometry g = geometry(p, src, w, diff_dst);
  const memory::desc s = user_md(src), wt = user_weight_md(w, p.groups), dd = user_md(diff_dst);
  const memory::desc b = diff_b ? dense_vector_md(diff_b->sizes[0]) : memory::desc();
  const dnnl::convolution_forward::primitive_desc hint(
      dnnl_engine(), dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any_md(s), any_md(wt), b,
      any_md(dd), g.strides, g.dilates, g.pad_l, g.pad_r, user_scratchpad());
  Backward bw;
  if (diff_src) {
    const dnnl::convolution_backward_data::primitive_desc pd(dnnl_engine(), dnnl::algorithm::convolution_direct,
                                                             any_md(user_md(*diff_src)), any_md(wt), any_md(dd),
                                                             g.strides, g.dilates, g.pad_l, g.pad_r, hint,
                                                             user_scratchpad());
    bw.data = true;
    bw.conv_data = dnnl::convolution_backward_data(pd);
    bw.scratch_data = pd.scratchpad_desc();
    bw.dd_data = make_operand(dd, pd.diff_dst_desc(), true);
    bw.w = make_operand(wt, pd.weights_desc(), true);
    bw.dsrc = make_operand(user_md(*diff_src), pd.diff_src_desc(), false);
  }
  if (diff_w) {
    const memory::desc dw = user_weight_md(*diff_w, p.groups);
    const dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl_engine(), dnnl::algorithm::convolution_direct, any_md(s), any_md(dw), b, any_md(dd), g.strides, g.dilates,
        g.pad_l, g.pad_r, hint, user_scratchpad());
    bw.weights = true;
    bw.partial = partial;
    bw.conv_weights = dnnl::convolution_backward_weights(pd);
    bw.scratch_weights = pd.scratchpad_desc();
    bw.dd_weights = make_operand(dd, pd.diff_dst_desc(), true);
    bw.src = make_operand(s, pd.src_desc(), true);
    bw.dw = make_operand(partial ? dense_md(dw) : dw, pd.diff_weights_desc(), false);
    if (partial) bw.store_dw = make_operand(dense_md(dw), dw, true);
    if (diff_b) {
      const memory::desc db = user_md(*diff_b);
      bw.bias = true;
      bw.db = make_operand(partial ? dense_md(db) : db, pd.diff_bias_desc(), false);
      if (partial) bw.store_db = make_operand(dense_md(db), db, true);
    }
  }
  return bw;
}

}  // namespace

bool dnnl_conv_forward(const ConvParams& p, const Strided& src, const Strided& w, const Strided* bias,
                       const Strided& dst) {
  if (!usable(p, {&src, &w, bias, &dst})) return false;
  const Split sp = split_batch(src.sizes[0], conv_macs(dst, w));
  const Strided src0 = samples(src, 0, sp.per), dst0 = samples(dst, 0, sp.per);
  // First: primitives are made for the thread count of the thread that makes them.
  const Exec x = thread_exec();
  static Cache<Forward> cache;
  Key key('f');
  add_params(key, p);
  for (const Strided* t : {&src0, &w, bias, &dst0}) key.add(t);
  const auto f = cache.get(key.str(), [&] { return make_forward(p, src0, w, bias, dst0); });
  if (!f) return false;
  // Weights and bias are reordered once, on this thread, for every sub-batch.
  const memory wm = input(x, f->w, w.data, kWeight);
  const memory bm = f->has_bias ? input(x, f->bias, bias->data, kBias) : memory();
  x.stream.wait();
  auto run = [&](int64_t c) {
    const Exec y = thread_exec();
    const Strided s = samples(src, c * sp.per, sp.per), d = samples(dst, c * sp.per, sp.per);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, input(y, f->src, s.data, kSrc)},
                                         {DNNL_ARG_WEIGHTS, wm},
                                         {DNNL_ARG_SCRATCHPAD, scratch_memory(y, f->scratch, kScratch)}};
    if (f->has_bias) args.emplace(DNNL_ARG_BIAS, bm);
    const memory out = output(y, f->dst, d.data, kDst);
    args.emplace(DNNL_ARG_DST, out);
    f->conv.execute(y.stream, args);
    finish(y, f->dst, out, d.data);
    y.stream.wait();
  };
  if (sp.chunks > 1) ThreadPool::instance().parallel_for(sp.chunks, run);
  else run(0);
  return true;
}

bool dnnl_conv_backward(const ConvParams& p, const Strided& diff_dst, const Strided& src, const Strided& w,
                        const Strided* diff_src, const Strided* diff_w, const Strided* diff_b) {
  if (!diff_w) diff_b = nullptr;
  if (!diff_src && !diff_w) return false;
  if (!usable(p, {&diff_dst, &src, &w, diff_src, diff_w, diff_b})) return false;
  const Split sp = split_batch(src.sizes[0], conv_macs(diff_dst, w));
  const bool partial = diff_w && sp.chunks > 1;
  const Strided dd0 = samples(diff_dst, 0, sp.per), src0 = samples(src, 0, sp.per);
  const Strided ds0 = diff_src ? samples(*diff_src, 0, sp.per) : Strided{};
  const Exec x = thread_exec();  // before a primitive is made (see above)
  static Cache<Backward> cache;
  Key key('b');
  add_params(key, p);
  key.add(int64_t{partial});
  for (const Strided* t : {&dd0, &src0, &w, diff_src ? &ds0 : nullptr, diff_w, diff_b}) key.add(t);
  const auto b = cache.get(key.str(), [&] {
    return make_backward(p, dd0, src0, w, diff_src ? &ds0 : nullptr, diff_w, diff_b, partial);
  });
  if (!b) return false;
  const memory wm = b->data ? input(x, b->w, w.data, kWeight) : memory();
  x.stream.wait();
  // Partial sums, dense, one block per sub-batch: weights then bias.
  const int64_t w_numel = w.numel, b_numel = b->bias ? diff_b->numel : 0, block = w_numel + b_numel;
  float* partials =
      partial ? static_cast<float*>(x.buffers.at(kPartials, static_cast<size_t>(sp.chunks * block) * sizeof(float)))
              : nullptr;
  auto run = [&](int64_t c) {
    const Exec y = thread_exec();
    const Strided dd = samples(diff_dst, c * sp.per, sp.per), s = samples(src, c * sp.per, sp.per);
    memory dd_data;
    if (b->data) {
      const Strided ds = samples(*diff_src, c * sp.per, sp.per);
      dd_data = input(y, b->dd_data, dd.data, kDiffDstData);
      const memory out = output(y, b->dsrc, ds.data, kDst);
      b->conv_data.execute(y.stream, {{DNNL_ARG_DIFF_DST, dd_data},
                                      {DNNL_ARG_WEIGHTS, wm},
                                      {DNNL_ARG_DIFF_SRC, out},
                                      {DNNL_ARG_SCRATCHPAD, scratch_memory(y, b->scratch_data, kScratch)}});
      finish(y, b->dsrc, out, ds.data);
    }
    if (b->weights) {
      // diff_dst is reordered once when both primitives want the same layout.
      const bool shared = b->data && b->dd_data.reorder && b->dd_weights.reorder && b->dd_data.prim == b->dd_weights.prim;
      const memory ddw = shared ? dd_data : input(y, b->dd_weights, dd.data, kDiffDstWeights);
      void* dw_data = partial ? static_cast<void*>(partials + c * block) : diff_w->data;
      void* db_data = partial ? static_cast<void*>(partials + c * block + w_numel) : (b->bias ? diff_b->data : nullptr);
      const memory dw = output(y, b->dw, dw_data, kDiffWeight);
      std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, ddw},
                                           {DNNL_ARG_SRC, input(y, b->src, s.data, kSrc)},
                                           {DNNL_ARG_DIFF_WEIGHTS, dw},
                                           {DNNL_ARG_SCRATCHPAD, scratch_memory(y, b->scratch_weights, kScratch)}};
      memory db;
      if (b->bias) {
        db = output(y, b->db, db_data, kDiffBias);
        args.emplace(DNNL_ARG_DIFF_BIAS, db);
      }
      b->conv_weights.execute(y.stream, args);
      finish(y, b->dw, dw, dw_data);
      if (b->bias) finish(y, b->db, db, db_data);
    }
    y.stream.wait();
  };
  if (sp.chunks > 1) ThreadPool::instance().parallel_for(sp.chunks, run);
  else run(0);
  if (partial) {
    // Sub-batches summed in order: the same result on every run.
    for (int64_t c = 1; c < sp.chunks; ++c)
      for (int64_t i = 0; i < block; ++i) partials[i] += partials[c * block + i];
    auto store = [&](const Operand& o, float* from, void* to) {
      if (!o.reorder) {
        std::memcpy(to, from, o.user.get_size());
        return;
      }
      o.move.execute(x.stream, {{DNNL_ARG_FROM, memory(o.user, dnnl_engine(), from)},
                                {DNNL_ARG_TO, memory(o.prim, dnnl_engine(), to)},
                                {DNNL_ARG_SCRATCHPAD, scratch_memory(x, o.move_scratch, kMoveScratch)}});
    };
    store(b->store_dw, partials, diff_w->data);
    if (b->bias) store(b->store_db, partials + w_numel, diff_b->data);
    x.stream.wait();
  }
  return true;
}

}  // namespace flemu
