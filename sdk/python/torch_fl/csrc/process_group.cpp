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
#include "bindings.h"
#include "kernel_abi.h"
#include "plugin.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/chrono.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

namespace py = pybind11;

namespace torch_fl::bridge {

namespace {

constexpr const char* kBackendName = "tfl";
constexpr auto kType = c10::DeviceType::PrivateUse1;

std::string device_name(c10::DeviceIndex index) {
  return c10::get_privateuse1_backend() + ":" + std::to_string(static_cast<int>(index));
}

const TFL_CollectivesApi& collectives() {
  const TFL_Api& api = active_plugin().api();
  const bool present = api.struct_size >= TFL_STRUCT_SIZE(TFL_Api, collectives) && api.collectives != nullptr &&
      api.collectives->struct_size >= TFL_CollectivesApi_STRUCT_SIZE;
  TORCH_CHECK_NOT_IMPLEMENTED(
      present, "plugin '", active_plugin().name(),
      "' has no collectives group; torch.distributed can only use gloo (CPU tensors) with it");
  return *api.collectives;
}

[[noreturn]] void throw_comm_error(TFL_Error* error, const std::string& what) {
  const Plugin& plugin = active_plugin();
  auto [code, message] = plugin.consume(error);
  throw c10::DistBackendError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "plugin '" + plugin.name() + "': " + what + " failed with " + error_code_name(code) + ": " + message);
}

// Synchronous plugin errors: bad arguments map like every other plugin call
// (ValueError, NotImplementedError); anything else is a backend error.
void check_call(TFL_Error* error, const char* what) {
  if (error == nullptr) {
    return;
  }
  const Plugin& plugin = active_plugin();
  TFL_Error_GetCode_Args c{};
  c.struct_size = TFL_Error_GetCode_Args_STRUCT_SIZE;
  c.error = error;
  plugin.api().core->Error_GetCode(&c);
  if (c.code == TFL_ERR_INVALID_ARGUMENT || c.code == TFL_ERR_UNIMPLEMENTED || c.code == TFL_ERR_OUT_OF_MEMORY) {
    plugin.check(error, what);
  }
  throw_comm_error(error, what);
}

TFL_Event* create_event(c10::DeviceIndex device) {
  Plugin& plugin = active_plugin();
  TFL_Event_Create_Args args{};
  args.struct_size = TFL_Event_Create_Args_STRUCT_SIZE;
  args.device = device;
  plugin.check(plugin.stream().Event_Create(&args), "Event_Create");
  return args.event;
}

void destroy_event(TFL_Event* event) noexcept {
  Plugin* plugin = active_plugin_or_null();
  if (event == nullptr || plugin == nullptr || plugin->is_shut_down()) {
    return;
  }
  TFL_Event_Destroy_Args args{};
  args.struct_size = TFL_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  plugin->consume(plugin->stream().Event_Destroy(&args));
}

void record(TFL_Event* event, TFL_Stream* stream) {
  Plugin& plugin = active_plugin();
  TFL_Event_Record_Args args{};
  args.struct_size = TFL_Event_Record_Args_STRUCT_SIZE;
  args.event = event;
  args.stream = stream;
  plugin.check(plugin.stream().Event_Record(&args), "Event_Record");
}

void stream_wait(TFL_Stream* stream, TFL_Event* event) {
  Plugin& plugin = active_plugin();
  TFL_Stream_WaitEvent_Args args{};
  args.struct_size = TFL_Stream_WaitEvent_Args_STRUCT_SIZE;
  args.stream = stream;
  args.event = event;
  plugin.check(plugin.stream().Stream_WaitEvent(&args), "Stream_WaitEvent");
}

// ---------------------------------------------------------------------------
// Work
// ---------------------------------------------------------------------------

class WorkTFL final : public c10d::Work {
 public:
  WorkTFL(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type, nullptr),
        what_(std::move(what)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  ~WorkTFL() override {
    for (TFL_Event* e : events_) {
      destroy_event(e);
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          "tfl: " + what_ + " did not complete within " + std::to_string(timeout.count()) +
              " ms of wait(); it is still running (the communicator's own timeout ends it)");
    }
    if (exception_) {
      std::rethrow_exception(exception_);
    }
    return true;
  }

