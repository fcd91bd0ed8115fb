"""Reductions on flemu against the CPU: max/min (whole tensor and over a dim,
with indices and backward), argmax/argmin, amax/amin, var/std/var_mean/
std_mean with corrections, all/any, prod; NaN handling, keepdim,
non-contiguous input, and large inputs split over threads."""

from __future__ import annotations

import pytest
import torch
from native_check import assert_close, make, run_native, tol

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_max_min(dtype: torch.dtype) -> None:
    x = make((5, 8, 3), dtype, seed=1, low=-20, high=20, noncontiguous=True)

    def run() -> list:
        xd = x.to("flemu")
        return [xd.max(), xd.min(), *xd.max(1), *xd.min(0, keepdim=True), xd.argmax(), xd.argmin(2),
                xd.argmax(1, keepdim=True), xd.amax((0, 2)), xd.amin(-1, keepdim=True)]

    outs = run_native(run, ["aten::max", "aten::min", "aten::max.dim", "aten::min.dim", "aten::argmax",
                            "aten::argmin", "aten::amax", "aten::amin"])
    refs = [x.max(), x.min(), *x.max(1), *x.min(0, keepdim=True), x.argmax(), x.argmin(2), x.argmax(1, keepdim=True),
            x.amax((0, 2)), x.amin(-1, keepdim=True)]
    assert_close(outs, refs)


def test_max_ties_pick_the_first_and_nan_wins() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [0.0, float("nan"), 5.0, float("nan")]])
    outs = run_native(lambda: [*x.to("flemu").max(1), x.to("flemu").argmax(1), x.to("flemu").max()],
                      ["aten::max.dim", "aten::argmax", "aten::max"])
    assert_close(outs, [*x.max(1), x.argmax(1), x.max()])


def test_max_dim_backward_and_amax_backward() -> None:
    x = make((4, 6), torch.float32, seed=2)
    xc = x.clone().requires_grad_()
    (xc.max(1).values.sum() + xc.amax(0).sum()).backward()

    def run() -> torch.Tensor:
        xd = x.to("flemu").requires_grad_()
        (xd.max(1).values.sum() + xd.amax(0).sum()).backward()
        return xd.grad

    assert_close(run_native(run, ["aten::max.dim", "aten::amax"]), xc.grad)


def test_empty_reduction_is_an_error() -> None:
    x = torch.empty(0, 3, device="flemu")
    with pytest.raises(ValueError, match="zero-size"):
        x.max()
        torch.flemu.synchronize()


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_var_std(dtype: torch.dtype) -> None:
    x = make((6, 5, 4), dtype, seed=3, low=-3, high=5, noncontiguous=True)

    def run() -> list:
        xd = x.to("flemu")
        return [xd.var(), xd.std(1), xd.var((0, 2), correction=0, keepdim=True), *torch.var_mean(xd, 1),
                *torch.std_mean(xd, (0, 1), correction=2), xd.var(2, correction=0)]

    outs = run_native(run, ["aten::var.correction", "aten::std.correction", "aten::var_mean.correction",
                            "aten::std_mean.correction"])
    refs = [x.var(), x.std(1), x.var((0, 2), correction=0, keepdim=True), *torch.var_mean(x, 1),
            *torch.std_mean(x, (0, 1), correction=2), x.var(2, correction=0)]
    for o, r in zip(outs, refs):
        assert_close(o, r, **tol(dtype, 8))


@pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")
def test_var_backward_and_single_element() -> None:
    x = make((5, 7), torch.float32, seed=4)
    xc = x.clone().requires_grad_()
    xc.var(1).sum().backward()

    def run() -> torch.Tensor:
        xd = x.to("flemu").requires_grad_()
        xd.var(1).sum().backward()
        return xd.grad

    assert_close(run_native(run, ["aten::var.correction"]), xc.grad, **tol(torch.float32, 10))
    one = torch.tensor([3.0])
    assert_close(run_native(lambda: one.to("flemu").var(), ["aten::var.correction"]), one.var())


@pytest.mark.parametrize("dtype", (torch.bool, torch.float32, torch.int64, torch.uint8), ids=str)
def test_all_any(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype, seed=5, low=0, high=1)
    if dtype.is_floating_point:
        x = x.round()
    z = torch.zeros(0, 3, dtype=dtype)

    def run() -> list:
        xd = x.to("flemu")
        return [xd.all(), xd.any(), xd.all(1), xd.any(0, keepdim=True), torch.all(xd, dim=(0, 1)),
                z.to("flemu").all(), z.to("flemu").any()]

    outs = run_native(run, ["aten::all", "aten::any", "aten::all.dim", "aten::any.dim", "aten::all.dims"])
    assert_close(outs, [x.all(), x.any(), x.all(1), x.any(0, keepdim=True), torch.all(x, dim=(0, 1)), z.all(), z.any()])


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.int64, torch.int32), ids=str)
def test_prod(dtype: torch.dtype) -> None:
    x = make((3, 4), dtype, seed=6, low=1, high=3) if not dtype.is_floating_point else make((3, 4), dtype, seed=6, low=0.5, high=1.5)
    out = run_native(lambda: x.to("flemu").prod(), ["aten::prod"])
    assert_close(out, x.prod(), **tol(dtype, 4))


@pytest.mark.slow
def test_large_reductions_split_over_threads() -> None:
    x = make((3, 200_000), torch.float32, seed=7)
    y = make((300_000,), torch.float32, seed=8)
    outs = run_native(lambda: [x.to("flemu").max(1).values, x.to("flemu").var(1), y.to("flemu").argmax(),
                               y.to("flemu").std(), (y.to("flemu") > 0).all()],
                      ["aten::max.dim", "aten::var.correction", "aten::argmax", "aten::std.correction", "aten::all"])
    refs = [x.max(1).values, x.var(1), y.argmax(), y.std(), (y > 0).all()]
    for o, r in zip(outs, refs):
        assert_close(o, r, atol=1e-5, rtol=1e-4)
