// The torch.distributed backend ("tfl") over the plugin's collectives group.
//
// Why C++ and not a Python ProcessGroup: DDP's reducer calls the backend from
// the autograd engine's device thread for every gradient bucket, and reads
// the result through Work::getFuture(); a C++ c10d::Backend serves those
// calls without taking the GIL, and its enqueue cost (a few plugin calls)
// stays out of the bandwidth the benchmark measures.
//
// One communicator per process group, bound to one device: the device of
// init_process_group(device_id=...) or of the first tensor it sees. Its unique
// id travels through the group's c10d store. Each communicator has three
// plugin streams — collectives, sends, receives — so that a send and the
// matching receive posted by two ranks in opposite order cannot deadlock.
//
// An operation: record an event on the caller's current stream (the inputs
// are ready there), make the communicator's stream wait for it, enqueue the
// plugin call(s), record a completion event. A completion thread per stream
// synchronizes those events in order and completes the Work and its Future
// with the plugin's error, if any; the Work holds its tensors until then, so
// memory freed by the caller is not reused while the plugin still reads it.
//
// Below the Backend: group_communicator.cpp (the communicator's lifetime),
// collective_work.cpp (the Work, its events and the completion lanes) and
// collective_tensors.cpp (checks of c10d's tensor arguments, flat buffers,
// split sizes, reduce ops).
#include "bindings.h"
#include "collective_tensors.h"
#include "collective_work.h"
#include "group_communicator.h"
#include "kernel_abi.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <set>

namespace py = pybind11;

