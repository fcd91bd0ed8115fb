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

// A view of one part of a tensor: `len` entries of dim `dim` from `lo`.
Strided part_of(const Strided& t, int32_t dim, int64_t lo, int64_t len) {
  Strided s = t;
  s.data += lo * t.strides[dim] * static_cast<int64_t>(sizeof(float));
  s.numel = t.numel / t.sizes[dim] * len;
  s.sizes[dim] = len;
  return s;
}

// How one pass splits over the pool: `parts` pieces of `per` entries of its
// axis (the last piece `last`), one single-threaded oneDNN call each. The
// batch splits while the activations outweigh the weights (each part then
// reads all weights, reordered once); otherwise, or when the batch is
// smaller than the pool, the pass's channel axis splits in multiples of 16
// (each part reorders its own slice of the weights).
struct Split {
  bool batch = true;
  int64_t parts = 1, per = 0, last = 0;
  int64_t lo(int64_t i) const { return i * per; }
  int64_t len(int64_t i) const { return i == parts - 1 ? last : per; }
};

Split split_pass(int64_t batch, int64_t channels, const Strided& w, const Strided& activation, int64_t groups) {
  const int64_t threads = ThreadPool::instance().parallelism();
  Split sp;
  sp.per = sp.last = batch;
  // Multiply-accumulates: one per activation element and weight element of its group.
  const int64_t macs = activation.numel * (w.numel / w.sizes[0]);
  if (threads < 2 || macs < (int64_t{1} << 20)) return sp;
  const bool by_channels = (batch < threads || w.numel >= activation.numel) && groups == 1 && channels >= 32;
  if (!by_channels && batch < 2) return sp;
  sp.batch = !by_channels;
  const int64_t extent = sp.batch ? batch : channels;
  sp.per = part_size(extent, threads, sp.batch ? 1 : 16);
  sp.parts = (extent + sp.per - 1) / sp.per;
  sp.last = extent - (sp.parts - 1) * sp.per;
  return sp;
}

template <class Run>
void run_parts(const Split& sp, Run&& run) {
  if (sp.parts > 1) ThreadPool::instance().parallel_for(sp.parts, run);
  else run(0);
}

// The operand's reorder, in the direction it was made for.
void move(const Exec& x, const Operand& o, const memory& from, const memory& to) {
  o.move.execute(x.stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to},
                            {DNNL_ARG_SCRATCHPAD, scratch_memory(x, o.move_scratch, kMoveScratch)}});
}

// The primitive-side memory of an input, reordered from the caller's data when needed.
memory input(const Exec& x, const Operand& o, const void* data, DnnlSlot slot) {
  memory user(o.user, dnnl_engine(), const_cast<void*>(data));
  if (!o.reorder) return user;
  memory prim(o.prim, dnnl_engine(), x.buffers.at(slot, o.prim.get_size()));
  move(x, o, user, prim);
  return prim;
}

// Where the primitive writes an output: the caller's data, or a buffer that finish() reorders back.
memory output(const Exec& x, const Operand& o, void* data, DnnlSlot slot) {
  if (!o.reorder) return memory(o.user, dnnl_engine(), data);
  return memory(o.prim, dnnl_engine(), x.buffers.at(slot, o.prim.get_size()));
}

