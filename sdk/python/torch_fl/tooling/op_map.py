"""Which ATen operators common PyTorch calls reach a PrivateUse1 device with.

The table maps a call in user code (a module, a function, a tensor method, an
operator symbol) to the ATen operators it dispatches to on a plugin device in
torch 2.13, forward and backward. It is an estimate for planning a port — the
shapes and flags at run time decide the exact overloads — so names are kept
at the operator level ("aten::addmm"), matched against a coverage table by
operator without overload.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch_fl.tooling.scan import CallSite

__all__ = ["OpUse", "forward_ops_of_opinfo", "likely_ops", "op_base"]


@dataclass(frozen=True)
class OpUse:
    """An operator the code is likely to run, and the calls that lead to it."""

    op: str  # "aten::convolution_backward"
    phase: str  # "forward", "backward" or "optimizer"
    sources: tuple[tuple[str, int, str], ...]  # (path, line, call)


def op_base(op: str) -> str:
    """ "aten::add.Tensor" -> "aten::add"."""
    name, _, _ = op.partition(".")
    return name if name.startswith("aten::") or "::" in name else f"aten::{name}"


_F = "torch.nn.functional."
_NN = "torch.nn."

# name -> (forward ops, backward ops)
_CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _add(names: Iterable[str], fwd: tuple[str, ...], bwd: tuple[str, ...] = ()) -> None:
    for n in names:
        _CALLS[n] = (fwd, bwd)


_CONV = (("aten::convolution",), ("aten::convolution_backward",))
_add([f"{_NN}Conv1d", f"{_NN}Conv2d", f"{_NN}Conv3d", f"{_NN}ConvTranspose1d",
      f"{_NN}ConvTranspose2d", f"{_NN}ConvTranspose3d", f"{_F}conv1d", f"{_F}conv2d",
      f"{_F}conv3d", f"{_F}conv_transpose2d"], *_CONV)
_add([f"{_NN}Linear", f"{_F}linear"], ("aten::addmm", "aten::mm"), ("aten::mm", "aten::sum"))
_add([f"{_NN}Bilinear"], ("aten::_trilinear",), ("aten::_trilinear",))
_add([f"{_NN}BatchNorm1d", f"{_NN}BatchNorm2d", f"{_NN}BatchNorm3d", f"{_F}batch_norm"],
     ("aten::native_batch_norm",), ("aten::native_batch_norm_backward",))
_add([f"{_NN}SyncBatchNorm"], ("aten::batch_norm_stats", "aten::batch_norm_gather_stats_with_counts",
                               "aten::batch_norm_elemt"),
     ("aten::batch_norm_backward_reduce", "aten::batch_norm_backward_elemt"))
_add([f"{_NN}LayerNorm", f"{_F}layer_norm"], ("aten::native_layer_norm",),
     ("aten::native_layer_norm_backward",))
_add([f"{_NN}GroupNorm", f"{_F}group_norm"], ("aten::native_group_norm",),
     ("aten::native_group_norm_backward",))
_add([f"{_NN}RMSNorm", f"{_F}rms_norm"], ("aten::_fused_rms_norm",), ("aten::_fused_rms_norm_backward",))
_add([f"{_NN}ReLU", f"{_F}relu", "torch.relu", ".relu", ".relu_"], ("aten::relu",),
     ("aten::threshold_backward",))
_add([f"{_NN}GELU", f"{_F}gelu"], ("aten::gelu",), ("aten::gelu_backward",))
_add([f"{_NN}SiLU", f"{_F}silu"], ("aten::silu",), ("aten::silu_backward",))
_add([f"{_NN}Sigmoid", "torch.sigmoid", f"{_F}sigmoid", ".sigmoid"], ("aten::sigmoid",),
     ("aten::sigmoid_backward",))
_add([f"{_NN}Tanh", "torch.tanh", f"{_F}tanh", ".tanh"], ("aten::tanh",), ("aten::tanh_backward",))
_add([f"{_NN}LeakyReLU", f"{_F}leaky_relu"], ("aten::leaky_relu",), ("aten::leaky_relu_backward",))
_add([f"{_NN}Dropout", f"{_F}dropout", f"{_NN}Dropout2d"], ("aten::native_dropout",),
     ("aten::native_dropout_backward",))
_add([f"{_NN}MaxPool2d", f"{_F}max_pool2d"], ("aten::max_pool2d_with_indices",),
     ("aten::max_pool2d_with_indices_backward",))
_add([f"{_NN}AvgPool2d", f"{_F}avg_pool2d"], ("aten::avg_pool2d",), ("aten::avg_pool2d_backward",))
# An output size of 1 (the usual global pool) runs as mean over the spatial dims.
_add([f"{_NN}AdaptiveAvgPool2d", f"{_F}adaptive_avg_pool2d"],
     ("aten::mean", "aten::_adaptive_avg_pool2d"), ("aten::_adaptive_avg_pool2d_backward",))
_add([f"{_NN}Upsample", f"{_F}interpolate"], ("aten::upsample_nearest2d", "aten::upsample_bilinear2d"),
     ("aten::upsample_nearest2d_backward", "aten::upsample_bilinear2d_backward"))
_add([f"{_NN}Embedding", f"{_F}embedding"], ("aten::embedding", "aten::index_select"),
     ("aten::embedding_dense_backward",))
_add([f"{_NN}CrossEntropyLoss", f"{_F}cross_entropy"], ("aten::_log_softmax", "aten::nll_loss_forward"),
     ("aten::nll_loss_backward", "aten::_log_softmax_backward_data"))
_add([f"{_NN}NLLLoss", f"{_F}nll_loss"], ("aten::nll_loss_forward",), ("aten::nll_loss_backward",))
_add([f"{_NN}MSELoss", f"{_F}mse_loss"], ("aten::mse_loss",), ("aten::mse_loss_backward",))
_add([f"{_NN}BCEWithLogitsLoss", f"{_F}binary_cross_entropy_with_logits"],
     ("aten::binary_cross_entropy_with_logits",), ("aten::sigmoid", "aten::sub", "aten::mul"))
_add([f"{_NN}Softmax", f"{_F}softmax", "torch.softmax", ".softmax"], ("aten::_softmax",),
     ("aten::_softmax_backward_data",))
_add([f"{_NN}LogSoftmax", f"{_F}log_softmax", "torch.log_softmax", ".log_softmax"],
     ("aten::_log_softmax",), ("aten::_log_softmax_backward_data",))
_add([f"{_NN}MultiheadAttention", f"{_F}scaled_dot_product_attention"],
     ("aten::bmm", "aten::_softmax", "aten::baddbmm"), ("aten::bmm", "aten::_softmax_backward_data"))
_add([f"{_NN}LSTM", f"{_NN}LSTMCell"], ("aten::_thnn_fused_lstm_cell", "aten::addmm"),
     ("aten::_thnn_fused_lstm_cell_backward_impl",))
_add([f"{_NN}GRU", f"{_NN}GRUCell"], ("aten::_thnn_fused_gru_cell", "aten::addmm"),
     ("aten::_thnn_fused_gru_cell_backward",))
_add(["torch.matmul", ".matmul", "@"], ("aten::mm", "aten::bmm"), ("aten::mm", "aten::bmm"))
_add(["torch.mm", ".mm"], ("aten::mm",), ("aten::mm",))
_add(["torch.bmm", ".bmm"], ("aten::bmm",), ("aten::bmm",))
_add(["torch.cat", "torch.concat"], ("aten::cat",), ())
_add(["torch.stack"], ("aten::cat",), ())
_add(["torch.where"], ("aten::where",), ("aten::where",))
_add(["torch.clamp", ".clamp", ".clamp_"], ("aten::clamp",), ("aten::where", "aten::ge"))
_add(["torch.exp", ".exp"], ("aten::exp",), ("aten::mul",))
_add(["torch.log", ".log"], ("aten::log",), ("aten::div",))
_add(["torch.sqrt", ".sqrt"], ("aten::sqrt",), ("aten::div",))
_add(["torch.pow", ".pow"], ("aten::pow",), ("aten::pow", "aten::mul"))
_add(["torch.abs", ".abs"], ("aten::abs",), ("aten::sgn",))
_add([".sum", "torch.sum"], ("aten::sum",), ("aten::expand",))
_add([".mean", "torch.mean"], ("aten::mean",), ("aten::div",))
_add([".var", "torch.var", ".std", "torch.std"], ("aten::var",), ("aten::var_mean",))
_add([".argmax", "torch.argmax"], ("aten::argmax",), ())
_add([".max", "torch.max", ".amax"], ("aten::max", "aten::amax"), ())
_add([".masked_fill", ".masked_fill_"], ("aten::masked_fill",), ())
_add([".float", ".half", ".bfloat16", ".double"], ("aten::_to_copy", "aten::copy_"), ())
_add(["torch.randn", "torch.randn_like", "torch.normal"], ("aten::normal_",), ())
_add(["torch.rand", "torch.rand_like"], ("aten::uniform_",), ())
_add(["torch.randint"], ("aten::random_",), ())
_add(["torch.zeros", "torch.zeros_like"], ("aten::zero_",), ())
_add(["torch.ones", "torch.ones_like", "torch.full"], ("aten::fill_",), ())
_add(["torch.arange"], ("aten::arange",), ())
_add(["+"], ("aten::add",), ())
_add(["-"], ("aten::sub",), ())
_add(["*"], ("aten::mul",), ())
_add(["/"], ("aten::div",), ())
_add(["=="], ("aten::eq",), ())
_add([f"{_NN}utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_"],
     ("aten::_foreach_norm", "aten::linalg_vector_norm", "aten::stack", "aten::clamp",
      "aten::_foreach_mul_"), ())
_add(["torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.GradScaler"],
     ("aten::mul", "aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"),
     ())

# Creation functions reach the device only with a device= argument.
_NEEDS_DEVICE = {"torch.randn", "torch.rand", "torch.randint", "torch.zeros", "torch.ones",
                 "torch.full", "torch.arange", "torch.normal"}

_FOREACH_ADAM = ("aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_lerp_",
                 "aten::_foreach_addcmul_", "aten::_foreach_sqrt", "aten::_foreach_div_",
                 "aten::_foreach_addcdiv_")
_SINGLE_ADAM = ("aten::mul_", "aten::add_", "aten::lerp_", "aten::addcmul_", "aten::sqrt",
                "aten::div_", "aten::addcdiv_")


def _optimizer_ops(site: CallSite) -> tuple[str, ...] | None:
    """Optimizers: on a plugin device torch picks fused kernels when asked
    (fused=True) and otherwise the foreach kernels (the device is in
    torch's foreach list), unless foreach=False."""
    name = site.name.rsplit(".", 1)[-1]
    if not site.name.startswith("torch.optim.") or name not in {"Adam", "AdamW", "SGD"}:
        return None
    fused = site.keyword("fused") is True
    foreach = site.keyword("foreach", None)
    if name in {"Adam", "AdamW"}:
        if fused:
            return (f"aten::_fused_{name.lower()}_",)
        return _SINGLE_ADAM if foreach is False else _FOREACH_ADAM
    if fused:
        return ("aten::_fused_sgd_",)
    return ("aten::add_", "aten::mul_") if foreach is False else ("aten::_foreach_add_",
                                                                   "aten::_foreach_mul_")


def likely_ops(calls: Iterable[CallSite]) -> list[OpUse]:
    """The operators `calls` are likely to run on the device, sorted by name.
    Backward operators count only when the code calls .backward()."""
    calls = list(calls)
    training = any(c.name == ".backward" for c in calls)
    found: dict[tuple[str, str], list[tuple[str, int, str]]] = {}

    def note(op: str, phase: str, site: CallSite) -> None:
        found.setdefault((op, phase), []).append((site.path, site.line, site.name))

    for site in calls:
        opt = _optimizer_ops(site)
        if opt is not None:
            for op in opt:
                note(op, "optimizer", site)
            continue
        entry = _CALLS.get(site.name)
        if entry is None:
            continue
        if site.name in _NEEDS_DEVICE and site.keyword("device", "absent") == "absent":
            continue
        fwd, bwd = entry
        for op in fwd:
            note(op, "forward", site)
        if training:
            for op in bwd:
                note(op, "backward", site)
    return [OpUse(op, phase, tuple(sorted(set(srcs))))
            for (op, phase), srcs in sorted(found.items())]


def forward_ops_of_opinfo(name: str) -> tuple[str, ...]:
    """The ATen operators an op_db (OpInfo) entry such as "nn.functional.conv2d"
    or "atan2" runs forward: from the table when the call is in it, otherwise
    the ATen operator of the same name ("linalg.norm" -> "aten::linalg_norm")."""
    for call in (f"torch.{name}", f"{_NN}{name[3:]}" if name.startswith("nn.") else "", f".{name}"):
        if call in _CALLS:
            return _CALLS[call][0]
    return (f"aten::{name.replace('.', '_')}",)
