"""Pooling and resampling on flemu against the CPU: max_pool2d with indices
(stride, padding, dilation, ceil_mode, NaN), avg_pool2d (count_include_pad,
divisor_override, a negative one too, ceil_mode), adaptive average pooling (divisible and
non-divisible output sizes, and the 1x1 global pool nn.AdaptiveAvgPool2d
turns into a mean), nearest upsampling by size and by scale factor; forward
and backward, batched and unbatched, non-contiguous and channels-last inputs,
every floating dtype."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from nn_parity import ALL_FLOATS, check_forward_backward, make, noncontiguous, run_native
from torch import nn

MAX_OPS = ("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")
AVG_OPS = ("aten::avg_pool2d", "aten::avg_pool2d_backward")
ADAPTIVE_OPS = ("aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward")
UPSAMPLE_OPS = ("aten::upsample_nearest2d", "aten::upsample_nearest2d_backward")

CASES: list[tuple[str, tuple[int, ...], Callable[[torch.Tensor], torch.Tensor], tuple[str, ...]]] = [
    ("max_k2", (2, 3, 8, 6), lambda x: F.max_pool2d(x, 2), MAX_OPS),
    ("max_k3_s2_p1", (2, 3, 9, 7), lambda x: F.max_pool2d(x, 3, 2, 1), MAX_OPS),
    ("max_dilation_ceil", (1, 2, 11, 10), lambda x: F.max_pool2d(x, (3, 2), (2, 3), (1, 1), (2, 1), ceil_mode=True),
     MAX_OPS),
    ("max_unbatched", (3, 7, 5), lambda x: F.max_pool2d(x, 3, 1, 1), MAX_OPS),
    ("avg_k2", (2, 3, 8, 6), lambda x: F.avg_pool2d(x, 2), AVG_OPS),
    ("avg_pad_exclude", (2, 3, 9, 7), lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), AVG_OPS),
    ("avg_pad_include_ceil", (1, 2, 10, 11), lambda x: F.avg_pool2d(x, (3, 2), (2, 2), (1, 1), ceil_mode=True),
     AVG_OPS),
    ("avg_divisor", (2, 2, 7, 7), lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5), AVG_OPS),
    ("adaptive_divisible", (2, 3, 8, 6), lambda x: F.adaptive_avg_pool2d(x, (4, 3)), ADAPTIVE_OPS),
    ("adaptive_uneven", (2, 3, 10, 7), lambda x: F.adaptive_avg_pool2d(x, (3, 4)), ADAPTIVE_OPS),
    ("adaptive_upscale", (1, 2, 3, 5), lambda x: F.adaptive_avg_pool2d(x, (5, 7)), ADAPTIVE_OPS),
    ("adaptive_unbatched", (3, 9, 9), lambda x: F.adaptive_avg_pool2d(x, 2), ADAPTIVE_OPS),
    ("nearest_x2", (2, 3, 4, 5), lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), UPSAMPLE_OPS),
    ("nearest_size", (2, 3, 5, 4), lambda x: F.interpolate(x, size=(7, 9), mode="nearest"), UPSAMPLE_OPS),
    ("nearest_down", (1, 2, 9, 8), lambda x: F.interpolate(x, size=(4, 3), mode="nearest"), UPSAMPLE_OPS),
    ("nearest_scale_1_5", (2, 2, 5, 6), lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), UPSAMPLE_OPS),
]


@pytest.mark.parametrize("name,shape,fn,ops", CASES, ids=[c[0] for c in CASES])
def test_float32(name: str, shape: tuple[int, ...], fn, ops: tuple[str, ...]) -> None:
    check_forward_backward(fn, [make(shape, 1)], [True], torch.float32, ops)


@pytest.mark.parametrize("layout", ["noncontiguous", "channels_last"])
@pytest.mark.parametrize("name,shape,fn,ops", [CASES[i] for i in (1, 5, 9, 13)], ids=[CASES[i][0] for i in (1, 5, 9, 13)])
def test_strided(name: str, shape: tuple[int, ...], fn, ops: tuple[str, ...], layout: str) -> None:
    def relayout(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else noncontiguous(t)

    check_forward_backward(fn, [make(shape, 1)], [True], torch.float32, ops, layout=relayout)


@pytest.mark.parametrize("dtype", [d for d in ALL_FLOATS if d != torch.float32], ids=str)
@pytest.mark.parametrize("name,shape,fn,ops", [CASES[i] for i in (1, 5, 9, 13)], ids=[CASES[i][0] for i in (1, 5, 9, 13)])
def test_other_dtypes(name: str, shape: tuple[int, ...], fn, ops: tuple[str, ...], dtype: torch.dtype) -> None:
    # Max pooling picks, averages sum a handful of values: a few ulps of the dtype.
    check_forward_backward(fn, [make(shape, 1)], [True], dtype, ops)


NEGATIVE_DIVISOR = [
    ("sample", (1, 1, 4, 4), lambda x: F.avg_pool2d(x, (2, 2), (), (0,), False, True, -2)),
    ("pad_ceil", (2, 3, 7, 6), lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=-5)),
    ("pad_exclude", (2, 2, 5, 5), lambda x: F.avg_pool2d(x, 2, 1, 1, count_include_pad=False, divisor_override=-1)),
]


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
@pytest.mark.parametrize("name,shape,fn", NEGATIVE_DIVISOR, ids=[c[0] for c in NEGATIVE_DIVISOR])
def test_avg_pool_negative_divisor_override(name: str, shape: tuple[int, ...], fn, dtype: torch.dtype) -> None:
    """PyTorch divides by divisor_override as given, a negative one included,
    in the output and in the gradient."""
    check_forward_backward(fn, [make(shape, 1)], [True], dtype, AVG_OPS)


def test_max_pool_indices_and_nan() -> None:
    x = make((2, 3, 7, 6), 3).float()
    x[0, 1, 2, 3] = float("nan")
    ref_out, ref_idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return F.max_pool2d(x.to("flemu"), 3, 2, 1, return_indices=True)

    out, idx = run_native(run, ("aten::max_pool2d_with_indices",))  # type: ignore[misc]
    assert torch.equal(idx.cpu(), ref_idx), f"indices differ:\n{idx.cpu()}\n{ref_idx}"
    torch.testing.assert_close(out.cpu(), ref_out, equal_nan=True)
    assert torch.isnan(out.cpu()[0, 1]).any(), "a NaN in the window must win the max"


def test_adaptive_global_pool_module() -> None:
    """nn.AdaptiveAvgPool2d(1) reduces with a mean: it must run natively too."""
    x = make((3, 5, 4, 6), 4).float()
    ref = nn.AdaptiveAvgPool2d(1)(x.requires_grad_())
    ref.backward(torch.ones_like(ref))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        xd = x.detach().to("flemu").requires_grad_()
        y = nn.AdaptiveAvgPool2d((1, 1))(xd)
        y.backward(torch.ones_like(y))
        return y, xd.grad

    y, g = run_native(run, ())  # type: ignore[misc]
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g.cpu(), x.grad, rtol=1e-5, atol=1e-6)


def test_upsample_integer_input() -> None:
    x = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(1, 2, 3, 4)
    ref = F.interpolate(x, scale_factor=2, mode="nearest")
    out = run_native(lambda: F.interpolate(x.to("flemu"), scale_factor=2, mode="nearest"),
                     ("aten::upsample_nearest2d",))
    assert torch.equal(out.cpu(), ref)  # type: ignore[union-attr]
