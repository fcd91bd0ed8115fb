"""Softmax, log_softmax and the losses on flemu against the CPU: every dim,
half_to_float, backward; cross-entropy / nll_loss with class weights,
ignore_index and each reduction (2-D and spatial), binary cross-entropy (with
weights, and with logits), mse_loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from native_check import FLOAT_DTYPES, assert_close, make, run_native, tol

REDUCTIONS = ("mean", "sum", "none")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1], ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(dtype: torch.dtype, dim: int, log: bool) -> None:
    fn = F.log_softmax if log else F.softmax
    x = make((5, 7, 3), dtype, seed=1, low=-5, high=5)
    g = make((5, 7, 3), dtype, seed=2)
    xc = x.clone().requires_grad_()
    ref = fn(xc, dim=dim)
    ref.backward(g)
    name = "_log_softmax" if log else "_softmax"

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
        out = fn(xd, dim=dim)
        out.backward(g.to("flemu"))
        return out.detach(), xd.grad

    out, grad = run_native(run, [f"aten::{name}", f"aten::{name}_backward_data"])
    assert_close(out, ref.detach(), **tol(dtype, 4))
    assert_close(grad, xc.grad, **tol(dtype, 4))


def test_softmax_half_to_float_and_masked_rows() -> None:
    x = make((4, 9), torch.bfloat16, seed=3)
    out = run_native(lambda: torch.ops.aten._softmax(x.to("flemu"), 1, True), ["aten::_softmax"])
    assert_close(out, torch.softmax(x.float(), 1), **tol(torch.float32, 10))
    m = torch.tensor([[0.0, -float("inf"), 1.0], [-float("inf")] * 3])
    out = run_native(lambda: torch.softmax(m.to("flemu"), -1), ["aten::_softmax"])
    assert_close(out, torch.softmax(m, -1))


# Layouts PyTorch's is_contiguous() accepts though their strides are not the
# row-major ones: no elements (any strides; (1, 1, 1) is what empty tensors of
# sizes (5, 0, 0) get), and a size-1 dim with any stride.
CONTIGUOUS_LAYOUTS = [
    ((5, 0, 0), (1, 1, 1)),
    ((0, 3), (7, 5)),
    ((2, 0, 4), (0, 9, 3)),
    ((4, 1, 3), (3, 99, 1)),
    ((1, 6), (2, 1)),
]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("sizes,strides", CONTIGUOUS_LAYOUTS, ids=lambda v: "x".join(map(str, v)))
def test_softmax_of_any_layout_pytorch_calls_contiguous(sizes: tuple[int, ...], strides: tuple[int, ...],
                                                         log: bool) -> None:
    """The kernels ask for dense operands; what the host rightly calls dense
    runs natively, forward and backward."""
    fn = F.log_softmax if log else F.softmax
    assert torch.empty_strided(sizes, strides).is_contiguous(), "the case must be contiguous to PyTorch"
    x = make(sizes, torch.float32, seed=4, low=-3, high=3)
    g = make(sizes, torch.float32, seed=5)
    xc = x.clone().requires_grad_()
    ref = fn(xc, dim=-1)
    ref.backward(g)
    name = "_log_softmax" if log else "_softmax"

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = torch.empty_strided(sizes, strides, device="flemu").copy_(x.to("flemu")).requires_grad_()
        out = fn(xd, dim=-1)
        out.backward(torch.empty_strided(sizes, strides, device="flemu").copy_(g.to("flemu")))
        return out.detach(), xd.grad

    out, grad = run_native(run, [f"aten::{name}", f"aten::{name}_backward_data"])
    assert_close(out, ref.detach(), **tol(torch.float32, 4))
    assert_close(grad, xc.grad, **tol(torch.float32, 4))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_cross_entropy(reduction: str, weighted: bool) -> None:
    x = make((11, 6), torch.float32, seed=4, low=-3, high=3)
    t = torch.randint(0, 6, (11,), generator=torch.Generator().manual_seed(5))
    t[3] = -100
    t[7] = -100
    w = make((6,), torch.float32, seed=6, low=0.2, high=2) if weighted else None
    xc = x.clone().requires_grad_()
    ref = F.cross_entropy(xc, t, weight=w, reduction=reduction, ignore_index=-100)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = F.cross_entropy(xd, t.to("flemu"), weight=None if w is None else w.to("flemu"), reduction=reduction)
        out.sum().backward()
        return out.detach(), xd.grad

    out, grad = run_native(run, ["aten::nll_loss_forward", "aten::nll_loss_backward", "aten::_log_softmax"])
    assert_close(out, ref.detach(), **tol(torch.float32, 4))
    assert_close(grad, xc.grad, **tol(torch.float32, 4))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_nll_loss_dtypes_and_1d(dtype: torch.dtype) -> None:
    x = make((4, 5), dtype, seed=7)
    t = torch.tensor([0, 4, 2, 1])
    outs = run_native(lambda: [F.nll_loss(x.to("flemu"), t.to("flemu")), F.nll_loss(x[0].to("flemu"), t[1].to("flemu"))],
                      ["aten::nll_loss_forward"])
    assert_close(outs, [F.nll_loss(x, t), F.nll_loss(x[0], t[1])], **tol(dtype, 2))


def test_nll_loss_all_ignored_mean_is_nan() -> None:
    x = make((3, 4), torch.float32, seed=8)
    t = torch.full((3,), -100)
    out = run_native(lambda: F.nll_loss(x.to("flemu"), t.to("flemu")), ["aten::nll_loss_forward"])
    assert torch.isnan(out.cpu()), f"mean over no counted element must be NaN, got {out.cpu()}"


def test_nll_loss_target_out_of_range_fails() -> None:
    x = torch.zeros(2, 3, device="flemu")
    t = torch.tensor([0, 3], device="flemu")
    # The kernel reads the targets on the stream: the error surfaces at the sync.
    with pytest.raises(ValueError, match="out of bounds"):
        F.nll_loss(x, t)
        torch.flemu.synchronize()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_spatial_cross_entropy(reduction: str) -> None:
    x = make((2, 4, 3, 5), torch.float32, seed=9)
    t = torch.randint(0, 4, (2, 3, 5), generator=torch.Generator().manual_seed(10))
    t[0, 1, 2] = -100
    xc = x.clone().requires_grad_()
    ref = F.cross_entropy(xc, t, reduction=reduction)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = F.cross_entropy(xd, t.to("flemu"), reduction=reduction)
        out.sum().backward()
        return out.detach(), xd.grad

    out, grad = run_native(run, ["aten::nll_loss2d_forward", "aten::nll_loss2d_backward"])
    assert_close(out, ref.detach(), **tol(torch.float32, 4))
    assert_close(grad, xc.grad, **tol(torch.float32, 4))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_binary_cross_entropy(reduction: str, weighted: bool) -> None:
    p = make((6, 5), torch.float32, seed=11, low=0.01, high=0.99)
    y = make((6, 5), torch.float32, seed=12, low=0, high=1)
    w = make((5,), torch.float32, seed=13, low=0.5, high=2) if weighted else None
    pc = p.clone().requires_grad_()
    ref = F.binary_cross_entropy(pc, y, weight=w, reduction=reduction)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        pd = p.to("flemu").requires_grad_()
        out = F.binary_cross_entropy(pd, y.to("flemu"), weight=None if w is None else w.to("flemu"), reduction=reduction)
        out.sum().backward()
        return out.detach(), pd.grad

    out, grad = run_native(run, ["aten::binary_cross_entropy", "aten::binary_cross_entropy_backward"])
    assert_close(out, ref.detach(), **tol(torch.float32, 4))
    assert_close(grad, pc.grad, **tol(torch.float32, 4))


def test_binary_cross_entropy_saturates_like_the_cpu() -> None:
    p = torch.tensor([0.0, 1.0, 0.5])
    y = torch.tensor([1.0, 0.0, 1.0])
    out = run_native(lambda: F.binary_cross_entropy(p.to("flemu"), y.to("flemu"), reduction="none"),
                     ["aten::binary_cross_entropy"])
    assert_close(out, F.binary_cross_entropy(p, y, reduction="none"))


def test_binary_cross_entropy_with_logits() -> None:
    x = make((8, 3), torch.float32, seed=14, low=-6, high=6)
    y = make((8, 3), torch.float32, seed=15, low=0, high=1)
    pw = make((3,), torch.float32, seed=16, low=0.5, high=3)
    xc = x.clone().requires_grad_()
    ref = F.binary_cross_entropy_with_logits(xc, y, pos_weight=pw)
    ref.backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = F.binary_cross_entropy_with_logits(xd, y.to("flemu"), pos_weight=pw.to("flemu"))
        out.backward()
        return out.detach(), xd.grad

    out, grad = run_native(run, [])
    assert_close(out, ref.detach(), **tol(torch.float32, 4))
    assert_close(grad, xc.grad, **tol(torch.float32, 4))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss(dtype: torch.dtype, reduction: str) -> None:
    x = make((4, 6), dtype, seed=17)
    y = make((4, 6), dtype, seed=18)
    xc = x.clone().requires_grad_()
    ref = F.mse_loss(xc, y, reduction=reduction)
    ref.sum().backward()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.to("flemu").requires_grad_()
        out = F.mse_loss(xd, y.to("flemu"), reduction=reduction)
        out.sum().backward()
        return out.detach(), xd.grad

    out, grad = run_native(run, ["aten::mse_loss", "aten::mse_loss_backward"])
    assert_close(out, ref.detach(), **tol(dtype, 8))
    assert_close(grad, xc.grad, **tol(dtype, 8))
