"""Embedding and dropout on flemu: the embedding gather and its dense backward
(repeated indices, padding_idx, scale_grad_by_freq, int32 indices, every
floating dtype) against the CPU; native_dropout and its backward by their
contract (the output is the input masked and scaled, the gradient follows the
same mask, the kept fraction is 1 - p within a binomial bound, reproducible
from the seed, identity in eval and for p = 0, zeros for p = 1)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from nn_parity import ALL_FLOATS, assert_close, make, reference_dtype, run_native
from torch import nn

EMB_OPS = ("aten::embedding", "aten::embedding_dense_backward")


def embedding_case(dtype: torch.dtype, index_dtype: torch.dtype = torch.int64, **kwargs: object) -> None:
    num, dim = 11, 6
    weight = make((num, dim), 1).to(dtype)
    idx = torch.tensor([[1, 3, 3, 0], [10, 3, 5, 1], [2, 2, 2, 9]], dtype=index_dtype)
    grad = make((3, 4, dim), 2).to(dtype)
    ref_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    w_ref = weight.to(ref_dtype).detach().requires_grad_()
    ref = F.embedding(idx, w_ref, **kwargs)
    ref.backward(grad.to(ref_dtype))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        w = weight.to("flemu").requires_grad_()
        out = F.embedding(idx.to("flemu"), w, **kwargs)
        out.backward(grad.to("flemu"))
        return out, w.grad

    out, gw = run_native(run, EMB_OPS)  # type: ignore[misc]
    assert_close(out, ref, dtype, "embedding output")
    assert_close(gw, w_ref.grad, dtype, "embedding weight gradient", scale=2.0)


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_embedding(dtype: torch.dtype) -> None:
    embedding_case(dtype)


@pytest.mark.parametrize("kwargs", [{"padding_idx": 3}, {"scale_grad_by_freq": True},
                                    {"padding_idx": 2, "scale_grad_by_freq": True}],
                         ids=["padding_idx", "scale_grad_by_freq", "both"])
def test_embedding_options(kwargs: dict) -> None:
    embedding_case(torch.float32, **kwargs)


def test_embedding_int32_indices_and_module() -> None:
    embedding_case(torch.float32, index_dtype=torch.int32)
    m = nn.Embedding(7, 3, padding_idx=0).to("flemu")
    out = run_native(lambda: m(torch.tensor([0, 4, 6], device="flemu")), ("aten::embedding",))
    assert float(out[0].detach().abs().sum().cpu()) == 0.0, "the padding row of nn.Embedding starts at zero"  # type: ignore[index]


def test_embedding_index_out_of_range_is_reported() -> None:
    w = torch.zeros(4, 2, device="flemu")
    # Indices live on the device: the kernel finds the bad one on the stream and
    # the next synchronization reports it (as the device's error).
    with pytest.raises((RuntimeError, ValueError), match="index 4 at position 1 is out of range"):
        F.embedding(torch.tensor([1, 4], device="flemu"), w)
        torch.flemu.synchronize()


DROP_OPS = ("aten::native_dropout", "aten::native_dropout_backward")


def binomial_bound(n: int, p: float, sigmas: float = 6.0) -> float:
    """Half-width of a `sigmas`-sigma interval of the kept fraction of n trials."""
    return sigmas * math.sqrt(p * (1 - p) / n) + 1.0 / n


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_contract(p: float, dtype: torch.dtype) -> None:
    torch.manual_seed(1234)
    x = (make((64, 129), 3, 0.5, 2.0)).to(dtype)
    g = make((64, 129), 4).to(dtype)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        y = F.dropout(xd, p, training=True)
        y.backward(g.to("flemu"))
        return y, xd.grad

    y, gx = run_native(run, DROP_OPS)  # type: ignore[misc]
    y, gx = y.cpu(), gx.cpu()
    kept = y != 0  # inputs are >= 0.5, so a zero output means dropped
    scale = 1.0 / (1.0 - p)
    ref = reference_dtype(dtype)
    ref_y = torch.where(kept, x.to(ref) * scale, torch.zeros((), dtype=ref))
    ref_g = torch.where(kept, g.to(ref) * scale, torch.zeros((), dtype=ref))
    assert_close(y, ref_y, dtype, "dropout output")
    assert_close(gx, ref_g, dtype, "dropout gradient")
    frac = float(kept.float().mean())
    bound = binomial_bound(kept.numel(), 1 - p)
    assert abs(frac - (1 - p)) < bound, f"kept fraction {frac:.4f}, expected {1 - p} +- {bound:.4f}"


def test_dropout_reproducible_and_seed_dependent() -> None:
    x = torch.ones(1000, device="flemu")

    def draw(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return F.dropout(x, 0.5, training=True).cpu()

    a, b, c = run_native(lambda: (draw(7), draw(7), draw(8)), ("aten::native_dropout",))  # type: ignore[misc]
    assert torch.equal(a, b), "the same seed must give the same mask"
    assert not torch.equal(a, c), "different seeds must give different masks"
    # Consecutive calls advance the generator.
    torch.manual_seed(7)
    first = F.dropout(x, 0.5, training=True).cpu()
    second = F.dropout(x, 0.5, training=True).cpu()
    assert not torch.equal(first, second)


def test_dropout_edge_cases() -> None:
    x = make((5, 7), 5).float().to("flemu")

    def run() -> tuple[torch.Tensor, ...]:
        return (F.dropout(x, 0.0, training=True), F.dropout(x, 1.0, training=True),
                F.dropout(x, 0.5, training=False), nn.Dropout(0.3).eval()(x))

    p0, p1, ev, mod = run_native(run, ())  # type: ignore[misc]
    assert torch.equal(p0.cpu(), x.cpu()), "p=0 keeps everything"
    assert float(p1.abs().sum().cpu()) == 0.0, "p=1 drops everything"
    assert torch.equal(ev.cpu(), x.cpu()) and torch.equal(mod.cpu(), x.cpu()), "eval mode is the identity"


def test_native_dropout_direct_train_false() -> None:
    x = make((3, 4), 6).float().to("flemu")
    out, mask = run_native(lambda: torch.native_dropout(x, 0.5, False), ("aten::native_dropout",))  # type: ignore[misc]
    assert torch.equal(out.cpu(), x.cpu())
    assert mask.dtype == torch.bool and bool(mask.all().cpu())


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_dense_and_strided_dropout_draw_the_same_elements(dtype: torch.dtype) -> None:
    # Dense operands take a vectorized path, strided ones the element walk:
    # element k of the logical order draws the same Philox word on both, so
    # one seed gives one mask whatever the layout (and thread split).
    x = make((300, 257), 9, 0.5, 2.0).to(dtype)
    dense = x.to("flemu")
    strided = x.t().contiguous().to("flemu").t()
    assert dense.is_contiguous() and not strided.is_contiguous()

    def draw(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(11)
        out, mask = torch.native_dropout(t, 0.3, True)
        grad = torch.ops.aten.native_dropout_backward(torch.ones_like(t), mask, 2.0)
        return out.cpu(), mask.cpu(), grad.cpu()

    (do, dm, dg), (so, sm, sg) = run_native(lambda: (draw(dense), draw(strided)), DROP_OPS)  # type: ignore[misc]
    assert torch.equal(dm, sm), f"{int((dm != sm).sum())} of {dm.numel()} mask elements differ"
    assert torch.equal(do, so) and torch.equal(dg, sg)
    assert torch.equal(dg, torch.where(dm, 2.0, 0.0).to(dtype))
