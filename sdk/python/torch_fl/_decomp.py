"""Step 1 of the fallback chain: PyTorch's own decomposition of an operator the
plugin lacks, used only when every operator it decomposes into runs natively on
the device and its outputs have the operator's own metadata (shape, dtype, and
the layout where the operator promises one), checked by tracing on meta
tensors. The bridge asks once per operator and dtype and keeps the answer."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = ["DEVICE_ONLY", "has_decomposition", "install", "run", "usable"]

_device_type = ""
_table: dict[str, Callable[..., Any]] | None = None
_bridge_ops: frozenset[str] = frozenset()  # served by the bridge for every plugin


def _schema_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _decompositions() -> dict[str, Callable[..., Any]]:
    global _table
    if _table is None:
        from torch._decomp import decomposition_table

        # torch._refs decompositions lower to prims, which a plugin never
        # serves, so only ATen-level decompositions can run natively.
        _table = {
            _schema_name(op): fn
            for op, fn in decomposition_table.items()
            if isinstance(op, torch._ops.OpOverload)
            and not getattr(fn, "__module__", "").startswith("torch._refs")
            and not any(a.is_out for a in op._schema.arguments)
        }
    return _table


# Operators PyTorch sends every non-CPU device to but implements only for
# CUDA: there is no CPU kernel to fall back to, so the bridge decomposes them
# itself, whatever runs the parts. Layouts follow ATen's CUDA kernels so a
# plugin may implement either half natively.
def _lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
               input_bias: torch.Tensor | None = None,
               hidden_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, dim=1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], dim=1)


def _lstm_cell_backward(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None,
                        cx: torch.Tensor, cy: torch.Tensor, workspace: torch.Tensor,
                        has_bias: bool) -> tuple[torch.Tensor | None, ...]:
    i, f, g, o = workspace.chunk(4, dim=1)
    tanh_cy = cy.tanh()
    gcy = torch.zeros_like(cy) if grad_cy is None else grad_cy
    if grad_hy is not None:
        gcy = gcy + grad_hy * o * (1 - tanh_cy * tanh_cy)
        go = grad_hy * tanh_cy * o * (1 - o)
    else:
        go = torch.zeros_like(o)
    gi = gcy * g * i * (1 - i)
    gf = gcy * cx * f * (1 - f)
    gg = gcy * i * (1 - g * g)
    grad_gates = torch.cat([gi, gf, gg, go], dim=1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, gcy * f, grad_bias


def _gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
              input_bias: torch.Tensor | None = None,
              hidden_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, dim=1)
    hr, hz, hn = hidden_gates.chunk(3, dim=1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], dim=1)


def _gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor,
                       has_bias: bool) -> tuple[torch.Tensor | None, ...]:
    r, z, n, hx, hn = workspace.chunk(5, dim=1)
    grad_hx = grad_hy * z
    gz = grad_hy * (hx - n) * z * (1 - z)
    gn = grad_hy * (1 - z) * (1 - n * n)
    gr = gn * hn * r * (1 - r)
    grad_input_gates = torch.cat([gr, gz, gn], dim=1)
    grad_hidden_gates = torch.cat([gr, gz, gn * r], dim=1)
    if has_bias:
        return (grad_input_gates, grad_hidden_gates, grad_hx,
                grad_input_gates.sum(0), grad_hidden_gates.sum(0))
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None


# Fused attention (csrc/sdp_choice.cpp picks it where the plugin has a kernel
# for the forward): the reference semantics, for a backward the plugin lacks
# and for calls its kernel declines. Computed in float32 (float64 for float64
# inputs); a fully masked row attends to nothing (output 0, logsumexp -inf).
def _attention_probs(q: torch.Tensor, k: torch.Tensor, attn_bias: torch.Tensor | None, is_causal: bool,
                     scale: float | None, logsumexp: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, float]:
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = scale if scale is not None else q.size(-1) ** -0.5
    scores = torch.matmul(q.to(acc), k.to(acc).transpose(-2, -1)) * s
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        scores = scores + attn_bias.to(acc)
    lse = (torch.logsumexp(scores, -1) if logsumexp is None else logsumexp.to(acc)).unsqueeze(-1)
    probs = torch.where(lse.isneginf(), 0.0, torch.exp(scores - lse))
    return probs, lse.squeeze(-1), s


def _fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                     return_debug_mask: bool = False, *, scale: float | None = None) -> tuple[Any, ...]:
    if dropout_p != 0.0 or return_debug_mask:
        raise RuntimeError(
            "_scaled_dot_product_fused_attention_overrideable: the bridge's decomposition has no attention "
            f"dropout or debug mask (dropout_p={dropout_p}, return_debug_mask={return_debug_mask}); "
            "call F.scaled_dot_product_attention, which takes the math backend for dropout")
    probs, lse, _ = _attention_probs(query, key, attn_bias, is_causal, scale)
    out = torch.matmul(probs, value.to(probs.dtype)).to(query.dtype)
    seed = torch.zeros((), dtype=torch.long, device=query.device)
    return out, lse.float(), None, None, query.size(-2), key.size(-2), seed, seed.clone(), None


def _fused_attention_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                              value: torch.Tensor, attn_bias: torch.Tensor | None,
                              grad_input_mask: list[bool], out: torch.Tensor, logsumexp: torch.Tensor,
                              cum_seq_q: Any, cum_seq_k: Any, max_q: int, max_k: int, dropout_p: float,
                              is_causal: bool, philox_seed: Any, philox_offset: Any, *,
                              scale: float | None = None) -> tuple[torch.Tensor | None, ...]:
    probs, _, s = _attention_probs(query, key, attn_bias, is_causal, scale, logsumexp)
    go = grad_out.to(probs.dtype)
    grad_v = torch.matmul(probs.transpose(-2, -1), go)
    grad_p = torch.matmul(go, value.to(probs.dtype).transpose(-2, -1))
    grad_s = probs * (grad_p - (go * out.to(probs.dtype)).sum(-1, keepdim=True))
    grad_q = torch.matmul(grad_s, key.to(probs.dtype)) * s
    grad_k = torch.matmul(grad_s.transpose(-2, -1), query.to(probs.dtype)) * s
    grad_bias = None
    if attn_bias is not None and grad_input_mask[3]:
        grad_bias = grad_s.sum_to_size(attn_bias.shape).to(attn_bias.dtype)
    return (grad_q.to(query.dtype) if grad_input_mask[0] else None,
            grad_k.to(key.dtype) if grad_input_mask[1] else None,
            grad_v.to(value.dtype) if grad_input_mask[2] else None,
            grad_bias)


DEVICE_ONLY: dict[str, Callable[..., Any]] = {
    "aten::_scaled_dot_product_fused_attention_overrideable": _fused_attention,
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": _fused_attention_backward,
    "aten::_thnn_fused_lstm_cell": _lstm_cell,
    "aten::_thnn_fused_lstm_cell_backward_impl": _lstm_cell_backward,
    "aten::_thnn_fused_gru_cell": _gru_cell,
    "aten::_thnn_fused_gru_cell_backward": _gru_cell_backward,
}


def has_decomposition(op_name: str) -> bool:
    return op_name in DEVICE_ONLY or op_name in _decompositions()


def _runs_natively(name: str, dtype: torch.dtype | None) -> bool:
    from torch_fl import _C

    if not name.startswith("aten::"):
        return False  # prims and friends may route back to the op being decomposed
    if name in _bridge_ops:
        return True
    if dtype is not None and _C.has_native_kernel(name, dtype):
        return True
    # Composite ops run as the ops they are made of (to.dtype, expand, ...).
    return any(
        torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        for key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd")
    )


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type == _device_type:
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type == _device_type:
        return torch.device("meta")
    return x


def _traced(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[list[tuple[str, torch.dtype | None]], Any]:
    """The operators `fn` runs on meta tensors, and what it returns there."""
    calls: list[tuple[str, torch.dtype | None]] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), kw=None):  # noqa: ANN001
            kw = kw or {}
            dtype = next(
                (t.dtype for t in torch.utils._pytree.tree_leaves((a, kw))
                 if isinstance(t, torch.Tensor)),
                None,
            )
            calls.append((_schema_name(func), dtype))
            return func(*a, **kw)

    meta_args, meta_kwargs = tree_map(_to_meta, (args, kwargs))
    with Recorder():
        out = fn(*meta_args, **meta_kwargs)
    return calls, out


def _same_metadata(decomposed: Any, expected: Any) -> bool:
    """Whether a decomposition's outputs have the operator's metadata: shapes and
    dtypes always, strides where the operator's output has a layout of its own
    (not row-major, e.g. channels_last)."""
    got = torch.utils._pytree.tree_leaves(decomposed)
    want = torch.utils._pytree.tree_leaves(expected)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
            return False
        if not isinstance(w, torch.Tensor):
            continue
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        if w.numel() > 1 and not w.is_contiguous() and g.stride() != w.stride():
            return False
    return True


def _op(op_name: str) -> torch._ops.OpOverload:
    namespace, _, rest = op_name.partition("::")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return getattr(packet, overload or "default")


def usable(op_name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the decomposition of `op_name` may serve this call natively."""
    if op_name in DEVICE_ONLY:
        return True
    fn = _decompositions().get(op_name)
    if fn is None:
        return False
    try:
        parts, out = _traced(fn, args, kwargs)
        if not parts or not all(name != op_name and _runs_natively(name, dtype)
                                for name, dtype in parts):
            return False
        meta_args, meta_kwargs = tree_map(_to_meta, (args, kwargs))
        return _same_metadata(out, _op(op_name)(*meta_args, **meta_kwargs))
    except Exception:  # a decomposition that cannot be traced or checked is not used
        return False


def run(op_name: str, args: tuple, kwargs: dict) -> Any:
    """Runs the decomposition of `op_name` (the bridge asked usable() first)."""
    fn = DEVICE_ONLY.get(op_name) or _decompositions()[op_name]
    return fn(*args, **kwargs)


def install(device_type: str) -> None:
    """Hands the decomposition step to the bridge's fallback chain."""
    from torch_fl import _C

    global _device_type, _bridge_ops
    _device_type = device_type
    _bridge_ops = frozenset(_C.bridge_ops())
    _C.set_decomposer(has_decomposition, usable, run)