namespace torch_fl::bridge::dist {

namespace {

// ---------------------------------------------------------------------------
// The backend
// ---------------------------------------------------------------------------

class ProcessGroupTFL;
std::mutex g_live_mu;
std::set<ProcessGroupTFL*> g_live;

class ProcessGroupTFL final : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout) : c10d::Backend::Options(kBackendName, timeout) {}
  };

  ProcessGroupTFL(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size),
        options_(c10::make_intrusive<Options>(timeout)),
        comm_(std::move(store), rank, size, timeout) {
    collectives();  // fails early for a plugin without the group
    init();
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.insert(this);
  }

  ~ProcessGroupTFL() override {
    {
      std::lock_guard<std::mutex> lock(g_live_mu);
      g_live.erase(this);
    }
    comm_.close(false);
  }

  const std::string getBackendName() const override {
    return kBackendName;
  }

  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }

  void eagerConnectSingleDevice(at::Device device) override {
    if (device.type() == kType && device.has_index()) {
      comm_.get(device.index());
    }
  }

  c10d::ErrorType getError() override {
    return comm_.async_error();
  }

  void abort() override {
    comm_.close(true);
  }

  void shutdown() override {
    comm_.close(false);
  }

  // Process exit: abort when work is still in flight, else a clean destroy.
  void close_at_exit() {
    comm_.close(comm_.busy());
  }

  // --- collectives --------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    at::Tensor t = single(tensors, "broadcast");
    check_dense(t, "broadcast");
    const int32_t root = static_cast<int32_t>(opts.rootRank);
    return launch(c10d::OpType::BROADCAST, "broadcast", t.device().index(), kCollectiveLane, {t}, {t},
                  [&](const Comm& c, TFL_Stream* s) {
                    auto a = collective_args(c.handle, s, t, t, t.numel(), t.scalar_type());
                    a.root = root;
                    check_call(collectives().Comm_Broadcast(&a), "Comm_Broadcast");
                  });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    at::Tensor t = single(tensors, "allreduce");
    return allreduce_impl(std::vector<at::Tensor>{t}, opts.reduceOp, c10d::OpType::ALLREDUCE, "all_reduce");
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "tfl: allreduce_coalesced needs at least one tensor");
    return allreduce_impl(tensors, opts.reduceOp, c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    at::Tensor t = single(tensors, "reduce");
    check_dense(t, "reduce");
    // Every rank takes part in an all_reduce; off the root it writes into a
    // scratch buffer so that the caller's tensor stays as it was.
    at::Tensor out = opts.rootRank == rank_ ? t : at::empty_like(t);
    return reduce_into({t}, {out}, opts.reduceOp, c10d::OpType::REDUCE, "reduce");
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) override {
    at::Tensor in = single(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "tfl: allgather takes one output list (one device per process), got ",
                outputs.size());
    return allgather_list(outputs[0], in, c10d::OpType::ALLGATHER, "all_gather");
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    std::vector<at::Tensor> outs{output}, ins{input};
    return allgather_tensors(outs, ins, c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor");
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions&) override {
    return allgather_tensors(outputs, inputs, c10d::OpType::COALESCED, "all_gather_into_tensor_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) override {
    TORCH_CHECK(output_lists.size() == inputs.size(), "tfl: allgather_coalesced needs one output list per input, got ",
                output_lists.size(), " lists for ", inputs.size(), " inputs");
    TORCH_CHECK(!inputs.empty(), "tfl: allgather_coalesced needs at least one input");
    // Gather each input into a flat buffer, then copy out.
    std::vector<at::Tensor> flats, ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_same_sizes(output_lists[i], inputs[i], "allgather_coalesced");
      ins.push_back(contiguous_input(inputs[i], "allgather_coalesced"));
      flats.push_back(at::empty({static_cast<int64_t>(size_) * inputs[i].numel()}, inputs[i].options()));
    }
    std::vector<at::Tensor> outs;
    for (auto& l : output_lists) {
      outs.insert(outs.end(), l.begin(), l.end());
    }
    return launch(
        c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", ins[0].device().index(), kCollectiveLane,
        cat_vectors(ins, flats), outs,
        [&](const Comm& c, TFL_Stream* s) {
          for (size_t i = 0; i < ins.size(); ++i) {
            auto a = collective_args(c.handle, s, ins[i], flats[i], ins[i].numel(), ins[i].scalar_type());
            check_call(collectives().Comm_AllGather(&a), "Comm_AllGather");
          }
        },
        [&] {
          for (size_t i = 0; i < ins.size(); ++i) {
            copy_out_chunks(flats[i], output_lists[i]);
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    at::Tensor in = contiguous_input(single(inputs, "gather"), "gather");
    const int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
      TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                  "tfl: gather on the root needs one list of ", size_, " output tensors");
      outs = outputs[0];
      check_same_dtype(outs, in, "gather");
    }
    // An all_to_all in which only the root receives.
    std::vector<size_t> sc(size_, 0), so(size_, 0), rc(size_, 0), ro(size_, 0);
    sc[root] = static_cast<size_t>(in.numel());
    size_t total = 0;
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        rc[p] = static_cast<size_t>(outs[p].numel());
        ro[p] = total;
        total += rc[p];
      }
    }
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
    return launch(
        c10d::OpType::GATHER, "gather", in.device().index(), kCollectiveLane, {in, flat}, outs,
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c.handle, s, in, flat, sc, so, rc, ro); },
        [&] {
          if (rank_ == root) {
            copy_out_pieces(flat, outs, ro);
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    at::Tensor out = single(outputs, "scatter");
    const int root = static_cast<int>(opts.rootRank);
    std::vector<size_t> sc(size_, 0), so(size_, 0), rc(size_, 0), ro(size_, 0);
    rc[root] = static_cast<size_t>(out.numel());
    at::Tensor flat_in = at::empty({0}, out.options());
    if (rank_ == root) {
      TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                  "tfl: scatter on the root needs one list of ", size_, " input tensors");
      check_same_dtype(inputs[0], out, "scatter");
      size_t total = 0;
      for (int p = 0; p < size_; ++p) {
        sc[p] = static_cast<size_t>(inputs[0][p].numel());
        so[p] = total;
        total += sc[p];
      }
      flat_in = flatten_into(inputs[0], total, out.options());
    }
    at::Tensor dst = out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
    return launch(
        c10d::OpType::SCATTER, "scatter", out.device().index(), kCollectiveLane, {flat_in, dst}, {out},
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c.handle, s, flat_in, dst, sc, so, rc, ro); },
        dst.is_same(out) ? std::function<void()>() : [&] { out.copy_(dst); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    at::Tensor out = single(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                "tfl: reduce_scatter needs one list of ", size_, " input tensors");
    std::vector<at::Tensor>& ins = inputs[0];
    check_same_dtype(ins, out, "reduce_scatter");
    bool even = true;
    size_t total = 0;
    std::vector<size_t> offsets;
    for (auto& t : ins) {
      even = even && t.numel() == out.numel();
      offsets.push_back(total);
      total += static_cast<size_t>(t.numel());
    }
    at::Tensor flat = flatten_into(ins, total, out.options());
    if (even) {
      std::vector<at::Tensor> o{out}, i{flat};
      return reduce_scatter_tensors(o, i, opts.reduceOp, c10d::OpType::REDUCE_SCATTER, "reduce_scatter");
    }
    // Uneven pieces: reduce the whole concatenation, keep this rank's piece.
    TORCH_CHECK(ins[rank_].numel() == out.numel(), "tfl: reduce_scatter: this rank's output has ", out.numel(),
                " elements but its input piece ", ins[rank_].numel());
    auto work = reduce_into({flat}, {flat}, opts.reduceOp, c10d::OpType::REDUCE_SCATTER, "reduce_scatter",
                            [&, offset = offsets[rank_]] {
                              out.copy_(flat.narrow(0, static_cast<int64_t>(offset), out.numel()).view_as(out));
                            },
                            {out});
    return work;
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    std::vector<at::Tensor> o{output}, i{input};
    return reduce_scatter_tensors(o, i, opts.reduceOp, c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    // COALESCED, as for all_gather_into_tensor_coalesced: torch 2.11 has no
    // REDUCE_SCATTER_TENSOR_COALESCED.
    return reduce_scatter_tensors(outputs, inputs, opts.reduceOp, c10d::OpType::COALESCED,
                                  "reduce_scatter_tensor_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override {
    check_dense_contiguous(output, "all_to_all_single output");
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "tfl: all_to_all_single: input is ",
                input.scalar_type(), " but output is ", output.scalar_type());
    at::Tensor in = contiguous_input(input, "all_to_all_single");
    if (in.storage().is_alias_of(output.storage())) {
      in = in.clone();  // the plugin needs separate buffers
    }
    std::vector<size_t> sc, so, rc, ro;
    splits_to_counts(in, input_splits, "input", size_, &sc, &so);
    splits_to_counts(output, output_splits, "output", size_, &rc, &ro);
    return launch(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", output.device().index(), kCollectiveLane,
                  {in, output}, {output},
                  [&](const Comm& c, TFL_Stream* s) { all_to_all(c.handle, s, in, output, sc, so, rc, ro); });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) && inputs.size() == static_cast<size_t>(size_),
                "tfl: all_to_all needs ", size_, " input and ", size_, " output tensors, got ", inputs.size(), " and ",
                outputs.size());
    check_same_dtype(inputs, outputs[0], "all_to_all");
    check_same_dtype(outputs, outputs[0], "all_to_all");
    std::vector<size_t> sc, so, rc, ro;
    size_t stotal = 0, rtotal = 0;
    for (int p = 0; p < size_; ++p) {
      sc.push_back(static_cast<size_t>(inputs[p].numel()));
      so.push_back(stotal);
      stotal += sc.back();
      rc.push_back(static_cast<size_t>(outputs[p].numel()));
      ro.push_back(rtotal);
      rtotal += rc.back();
    }
    at::Tensor flat_in = flatten_into(inputs, stotal, outputs[0].options());
    at::Tensor flat_out = at::empty({static_cast<int64_t>(rtotal)}, outputs[0].options());
    return launch(
        c10d::OpType::ALLTOALL, "all_to_all", outputs[0].device().index(), kCollectiveLane, {flat_in, flat_out},
        outputs, [&](const Comm& c, TFL_Stream* s) { all_to_all(c.handle, s, flat_in, flat_out, sc, so, rc, ro); },
        [&] { copy_out_pieces(flat_out, outputs, ro); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) override {
    return point_to_point(tensors, dst, /*sending=*/true);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    return point_to_point(tensors, src, /*sending=*/false);
  }

  c10::intrusive_ptr<c10d::Work> point_to_point(std::vector<at::Tensor>& tensors, int peer, bool sending) {
    const char* what = sending ? "send" : "recv";
    at::Tensor t = single(tensors, what);
    check_dense(t, what);
    return launch(sending ? c10d::OpType::SEND : c10d::OpType::RECV, what, t.device().index(),
                  sending ? kSendLane : kRecvLane, {t}, {t},
                  [&](const Comm& c, TFL_Stream* s) {
                    TFL_Comm_SendRecv_Args a{};
                    a.struct_size = TFL_Comm_SendRecv_Args_STRUCT_SIZE;
                    a.comm = c.handle;
                    a.buf = t.data_ptr();
                    a.count = static_cast<size_t>(t.numel());
                    a.dtype = dtype_of(t);
                    a.peer = peer;
                    a.stream = s;
                    if (sending) {
                      check_call(collectives().Comm_Send(&a), "Comm_Send");
                    } else {
                      check_call(collectives().Comm_Recv(&a), "Comm_Recv");
                    }
                  });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tfl: recv from any source is not supported; name the source rank");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    c10::DeviceIndex device = -1;
    if (opts.device.has_value() && opts.device->type() == kType) {
      device = opts.device->index();
    } else if (!opts.device_ids.empty()) {
      device = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
    } else if (bound_device_id_.has_value() && bound_device_id_->type() == kType) {
      device = bound_device_id_->index();
    } else {
      device = comm_.device() >= 0 ? comm_.device() : current_device();
    }
    return launch(c10d::OpType::BARRIER, "barrier", device, kCollectiveLane, {}, {},
                  [&](const Comm& c, TFL_Stream* s) {
                    TFL_Comm_Barrier_Args a{};
                    a.struct_size = TFL_Comm_Barrier_Args_STRUCT_SIZE;
                    a.comm = c.handle;
                    a.stream = s;
                    check_call(collectives().Comm_Barrier(&a), "Comm_Barrier");
                  });
  }

 private:
  using Enqueue = std::function<void(const Comm&, TFL_Stream*)>;

  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* name, c10::DeviceIndex device, LaneId lane,
                                        std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                                        const Enqueue& enqueue, const std::function<void()>& finish = {}) {
    const Comm& c = comm_.get(device);
    c10::DeviceGuard guard(c10::Device(kType, device));
    std::lock_guard<std::mutex> lock(launch_mu_);
    TFL_Stream* current = StreamRegistry::get().current_native(device);
    TFL_Stream* stream = c.streams[lane];
    auto work = c10::make_intrusive<WorkTFL>(rank_, type, std::string(name), std::move(outputs));
    // The inputs are ready once the current stream gets here.
    TFL_Event* ready = create_event(device);
    try {
      record_event(ready, current);
      stream_wait_event(stream, ready);
    } catch (...) {
      destroy_event(ready);
      throw;
    }
    destroy_event(ready);  // the wait already enqueued keeps what it needs
    enqueue(c, stream);
    TFL_Event* done = create_event(device);
    work->add_event(done);
    record_event(done, stream);
    if (finish) {
      // Copies out of scratch buffers run on the current stream after the
      // collective; the Work completes after them.
      stream_wait_event(current, done);
      finish();
      TFL_Event* copied = create_event(device);
      work->add_event(copied);
      record_event(copied, current);
    }
    work->keep(std::move(keep));
    c.lanes[lane]->push(work);
    return work;
  }


  c10::intrusive_ptr<c10d::Work> allreduce_impl(const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                                c10d::OpType type, const char* name) {
    for (const auto& t : tensors) {
      check_dense(t, name);
    }
    return reduce_into(tensors, tensors, op, type, name);
  }

  // All-reduces ins[i] into outs[i] (same shapes), then runs `finish` on the
  // current stream.
  c10::intrusive_ptr<c10d::Work> reduce_into(const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs,
                                             const c10d::ReduceOp& op, c10d::OpType type, const char* name,
                                             const std::function<void()>& finish = {},
                                             std::vector<at::Tensor> results = {}) {
    std::vector<PlannedReduction> plans;
    std::vector<at::Tensor> keep;
    for (size_t i = 0; i < ins.size(); ++i) {
      plans.push_back(plan(ins[i], outs[i], op));
      keep.push_back(plans.back().send);
      keep.push_back(plans.back().recv);
    }
    if (results.empty()) {
      results = outs;
    }
    return launch(
        type, name, ins[0].device().index(), kCollectiveLane, keep, results,
        [&](const Comm& c, TFL_Stream* s) {
          for (const auto& p : plans) {
            auto a = collective_args(c.handle, s, p.send, p.recv, p.send.numel(), p.type);
            a.op = p.op;
            check_call(collectives().Comm_AllReduce(&a), "Comm_AllReduce");
          }
        },
        finish);
  }

  c10::intrusive_ptr<c10d::Work> allgather_list(std::vector<at::Tensor>& outs, const at::Tensor& input,
                                                c10d::OpType type, const char* name) {
    TORCH_CHECK(outs.size() == static_cast<size_t>(size_), "tfl: ", name, " needs ", size_, " output tensors, got ",
                outs.size());
    check_same_dtype(outs, input, name);
    at::Tensor in = contiguous_input(input, name);
    bool even = true;
    size_t total = 0;
    std::vector<size_t> offsets;
    for (auto& o : outs) {
      even = even && o.numel() == in.numel();
      offsets.push_back(total);
      total += static_cast<size_t>(o.numel());
    }
    TORCH_CHECK(outs[rank_].numel() == in.numel(), "tfl: ", name, ": this rank's output slot has ", outs[rank_].numel(),
                " elements but its input ", in.numel());
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
    if (even) {
      return launch(
          type, name, in.device().index(), kCollectiveLane, {in, flat}, outs,
          [&](const Comm& c, TFL_Stream* s) {
            auto a = collective_args(c.handle, s, in, flat, in.numel(), in.scalar_type());
            check_call(collectives().Comm_AllGather(&a), "Comm_AllGather");
          },
          [&] { copy_out_chunks(flat, outs); });
    }
    // Uneven sizes: every rank sends its whole input to everyone.
    std::vector<size_t> sc(size_, static_cast<size_t>(in.numel())), so(size_, 0), rc(size_);
    for (int p = 0; p < size_; ++p) {
      rc[p] = static_cast<size_t>(outs[p].numel());
    }
    return launch(
        type, name, in.device().index(), kCollectiveLane, {in, flat}, outs,
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c.handle, s, in, flat, sc, so, rc, offsets); },
        [&] { copy_out_pieces(flat, outs, offsets); });
  }

  c10::intrusive_ptr<c10d::Work> allgather_tensors(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                   c10d::OpType type, const char* name) {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "tfl: ", name,
                " needs one output per input, got ", outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<at::Tensor> ins, dsts, keep;
    bool copies = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_device(outputs[i], name);
      TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), "tfl: ", name, ": output is ",
                  outputs[i].scalar_type(), " but input ", inputs[i].scalar_type());
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, "tfl: ", name, ": the output needs world size x ",
                  inputs[i].numel(), " = ", inputs[i].numel() * size_, " elements, got ", outputs[i].numel());
      ins.push_back(contiguous_input(inputs[i], name));
      dsts.push_back(contiguous_output(outputs[i]));
      copies = copies || !dsts.back().is_same(outputs[i]);
      keep.push_back(ins.back());
      keep.push_back(dsts.back());
    }
    std::function<void()> finish = copies ? copy_back(outputs, dsts) : std::function<void()>();
    return launch(
        type, name, ins[0].device().index(), kCollectiveLane, keep, outputs,
        [&](const Comm& c, TFL_Stream* s) {
          for (size_t i = 0; i < ins.size(); ++i) {
            auto a = collective_args(c.handle, s, ins[i], dsts[i], ins[i].numel(), ins[i].scalar_type());
            check_call(collectives().Comm_AllGather(&a), "Comm_AllGather");
          }
        },
        finish);
  }


  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensors(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs, const c10d::ReduceOp& op,
                                                        c10d::OpType type, const char* name) {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "tfl: ", name,
                " needs one output per input, got ", outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<PlannedReduction> plans;
    std::vector<at::Tensor> dsts, keep;
    bool copies = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_device(outputs[i], name);
      TORCH_CHECK(outputs[i].scalar_type() == inputs[i].scalar_type(), "tfl: ", name, ": output is ",
                  outputs[i].scalar_type(), " but input ", inputs[i].scalar_type());
      TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_, "tfl: ", name, ": the input needs world size x ",
                  outputs[i].numel(), " = ", outputs[i].numel() * size_, " elements, got ", inputs[i].numel());
      at::Tensor in = contiguous_input(inputs[i], name);
      dsts.push_back(contiguous_output(outputs[i]));
      copies = copies || !dsts.back().is_same(outputs[i]);
      plans.push_back(plan(in, dsts.back(), op));
      keep.push_back(plans.back().send);
      keep.push_back(plans.back().recv);
    }
    std::function<void()> finish = copies ? copy_back(outputs, dsts) : std::function<void()>();
    return launch(
        type, name, outputs[0].device().index(), kCollectiveLane, keep, outputs,
        [&](const Comm& c, TFL_Stream* s) {
          for (const auto& p : plans) {
            auto a = collective_args(c.handle, s, p.send, p.recv, p.recv.numel(), p.type);
            a.op = p.op;
            check_call(collectives().Comm_ReduceScatter(&a), "Comm_ReduceScatter");
          }
        },
        finish);
  }

  c10::intrusive_ptr<Options> options_;
  std::mutex launch_mu_;
  GroupCommunicator comm_;
};