void finish(const Exec& x, const Operand& o, const memory& prim, void* data) {
  if (o.reorder) move(x, o, prim, memory(o.user, dnnl_engine(), data));
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

struct BackwardData {
  dnnl::convolution_backward_data conv;
  memory::desc scratch;
  Operand dd, w, dsrc;
};

// With partial sums (a split batch), each part writes its weight and bias
// gradients dense into its own buffer; their sum is then stored by store_dw
// and store_db.
struct BackwardWeights {
  dnnl::convolution_backward_weights conv;
  memory::desc scratch;
  bool bias = false, partial = false;
  Operand dd, src, dw, db;
  Operand store_dw, store_db;  // partial sums: dense -> the caller's layout
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

dnnl::convolution_forward::primitive_desc forward_pd(const ConvParams& p, const memory::desc& s,
                                                      const memory::desc& wt, const memory::desc& b,
                                                      const memory::desc& d, const Geometry& g) {
  return dnnl::convolution_forward::primitive_desc(dnnl_engine(), dnnl::prop_kind::forward_training,
                                                   dnnl::algorithm::convolution_direct, any_md(s), any_md(wt), b,
                                                   any_md(d), g.strides, g.dilates, g.pad_l, g.pad_r,
                                                   user_scratchpad());
}

Forward make_forward(const ConvParams& p, const Strided& src, const Strided& w, const Strided* bias,
                     const Strided& dst) {
  const memory::desc s = user_md(src), wt = user_weight_md(w, p.groups), d = user_md(dst);
  const memory::desc b = bias ? dense_vector_md(bias->sizes[0]) : memory::desc();
  const auto pd = forward_pd(p, s, wt, b, d, geometry(p, src, w, dst));
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

BackwardData make_backward_data(const ConvParams& p, const Strided& diff_dst, const Strided& w,
                                const Strided& diff_src) {
  const memory::desc ds = user_md(diff_src), wt = user_weight_md(w, p.groups), dd = user_md(diff_dst);
  const Geometry g = geometry(p, diff_src, w, diff_dst);
  const auto hint = forward_pd(p, ds, wt, memory::desc(), dd, g);
  const dnnl::convolution_backward_data::primitive_desc pd(dnnl_engine(), dnnl::algorithm::convolution_direct,
                                                           any_md(ds), any_md(wt), any_md(dd), g.strides,
                                                           g.dilates, g.pad_l, g.pad_r, hint, user_scratchpad());
  BackwardData bd;
  bd.conv = dnnl::convolution_backward_data(pd);
  bd.scratch = pd.scratchpad_desc();
  bd.dd = make_operand(dd, pd.diff_dst_desc(), true);
  bd.w = make_operand(wt, pd.weights_desc(), true);
  bd.dsrc = make_operand(ds, pd.diff_src_desc(), false);
  return bd;
}

BackwardWeights make_backward_weights(const ConvParams& p, const Strided& diff_dst, const Strided& src,
                                      const Strided& diff_w, const Strided* diff_b, bool partial) {
  const memory::desc s = user_md(src), dw = user_weight_md(diff_w, p.groups), dd = user_md(diff_dst);
  const memory::desc b = diff_b ? dense_vector_md(diff_b->sizes[0]) : memory::desc();
  const Geometry g = geometry(p, src, diff_w, diff_dst);
  const auto hint = forward_pd(p, s, dw, b, dd, g);
  const dnnl::convolution_backward_weights::primitive_desc pd(dnnl_engine(), dnnl::algorithm::convolution_direct,
                                                              any_md(s), any_md(dw), b, any_md(dd), g.strides,
                                                              g.dilates, g.pad_l, g.pad_r, hint, user_scratchpad());
  BackwardWeights bw;
  bw.conv = dnnl::convolution_backward_weights(pd);
  bw.scratch = pd.scratchpad_desc();
  bw.partial = partial;
  bw.dd = make_operand(dd, pd.diff_dst_desc(), true);
  bw.src = make_operand(s, pd.src_desc(), true);
  bw.dw = make_operand(partial ? dense_md(dw) : dw, pd.diff_weights_desc(), false);
  if (partial) bw.store_dw = make_operand(dense_md(dw), dw, true);
  if (diff_b) {
    const memory::desc db = user_md(*diff_b);
    bw.bias = true;
    bw.db = make_operand(partial ? dense_md(db) : db, pd.diff_bias_desc(), false);
    if (partial) bw.store_db = make_operand(dense_md(db), db, true);
  }
  return bw;
}

Key conv_key(char kind, const ConvParams& p, std::initializer_list<const Strided*> tensors, int64_t extra = 0) {
  Key key(kind);
  add_params(key, p);
  key.add(extra);
  for (const Strided* t : tensors) key.add(t);
  return key;
}

// The pass's two primitives (a full part and the last one), or null when
// oneDNN refuses either.
template <class Entry, class Make>
std::pair<std::shared_ptr<const Entry>, std::shared_ptr<const Entry>> part_primitives(Cache<Entry>& cache,
                                                                                    const Split& sp,
                                                                                    Make&& make) {
  auto full = make(cache, sp.per);
  auto last = sp.last == sp.per ? full : make(cache, sp.last);
  if (!full || !last) return {nullptr, nullptr};
  return {full, last};
}

bool backward_data(const ConvParams& p, const Strided& diff_dst, const Strided& w, const Strided& diff_src) {
  const Split sp = split_pass(diff_src.sizes[0], diff_src.sizes[1], w, diff_src, p.groups);
  // A part: samples of diff_dst and diff_src, or input channels of w and diff_src.
  auto views = [&](int64_t lo, int64_t len) {
    struct V {
      Strided dd, w, ds;
    };
    return sp.batch ? V{part_of(diff_dst, 0, lo, len), w, part_of(diff_src, 0, lo, len)}
                    : V{diff_dst, part_of(w, 1, lo, len), part_of(diff_src, 1, lo, len)};
  };
  static Cache<BackwardData> cache;
  const auto prims = part_primitives(cache, sp, [&](Cache<BackwardData>& c, int64_t len) {
    const auto v = views(0, len);
    return c.get(conv_key('d', p, {&v.dd, &v.w, &v.ds}).str(), [&] { return make_backward_data(p, v.dd, v.w, v.ds); });
  });
  const auto& full = prims.first;
  const auto& last = prims.second;
  if (!full) return false;
  const Exec x = thread_exec();
  const memory shared_w = sp.batch ? input(x, full->w, w.data, kWeight) : memory();
  run_parts(sp, [&](int64_t i) {
    const Exec y = thread_exec();
    const BackwardData& e = i == sp.parts - 1 ? *last : *full;
    const auto v = views(sp.lo(i), sp.len(i));
    const memory out = output(y, e.dsrc, v.ds.data, kDst);
    e.conv.execute(y.stream, {{DNNL_ARG_DIFF_DST, input(y, e.dd, v.dd.data, kDiffDstData)},
                              {DNNL_ARG_WEIGHTS, sp.batch ? shared_w : input(y, e.w, v.w.data, kWeight)},
                              {DNNL_ARG_DIFF_SRC, out},
                              {DNNL_ARG_SCRATCHPAD, scratch_memory(y, e.scratch, kScratch)}});
    finish(y, e.dsrc, out, v.ds.data);
    y.stream.wait();
  });
  return true;
}

bool backward_weights(const ConvParams& p, const Strided& diff_dst, const Strided& src, const Strided& diff_w,
                      const Strided* diff_b) {
  const Split sp = split_pass(src.sizes[0], diff_dst.sizes[1], diff_w, diff_dst, p.groups);
  const bool partial = sp.batch && sp.parts > 1;
  // A part: samples of diff_dst and src (a partial sum), or output channels
  // of diff_dst, diff_w and diff_b.
  auto views = [&](int64_t lo, int64_t len) {
    struct V {
      Strided dd, s, dw, db;
    };
    if (sp.batch) return V{part_of(diff_dst, 0, lo, len), part_of(src, 0, lo, len), diff_w, diff_b ? *diff_b : Strided{}};
    return V{part_of(diff_dst, 1, lo, len), src, part_of(diff_w, 0, lo, len),
             diff_b ? part_of(*diff_b, 0, lo, len) : Strided{}};
  };
  static Cache<BackwardWeights> cache;
  const auto prims = part_primitives(cache, sp, [&](Cache<BackwardWeights>& c, int64_t len) {
    const auto v = views(0, len);
    const Strided* db = diff_b ? &v.db : nullptr;
    return c.get(conv_key('w', p, {&v.dd, &v.s, &v.dw, db}, partial).str(),
                 [&] { return make_backward_weights(p, v.dd, v.s, v.dw, db, partial); });
  });
  const auto& full = prims.first;
  const auto& last = prims.second;
  if (!full) return false;
  const Exec x = thread_exec();
  // Partial sums, dense, one block per part: weights then bias.
  const int64_t w_numel = diff_w.numel, b_numel = diff_b ? diff_b->numel : 0, block = w_numel + b_numel;
  float* partials =
      partial ? static_cast<float*>(x.buffers.at(kPartials, static_cast<size_t>(sp.parts * block) * sizeof(float)))
              : nullptr;
  run_parts(sp, [&](int64_t i) {
    const Exec y = thread_exec();
    const BackwardWeights& e = i == sp.parts - 1 ? *last : *full;
    const auto v = views(sp.lo(i), sp.len(i));
    void* dw_data = partial ? static_cast<void*>(partials + i * block) : v.dw.data;
    void* db_data = partial ? static_cast<void*>(partials + i * block + w_numel) : v.db.data;
    const memory dw = output(y, e.dw, dw_data, kDiffWeight);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, input(y, e.dd, v.dd.data, kDiffDstWeights)},
                                         {DNNL_ARG_SRC, input(y, e.src, v.s.data, kSrc)},
                                         {DNNL_ARG_DIFF_WEIGHTS, dw},
                                         {DNNL_ARG_SCRATCHPAD, scratch_memory(y, e.scratch, kScratch)}};
    memory db;
    if (e.bias) {
      db = output(y, e.db, db_data, kDiffBias);
      args.emplace(DNNL_ARG_DIFF_BIAS, db);
    }
    e.conv.execute(y.stream, args);
    finish(y, e.dw, dw, dw_data);
    if (e.bias) finish(y, e.db, db, db_data);
    y.stream.wait();
  });
  if (partial) {
    // Parts summed in order: the same result on every run.
    for (int64_t i = 1; i < sp.parts; ++i)
      for (int64_t j = 0; j < block; ++j) partials[j] += partials[i * block + j];
    auto store = [&](const Operand& o, float* from, void* to) {
      if (o.reorder) move(x, o, memory(o.user, dnnl_engine(), from), memory(o.prim, dnnl_engine(), to));
      else std::memcpy(to, from, o.user.get_size());
    };
    store(full->store_dw, partials, diff_w.data);
    if (full->bias) store(full->store_db, partials + w_numel, diff_b->data);
    x.stream.wait();
  }
  return true;
}

}  // namespace

