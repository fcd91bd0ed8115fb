#include "op_rules.h"

#include "fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/ConvUtils.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

namespace torch_fl::bridge {

namespace {

// ---------------------------------------------------------------------------
// Unannotated mutations
// ---------------------------------------------------------------------------

const std::unordered_map<std::string, std::vector<int>>& mutation_table() {
  // native_batch_norm(input, weight, bias, running_mean, running_var, training,
  // momentum, eps): the running statistics are updated in training mode
  // (PyTorch's own decomposition copies into them).
  static const auto* table = new std::unordered_map<std::string, std::vector<int>>{
      {"aten::native_batch_norm", {3, 4}},
      {"aten::native_batch_norm.out", {3, 4}},
  };
  return *table;
}

// ---------------------------------------------------------------------------
// Calls a CPU kernel crashes on
// ---------------------------------------------------------------------------

// native_batch_norm_backward(grad_out, input, weight?, running_mean?,
// running_var?, save_mean?, save_invstd?, train, eps, output_mask) and its
// .out overload: the statistics the mode normalizes with must be given.
void check_batch_norm_backward(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (args.size() < 8 || !args[7].isBool()) {
    return;
  }
  const bool train = args[7].toBool();
  // The pair the mode normalizes with: the saved batch statistics (arguments
  // 5 and 6) in training, the running ones (3 and 4) in eval mode.
  const int first = train ? 5 : 3;
  const char* const names[2] = {train ? "save_mean" : "running_mean", train ? "save_invstd" : "running_var"};
  for (int k = 0; k < 2; ++k) {
    TORCH_CHECK(
        args[first + k].isTensor(), op, " with train=", train ? "True" : "False", " needs ", names[k],
        ", got None: ", train ? "training mode normalizes with the batch statistics native_batch_norm saved"
                              : "eval mode normalizes with the running statistics",
        ". PyTorch's CPU kernel, which the fallback would run, crashes without them; pass ", names[0],
        " and ", names[1], " (or the other mode's pair with train=", train ? "False" : "True", ")");
  }
}

// ---------------------------------------------------------------------------
// Host operands
// ---------------------------------------------------------------------------

// Advanced indexing (aten/src/ATen/native/TensorAdvancedIndexing.cpp) moves
// CPU indices to self's device, for every overload of these operators.
bool takes_host_indices(const std::string& base) {
  static const auto* names = new std::set<std::string>{
      "aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl",
      "aten::_index_put_impl_", "aten::_unsafe_index", "aten::_unsafe_index_put",
      "aten::_unsafe_masked_index", "aten::_unsafe_masked_index_put_accumulate",
  };
  return names->count(base) != 0;
}

// ---------------------------------------------------------------------------
// Output metadata
// ---------------------------------------------------------------------------

bool absent(const c10::IValue& v) {
  return v.isNone() || (v.isTensor() && !v.toTensor().defined());
}

OutSpec dense_like(const at::Tensor& t, c10::IntArrayRef sizes) {
  return OutSpec{t.scalar_type(), c10::DimVector(sizes), c10::contiguous_strides(sizes)};
}

// PyTorch's meta functions for the fused RNN cells read the optional biases
// unconditionally (torch 2.13: `x.device` on None); without biases the
// outputs are shaped as the CUDA kernels shape them, with their size check.
std::optional<std::vector<OutSpec>> bias_free_rnn_cell(
    const std::string& op, c10::ArrayRef<c10::IValue> args) {
  const bool lstm = op == "aten::_thnn_fused_lstm_cell";
  if (args.size() < 5 || (absent(args[3]) == false && absent(args[4]) == false)) {
    return std::nullopt;
  }
  const at::Tensor& gates = args[0].toTensor();
  const at::Tensor& hidden_gates = args[1].toTensor();
  const at::Tensor& state = args[2].toTensor();
  const int64_t per_unit = lstm ? 4 : 3;
  TORCH_CHECK(
      state.dim() == 2 && gates.dim() == 2 && gates.sizes() == hidden_gates.sizes() &&
          gates.size(0) == state.size(0) && gates.size(1) == per_unit * state.size(1),
      op, ": input_gates and hidden_gates must be of size [batch, ", per_unit,
      " * hidden] for a state of size [batch, hidden]; got input_gates ", gates.sizes(),
      ", hidden_gates ", hidden_gates.sizes(), ", state ", state.sizes());
  std::vector<OutSpec> outs{dense_like(state, state.sizes())};
  if (lstm) {
    outs.push_back(dense_like(state, state.sizes()));
    outs.push_back(dense_like(gates, gates.sizes()));
  } else {
    outs.push_back(dense_like(gates, {state.size(0), state.size(1) * 5}));
  }
  return outs;
}

// ---------------------------------------------------------------------------
// Convolution layouts
// ---------------------------------------------------------------------------

// Strides of `sizes` in `format`; a 3-d tensor is laid out channels-last as
// FakeTensor does it (unsqueezed to 4-d, converted, squeezed back).
c10::DimVector strides_in(c10::IntArrayRef sizes, at::MemoryFormat format) {
  if (format == at::MemoryFormat::ChannelsLast && sizes.size() == 3) {
    const std::vector<int64_t> four{sizes[0], sizes[1], 1, sizes[2]};
    const std::vector<int64_t> st = c10::get_channels_last_strides_2d(four);
    return c10::DimVector{st[0], st[1], st[3]};
  }
  if (format == at::MemoryFormat::ChannelsLast && sizes.size() == 4) {
    const std::vector<int64_t> st = c10::get_channels_last_strides_2d(sizes);
    return c10::DimVector(st.begin(), st.end());
  }
  if (format == at::MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
    const std::vector<int64_t> st = c10::get_channels_last_strides_3d(sizes);
    return c10::DimVector(st.begin(), st.end());
  }
  return c10::contiguous_strides(sizes);
}

// FakeTensor (torch/_subclasses/fake_impls.py, conv) lays a convolution's
// output, and the input and weight gradients of its backward, out in the
// format that ATen's convolution picks for the backend it selects for the
// arguments; that is what a compiled graph plans for. PyTorch's meta
// kernels choose otherwise, and differently from each other (torch 2.13:
// the forward's leaves its output contiguous, the backward's makes both
// gradients channels-last when the input or the weight is): a compiled
// channels-last model then met gradients laid out as its graph had not
// planned. `first`: the index of the input argument.
void conv_layouts(c10::ArrayRef<c10::IValue> args, size_t first, bool backward, std::vector<OutSpec>& outs) {
  const at::Tensor& input = args[first].toTensor();
  const at::Tensor& weight = args[first + 1].toTensor();
  std::optional<at::Tensor> bias;
  std::optional<std::vector<c10::SymInt>> bias_sizes;
  if (backward) {
    if (!args[first + 2].isNone()) {
      bias_sizes = args[first + 2].toSymIntVector();
    }
  } else if (args[first + 2].isTensor()) {
    bias = args[first + 2].toTensor();
  }
  const std::vector<c10::SymInt> stride = args[first + 3].toSymIntVector();
  const std::vector<c10::SymInt> padding = args[first + 4].toSymIntVector();
  const std::vector<c10::SymInt> dilation = args[first + 5].toSymIntVector();
  const bool transposed = args[first + 6].toBool();
  const std::vector<c10::SymInt> output_padding = args[first + 7].toSymIntVector();
  const c10::SymInt groups = args[first + 8].toSymInt();
  const at::native::ConvBackend backend = at::native::select_conv_backend(
      input, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
      bias_sizes.has_value() ? at::OptionalSymIntArrayRef(*bias_sizes) : at::OptionalSymIntArrayRef());
  // FakeTensor asks about a 1-d convolution as a 2-d one with a contiguous
  // input (Convolution.cpp's expansion). Only the layout is asked about: an
  // empty contiguous tensor stands in for a strided input, not a copy of it.
  const bool one_d = weight.dim() == 3 && !input.is_mkldnn() && !input.is_xpu();
  const at::MemoryFormat format = one_d
      ? at::native::_determine_backend_memory_format(
            (input.is_contiguous() ? input : at::empty_like(input, at::MemoryFormat::Contiguous)).unsqueeze(2),
            weight.unsqueeze(2), backend)
      : at::native::_determine_backend_memory_format(input, weight, backend);
  const size_t n = backward ? std::min<size_t>(outs.size(), 2) : std::min<size_t>(outs.size(), 1);
  for (size_t i = 0; i < n; ++i) {
    if (outs[i].defined) {
      outs[i].strides = strides_in(outs[i].sizes, format);
    }
  }
}

// ---------------------------------------------------------------------------
// The overrideable convolutions
// ---------------------------------------------------------------------------

c10::OperatorHandle aten_op(const char* name, const char* overload = "") {
  auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
  TORCH_INTERNAL_ASSERT(handle.has_value(), name, " is not registered");
  return *handle;
}

// aten::convolution dispatches to convolution_overrideable on out-of-tree
// devices, whose default raises; the CPU fallback would reach that default
// too. Both run as aten::convolution instead (same arguments).
void convolution_overrideable(
    const c10::OperatorHandle& /*op*/,
    c10::DispatchKeySet ks,
    torch::jit::Stack* stack) {
  static const c10::OperatorHandle convolution = aten_op("aten::convolution");
  run_fallback(convolution, ks, stack, "the plugin has no convolution kernel");
}

// convolution_backward_overrideable lacks convolution_backward's bias_sizes
// argument; it is inserted (the bias has one entry per output channel).
void convolution_backward_overrideable(
    const c10::OperatorHandle& /*op*/,
    c10::DispatchKeySet ks,
    torch::jit::Stack* stack) {
  static const c10::OperatorHandle backward = aten_op("aten::convolution_backward");
  constexpr size_t kArgs = 10;
  auto args = torch::jit::last(*stack, kArgs);
  const at::Tensor weight = args[2].toTensor();
  const bool transposed = args[6].toBool();
  const int64_t groups = args[8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  torch::jit::Stack rewritten;
  rewritten.reserve(kArgs + 1);
  for (size_t i = 0; i < kArgs; ++i) {
    if (i == 3) {
      rewritten.emplace_back(std::vector<int64_t>{channels});
    }
    rewritten.push_back(args[i]);
  }
  torch::jit::drop(*stack, kArgs);
  run_fallback(backward, ks, &rewritten, "the plugin has no convolution_backward kernel");
  for (c10::IValue& r : rewritten) {
    stack->push_back(std::move(r));
  }
}

// ---------------------------------------------------------------------------
// Composite kernels less accurate than their operator, or that refuse the device
// ---------------------------------------------------------------------------

// On a device without a kernel PyTorch runs these operators'
// CompositeExplicitAutograd kernels, which are less accurate than the
// operator on the CPU or CUDA:
//   - native_layer_norm normalizes through native_batch_norm, whose
//     x * invstd + (-mean * invstd) cancels to about ulp(x / sqrt(eps))
//     instead of 0 where a row's variance is 0 (rows of one element, constant
//     rows): 1e-4 off where the CPU is exact;
//   - native_group_norm computes its statistics and the normalization in the
//     input's dtype: float16 results off by 2e-3 relative, where the CPU
//     computes in float.
// And this one's CompositeExplicitAutograd kernel refuses any device but
// CPU, CUDA and XPU, where the functional operator runs (through the CPU
// fallback):
//   - mode.values (torch.mode(..., out=)).
// They take the bridge's chain instead: the operator's decomposition (which
// computes in float) where that runs natively, else the CPU kernel.
void through_the_chain(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  run_fallback(op, ks, stack, "the plugin has no kernel for it");
}

constexpr const char* kCompositesReplacedByTheChain[] = {"native_layer_norm", "native_group_norm", "mode.values"};

} // namespace

void check_cpu_kernel_arguments(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (op == "aten::native_batch_norm_backward" || op == "aten::native_batch_norm_backward.out") {
    check_batch_norm_backward(op, args);
  }
}

const std::vector<int>& unannotated_mutations(const std::string& op) {
  static const std::vector<int> none;
  auto it = mutation_table().find(op);
  return it == mutation_table().end() ? none : it->second;
}

std::vector<int> host_operand_args(const c10::FunctionSchema& schema) {
  std::vector<int> args;
  if (!takes_host_indices(schema.name())) {
    return args;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (schema.arguments()[i].name() == "indices") {
      args.push_back(static_cast<int>(i));
    }
  }
  return args;
}

std::optional<std::vector<OutSpec>> rule_output_metadata(
    const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (op == "aten::_thnn_fused_lstm_cell" || op == "aten::_thnn_fused_gru_cell") {
    return bias_free_rnn_cell(op, args);
  }
  return std::nullopt;
}

void adjust_output_metadata(
    const std::string& op, c10::ArrayRef<c10::IValue> args, std::vector<OutSpec>& outs) {
  if (op == "aten::convolution" && args.size() >= 9) {
    conv_layouts(args, 0, false, outs);
  } else if (op == "aten::convolution_backward" && args.size() >= 10) {
    conv_layouts(args, 1, true, outs);
  }
}

void register_rule_kernels(torch::Library& aten, const std::vector<std::string>& native) {
  auto served = [&](const char* name) {
    return std::find(native.begin(), native.end(), name) != native.end();
  };
  if (!served("aten::convolution_overrideable")) {
    aten.impl(
        "convolution_overrideable",
        torch::CppFunction::makeFromBoxedFunction<&convolution_overrideable>());
  }
  if (!served("aten::convolution_backward_overrideable")) {
    aten.impl(
        "convolution_backward_overrideable",
        torch::CppFunction::makeFromBoxedFunction<&convolution_backward_overrideable>());
  }
  for (const char* name : kCompositesReplacedByTheChain) {
    if (!served(("aten::" + std::string(name)).c_str())) {
      aten.impl(name, torch::CppFunction::makeFromBoxedFunction<&through_the_chain>());
    }
  }
}

} // namespace torch_fl::bridge
