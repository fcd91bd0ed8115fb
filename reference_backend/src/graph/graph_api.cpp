// The ABI entry points of the graph group: argument checks, the executable
// handle, and the launch of a fused program on a stream.
#include "graph_api.h"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../errors.h"
#include "../kernels/support/dtype.h"
#include "../kernels/support/launch.h"
#include "../runtime.h"
#include "fused_program.h"

namespace flemu {
namespace {

constexpr uint64_t kExecutableMagic = 0x464c454d55455845ull;  // "FLEMUEXE"

struct Executable {
  uint64_t magic = kExecutableMagic;
  std::shared_ptr<const graph::Program> program;
};

Executable& executable_from_handle(TFL_Executable* handle) {
  auto* exe = reinterpret_cast<Executable*>(handle);
  if (exe == nullptr) invalid_argument("executable is NULL");
  if (exe->magic != kExecutableMagic)
    invalid_argument("executable ", static_cast<void*>(handle), " is not a live flemu executable");
  return *exe;
}

// Decline reasons must outlive the call; the distinct reasons are few (op
// and dtype names), so they are kept for the life of the library.
const char* intern(const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string>* reasons = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return reasons->insert(reason).first->c_str();
}

// Checks one execution operand against what the region declared and
// returns flemu's alias of its first element.
char* operand_data(Runtime& rt, const TFL_Tensor* t, const graph::Operand& op, int32_t device, const char* kind,
                   size_t index) {
  const std::string what = cat(kind, "[", index, "]");
  if (t == nullptr) invalid_argument(what, " is NULL");
  if (t->struct_size < TFL_Tensor_STRUCT_SIZE)
    invalid_argument(what, ": TFL_Tensor.struct_size is ", t->struct_size, ", expected at least ",
                     TFL_Tensor_STRUCT_SIZE);
  if (t->memory_kind != TFL_MEMORY_DEVICE) invalid_argument(what, " is in host memory; the region runs on the device");
  if (t->device != device) invalid_argument(what, " is on device ", t->device, " but the region runs on device ", device);
  if (t->dtype != op.dtype)
    invalid_argument(what, " has dtype ", dtype_name(t->dtype), "; the region declared ", dtype_name(op.dtype));
  if (t->ndim != static_cast<int32_t>(op.sizes.size()))
    invalid_argument(what, " has ", t->ndim, " dims; the region declared ", op.sizes.size());
  if (t->ndim > 0 && (t->sizes == nullptr || t->strides == nullptr))
    invalid_argument(what, " has ndim ", t->ndim, " but NULL sizes or strides");
  int64_t numel = 1, last = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] != op.sizes[d] || t->strides[d] != op.declared_strides[d])
      invalid_argument(what, " has size ", t->sizes[d], " and stride ", t->strides[d], " in dim ", d,
                       "; the region declared size ", op.sizes[d], " and stride ", op.declared_strides[d]);
    numel *= t->sizes[d];
    if (t->sizes[d] > 0) last += (t->sizes[d] - 1) * t->strides[d];
  }
  if (numel != t->numel) invalid_argument(what, " says numel ", t->numel, " but its sizes multiply to ", numel);
  if (numel == 0) return nullptr;
  if (t->data == nullptr) invalid_argument(what, " has ", numel, " elements but a NULL data pointer");
  Arena& arena = rt.device(device).arena;
  const uint64_t bytes = static_cast<uint64_t>(last + 1) * static_cast<uint64_t>(op.itemsize);
  if (!arena.owns_range(t->data, bytes))
    invalid_argument(what, " [", t->data, ", +", bytes, " bytes) is not inside the memory of device ", device);
  if (kernel_settings().strict) arena.check_allocated(t->data, bytes, what.c_str());
  return arena.to_host(t->data);
}

}  // namespace

TFL_Error* Graph_Compile(TFL_Graph_Compile_Args* args) {
  return guarded("Graph_Compile", [&] {
    // declined_node is part of ABI 1.0's struct, like every other field.
    TFL_CHECK_ARGS(args, TFL_Graph_Compile_Args);
    args->accepted = 0;
    args->executable = nullptr;
    args->decline_reason = nullptr;
    args->declined_node = -1;
    const TFL_Graph* g = args->graph;
    TFL_CHECK_ARGS(g, TFL_Graph);
    Runtime& rt = runtime();
    rt.device(g->device);  // range check
    if (rt.config().minimal_profile) {
      args->decline_reason = "FLEMU_PROFILE=minimal has no graph compiler";
      return;
    }
    auto program = std::make_shared<graph::Program>();
    graph::Decline decline;
    if (!graph::compile_program(*g, program.get(), &decline)) {
      args->decline_reason = intern(decline.reason);
      args->declined_node = decline.node;
      return;
    }
    auto* exe = new Executable();
    exe->program = std::move(program);
    args->executable = reinterpret_cast<TFL_Executable*>(exe);
    args->accepted = 1;
  });
}

TFL_Error* Graph_Execute(TFL_Graph_Execute_Args* args) {
  return guarded("Graph_Execute", [&] {
    TFL_CHECK_ARGS(args, TFL_Graph_Execute_Args);
    Executable& exe = executable_from_handle(args->executable);
    std::shared_ptr<const graph::Program> program = exe.program;
    const graph::Program& p = *program;
    Runtime& rt = runtime();
    Stream& stream = stream_from_handle(args->stream);
    if (stream.device() != p.device)
      invalid_argument("the stream belongs to device ", stream.device(), " but the region runs on device ", p.device);
    if (args->num_inputs != p.inputs.size())
      invalid_argument("got ", args->num_inputs, " inputs; the region takes ", p.inputs.size());
    if (args->num_outputs != p.outputs.size())
      invalid_argument("got ", args->num_outputs, " outputs; the region produces ", p.outputs.size());
    if (args->num_inputs > 0 && args->inputs == nullptr) invalid_argument("inputs is NULL");
    if (args->num_outputs > 0 && args->outputs == nullptr) invalid_argument("outputs is NULL");
    std::vector<char*> ins(p.inputs.size()), outs(p.outputs.size());
    for (size_t i = 0; i < ins.size(); ++i) ins[i] = operand_data(rt, args->inputs[i], p.inputs[i], p.device, "inputs", i);
    for (size_t i = 0; i < outs.size(); ++i)
      outs[i] = operand_data(rt, args->outputs[i], p.outputs[i], p.device, "outputs", i);
    if (p.numel == 0) return;
    stream.submit("Graph_Execute", [program, ins = std::move(ins), outs = std::move(outs)] {
      graph::run_program(*program, ins.data(), outs.data());
    });
  });
}

TFL_Error* Graph_Destroy(TFL_Graph_Destroy_Args* args) {
  return guarded("Graph_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Graph_Destroy_Args);
    Executable& exe = executable_from_handle(args->executable);
    exe.magic = 0;
    // Enqueued executions hold their own reference to the program.
    delete &exe;
  });
}

}  // namespace flemu