bool dnnl_conv_forward(const ConvParams& p, const Strided& src, const Strided& w, const Strided* bias,
                       const Strided& dst) {
  if (!usable(p, {&src, &w, bias, &dst})) return false;
  thread_exec();  // before a primitive is made (dnnl_support.h)
  const Split sp = split_pass(src.sizes[0], dst.sizes[1], w, dst, p.groups);
  // A part: samples of src and dst, or output channels of w, bias and dst.
  auto views = [&](int64_t lo, int64_t len) {
    struct V {
      Strided s, w, b, d;
    };
    if (sp.batch) return V{part_of(src, 0, lo, len), w, bias ? *bias : Strided{}, part_of(dst, 0, lo, len)};
    return V{src, part_of(w, 0, lo, len), bias ? part_of(*bias, 0, lo, len) : Strided{}, part_of(dst, 1, lo, len)};
  };
  static Cache<Forward> cache;
  const auto prims = part_primitives(cache, sp, [&](Cache<Forward>& c, int64_t len) {
    const auto v = views(0, len);
    const Strided* b = bias ? &v.b : nullptr;
    return c.get(conv_key('f', p, {&v.s, &v.w, b, &v.d}).str(), [&] { return make_forward(p, v.s, v.w, b, v.d); });
  });
  const auto& full = prims.first;
  const auto& last = prims.second;
  if (!full) return false;
  // Split by batch, the weights and bias are reordered once, here.
  const Exec x = thread_exec();
  const memory shared_w = sp.batch ? input(x, full->w, w.data, kWeight) : memory();
  const memory shared_b = sp.batch && bias ? input(x, full->bias, bias->data, kBias) : memory();
  run_parts(sp, [&](int64_t i) {
    const Exec y = thread_exec();
    const Forward& f = i == sp.parts - 1 ? *last : *full;
    const auto v = views(sp.lo(i), sp.len(i));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, input(y, f.src, v.s.data, kSrc)},
                                         {DNNL_ARG_WEIGHTS, sp.batch ? shared_w : input(y, f.w, v.w.data, kWeight)},
                                         {DNNL_ARG_SCRATCHPAD, scratch_memory(y, f.scratch, kScratch)}};
    if (f.has_bias) args.emplace(DNNL_ARG_BIAS, sp.batch ? shared_b : input(y, f.bias, v.b.data, kBias));
    const memory out = output(y, f.dst, v.d.data, kDst);
    args.emplace(DNNL_ARG_DST, out);
    f.conv.execute(y.stream, args);
    finish(y, f.dst, out, v.d.data);
    y.stream.wait();
  });
  return true;
}

bool dnnl_conv_backward(const ConvParams& p, const Strided& diff_dst, const Strided& src, const Strided& w,
                        const Strided* diff_src, const Strided* diff_w, const Strided* diff_b) {
  if (!diff_w) diff_b = nullptr;
  if (!diff_src && !diff_w) return false;
  if (!usable(p, {&diff_dst, &src, &w, diff_src, diff_w, diff_b})) return false;
  thread_exec();  // before a primitive is made (dnnl_support.h)
  if (diff_src && !backward_data(p, diff_dst, w, *diff_src)) return false;
  return !diff_w || backward_weights(p, diff_dst, src, *diff_w, diff_b);
}

}  // namespace flemu
