"""scaled_dot_product_attention on flemu. The bridge's choice function
(csrc/sdp_choice.cpp) sends F.scaled_dot_product_attention to the overrideable
fused backend, whose forward and backward are flemu kernels
(kernels/attention.cpp); with that backend disabled
(torch.nn.attention.sdpa_kernel) PyTorch runs the math path
(`_scaled_dot_product_attention_math`), whose parts (bmm, _safe_softmax's
_softmax/isneginf/all/where, masked fills, scaling) are flemu kernels too.
Calls the fused kernels decline run the bridge's decomposition of the same op
(torch_fl/_decomp.py). Every test compares with the CPU with every CPU
fallback forbidden, and checks from op_stats which path ran."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
import torch_fl
from native_check import assert_close, make, run_native, tol
from torch.nn.attention import SDPBackend, sdpa_kernel

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
FUSED_BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
MATH_OPS = ["aten::bmm", "aten::_softmax", "aten::_softmax_backward_data"]
# Which backend a test runs, and the ops that must have run natively there.
BACKENDS = {
    "fused": (contextlib.nullcontext, [FUSED, FUSED_BACKWARD]),
    "math": (lambda: sdpa_kernel([SDPBackend.MATH]), MATH_OPS),
}

SHAPE = (2, 3, 7, 8)  # batch, heads, sequence, head dim


def _qkv(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(make(SHAPE, dtype, seed=seed + i, low=-1, high=1) for i in range(3))  # type: ignore[return-value]


def _mask(kind: str) -> torch.Tensor | None:
    if kind == "none":
        return None
    g = torch.Generator().manual_seed(9)
    if kind == "bool":
        m = torch.rand(2, 1, 7, 7, generator=g) > 0.3
        m[..., 0] = True  # every query attends to something
        return m
    return torch.randn(2, 1, 1, 7, generator=g)  # additive float mask, broadcast over heads and queries


def _permuted_qkv(seed: int) -> tuple[torch.Tensor, ...]:
    """q, k, v as a fused projection hands them over: views of one
    [batch, seq, 3, heads, dim] tensor, permuted (no dense operand)."""
    b, h, s, d = SHAPE
    qkv = make((b, s, 3, h, d), torch.float32, seed=seed, low=-1, high=1)
    return tuple(qkv.permute(2, 0, 3, 1, 4).unbind(0))


# PyTorch rejects attn_mask together with is_causal, so causal runs unmasked.
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("mask,causal,layout",
                         [("none", False, "dense"), ("bool", False, "dense"), ("float", False, "dense"),
                          ("none", True, "dense"), ("bool", False, "permuted")],
                         ids=["plain", "bool_mask", "float_mask", "causal", "permuted_bool_mask"])
def test_sdpa_forward_backward(backend: str, mask: str, causal: bool, layout: str) -> None:
    q, k, v = _qkv(torch.float32) if layout == "dense" else _permuted_qkv(seed=11)
    m = _mask(mask)
    qc, kc, vc = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=m, is_causal=causal)
    grad = make(ref.shape, torch.float32, seed=21)
    ref.backward(grad)
    context, expected_ops = BACKENDS[backend]

    def run() -> tuple[torch.Tensor, ...]:
        qd, kd, vd = (t.to("flemu").detach().requires_grad_() for t in (q, k, v))
        if layout == "permuted":  # .to() keeps the head-major order of the strides
            assert not qd.is_contiguous()
        with context():
            out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=None if m is None else m.to("flemu"),
                                                 is_causal=causal)
        out.backward(grad.to("flemu"))
        return out.detach(), qd.grad, kd.grad, vd.grad

    with torch_fl.op_stats_scope() as scope:
        outs = run_native(run, expected_ops)
    assert not any(r.decomposed for r in scope.table if r.op in (FUSED, FUSED_BACKWARD)), scope.table
    if backend == "math":
        assert scope.table.get(FUSED).calls == 0, scope.table
    for o, r in zip(outs, (ref.detach(), qc.grad, kc.grad, vc.grad)):
        assert_close(o, r, atol=1e-5, rtol=1e-4)


def test_sdpa_bias_gradient_runs_the_decomposition() -> None:
    """A float mask that requires grad: the fused backward declines (it has no
    bias gradient) and the bridge's decomposition computes all four grads."""
    q, k, v = _qkv(torch.float32, seed=13)
    bias = make((2, 1, 7, 7), torch.float32, seed=14)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    ref = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3])
    ref.sum().backward()

    def run() -> list[torch.Tensor]:
        dev = [t.to("flemu").requires_grad_() for t in (q, k, v, bias)]
        out = F.scaled_dot_product_attention(*dev[:3], attn_mask=dev[3])
        out.sum().backward()
        return [out.detach()] + [t.grad for t in dev]

    with torch_fl.op_stats_scope() as scope:
        outs = run_native(run, [FUSED])
    assert scope.table.get(FUSED_BACKWARD).decomposed == 1, scope.table
    for o, r in zip(outs, [ref.detach()] + [t.grad for t in leaves]):
        assert_close(o, r, atol=1e-5, rtol=1e-4)


def test_sdpa_dropout_takes_the_math_backend() -> None:
    q, k, v = (t.to("flemu") for t in _qkv(torch.float32, seed=15))
    with torch_fl.op_stats_scope() as scope:
        torch.manual_seed(0)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        torch.flemu.synchronize()
    assert out.shape == q.shape
    assert scope.table.get(FUSED).calls == 0, scope.table
    assert scope.table.get("aten::bmm").native > 0, scope.table
    # With only the fused backend allowed, the error says why it cannot serve.
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]), pytest.raises(RuntimeError, match="dropout_p=0"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


def test_sdpa_fully_masked_row_is_zero_not_nan() -> None:
    q, k, v = _qkv(torch.float32, seed=3)
    m = torch.ones(1, 1, 7, 7, dtype=torch.bool)
    m[..., 2, :] = False  # query 2 sees nothing
    out = run_native(lambda: F.scaled_dot_product_attention(q.to("flemu"), k.to("flemu"), v.to("flemu"),
                                                            attn_mask=m.to("flemu")), [FUSED])
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert_close(out, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_sdpa_dtypes(dtype: torch.dtype) -> None:
    q, k, v = _qkv(dtype, seed=5)
    out = run_native(lambda: F.scaled_dot_product_attention(q.to("flemu"), k.to("flemu"), v.to("flemu"), scale=0.3),
                     [FUSED])
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3).to(dtype)
    assert_close(out, ref, **tol(dtype, 4))


def test_multihead_attention_module() -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    x = make((3, 5, 16), torch.float32, seed=7)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    ref, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)
    dev = mha.to("flemu")
    out = run_native(lambda: dev(x.to("flemu"), x.to("flemu"), x.to("flemu"), key_padding_mask=pad.to("flemu"),
                                 need_weights=False)[0], [])
    assert_close(out.detach(), ref.detach(), atol=1e-5, rtol=1e-4)
