"""Convolution on flemu against the CPU: aten::convolution and
aten::convolution_backward for 1-d, 2-d and 3-d convolutions, groups
(depthwise included), stride, padding, dilation, transposed convolutions with
output_padding, with and without bias, odd sizes, non-contiguous and
channels-last inputs, every floating dtype, and partial output masks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F
from nn_parity import ALL_FLOATS, check_forward_backward, make, noncontiguous, run_native

OPS = ("aten::convolution", "aten::convolution_backward")


@dataclass(frozen=True)
class Case:
    name: str
    input: tuple[int, ...]
    weight: tuple[int, ...]
    bias: bool = True
    kwargs: dict = field(default_factory=dict)
    transposed: bool = False

    def fn(self) -> Callable[..., torch.Tensor]:
        dims = len(self.input) - 2
        conv = {
            (1, False): F.conv1d, (2, False): F.conv2d, (3, False): F.conv3d,
            (1, True): F.conv_transpose1d, (2, True): F.conv_transpose2d, (3, True): F.conv_transpose3d,
        }[(dims, self.transposed)]
        kwargs = self.kwargs
        return lambda x, w, b: conv(x, w, b, **kwargs)

    def tensors(self) -> list[torch.Tensor | None]:
        out_channels = self.weight[1] * self.kwargs.get("groups", 1) if self.transposed else self.weight[0]
        return [make(self.input, 1), make(self.weight, 2, -0.5, 0.5),
                make((out_channels,), 3) if self.bias else None]


CASES = [
    Case("1d_stride_pad_dil", (2, 3, 11), (5, 3, 3), kwargs={"stride": 2, "padding": 1, "dilation": 2}),
    Case("2d_basic", (2, 3, 7, 9), (4, 3, 3, 3), kwargs={"padding": 1}),
    Case("2d_groups_asym", (3, 4, 9, 7), (6, 2, 3, 2),
         kwargs={"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
    Case("2d_depthwise", (2, 6, 8, 5), (6, 1, 3, 3), kwargs={"padding": 1, "groups": 6}),
    Case("2d_1x1", (2, 5, 6, 7), (3, 5, 1, 1), bias=False),
    Case("2d_1x1_stride2", (2, 5, 7, 7), (4, 5, 1, 1), kwargs={"stride": 2}),
    Case("2d_pad_exceeds_kernel", (1, 2, 4, 5), (3, 2, 2, 3), kwargs={"padding": (3, 2)}),
    Case("2d_batch1_large", (1, 16, 20, 20), (32, 16, 3, 3), kwargs={"padding": 1}),
    Case("2d_threaded", (5, 16, 17, 15), (24, 16, 3, 3), kwargs={"stride": 1, "padding": 1}),
    Case("3d", (2, 2, 5, 6, 4), (3, 2, 2, 3, 2), kwargs={"stride": (1, 2, 1), "padding": (1, 0, 1)}),
    Case("transposed_2d", (2, 4, 5, 6), (4, 3, 3, 3), transposed=True,
         kwargs={"stride": 2, "padding": 1, "output_padding": 1}),
    Case("transposed_2d_groups_dil", (2, 4, 5, 4), (4, 2, 2, 3), transposed=True,
         kwargs={"stride": (2, 3), "padding": (0, 1), "output_padding": (1, 2), "groups": 2, "dilation": (2, 1)}),
    Case("transposed_2d_1x1", (2, 3, 4, 5), (3, 6, 1, 1), transposed=True, bias=False),
    Case("transposed_1d", (2, 3, 7), (3, 2, 4), transposed=True, kwargs={"stride": 3, "padding": 2}),
    Case("transposed_3d", (1, 2, 3, 4, 3), (2, 2, 2, 2, 3), transposed=True, kwargs={"stride": 2}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_float32(case: Case) -> None:
    check_forward_backward(case.fn(), case.tensors(), [True, True, True], torch.float32, OPS)


@pytest.mark.parametrize("dtype", [d for d in ALL_FLOATS if d != torch.float32], ids=str)
@pytest.mark.parametrize("case", [CASES[2], CASES[10]], ids=[CASES[2].name, CASES[10].name])
def test_other_dtypes(case: Case, dtype: torch.dtype) -> None:
    check_forward_backward(case.fn(), case.tensors(), [True, True, True], dtype, OPS)


@pytest.mark.parametrize("layout", ["noncontiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("case", [CASES[2], CASES[10]], ids=[CASES[2].name, CASES[10].name])
def test_strided_inputs(case: Case, layout: str) -> None:
    def relayout(t: torch.Tensor) -> torch.Tensor:
        if t.dim() != 4:
            return noncontiguous(t) if layout == "noncontiguous" else t
        if layout == "channels_last":
            return t.contiguous(memory_format=torch.channels_last)
        if layout == "sliced":
            # Every other column of a wider tensor: a unit-less innermost stride.
            wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], device=t.device, dtype=t.dtype)
            wide[..., ::2] = t
            return wide[..., ::2]
        return noncontiguous(t)

    check_forward_backward(case.fn(), case.tensors(), [True, True, True], torch.float32, OPS, layout=relayout)


@pytest.mark.parametrize("wants", [(True, False), (False, True)], ids=["input_only", "weight_only"])
def test_partial_output_mask(wants: tuple[bool, bool]) -> None:
    case = CASES[2]
    check_forward_backward(case.fn(), case.tensors(), [wants[0], wants[1], False], torch.float32, OPS)


def test_module_and_empty_batch() -> None:
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = make((0, 3, 5, 5), 4).float()
    dev = torch.nn.Conv2d(3, 4, 3, padding=1).to("flemu")
    dev.load_state_dict(conv.state_dict())

    def run() -> tuple[torch.Tensor, torch.Tensor | None]:
        y = dev(x.to("flemu"))
        y.sum().backward()
        return y, dev.weight.grad

    y, gw = run_native(run, ("aten::convolution",))  # type: ignore[misc]
    assert tuple(y.shape) == (0, 4, 5, 5)
    assert gw is not None and float(gw.abs().sum().cpu()) == 0.0, "an empty batch has a zero weight gradient"


# The meta function rejects the arguments; the bridge's fallback chain then
# reports PyTorch's own error (with a not-native warning on the way).
@pytest.mark.filterwarnings("ignore:.*is not native:UserWarning")
def test_bad_arguments_are_reported() -> None:
    x = torch.zeros(1, 4, 5, 5, device="flemu")
    w = torch.zeros(3, 3, 3, 3, device="flemu")
    with pytest.raises(RuntimeError, match="channel|groups|weight|size"):
        F.conv2d(x, w)
    torch.flemu.synchronize()
