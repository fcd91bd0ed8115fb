"""The bridge against PyTorch's CPU semantics, through the smallest plugin there is.

flemu's kernels take any strides and dtypes, so a bridge that hands a kernel the
wrong view, or a fallback that forgets to write an argument back, still gives
right answers on flemu. The generated template plugin has two float32 kernels
flagged dense/contiguous (`aten::add.Tensor` from the kernel table,
`aten::mul.Tensor` by the symbol convention) and nothing else: every strided
in-place target, every `out=`, every other operator goes through the bridge's
canonicalization and its fallback chain, where those bugs live.

Each `check_*` function below is one assertion of what PyTorch does on the CPU
(the expectations are computed on the CPU in the same process, from the same
data). They run in one worker process — this file run as a script — with the
template plugin registered by path and autoload off, since a process holds one
PrivateUse1 backend and the test session holds flemu. A check that kills the
worker is reported as a crash and the others run in a fresh one.

What PyTorch expects was read from its own tests: test/test_ops.py (out= with
extremal values, non-contiguous, empty and wrongly sized outputs, unsafe casts;
non-contiguous samples) and OpenReg's torch_openreg/tests (out= into strided
views, the CPU fallback of in-place and list operators).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from template_project import DEFAULT_DEVICE
from torch import nn

CPU = torch.device("cpu")
Check = Callable[[torch.device], None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


# ---------------------------------------------------------------------------
# comparing a device result with the CPU's
# ---------------------------------------------------------------------------


def describe(t: torch.Tensor) -> str:
    values = t.detach().cpu().tolist()
    return f"{t.dtype} shape {tuple(t.shape)} strides {t.stride()}: {values}"


def differences(actual: torch.Tensor, expected: torch.Tensor, limit: int = 6) -> str:
    """The first positions where two same-shaped tensors differ."""
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.shape != e.shape:
        return ""
    equal = (a == e) | (a.isnan() & e.isnan()) if a.is_floating_point() else a == e
    where = (~equal).nonzero().tolist()
    shown = ", ".join(
        f"{tuple(i)}: {a[tuple(i)].item()} vs {e[tuple(i)].item()}" for i in where[:limit]
    )
    more = f" and {len(where) - limit} more" if len(where) > limit else ""
    return f"; differing at {shown}{more}" if where else ""


def expect_tensor(
    actual: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    *,
    rtol: float | None = 0.0,
    atol: float | None = 0.0,
    strides: bool = False,
) -> None:
    """`actual` (on the device) must have `expected`'s dtype, shape and values
    (exactly, unless tolerances are given; None: torch.testing's per dtype)."""
    problems = []
    if actual.dtype != expected.dtype:
        problems.append(f"dtype {actual.dtype}, expected {expected.dtype}")
    if actual.shape != expected.shape:
        problems.append(f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if strides and actual.stride() != expected.stride():
        problems.append(f"strides {actual.stride()}, expected {expected.stride()}")
    if not problems:
        try:
            torch.testing.assert_close(
                actual.detach().cpu(), expected.detach(), rtol=rtol, atol=atol, equal_nan=True
            )
        except AssertionError as error:
            first = str(error).strip().splitlines()
            problems.append(" ".join(line.strip() for line in first[:3]))
    if problems:
        raise AssertionError(
            f"{what}: {'; '.join(problems)}\n  device: {describe(actual)}\n"
            f"  CPU:    {describe(expected)}{differences(actual, expected)}"
        )


def on(device: torch.device, *tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(device) for t in tensors]


def raised(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - whatever it raises is compared with the CPU's
        return error
    return None


@contextlib.contextmanager
def cases() -> Iterator[Callable[[], contextlib.AbstractContextManager[None]]]:
    """Runs every case of a check and fails with all their messages, not the first."""
    messages: list[str] = []

    @contextlib.contextmanager
    def case() -> Iterator[None]:
        try:
            yield
        except AssertionError as error:
            messages.append(str(error))

    yield case
    if messages:
        raise AssertionError("\n".join(messages))


def expect_same_outcome(fn: Callable[[torch.device], Any], dev: torch.device, what: str) -> Any:
    """Runs fn on the CPU and on the device: both must raise the same exception
    type (the device's message must contain the CPU's) or both succeed; returns
    (cpu result, device result) when they succeed."""
    results: dict[str, Any] = {}
    errors: dict[str, BaseException | None] = {}
    for name, device in (("cpu", CPU), ("device", dev)):
        try:
            results[name] = fn(device)
            errors[name] = None
        except Exception as error:  # noqa: BLE001 - compared with the other side's below
            errors[name] = error
    cpu_error, dev_error = errors["cpu"], errors["device"]
    if cpu_error is None and dev_error is not None:
        raise AssertionError(
            f"{what}: raised {type(dev_error).__name__}: {dev_error} on the device; the CPU runs it"
        )
    if cpu_error is not None and dev_error is None:
        raise AssertionError(
            f"{what}: ran on the device; the CPU raises {type(cpu_error).__name__}: {cpu_error}"
        )
    if cpu_error is not None and dev_error is not None:
        if type(dev_error) is not type(cpu_error) or str(cpu_error) not in str(dev_error):
            raise AssertionError(
                f"{what}: the device raised {type(dev_error).__name__}: {dev_error}; "
                f"the CPU raises {type(cpu_error).__name__}: {cpu_error}"
            )
        return None
    return results["cpu"], results["device"]


# ---------------------------------------------------------------------------
# in-place on strided views: the table kernel (add) and the symbol kernel (mul)
# ---------------------------------------------------------------------------


def grid(device: torch.device) -> torch.Tensor:
    return torch.arange(12.0).reshape(4, 3).to(device)


def inplace_on_view(
    dev: torch.device,
    what: str,
    view: Callable[[torch.Tensor], torch.Tensor],
    op: Callable[[torch.Tensor, torch.device], torch.Tensor],
    base: Callable[[torch.device], torch.Tensor] = grid,
) -> None:
    """`op(view(base))` must write through the view exactly as on the CPU, return
    the view itself and leave the view's strides alone."""
    outcomes = []
    for device in (CPU, dev):
        b = base(device)
        v = view(b)
        strides = v.stride()
        returned = op(v, device)
        outcomes.append((b, returned is v, v.stride() == strides))
    (b_cpu, _, _), (b_dev, same_object, same_strides) = outcomes
    try:
        expect_tensor(b_dev, b_cpu, f"{what}: the base tensor afterwards")
    except AssertionError as error:
        dense = read_as_dense_block(base, view, op)
        if dense is not None and torch.equal(dense, b_dev.cpu()):
            raise AssertionError(
                f"{error}\n  that is what reading self as a dense block of numel elements from "
                "its data pointer (ignoring its strides), then writing the result through its "
                "strides, gives: the kernel was handed the strided self as a contiguous input"
            ) from None
        raise
    assert same_object, f"{what}: returned a new tensor, not self"
    assert same_strides, f"{what}: changed the strides of self"


def read_as_dense_block(
    base: Callable[[torch.device], torch.Tensor],
    view: Callable[[torch.Tensor], torch.Tensor],
    op: Callable[[torch.Tensor, torch.device], torch.Tensor],
) -> torch.Tensor | None:
    """The base after op(view(base)) on the CPU if self were read as a dense block
    from its data pointer: a diagnosis of the in-place failures above."""
    b = base(CPU)
    v = view(b)
    try:
        dense = b.as_strided(v.shape, v.contiguous().stride(), v.storage_offset()).clone()
    except RuntimeError:
        return None  # the block would run past the storage
    v.copy_(op(dense, CPU))
    return b


def offset_base(device: torch.device) -> torch.Tensor:
    return torch.arange(20.0).to(device)


def offset_view(b: torch.Tensor) -> torch.Tensor:
    return b[5:17].view(4, 3)[1:, 1:]  # storage offset 9, strides (3, 1), shape (3, 2)


ROW = torch.tensor([1.0, 2.0, 3.0])
# name: (the code, as the failure message shows it; the view of the base; the op on the view; the base)
INPLACE_ON_VIEWS: dict[
    str,
    tuple[
        str,
        Callable[..., torch.Tensor],
        Callable[..., torch.Tensor],
        Callable[[torch.device], torch.Tensor],
    ],
] = {
    # CPU: column 0 becomes [100, 103, 106, 109].
    "add_-column": (
        "s = arange(12.).reshape(4, 3); s[:, 0].add_(100)",
        lambda s: s[:, 0],
        lambda v, d: v.add_(100),
        grid,
    ),
    "add_-column_tensor_other": (
        "s[:, 2].add_(arange(4.), alpha=-1)",
        lambda s: s[:, 2],
        lambda v, d: v.add_(torch.arange(4.0).to(d), alpha=-1),
        grid,
    ),
    "add_-transpose": ("s.t().add_(1)", lambda s: s.t(), lambda v, d: v.add_(1), grid),
    "add_-transpose_broadcast_other": (
        "s.t().add_(arange(4.), alpha=2)",
        lambda s: s.t(),
        lambda v, d: v.add_(torch.arange(4.0).to(d), alpha=2),
        grid,
    ),
    "add_-offset_view": (
        "base = arange(20.); base[5:17].view(4, 3)[1:, 1:].add_(ones(2))",
        offset_view,
        lambda v, d: v.add_(torch.ones(2).to(d)),
        offset_base,
    ),
    "add_-offset_contiguous": (
        "base = arange(20.); base[3:].add_(1)",
        lambda b: b[3:],
        lambda v, d: v.add_(1),
        offset_base,
    ),
    "add_-broadcast_row": (
        "x.add_(y) with y of shape (3,)",
        lambda s: s,
        lambda v, d: v.add_(ROW.to(d)),
        grid,
    ),
    "add_-broadcast_column": (
        "x.add_(y) with y of shape (4, 1)",
        lambda s: s,
        lambda v, d: v.add_(torch.arange(4.0).reshape(4, 1).to(d)),
        grid,
    ),
    "add_-expanded_other": (
        "x.add_(y.expand(4, 3)) (a stride-0 other)",
        lambda s: s,
        lambda v, d: v.add_(ROW.to(d).expand(4, 3)),
        grid,
    ),
    "add_-cpu_scalar_other": (
        "x.add_(tensor(2.5)) (a 0-dim CPU other)",
        lambda s: s,
        lambda v, d: v.add_(torch.tensor(2.5)),
        grid,
    ),
    "mul_-column": (
        "s = arange(12.).reshape(4, 3); s[:, 1].mul_(2)",
        lambda s: s[:, 1],
        lambda v, d: v.mul_(2),
        grid,
    ),
    "mul_-column_tensor_other": (
        "s[:, 1].mul_(full((4,), 2.))",
        lambda s: s[:, 1],
        lambda v, d: v.mul_(torch.full((4,), 2.0).to(d)),
        grid,
    ),
    "mul_-transpose": (
        "s.t().mul_(arange(3.).reshape(3, 1))",
        lambda s: s.t(),
        lambda v, d: v.mul_(torch.arange(3.0).reshape(3, 1).to(d)),
        grid,
    ),
    "mul_-offset_view": (
        "base[5:17].view(4, 3)[1:, 1:].mul_(full((3, 2), 2.))",
        offset_view,
        lambda v, d: v.mul_(torch.full((3, 2), 2.0).to(d)),
        offset_base,
    ),
    "mul_-broadcast_row": (
        "x.mul_(y) with y of shape (3,)",
        lambda s: s,
        lambda v, d: v.mul_(ROW.to(d)),
        grid,
    ),
}


def inplace_on_view_check(
    what: str,
    view: Callable[..., torch.Tensor],
    op: Callable[..., torch.Tensor],
    base: Callable[[torch.device], torch.Tensor],
) -> Check:
    return lambda dev: inplace_on_view(dev, what, view, op, base)


for _name, _case in INPLACE_ON_VIEWS.items():
    CHECKS[f"inplace_{_name}"] = inplace_on_view_check(*_case)


@check
def check_inplace_into_an_expanded_self_is_refused(dev: torch.device) -> None:
    # CPU: "unsupported operation: more than one element of the written-to
    # tensor refers to a single memory location".
    with cases() as case:
        for name, op in (("add_", lambda t: t.add_(1)), ("mul_", lambda t: t.mul_(2))):
            with case():
                expect_same_outcome(
                    lambda d, op=op: op(torch.zeros(3, 1).to(d).expand(3, 4)),
                    dev,
                    f"zeros(3, 1).expand(3, 4).{name}(...)",
                )


@check
def check_functional_ops_on_non_contiguous_inputs(dev: torch.device) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(6, 5), torch.randn(5, 6)
    examples = {
        "add(a[:, ::2], b.t()[:, ::2])": lambda x, y: torch.add(x[:, ::2], y.t()[:, ::2]),
        "mul(a.t(), b)": lambda x, y: torch.mul(x.t(), y),
        "add(a[1:, 1:], b.t()[1:, 1:], alpha=3)": lambda x, y: torch.add(
            x[1:, 1:], y.t()[1:, 1:], alpha=3
        ),
        "a[::2] * b.t()[::2]": lambda x, y: x[::2] * y.t()[::2],
    }
    with cases() as case:
        for what, fn in examples.items():
            with case():
                expect_tensor(fn(*on(dev, a, b)), fn(a, b), what, rtol=None, atol=None)


# ---------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------

BINARY = {"add": torch.add, "mul": torch.mul}


def operands(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.arange(6.0).reshape(2, 3).to(device),
        torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.25, -2.0]]).to(device),
    )


