"""Normalization on flemu against the CPU: batch norm in training (batch
statistics, running-stat update with momentum and unbiased variance, cumulative
momentum=None) and eval (running statistics), without running stats and
without affine parameters; group norm and layer norm with and without affine
parameters; forward and backward, odd and non-contiguous shapes, every
floating dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_parity import (
    ALL_FLOATS,
    assert_close,
    check_forward_backward,
    make,
    noncontiguous,
    run_native,
)
from torch import nn

# The last two: per channel, 8 runs of 16 (a 4x4 map, the kernel's groups of
# 8 and 32 with nothing left over), and 2 runs of 2,805 (partial sums folded
# into the total every 4,096 elements, in the middle of a run).
BN_SHAPES = [(4, 3, 5, 7), (6, 5), (3, 4, 9), (2, 3, 2, 3, 4), (8, 5, 4, 4), (2, 3, 51, 55)]
BN_MODULE = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}


def batch_norm_pair(shape: tuple[int, ...], dtype: torch.dtype, **kwargs: object) -> tuple[nn.Module, nn.Module]:
    cpu = BN_MODULE[len(shape)](shape[1], **kwargs)
    if cpu.affine:
        with torch.no_grad():
            cpu.weight.copy_(make((shape[1],), 7, 0.5, 1.5))
            cpu.bias.copy_(make((shape[1],), 8))
    if cpu.track_running_stats:
        cpu.running_mean.copy_(make((shape[1],), 9, -0.5, 0.5))
        cpu.running_var.copy_(make((shape[1],), 10, 0.5, 2.0))
    dev = BN_MODULE[len(shape)](shape[1], **kwargs)
    dev.load_state_dict(cpu.state_dict())
    ref_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return cpu.to(ref_dtype), dev.to("flemu", dtype)


def run_batch_norm(shape: tuple[int, ...], dtype: torch.dtype, train: bool, steps: int = 2,
                   layout: bool = False, **kwargs: object) -> None:
    cpu, dev = batch_norm_pair(shape, dtype, **kwargs)
    cpu.train(train)
    dev.train(train)
    ref_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    for step in range(steps):
        x = make(shape, 20 + step, -1.0, 3.0).to(dtype)
        g = make(shape, 40 + step).to(dtype)
        xr = x.to(ref_dtype).detach().requires_grad_()
        yr = cpu(xr)
        yr.backward(g.to(ref_dtype))

        def run() -> tuple[torch.Tensor, torch.Tensor | None]:
            xd = x.to("flemu")  # noqa: B023 - run() is called in this iteration
            if layout:
                xd = noncontiguous(xd)
            xd.requires_grad_()
            y = dev(xd)
            y.backward(g.to("flemu"))  # noqa: B023
            return y, xd.grad

        y, gx = run_native(run, ())  # type: ignore[misc]
        assert_close(y, yr, dtype, f"output (step {step})")
        assert_close(gx, xr.grad, dtype, f"grad_input (step {step})")
    if cpu.affine:
        assert_close(dev.weight.grad, cpu.weight.grad, dtype, "grad_weight", scale=4.0)
        assert_close(dev.bias.grad, cpu.bias.grad, dtype, "grad_bias", scale=4.0)
    if cpu.track_running_stats:
        assert_close(dev.running_mean, cpu.running_mean, dtype, "running_mean")
        assert_close(dev.running_var, cpu.running_var, dtype, "running_var")
        assert int(dev.num_batches_tracked.cpu()) == int(cpu.num_batches_tracked)


def batch_norm_ops() -> tuple[str, ...]:
    """The forward/backward operators nn.BatchNorm reaches on the device."""
    x = torch.randn(2, 3, 4, device="flemu", requires_grad=True)
    m = nn.BatchNorm1d(3).to("flemu")
    with torch_fl_scope() as scope:
        m(x).sum().backward()
        m.eval()
        m(x).sum().backward()
    return tuple(r.op for r in scope.table if "norm" in r.op)


def torch_fl_scope():
    import torch_fl

    return torch_fl.op_stats_scope()


@pytest.mark.parametrize("shape", BN_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batch_norm(shape: tuple[int, ...], train: bool) -> None:
    run_batch_norm(shape, torch.float32, train)


@pytest.mark.parametrize("dtype", [d for d in ALL_FLOATS if d != torch.float32], ids=str)
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batch_norm_dtypes(dtype: torch.dtype, train: bool) -> None:
    run_batch_norm((4, 3, 5, 7), dtype, train)


def test_batch_norm_variants() -> None:
    run_batch_norm((4, 3, 5, 7), torch.float32, True, layout=True)
    run_batch_norm((2, 3, 51, 55), torch.float32, True, layout=True)
    run_batch_norm((4, 3, 5, 7), torch.float32, True, steps=3, momentum=None)
    run_batch_norm((4, 3, 5, 7), torch.float32, True, affine=False)
    # Without running stats, eval mode normalizes with the batch statistics.
    run_batch_norm((4, 3, 5, 7), torch.float32, False, track_running_stats=False)


def test_batch_norm_runs_natively_in_both_modes() -> None:
    ops = batch_norm_ops()
    assert ops, "nn.BatchNorm reached no normalization operator"
    run_batch_norm((2, 3, 4), torch.float32, True)
    run_batch_norm((2, 3, 4), torch.float32, False)


def test_batch_norm_single_value_per_channel_is_an_error() -> None:
    m = nn.BatchNorm1d(3).to("flemu")
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        m(torch.zeros(1, 3, device="flemu"))


GN_CASES = [((2, 6, 5, 3), 3), ((3, 4, 7), 2), ((2, 4), 4), ((1, 6, 2, 2, 3), 1), ((2, 4, 61, 70), 2)]


@pytest.mark.parametrize("shape,groups", GN_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_group_norm(shape: tuple[int, ...], groups: int, dtype: torch.dtype) -> None:
    c = shape[1]
    check_forward_backward(
        lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-5),
        [make(shape, 1, -1.0, 3.0), make((c,), 2, 0.5, 1.5), make((c,), 3)],
        [True, True, True], dtype, ("aten::native_group_norm", "aten::native_group_norm_backward"),
        layout=lambda t: noncontiguous(t) if t.dim() > 1 else t,
        scale=2.0, reference=torch.float64 if shape[1] == groups else None)


def test_group_norm_without_affine() -> None:
    check_forward_backward(lambda x: F.group_norm(x, 2), [make((3, 4, 5), 1)], [True], torch.float32,
                           ("aten::native_group_norm", "aten::native_group_norm_backward"))


# (3, 5000): rows longer than the 4,096 elements after which partial sums fold.
LN_CASES = [((3, 7, 13), (13,)), ((2, 3, 4, 5), (4, 5)), ((5, 768), (768,)), ((4, 1), (1,)), ((3, 5000), (5000,))]


@pytest.mark.parametrize("shape,normalized", LN_CASES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=str)
def test_layer_norm(shape: tuple[int, ...], normalized: tuple[int, ...], dtype: torch.dtype) -> None:
    check_forward_backward(
        lambda x, w, b: F.layer_norm(x, normalized, w, b, eps=1e-5),
        [make(shape, 1, -1.0, 3.0), make(normalized, 2, 0.5, 1.5), make(normalized, 3)],
        [True, True, True], dtype, ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
        layout=lambda t: noncontiguous(t) if t.dim() > 1 and t.shape[0] > 1 else t,
        scale=2.0, reference=torch.float64 if normalized == (1,) else None)


def test_layer_norm_module_without_bias() -> None:
    cpu = nn.LayerNorm(6, bias=False)
    with torch.no_grad():
        cpu.weight.copy_(make((6,), 4, 0.5, 1.5))
    dev = nn.LayerNorm(6, bias=False).to("flemu")
    dev.load_state_dict(cpu.state_dict())
    x = make((4, 6), 5).float()
    ref = cpu(x.requires_grad_())
    ref.sum().backward()

    def run() -> torch.Tensor:
        y = dev(x.detach().to("flemu"))
        y.sum().backward()
        return y

    y = run_native(run, ("aten::native_layer_norm", "aten::native_layer_norm_backward"))
    assert_close(y, ref, torch.float32, "output")  # type: ignore[arg-type]
    assert_close(dev.weight.grad, cpu.weight.grad, torch.float32, "grad_weight")