  // Completion is observed on the host, after which work enqueued on any
  // stream is ordered after the collective.
  void synchronize() override {}

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  const std::string& what() const {
    return what_;
  }
  void add_event(TFL_Event* event) {
    events_.push_back(event);
  }
  const std::vector<TFL_Event*>& events() const {
    return events_;
  }
  void keep(std::vector<at::Tensor> tensors) {
    for (auto& t : tensors) {
      keep_alive_.push_back(std::move(t));
    }
  }

  // Called once by the completion thread.
  void complete(std::exception_ptr error) {
    for (TFL_Event* e : events_) {
      destroy_event(e);
    }
    events_.clear();
    keep_alive_.clear();
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  std::vector<TFL_Event*> events_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Completes the Works of one plugin stream, in order.
class CompletionLane {
 public:
  explicit CompletionLane(c10::DeviceIndex device) : device_(device) {
    thread_ = std::thread([this] { loop(); });
  }
  ~CompletionLane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
    }
  }

  void push(c10::intrusive_ptr<WorkTFL> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
      ++pending_;
    }
    cv_.notify_all();
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ == 0;
  }

 private:
  void loop() {
    for (;;) {
      c10::intrusive_ptr<WorkTFL> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
          return;  // stop_ and drained
        }
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      Plugin* plugin = active_plugin_or_null();
      for (TFL_Event* e : work->events()) {
        if (plugin == nullptr || plugin->is_shut_down()) {
          error = std::make_exception_ptr(c10::DistBackendError(
              {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
              "tfl: " + work->what() + " cannot complete: the plugin was shut down"));
          break;
        }
        TFL_Event_Synchronize_Args args{};
        args.struct_size = TFL_Event_Synchronize_Args_STRUCT_SIZE;
        args.event = e;
        TFL_Error* err = plugin->stream().Event_Synchronize(&args);
        if (err != nullptr && !error) {
          try {
            throw_comm_error(err, work->what() + " on " + device_name(device_));
          } catch (...) {
            error = std::current_exception();
          }
        } else if (err != nullptr) {
          plugin->consume(err);
        }
      }
      // A stream reports only its first pending failure; a communicator
      // that failed fails everything after it, so later Works on this lane
      // inherit the failure instead of reporting a silent success.
      if (error) {
        failed_ = error;
      } else if (failed_) {
        error = failed_;
      }
      work->complete(error);
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
  }

  c10::DeviceIndex device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkTFL>> queue_;
  int64_t pending_ = 0;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// The backend
// ---------------------------------------------------------------------------

class ProcessGroupTFL;
std::mutex g_live_mu;
std::set<ProcessGroupTFL*> g_live;

enum LaneId { kCollectiveLane = 0, kSendLane = 1, kRecvLane = 2 };

class ProcessGroupTFL final : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout) : c10d::Backend::Options(kBackendName, timeout) {}
  };

  ProcessGroupTFL(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : c10d::Backend(rank, size), store_(std::move(store)), options_(c10::make_intrusive<Options>(timeout)) {
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
    close(false);
  }

  const std::string getBackendName() const override {
    return kBackendName;
  }

  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return options_;
  }

  void eagerConnectSingleDevice(at::Device device) override {
    if (device.type() == kType && device.has_index()) {
      communicator(device.index());
    }
  }

  c10d::ErrorType getError() override {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (!comm_.handle) {
      return c10d::ErrorType::SUCCESS;
    }
    TFL_Comm_GetAsyncError_Args args{};
    args.struct_size = TFL_Comm_GetAsyncError_Args_STRUCT_SIZE;
    args.comm = comm_.handle;
    check_call(collectives().Comm_GetAsyncError(&args), "Comm_GetAsyncError");
    if (args.error == nullptr) {
      return c10d::ErrorType::SUCCESS;
    }
    auto [code, message] = active_plugin().consume(args.error);
    (void)message;
    return code == TFL_ERR_TIMEOUT ? c10d::ErrorType::TIMEOUT : c10d::ErrorType::COMM_ERROR;
  }

  void abort() override {
    close(true);
  }

  void shutdown() override {
    close(false);
  }

  // Process exit: abort when work is still in flight, else a clean destroy.
  void close_at_exit() {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      for (auto& lane : comm_.lanes) {
        busy = busy || (lane && !lane->idle());
      }
    }
    close(busy);
  }

  // --- collectives --------------------------------------------------------

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    at::Tensor t = single(tensors, "broadcast");
    check_dense(t, "broadcast");
    const int32_t root = static_cast<int32_t>(opts.rootRank);
    return launch(c10d::OpType::BROADCAST, "broadcast", t.device().index(), kCollectiveLane, {t}, {t},
                  [&](const Comm& c, TFL_Stream* s) {
                    auto a = collective_args(c, s, t, t, t.numel(), t.scalar_type());
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
            auto a = collective_args(c, s, ins[i], flats[i], ins[i].numel(), ins[i].scalar_type());
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
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c, s, in, flat, sc, so, rc, ro); },
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
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c, s, flat_in, dst, sc, so, rc, ro); },
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
    return reduce_scatter_tensors(outputs, inputs, opts.reduceOp, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
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
    splits_to_counts(in, input_splits, "input", &sc, &so);
    splits_to_counts(output, output_splits, "output", &rc, &ro);
    return launch(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", output.device().index(), kCollectiveLane,
                  {in, output}, {output},
                  [&](const Comm& c, TFL_Stream* s) { all_to_all(c, s, in, output, sc, so, rc, ro); });
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
        outputs, [&](const Comm& c, TFL_Stream* s) { all_to_all(c, s, flat_in, flat_out, sc, so, rc, ro); },
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
      std::lock_guard<std::mutex> lock(comm_mu_);
      device = comm_.handle ? comm_.device : current_device();
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
  struct Comm {
    TFL_Communicator* handle = nullptr;
    c10::DeviceIndex device = -1;
    TFL_Stream* streams[3] = {nullptr, nullptr, nullptr};
    std::unique_ptr<CompletionLane> lanes[3];
  };

  using Enqueue = std::function<void(const Comm&, TFL_Stream*)>;

  // The communicator for `device`, created on first use: rank 0 makes the
  // unique id and publishes it through the store; everyone joins.
  const Comm& communicator(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(comm_mu_);
    TORCH_CHECK(!closed_, "tfl: the process group was shut down or aborted");
    if (comm_.handle) {
      TORCH_CHECK(device == comm_.device, "tfl: this process group communicates on ", device_name(comm_.device),
                  " (its first operation used it), but this tensor is on ", device_name(device),
                  "; use one device per process, e.g. init_process_group(..., device_id=torch.device(\"",
                  c10::get_privateuse1_backend(), ":", static_cast<int>(comm_.device), "\"))");
      return comm_;
    }
    check_device_index(device);
    const TFL_CollectivesApi& api = collectives();
    const std::string key = "tfl/unique_id/" + std::to_string(generation_++);
    TFL_CommUniqueId id{};
    if (rank_ == 0) {
      TFL_Comm_GetUniqueId_Args u{};
      u.struct_size = TFL_Comm_GetUniqueId_Args_STRUCT_SIZE;
      check_call(api.Comm_GetUniqueId(&u), "Comm_GetUniqueId");
      id = u.id;
      store_->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof(id.bytes)));
    } else {
      const std::vector<uint8_t> bytes = store_->get(key);
      TORCH_CHECK(bytes.size() == sizeof(id.bytes), "tfl: the unique id in the store has ", bytes.size(),
                  " bytes, expected ", sizeof(id.bytes));
      std::copy(bytes.begin(), bytes.end(), id.bytes);
      forget_unique_id(key);
    }
    TFL_Comm_Init_Args a{};
    a.struct_size = TFL_Comm_Init_Args_STRUCT_SIZE;
    a.device = device;
    a.world_size = size_;
    a.rank = rank_;
    a.id = &id;
    a.timeout_ms = options_->timeout.count();
    check_call(api.Comm_Init(&a), "Comm_Init");
    Comm c;
    c.handle = a.comm;
    c.device = device;
    Plugin& plugin = active_plugin();
    for (int i = 0; i < 3; ++i) {
      TFL_Stream_Create_Args s{};
      s.struct_size = TFL_Stream_Create_Args_STRUCT_SIZE;
      s.device = device;
      plugin.check(plugin.stream().Stream_Create(&s), "Stream_Create");
      c.streams[i] = s.stream;
      c.lanes[i] = std::make_unique<CompletionLane>(device);
    }
    comm_ = std::move(c);
    return comm_;
  }

  // A group re-created under the same name on the same store (destroy and
  // init again under torchrun, whose store outlives the groups) uses the same
  // key: a rank reading it before rank 0 publishes the new id would join a
  // communicator that no longer exists and wait out the timeout. So the last
  // rank to read an id deletes it; that happens before its Comm_Init, hence
  // before the group can be destroyed and made again. A store that cannot
  // delete keys keeps the id (and the race).
  void forget_unique_id(const std::string& key) {
    if (store_->add(key + "/readers", 1) < size_ - 1) {
      return;
    }
    try {
      store_->deleteKey(key);
      store_->deleteKey(key + "/readers");
    } catch (const c10::Error&) {
    }
  }

  void close(bool abort) noexcept {
    Comm c;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      closed_ = true;
      c = std::move(comm_);
      comm_ = Comm();
    }
    Plugin* plugin = active_plugin_or_null();
    if (!c.handle || plugin == nullptr || plugin->is_shut_down()) {
      return;
    }
    try {
      TFL_Comm_Destroy_Args d{};
      d.struct_size = TFL_Comm_Destroy_Args_STRUCT_SIZE;
      d.comm = c.handle;
      const TFL_CollectivesApi& api = collectives();
      plugin->consume(abort ? api.Comm_Abort(&d) : api.Comm_Destroy(&d));
      for (int i = 0; i < 3; ++i) {
        TFL_Stream_Destroy_Args s{};
        s.struct_size = TFL_Stream_Destroy_Args_STRUCT_SIZE;
        s.stream = c.streams[i];
        plugin->consume(plugin->stream().Stream_Destroy(&s));
      }
      for (auto& lane : c.lanes) {
        lane.reset();  // completes what is left, then joins
      }
    } catch (...) {
    }
  }

  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* name, c10::DeviceIndex device, LaneId lane,
                                        std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                                        const Enqueue& enqueue, const std::function<void()>& finish = {}) {
    const Comm& c = communicator(device);
    c10::DeviceGuard guard(c10::Device(kType, device));
    std::lock_guard<std::mutex> lock(launch_mu_);
    TFL_Stream* current = StreamRegistry::get().current_native(device);
    TFL_Stream* stream = c.streams[lane];
    auto work = c10::make_intrusive<WorkTFL>(rank_, type, std::string(name), std::move(outputs));
    // The inputs are ready once the current stream gets here.
    TFL_Event* ready = create_event(device);
    try {
      record(ready, current);
      stream_wait(stream, ready);
    } catch (...) {
      destroy_event(ready);
      throw;
    }
    destroy_event(ready);  // the wait already enqueued keeps what it needs
    enqueue(c, stream);
    TFL_Event* done = create_event(device);
    work->add_event(done);
    record(done, stream);
    if (finish) {
      // Copies out of scratch buffers run on the current stream after the
      // collective; the Work completes after them.
      stream_wait(current, done);
      finish();
      TFL_Event* copied = create_event(device);
      work->add_event(copied);
      record(copied, current);
    }
    work->keep(std::move(keep));
    c.lanes[lane]->push(work);
    return work;
  }

  // --- helpers --------------------------------------------------------------

  static at::Tensor single(std::vector<at::Tensor>& tensors, const char* op) {
    TORCH_CHECK(tensors.size() == 1, "tfl: ", op, " takes exactly one tensor per process (one device per process), got ",
                tensors.size());
    check_device(tensors[0], op);
    return tensors[0];
  }

  static void check_device(const at::Tensor& t, const char* op) {
    TORCH_CHECK(t.device().type() == kType, "tfl: ", op, " got a tensor on ", t.device(), "; the tfl backend takes ",
                c10::get_privateuse1_backend(), " tensors (route CPU tensors to gloo with init_process_group(\"cpu:gloo,",
                c10::get_privateuse1_backend(), ":tfl\"))");
  }

  // all_reduce, broadcast, send and recv treat a tensor as its block of
  // memory: any dense layout works as long as every rank uses the same one.
  static void check_dense(const at::Tensor& t, const char* op) {
    check_device(t, op);
    TORCH_CHECK(t.is_non_overlapping_and_dense(), "tfl: ", op,
                " needs a dense tensor (contiguous or a permutation of it); got sizes ", t.sizes(), " strides ",
                t.strides(), "; call .contiguous() first");
  }

  static void check_dense_contiguous(const at::Tensor& t, const char* op) {
    check_device(t, op);
    TORCH_CHECK(t.is_contiguous(), "tfl: ", op, " needs a contiguous tensor; got sizes ", t.sizes(), " strides ",
                t.strides());
  }

  static at::Tensor contiguous_input(const at::Tensor& t, const char* op) {
    check_device(t, op);
    return t.contiguous();
  }

  static void check_same_dtype(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op) {
    for (const auto& t : ts) {
      check_device(t, op);
      TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "tfl: ", op, " mixes ", t.scalar_type(), " and ",
                  ref.scalar_type(), " tensors");
    }
  }

  static void check_same_sizes(const std::vector<at::Tensor>& outs, const at::Tensor& in, const char* op) {
    check_same_dtype(outs, in, op);
    for (const auto& o : outs) {
      TORCH_CHECK(o.numel() == in.numel(), "tfl: ", op, " outputs need as many elements as the input (", in.numel(),
                  "), got ", o.numel());
    }
  }

  static int32_t dtype_of(const at::Tensor& t) {
    const int32_t d = to_tfl_dtype(t.scalar_type());
    TORCH_CHECK_VALUE(d >= 0, "tfl: the plugin ABI has no dtype for ", t.scalar_type());
    return d;
  }

  static std::vector<at::Tensor> cat_vectors(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  // One flat buffer holding `pieces` one after another (copies on the
  // current stream, before the collective's ready event).
  static at::Tensor flatten_into(const std::vector<at::Tensor>& pieces, size_t total, const at::TensorOptions& options) {
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, options);
    int64_t offset = 0;
    for (const auto& p : pieces) {
      check_device(p, "flatten");
      if (p.numel() > 0) {
        flat.narrow(0, offset, p.numel()).view(p.sizes()).copy_(p);
      }
      offset += p.numel();
    }
    return flat;
  }

  static void copy_out_chunks(const at::Tensor& flat, std::vector<at::Tensor>& outs) {
    int64_t offset = 0;
    for (auto& o : outs) {
      if (o.numel() > 0) {
        o.copy_(flat.narrow(0, offset, o.numel()).view(o.sizes()));
      }
      offset += o.numel();
    }
  }

  static void copy_out_pieces(const at::Tensor& flat, std::vector<at::Tensor>& outs, const std::vector<size_t>& offsets) {
    for (size_t p = 0; p < outs.size(); ++p) {
      if (outs[p].numel() > 0) {
        outs[p].copy_(flat.narrow(0, static_cast<int64_t>(offsets[p]), outs[p].numel()).view(outs[p].sizes()));
      }
    }
  }

  void splits_to_counts(const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                        std::vector<size_t>* counts, std::vector<size_t>* offsets) const {
    counts->assign(size_, 0);
    offsets->assign(size_, 0);
    if (splits.empty()) {
      TORCH_CHECK(t.numel() % size_ == 0, "tfl: all_to_all_single without split sizes needs the ", which,
                  " to divide evenly by the world size ", size_, ", but it has ", t.numel(), " elements");
      for (int p = 0; p < size_; ++p) {
        (*counts)[p] = static_cast<size_t>(t.numel() / size_);
        (*offsets)[p] = static_cast<size_t>(p) * (*counts)[p];
      }
      return;
    }
    TORCH_CHECK(splits.size() == static_cast<size_t>(size_), "tfl: all_to_all_single: ", which, " split sizes have ",
                splits.size(), " entries, expected ", size_);
    const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
    int64_t rows = 0;
    for (int p = 0; p < size_; ++p) {
      TORCH_CHECK(splits[p] >= 0, "tfl: all_to_all_single: negative split size ", splits[p]);
      (*counts)[p] = static_cast<size_t>(splits[p] * row);
      (*offsets)[p] = static_cast<size_t>(rows * row);
      rows += splits[p];
    }
    TORCH_CHECK(t.dim() > 0 && rows == t.size(0), "tfl: all_to_all_single: ", which, " split sizes add up to ", rows,
                " but the tensor's first dimension is ", t.dim() > 0 ? t.size(0) : 0);
  }

  static TFL_Comm_Collective_Args collective_args(const Comm& c, TFL_Stream* s, const at::Tensor& in,
                                                  const at::Tensor& out, int64_t count, c10::ScalarType type) {
    TFL_Comm_Collective_Args a{};
    a.struct_size = TFL_Comm_Collective_Args_STRUCT_SIZE;
    a.comm = c.handle;
    a.sendbuf = in.numel() > 0 ? in.data_ptr() : nullptr;
    a.recvbuf = out.numel() > 0 ? out.data_ptr() : nullptr;
    a.count = static_cast<size_t>(count);
    const int32_t d = to_tfl_dtype(type);
    TORCH_CHECK_VALUE(d >= 0, "tfl: the plugin ABI has no dtype for ", type);
    a.dtype = d;
    a.stream = s;
    return a;
  }

  static void all_to_all(const Comm& c, TFL_Stream* s, const at::Tensor& in, const at::Tensor& out,
                         const std::vector<size_t>& sc, const std::vector<size_t>& so, const std::vector<size_t>& rc,
                         const std::vector<size_t>& ro) {
    TFL_Comm_AllToAll_Args a{};
    a.struct_size = TFL_Comm_AllToAll_Args_STRUCT_SIZE;
    a.comm = c.handle;
    a.sendbuf = in.numel() > 0 ? in.data_ptr() : nullptr;
    a.recvbuf = out.numel() > 0 ? out.data_ptr() : nullptr;
    a.send_counts = sc.data();
    a.send_offsets = so.data();
    a.recv_counts = rc.data();
    a.recv_offsets = ro.data();
    a.dtype = dtype_of(out.numel() > 0 ? out : in);
    a.stream = s;
    check_call(collectives().Comm_AllToAll(&a), "Comm_AllToAll");
  }

  // A c10d reduce op as a plugin op on `t`, possibly after a rewrite: complex
  // sums go through their real view, PREMUL_SUM scales first, bitwise and/or
  // on bool are min/max.
  struct PlannedReduction {
    at::Tensor send, recv;  // the buffers the plugin sees
    int32_t op;
    c10::ScalarType type;
  };

  static PlannedReduction plan(const at::Tensor& in, const at::Tensor& out, const c10d::ReduceOp& op) {
    PlannedReduction p{in, out, TFL_REDUCE_SUM, in.scalar_type()};
    switch (op.op_) {
      case c10d::ReduceOp::SUM: p.op = TFL_REDUCE_SUM; break;
      case c10d::ReduceOp::AVG: p.op = TFL_REDUCE_AVG; break;
      case c10d::ReduceOp::PRODUCT: p.op = TFL_REDUCE_PRODUCT; break;
      case c10d::ReduceOp::MIN: p.op = TFL_REDUCE_MIN; break;
      case c10d::ReduceOp::MAX: p.op = TFL_REDUCE_MAX; break;
      case c10d::ReduceOp::BAND:
      case c10d::ReduceOp::BOR:
        TORCH_CHECK_NOT_IMPLEMENTED(in.scalar_type() == at::kBool, "tfl: bitwise ",
                                    op.op_ == c10d::ReduceOp::BAND ? "BAND" : "BOR",
                                    " is supported for bool tensors only, got ", in.scalar_type());
        p.op = op.op_ == c10d::ReduceOp::BAND ? TFL_REDUCE_MIN : TFL_REDUCE_MAX;
        break;
      case c10d::ReduceOp::PREMUL_SUM: {
        auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
        TORCH_CHECK(supplement != nullptr, "tfl: PREMUL_SUM without its factor");
        p.send = supplement->tensor_factor.defined() ? in * supplement->tensor_factor.to(in.device())
                                                     : in * supplement->double_factor;
        p.op = TFL_REDUCE_SUM;
        break;
      }
      default:
        TORCH_CHECK_NOT_IMPLEMENTED(false, "tfl: reduce op ", static_cast<int>(op.op_),
                                    " is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM; BAND/BOR on bool)");
    }
    if (in.is_complex()) {
      TORCH_CHECK_NOT_IMPLEMENTED(p.op == TFL_REDUCE_SUM || p.op == TFL_REDUCE_AVG,
                                  "tfl: complex tensors support SUM, AVG and PREMUL_SUM only");
      p.send = at::view_as_real(p.send);
      p.recv = at::view_as_real(p.recv);
      p.type = p.send.scalar_type();
    }
    return p;
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
            auto a = collective_args(c, s, p.send, p.recv, p.send.numel(), p.type);
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
            auto a = collective_args(c, s, in, flat, in.numel(), in.scalar_type());
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
        [&](const Comm& c, TFL_Stream* s) { all_to_all(c, s, in, flat, sc, so, rc, offsets); },
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
            auto a = collective_args(c, s, ins[i], dsts[i], ins[i].numel(), ins[i].scalar_type());
            check_call(collectives().Comm_AllGather(&a), "Comm_AllGather");
          }
        },
        finish);
  }

  // A non-contiguous output is written through a contiguous stand-in ...
  static at::Tensor contiguous_output(const at::Tensor& out) {
    return out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
  }

  // ... that this copies back when the work finishes.
  static std::function<void()> copy_back(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& dsts) {
    return [&outputs, &dsts] {
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (!dsts[i].is_same(outputs[i])) {
          outputs[i].copy_(dsts[i]);
        }
      }
    };
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
            auto a = collective_args(c, s, p.send, p.recv, p.recv.numel(), p.type);
            a.op = p.op;
            check_call(collectives().Comm_ReduceScatter(&a), "Comm_ReduceScatter");
          }
        },
        finish);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Options> options_;
  std::mutex comm_mu_;
  std::mutex launch_mu_;
  Comm comm_;
  int generation_ = 0;
  bool closed_ = false;
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
} // namespace torch_fl::bridge

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_fl::bridge::NoGilHolder<T>, true)

namespace torch_fl::bridge {
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
} // namespace torch_fl::bridge