def resize_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message) for w in caught if "An output with one or more elements" in str(w.message)
    ]


def run_out(
    fn: Callable[..., torch.Tensor],
    device: torch.device,
    make_out: Callable[[torch.device], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, bool, list[str]]:
    a, b = operands(device)
    out = make_out(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = fn(a, b, out=out)
    return out, returned, returned is out, resize_warnings(caught)


def out_into(
    dev: torch.device,
    fn: Callable[..., torch.Tensor],
    what: str,
    make: Callable[[torch.device], tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """fn(a, b, out=<view of a base>) must write the CPU's values through the view,
    leave the rest of the base alone, return the out and keep its storage and strides."""
    ends = []
    for device in (CPU, dev):
        a, b = operands(device)
        out, base = make(device)
        before = (out.data_ptr(), out.stride())
        returned = fn(a, b, out=out)
        ends.append((out, base, returned is out, before, (out.data_ptr(), out.stride())))
    (out_c, base_c, *_), (out_d, base_d, same, before, after) = ends
    expect_tensor(out_d, out_c, what, strides=True)
    expect_tensor(base_d, base_c, f"{what}: the whole tensor the out is a view of")
    assert same, f"{what}: returned another tensor, not the out"
    assert before == after, (
        f"{what}: the out's (data_ptr, strides) went from ({before[0]:#x}, {before[1]}) "
        f"to ({after[0]:#x}, {after[1]}); PyTorch writes into the given storage"
    )


@check
def check_out_into_a_non_contiguous_tensor(dev: torch.device) -> None:
    # test_ops.test_out case 1: the values land in the out's own storage, with
    # its strides; the elements of that storage outside the out stay as they were.
    def transpose(d: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        base = torch.full((3, 2), -7.0).to(d)
        return base.t(), base

    def every_other_column(d: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        base = torch.full((2, 6), -7.0).to(d)
        return base[:, ::2], base

    layouts = {"a transpose": transpose, "every other column of a (2, 6)": every_other_column}
    with cases() as case:
        for (op, fn), (layout, make) in itertools.product(BINARY.items(), layouts.items()):
            with case():
                out_into(dev, fn, f"torch.{op}(a, b, out=<{layout}>)", make)


@check
def check_out_values_are_ignored(dev: torch.device) -> None:
    # test_ops.test_out case 0: an out full of NaN does not change the result.
    with cases() as case:
        for op, fn in BINARY.items():
            with case():
                out_c, *_ = run_out(fn, CPU, lambda d: torch.full((2, 3), math.nan).to(d))
                out_d, *_ = run_out(fn, dev, lambda d: torch.full((2, 3), math.nan).to(d))
                expect_tensor(out_d, out_c, f"torch.{op}(a, b, out=<full of NaN>)")


@check
def check_out_of_the_wrong_size_is_resized_with_a_warning(dev: torch.device) -> None:
    # test_ops.test_out_warning: a non-empty out of the wrong shape is resized,
    # with "An output with one or more elements was resized ...".
    with cases() as case:
        for op, fn in BINARY.items():
            with case():
                out_c, _, _, warned_c = run_out(fn, CPU, lambda d: torch.zeros(5).to(d))
                out_d, _, same_d, warned_d = run_out(fn, dev, lambda d: torch.zeros(5).to(d))
                what = f"torch.{op}(a, b, out=zeros(5)) for a (2, 3) result"
                expect_tensor(out_d, out_c, what, strides=True)
                assert len(warned_d) == len(warned_c) == 1, (
                    f"{what}: resize warnings on the device {warned_d}, on the CPU {warned_c}"
                )
                assert same_d, f"{what}: did not return the out tensor"


@check
def check_empty_out_is_resized_silently(dev: torch.device) -> None:
    # test_ops.test_out case 2: an empty out is resized without a warning.
    with cases() as case:
        for op, fn in BINARY.items():
            with case():
                out_c, _, _, warned_c = run_out(fn, CPU, lambda d: torch.empty(0).to(d))
                out_d, _, same_d, warned_d = run_out(fn, dev, lambda d: torch.empty(0).to(d))
                what = f"torch.{op}(a, b, out=empty(0))"
                expect_tensor(out_d, out_c, what, strides=True)
                assert warned_d == warned_c == [], (
                    f"{what}: warned {warned_d} (the CPU: {warned_c})"
                )
                assert same_d, f"{what}: did not return the out tensor"


def aliased_out_examples(fn: Callable[..., torch.Tensor], op: str) -> dict[str, Callable[..., Any]]:
    """what: run(device) -> the tensor to compare, for out= aliasing an input."""

    def into_first(d: torch.device) -> torch.Tensor:
        a, b = operands(d)
        fn(a, b, out=a)
        return a

    def into_second(d: torch.device) -> torch.Tensor:
        a, b = operands(d)
        fn(a, b, out=b)
        return b

    def into_transpose(d: torch.device) -> torch.Tensor:
        at = torch.arange(6.0).reshape(3, 2).to(d).t()
        fn(at, at, out=at)
        return at

    def into_sibling_column(d: torch.device) -> torch.Tensor:
        s = grid(d)
        fn(s[:, 0], s[:, 1], out=s[:, 2])
        return s

    return {
        f"torch.{op}(a, b, out=a)": into_first,
        f"torch.{op}(a, b, out=b)": into_second,
        f"torch.{op}(at, at, out=at) with at a transpose": into_transpose,
        f"torch.{op}(s[:, 0], s[:, 1], out=s[:, 2])": into_sibling_column,
    }


@check
def check_out_aliasing_an_input(dev: torch.device) -> None:
    with cases() as case:
        for op, fn in BINARY.items():
            for what, run in aliased_out_examples(fn, op).items():
                with case():
                    expect_tensor(run(dev), run(CPU), what)


@check
def check_out_with_an_unsafe_dtype_or_another_device_is_refused(dev: torch.device) -> None:
    # test_ops.test_out cases 3 and 4.
    with cases() as case:
        for op, fn in BINARY.items():
            with case():
                expect_same_outcome(
                    lambda d, fn=fn: fn(
                        *operands(d), out=torch.zeros(2, 3, dtype=torch.long).to(d)
                    ),
                    dev,
                    f"torch.{op}(float, float, out=<int64>)",
                )
                error = raised(lambda fn=fn: fn(*operands(dev), out=torch.zeros(2, 3)))
                assert isinstance(error, RuntimeError), (
                    f"torch.{op}(<{dev} tensors>, out=<CPU tensor>): "
                    f"{'ran' if error is None else f'raised {type(error).__name__}: {error}'}; "
                    "PyTorch raises RuntimeError for an out on another device"
                )


# ---------------------------------------------------------------------------
# mixed dtypes in place
# ---------------------------------------------------------------------------


@check
def check_int_inplace_with_a_float_operand_is_refused(dev: torch.device) -> None:
    # CPU: "result type Float can't be cast to the desired output type Long",
    # raised before anything is written.
    examples = {
        "arange(6).add_(ones(6))": lambda t, d: t.add_(torch.ones(6).to(d)),
        "arange(6).add_(1.5)": lambda t, d: t.add_(1.5),
        "arange(6).mul_(ones(6))": lambda t, d: t.mul_(torch.ones(6).to(d)),
        "arange(6).mul_(0.5)": lambda t, d: t.mul_(0.5),
    }
    with cases() as case:
        for what, op in examples.items():
            with case():
                selves = {d.type: torch.arange(6).to(d) for d in (CPU, dev)}
                expect_same_outcome(
                    lambda d, op=op, selves=selves: op(selves[d.type], d), dev, what
                )
                expect_tensor(selves[dev.type], selves["cpu"], f"{what}: self after the refusal")


@check
def check_float_inplace_with_an_int_operand(dev: torch.device) -> None:
    examples = {
        "arange(6.).add_(arange(6))": lambda d: torch.arange(6.0).to(d).add_(torch.arange(6).to(d)),
        "arange(6.).mul_(arange(6))": lambda d: torch.arange(6.0).to(d).mul_(torch.arange(6).to(d)),
        "arange(6.).add_(arange(6), alpha=2)": lambda d: (
            torch.arange(6.0).to(d).add_(torch.arange(6).to(d), alpha=2)
        ),
        "arange(6.).half().add_(ones(6)) (float32 operand, float16 self)": lambda d: (
            torch.arange(6.0).half().to(d).add_(torch.ones(6).to(d))
        ),
        "arange(6.).add_(True)": lambda d: torch.arange(6.0).to(d).add_(True),
    }
    with cases() as case:
        for what, fn in examples.items():
            with case():
                expect_tensor(fn(dev), fn(CPU), what)


# ---------------------------------------------------------------------------
# the CPU fallback writes back every argument the schema marks mutated
# ---------------------------------------------------------------------------


@check
def check_batch_norm_training_step_updates_the_running_statistics(dev: torch.device) -> None:
    # The template has no batch-norm kernel: native_batch_norm runs on the CPU
    # fallback, whose schema marks running_mean and running_var mutated.
    torch.manual_seed(0)
    reference = nn.BatchNorm2d(3)
    x = torch.randn(4, 3, 5, 5) * 2 + 1
    modules = {"cpu": reference, "device": copy.deepcopy(reference).to(dev)}
    outputs = {}
    for name, module in modules.items():
        inp = x.to(next(module.parameters()).device)
        out = module(inp)
        (out * out).sum().backward()
        module.eval()
        outputs[name] = (out, module(inp))
    cpu, device = modules["cpu"], modules["device"]
    # float32 statistics of 100 values per channel: a few ulps apart at most.
    comparisons = (
        [
            (getattr(device, b), getattr(cpu, b), f"after one training step: {b}", 1e-5, 1e-6)
            for b in ("running_mean", "running_var", "num_batches_tracked")
        ]
        + [
            (getattr(device, p).grad, getattr(cpu, p).grad, f"{p}.grad", 1e-4, 1e-4)
            for p in ("weight", "bias")
        ]
        + [
            (outputs["device"][0], outputs["cpu"][0], "training output", 1e-5, 1e-5),
            (
                outputs["device"][1],
                outputs["cpu"][1],
                "eval output (reads the running statistics)",
                1e-5,
                1e-5,
            ),
        ]
    )
    with cases() as case:
        for actual, expected, what, rtol, atol in comparisons:
            with case():
                expect_tensor(
                    actual, expected, f"BatchNorm2d(3) on the device, {what}", rtol=rtol, atol=atol
                )


def fallback_self(layout: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(self, the whole tensor self is a view of) for a (4, 6) float self."""
    data = torch.arange(24.0).reshape(4, 6) - 5
    if layout == "contiguous":
        s = data.clone().to(device)
        return s, s
    if layout == "transposed":
        base = data.t().contiguous().to(device)  # (6, 4)
        return base.t(), base
    assert layout == "column_slice"
    base = torch.full((4, 9), -100.0)
    base[:, 2:8] = data
    base = base.to(device)
    return base[:, 2:8], base


def index(device: torch.device, *values: int) -> torch.Tensor:
    return torch.tensor(values).to(device)


FALLBACK_INPLACE: dict[str, Callable[[torch.Tensor, torch.device], torch.Tensor]] = {
    "index_put_": lambda s, d: s.index_put_((index(d, 0, 2),), torch.ones(6).to(d)),
    "index_put_accumulate": lambda s, d: s.index_put_(
        (index(d, 1, 1, 3), index(d, 0, 0, 5)), torch.tensor([1.0, 2.0, 4.0]).to(d), accumulate=True
    ),
    "setitem_bool_mask": lambda s, d: s.__setitem__(s > 3, 0.5) or s,
    "scatter_": lambda s, d: s.scatter_(
        1,
        torch.tensor([[0, 1, 2], [0, 1, 5], [3, 3, 3], [4, 0, 1]]).to(d),
        torch.full((4, 3), 9.0).to(d),
    ),
    "scatter_add_": lambda s, d: s.scatter_add_(
        0, torch.tensor([[0, 1, 2, 3, 0, 1]]).to(d), torch.ones(1, 6).to(d)
    ),
    "index_add_": lambda s, d: s.index_add_(1, index(d, 0, 5), torch.ones(4, 2).to(d), alpha=3),
    "index_fill_": lambda s, d: s.index_fill_(1, index(d, 1, 4), -2.0),
    "index_copy_": lambda s, d: s.index_copy_(0, index(d, 3, 0), torch.zeros(2, 6).to(d)),
    "masked_fill_": lambda s, d: s.masked_fill_((torch.arange(6) % 2 == 0).to(d), 7.0),
    "masked_scatter_": lambda s, d: s.masked_scatter_(
        (torch.arange(24).reshape(4, 6) % 5 == 0).to(d), -torch.arange(24.0).to(d)
    ),
    "put_": lambda s, d: s.put_(index(d, 0, 7, 23), torch.tensor([1.0, 2.0, 3.0]).to(d)),
    "fill_": lambda s, d: s.fill_(3.0),
    "zero_": lambda s, d: s.zero_(),
    "clamp_": lambda s, d: s.clamp_(-2.0, 10.0),
    "sub_": lambda s, d: s.sub_(torch.ones(6).to(d), alpha=2),
    "div_": lambda s, d: s.div_(4.0),
    "sin_": lambda s, d: s.sin_(),
    "addcmul_": lambda s, d: s.addcmul_(torch.ones(4, 6).to(d), torch.full((4, 6), 0.5).to(d)),
    "lerp_": lambda s, d: s.lerp_(torch.zeros(4, 6).to(d), 0.25),
    "copy_from_cpu": lambda s, d: s.copy_(torch.arange(24.0).reshape(4, 6)),
    "copy_from_device_transpose": lambda s, d: s.copy_(torch.arange(24.0).reshape(6, 4).to(d).t()),
}
LAYOUTS = ("contiguous", "transposed", "column_slice")


def fallback_inplace_check(op: str, layout: str) -> Check:
    def run(dev: torch.device) -> None:
        results = []
        for device in (CPU, dev):
            s, base = fallback_self(layout, device)
            strides = s.stride()
            returned = FALLBACK_INPLACE[op](s, device)
            results.append((base, returned is s, s.stride() == strides))
        (base_c, _, _), (base_d, same, kept) = results
        what = f"{op} on a {layout} self"
        expect_tensor(
            base_d,
            base_c,
            f"{what}: the tensor afterwards (the whole storage)",
            rtol=1.3e-6,
            atol=1e-5,
        )
        assert same, f"{what}: returned a new tensor, not self"
        assert kept, f"{what}: changed the strides of self"

    return run


for _op in FALLBACK_INPLACE:
    for _layout in LAYOUTS:
        CHECKS[f"fallback_{_op}-{_layout}"] = fallback_inplace_check(_op, _layout)


@check
def check_fallback_foreach_on_a_list(dev: torch.device) -> None:
    def run(d: torch.device) -> list[torch.Tensor]:
        xs = [torch.arange(4.0).to(d), torch.ones(2, 3).to(d).t()]
        torch._foreach_mul_(xs, 3.0)
        torch._foreach_add_(xs, [torch.ones(4).to(d), torch.full((3, 2), 2.0).to(d)])
        return xs

    with cases() as case:
        for i, (a, e) in enumerate(zip(run(dev), run(CPU))):
            with case():
                expect_tensor(
                    a, e, f"_foreach_mul_ then _foreach_add_ on a list: tensor {i}", strides=True
                )


@check
def check_fallback_out_pair_into_transposed_outs(dev: torch.device) -> None:
    def run(d: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        mantissa = torch.zeros(3, 2).to(d).t()
        exponent = torch.zeros(3, 2, dtype=torch.int32).to(d).t()
        x = torch.tensor([[1.0, 6.0, -0.75], [1024.0, 3.0, 0.1]]).to(d)
        torch.frexp(x, out=(mantissa, exponent))
        return mantissa, exponent

    with cases() as case:
        for name, a, e in zip(("mantissa", "exponent"), run(dev), run(CPU)):
            with case():
                expect_tensor(
                    a, e, f"torch.frexp(x, out=(mantissa, exponent)): {name}", strides=True
                )


@check
def check_fallback_amp_unscale_writes_grads_and_found_inf(dev: torch.device) -> None:
    # Two mutated arguments: the list of gradients and found_inf (GradScaler's step).
    def run(d: torch.device) -> list[torch.Tensor]:
        grads = [torch.tensor([2.0, 4.0]).to(d), torch.tensor([[8.0, math.inf]]).to(d)]
        found_inf = torch.zeros(1).to(d)
        torch._amp_foreach_non_finite_check_and_unscale_(
            grads, found_inf, torch.tensor([0.5]).to(d)
        )
        return [found_inf, *grads]

    what = "_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)"
    with cases() as case:
        for name, a, e in zip(("found_inf", "grads[0]", "grads[1]"), run(dev), run(CPU)):
            with case():
                expect_tensor(a, e, f"{what}: {name}")


# ---------------------------------------------------------------------------
# modules on the device
# ---------------------------------------------------------------------------


@check
def check_tied_weights_stay_tied_across_to(dev: torch.device) -> None:
    e = nn.Embedding(10, 4)
    h = nn.Linear(4, 10, bias=False)
    h.weight = e.weight
    m = nn.Sequential(e, h).to(dev)
    assert m[1].weight is m[0].weight, (
        "e = nn.Embedding(10, 4); h = nn.Linear(4, 10, bias=False); h.weight = e.weight; "
        f"m = nn.Sequential(e, h).to('{dev}'): m[1].weight is m[0].weight is False "
        f"(ids {id(m[1].weight):#x} and {id(m[0].weight):#x}, data_ptrs "
        f"{m[1].weight.data_ptr():#x} and {m[0].weight.data_ptr():#x}); on the CPU and CUDA "
        "Module.to() keeps the Parameter objects (param.data = ...), so they stay tied. "
        f"torch._has_compatible_shallow_copy_type(cpu, {dev.type}) is "
        f"{torch._has_compatible_shallow_copy_type(torch.zeros(1), torch.zeros(1).to(dev))}"
    )


@check
def check_optimizer_built_before_to_updates_the_module(dev: torch.device) -> None:
    torch.manual_seed(0)
    reference = nn.Linear(3, 2)
    x = torch.randn(5, 3)
    results = {}
    for name, device in (("cpu", CPU), ("device", dev)):
        m = copy.deepcopy(reference)
        opt = torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
        m.to(device)
        for _ in range(2):
            opt.zero_grad()
            m(x.to(device)).pow(2).sum().backward()
            opt.step()
        results[name] = (m, opt)
    (m_c, _), (m_d, opt_d) = results["cpu"], results["device"]
    held = opt_d.param_groups[0]["params"][0]
    assert held is m_d.weight, (
        f"torch.optim.SGD(m.parameters()) then m.to('{dev}'): the optimizer holds a "
        f"{held.device} Parameter, the module a {m_d.weight.device} one (not the same object), "
        "so opt.step() does not update the module; PyTorch keeps parameter identity in "
        "Module.to() for CPU and CUDA"
    )
    expect_tensor(m_d.weight, m_c.weight, "Linear.weight after two SGD steps", rtol=1e-5, atol=1e-6)
    expect_tensor(m_d.bias, m_c.bias, "Linear.bias after two SGD steps", rtol=1e-5, atol=1e-6)


@check
def check_load_state_dict_keeps_parameter_identity(dev: torch.device) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to(dev)
    params = {name: p for name, p in m.named_parameters()}
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    source[1].running_mean.fill_(0.25)
    m.load_state_dict(source.state_dict())
    for name, p in m.named_parameters():
        assert p is params[name], f"load_state_dict replaced the Parameter {name}"
        assert p.device == torch.device(dev.type, 0), f"{name} moved to {p.device}"
        expect_tensor(p, source.state_dict()[name], f"{name} after load_state_dict")
    expect_tensor(m[1].running_mean, source[1].running_mean, "running_mean after load_state_dict")
    assert m[1].running_mean.device.type == dev.type, m[1].running_mean.device


@check
def check_swap_tensors(dev: torch.device) -> None:
    a = torch.arange(3.0).to(dev)
    b = torch.ones(2, 2).to(dev).t()
    ids = (id(a), id(b))
    torch.utils.swap_tensors(a, b)
    assert (id(a), id(b)) == ids, "swap_tensors changed the Python objects"
    expect_tensor(a, torch.ones(2, 2).t(), "a after swap_tensors(a, b)", strides=True)
    expect_tensor(b, torch.arange(3.0), "b after swap_tensors(a, b)", strides=True)
    p = nn.Parameter(torch.zeros(2).to(dev))
    q = nn.Parameter(torch.full((2,), 5.0).to(dev))
    torch.utils.swap_tensors(p, q)
    expect_tensor(p, torch.full((2,), 5.0), "Parameter p after swap_tensors(p, q)")
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m = nn.Linear(3, 2)
        weight = m.weight
        m.to(dev)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)
    assert m.weight is weight and weight.device.type == dev.type, (
        f"with swap_module_params_on_conversion, Linear.to('{dev}') gave a "
        f"{'same' if m.weight is weight else 'new'} Parameter on {m.weight.device}"
    )


class Symmetric(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.triu() + x.triu(1).transpose(-1, -2)


@check
def check_parametrize(dev: torch.device) -> None:
    from torch.nn.utils import parametrize

    torch.manual_seed(0)
    reference = nn.Linear(4, 4)
    x = torch.randn(3, 4)
    results = {}
    for name, device in (("cpu", CPU), ("device", dev)):
        m = copy.deepcopy(reference)
        parametrize.register_parametrization(m, "weight", Symmetric())
        m.to(device)
        out = m(x.to(device))
        out.pow(2).sum().backward()
        results[name] = (m, out)
    (m_c, out_c), (m_d, out_d) = results["cpu"], results["device"]
    original = m_d.parametrizations.weight.original
    assert original.device.type == dev.type, (
        f"parametrizations.weight.original is on {original.device}"
    )
    expect_tensor(m_d.weight, m_c.weight, "the parametrized (symmetric) weight")
    expect_tensor(out_d, out_c, "forward through the parametrized Linear", rtol=1e-5, atol=1e-6)
    assert original.grad is not None, "parametrizations.weight.original.grad is None after backward"
    expect_tensor(
        original.grad,
        m_c.parametrizations.weight.original.grad,
        "parametrizations.weight.original.grad",
        rtol=1e-5,
        atol=1e-5,
    )


# ---------------------------------------------------------------------------
# bilinear
# ---------------------------------------------------------------------------


@check
def check_bilinear(dev: torch.device) -> None:
    # F.bilinear is aten::_trilinear, whose ATen implementation accumulates one
    # output column at a time: output.narrow(1, k, 1).add_(buf) — an in-place add
    # (the template's table kernel) into a strided (2, 1) view of a (2, 5) output.
    torch.manual_seed(0)
    x1, x2, w, b = torch.randn(2, 3), torch.randn(2, 4), torch.randn(5, 3, 4), torch.randn(5)
    problems = []
    for what, args in (("without bias", (x1, x2, w, None)), ("with bias", (x1, x2, w, b))):
        expected = F.bilinear(*args)
        actual = F.bilinear(*[None if t is None else t.to(dev) for t in args])
        error = raised(
            lambda a=actual, e=expected, w=what: expect_tensor(
                a, e, f"F.bilinear {w}", rtol=1.3e-6, atol=1e-5
            )
        )
        if error is not None:
            problems.append(str(error))
    if problems:
        # _trilinear's loop, alone: column k of a zero (2, 5) output += k + 1.
        outs = {}
        for device in (CPU, dev):
            out = torch.zeros(2, 5).to(device)
            for k in range(5):
                out.narrow(1, k, 1).add_(torch.full((2, 1), k + 1.0).to(device))
            outs[device.type] = out.cpu().tolist()
        cause = (
            "\n_trilinear's accumulation alone, out = zeros(2, 5); for k in range(5): "
            f"out.narrow(1, k, 1).add_(full((2, 1), k + 1.)), gives {outs[dev.type]} on the "
            f"device, {outs['cpu']} on the CPU: the in-place add into the strided column "
            "view is wrong (see add_inplace_into_a_column)"
            if outs[dev.type] != outs["cpu"]
            else "\n(_trilinear's accumulation into column views, alone, is right)"
        )
        raise AssertionError("\n".join(problems) + cause)


# ---------------------------------------------------------------------------
# scaled dot-product attention through its decomposition
# ---------------------------------------------------------------------------

SDPA_TOLERANCE = {
    # The CPU's flash kernel accumulates in float32 and rounds once; the
    # decomposition on the device rounds after each operation: a few units in
    # the last place of the dtype at magnitude 1.
    torch.float32: (1e-4, 1e-5),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def attention_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(2, 3, 5, 8).to(dtype) for _ in range(3))


def flash_for_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)


def sdpa_metadata_check(dtype: torch.dtype) -> Check:
    def run(dev: torch.device) -> None:
        q, k, v = attention_inputs(dtype)
        expected = flash_for_cpu(q, k, v)
        actual = flash_for_cpu(*on(dev, q, k, v))
        names = ("output", "logsumexp")
        problems = [
            f"{name}: device {a.dtype} {tuple(a.shape)}, CPU {e.dtype} {tuple(e.shape)}"
            for name, a, e in zip(names, actual, expected)
            if a.dtype != e.dtype or a.shape != e.shape
        ]
        assert len(actual) == len(expected) and not problems, (
            f"_scaled_dot_product_flash_attention_for_cpu(q, k, v) with q, k, v {dtype} (2, 3, 5, 8) "
            f"on the device returns metadata unlike the CPU's: {'; '.join(problems)} "
            "(the CPU's logsumexp is float32 of shape (..., L); the decomposition in "
            "torch._decomp returns the attention weights (..., L, S) in the input dtype instead)"
        )
        rtol, atol = SDPA_TOLERANCE[dtype]
        expect_tensor(
            actual[0], expected[0], f"flash attention output ({dtype})", rtol=rtol, atol=atol
        )
        expect_tensor(
            actual[1], expected[1], f"flash attention logsumexp ({dtype})", rtol=rtol, atol=atol
        )

    return run


def sdpa_backward_check(dtype: torch.dtype) -> Check:
    def run(dev: torch.device) -> None:
        grads = {}
        for name, device in (("cpu", CPU), ("device", dev)):
            q, k, v = (t.to(device).requires_grad_() for t in attention_inputs(dtype))
            out = flash_for_cpu(q, k, v)[0]
            upstream = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(dtype).to(device)
            try:
                out.backward(upstream)
            except RuntimeError as error:
                lse = flash_for_cpu(*(t.detach() for t in (q, k, v)))[1]
                raise AssertionError(
                    f"backward of _scaled_dot_product_flash_attention_for_cpu in {dtype} on "
                    f"{device} raised: {str(error).splitlines()[0]} (its forward's logsumexp there: "
                    f"{lse.dtype} {tuple(lse.shape)}; the CPU kernel's backward needs float32 (..., L))"
                ) from None
            grads[name] = (q.grad, k.grad, v.grad)
        rtol, atol = SDPA_TOLERANCE[dtype]
        with cases() as case:
            for which, a, e in zip("qkv", grads["device"], grads["cpu"]):
                with case():
                    expect_tensor(
                        a,
                        e,
                        f"flash attention backward ({dtype}): {which}.grad",
                        rtol=rtol,
                        atol=atol,
                    )

    return run


for _dtype in (torch.float32, torch.float16, torch.bfloat16):
    _name = str(_dtype).removeprefix("torch.")
    CHECKS[f"sdpa_flash_for_cpu_output_metadata-{_name}"] = sdpa_metadata_check(_dtype)
    CHECKS[f"sdpa_flash_for_cpu_backward-{_name}"] = sdpa_backward_check(_dtype)


@check
def check_scaled_dot_product_attention(dev: torch.device) -> None:
    for causal in (False, True):
        grads = {}
        for name, device in (("cpu", CPU), ("device", dev)):
            q, k, v = (t.to(device).requires_grad_() for t in attention_inputs(torch.float32))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            out.sum().backward()
            grads[name] = (out, q.grad, k.grad, v.grad)
        for which, a, e in zip(
            ("output", "q.grad", "k.grad", "v.grad"), grads["device"], grads["cpu"]
        ):
            expect_tensor(
                a,
                e,
                f"F.scaled_dot_product_attention(is_causal={causal}): {which}",
                rtol=1e-4,
                atol=1e-5,
            )


# ---------------------------------------------------------------------------
# the worker (this file run as a script) and the test that drives it
# ---------------------------------------------------------------------------


def worker(device: str, library: str, results: Path, names: list[str]) -> int:
    import torch_fl

    handle = torch_fl.register_device_plugin(device, plugin_path=library)
    dev = torch.device(handle.name, 0)
    with results.open("a", encoding="utf-8") as log:
        for name in names:
            log.write(json.dumps({"name": name, "outcome": "started"}) + "\n")
            log.flush()
            try:
                CHECKS[name](dev)
                record = {"name": name, "outcome": "passed"}
            except AssertionError as error:
                record = {"name": name, "outcome": "failed", "message": str(error)}
            except Exception as error:  # noqa: BLE001 - a check that errors is reported, not fatal
                record = {
                    "name": name,
                    "outcome": "error",
                    "message": "".join(traceback.format_exception(error)),
                }
            log.write(json.dumps(record) + "\n")
            log.flush()
    return 0


def run_checks(library: Path, names: list[str], scratch: Path) -> dict[str, dict[str, str]]:
    """Runs the named checks in worker processes; a check that kills its worker
    is recorded as a crash and the rest go on in a new one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        TORCH_FL_AUTOLOAD="0",
        TORCH_FL_FALLBACK="silent",
        TORCH_FL_PLUGINS="",
    )
    outcomes: dict[str, dict[str, str]] = {}
    pending = list(names)
    for attempt in range(len(names) + 1):
        if not pending:
            break
        log = scratch / f"worker{attempt}.jsonl"
        proc = subprocess.run(
            [sys.executable, __file__, DEFAULT_DEVICE, str(library), str(log), *pending],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=900,
        )
        started = None
        if log.exists():
            for line in log.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if record["outcome"] == "started":
                    started = record["name"]
                else:
                    outcomes[record["name"]] = record
                    started = None
        if started is not None:
            outcomes[started] = {
                "outcome": "crashed",
                "message": f"the worker died (exit {proc.returncode}) in this check\n"
                f"--- stderr\n{proc.stderr[-4000:]}",
            }
        elif proc.returncode != 0:
            for name in pending:
                outcomes.setdefault(
                    name,
                    {
                        "outcome": "error",
                        "message": f"the worker exited with {proc.returncode} before running it\n"
                        f"--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-4000:]}",
                    },
                )
        pending = [n for n in pending if n not in outcomes]
    return outcomes


def selected_checks(items: list[Any], module: str) -> list[str]:
    names = [
        item.callspec.params["name"]
        for item in items
        if item.module.__name__ == module and hasattr(item, "callspec")
    ]
    return list(dict.fromkeys(names))


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, template_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, str]]:
    names = selected_checks(request.session.items, __name__)
    return run_checks(template_library, names, tmp_path_factory.mktemp("bridge_checks"))


@pytest.mark.parametrize("name", list(CHECKS))
def test_bridge_semantics(name: str, outcomes: dict[str, dict[str, str]]) -> None:
    result = outcomes.get(name)
    assert result is not None, f"{name} was not run"
    if result["outcome"] != "passed":
        pytest.fail(f"[{result['outcome']}] {result['message']}", pytrace=False)


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]))