// Destroys the backend without holding the GIL (it may wait for the
// plugin), like torch's own holder for c10d objects.
template <class T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  explicit NoGilHolder(T* p) : p_(c10::intrusive_ptr<T>::unsafe_steal_from_new(p)) {}
  NoGilHolder(c10::intrusive_ptr<T> p) : p_(std::move(p)) {}  // NOLINT: implicit by design
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder(NoGilHolder&&) noexcept = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  NoGilHolder& operator=(NoGilHolder&&) noexcept = default;
  ~NoGilHolder() {
    if (p_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      p_.reset();
    }
  }
  T* get() const noexcept {
    return p_.get();
  }

 private:
  c10::intrusive_ptr<T> p_;
};

} // namespace
} // namespace torch_fl::bridge::dist

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_fl::bridge::dist::NoGilHolder<T>, true)

namespace torch_fl::bridge::dist {
namespace {

void bind(py::module_& m) {
  // The class is registered on first use: its base, torch's c10d Backend,
  // exists only once torch.distributed has been imported.
  m.def("_dist_register", [](py::module_ self) {
    static bool registered = false;
    if (registered) {
      return;
    }
    py::object base = py::module_::import("torch._C._distributed_c10d").attr("Backend");
    py::class_<ProcessGroupTFL, NoGilHolder<ProcessGroupTFL>>(self, "ProcessGroupTFL", base);
    registered = true;
  });
  m.def(
      "_dist_create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return NoGilHolder<ProcessGroupTFL>(c10::make_intrusive<ProcessGroupTFL>(store, rank, size, timeout));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_dist_close_all",
      [] {
        // Under the lock: a backend being destroyed meanwhile waits for it.
        std::lock_guard<std::mutex> lock(g_live_mu);
        for (ProcessGroupTFL* pg : g_live) {
          pg->close_at_exit();
        }
      },
      py::call_guard<py::gil_scoped_release>());
}

TFL_REGISTER_BINDINGS(bind);

} // namespace
} // namespace torch_fl::bridge::dist
