"""scaled_dot_product_attention on flemu. PyTorch picks a fused SDPA backend
only for CPU/CUDA-like devices; on a PrivateUse1 device it runs the math path
(`_scaled_dot_product_attention_math`, CompositeImplicitAutograd), whose parts
(bmm, _safe_softmax's _softmax/isneginf/all/where, masked fills, scaling) are
flemu kernels. These tests check forward and backward against the CPU with
every CPU fallback forbidden."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from native_check import assert_close, make, run_native, tol

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


# PyTorch rejects attn_mask together with is_causal, so causal runs unmasked.
@pytest.mark.parametrize("mask,causal", [("none", False), ("bool", False), ("float", False), ("none", True)],
                         ids=["plain", "bool_mask", "float_mask", "causal"])
def test_sdpa_forward_backward(mask: str, causal: bool) -> None:
    q, k, v = _qkv(torch.float32)
    m = _mask(mask)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=m, is_causal=causal)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, ...]:
        qd, kd, vd = (t.to("flemu").requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=None if m is None else m.to("flemu"), is_causal=causal)
        out.sum().backward()
        return out.detach(), qd.grad, kd.grad, vd.grad

    outs = run_native(run, ["aten::bmm", "aten::_softmax", "aten::_softmax_backward_data"])
    for o, r in zip(outs, (ref.detach(), qc.grad, kc.grad, vc.grad)):
        assert_close(o, r, atol=1e-5, rtol=1e-4)


def test_sdpa_fully_masked_row_is_zero_not_nan() -> None:
    q, k, v = _qkv(torch.float32, seed=3)
    m = torch.ones(1, 1, 7, 7, dtype=torch.bool)
    m[..., 2, :] = False  # query 2 sees nothing
    out = run_native(lambda: F.scaled_dot_product_attention(q.to("flemu"), k.to("flemu"), v.to("flemu"),
                                                            attn_mask=m.to("flemu")), ["aten::_softmax"])
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert_close(out, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_sdpa_dtypes(dtype: torch.dtype) -> None:
    q, k, v = _qkv(dtype, seed=5)
    out = run_native(lambda: F.scaled_dot_product_attention(q.to("flemu"), k.to("flemu"), v.to("flemu"), scale=0.3),
                     ["aten::bmm"])
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
