"""Elementwise chains fuse into one region that flemu's graph compiler runs
in one pass, and the result matches eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_fl
from conftest import compile_fl
from helpers import accepted_ops, assert_close, graph_reports, on_cpu


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x * 2.0 + y
    z = torch.relu(z) - 0.5
    z = torch.sigmoid(z) * torch.tanh(y)
    return torch.exp(-z.abs()) / (1.0 + z * z)


def test_chain_is_one_accepted_region(dev: torch.device) -> None:
    x = torch.randn(64, 33, device=dev)
    y = torch.randn(64, 33, device=dev)
    expected = on_cpu(chain, x, y)
    with torch.no_grad():
        actual = compile_fl(chain)(x, y)
    assert_close(actual, expected, "fused chain")
    (report,) = graph_reports("inference")
    regions = report.regions
    assert len(regions) == 1 and regions[0].accepted, report.describe()
    assert len(regions[0].ops) >= 10, report.describe()
    assert "aten::sigmoid" in regions[0].ops and "aten::exp" in regions[0].ops, regions[0].ops
    assert report.eager_ops == {}, f"ops left to eager: {report.eager_ops}"


def test_fused_region_replaces_the_op_by_op_kernels(dev: torch.device) -> None:
    x = torch.randn(1000, device=dev)
    y = torch.randn(1000, device=dev)
    fn = compile_fl(chain)
    with torch.no_grad():
        fn(x, y)  # compile
        with torch_fl.op_stats_scope() as scope:
            out = fn(x, y)
    assert_close(out, on_cpu(chain, x, y), "fused chain")
    ran = {row.op for row in scope.table if row.calls}
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::sigmoid", "aten::exp"):
        assert op not in ran, f"{op} ran op by op in the compiled call: {sorted(ran)}"


def test_broadcast_inputs_and_scalars(dev: torch.device) -> None:
    def f(x: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - row) * col + 3, min=0.0, max=6.0).pow(2) / 6

    x = torch.randn(8, 16, 10, device=dev)
    row = torch.randn(10, device=dev)
    col = torch.randn(16, 1, device=dev)
    with torch.no_grad():
        actual = compile_fl(f)(x, row, col)
    assert_close(actual, on_cpu(f, x, row, col), "broadcast chain")
    assert accepted_ops(graph_reports()), graph_reports()[0].describe()


def test_comparisons_where_and_bool_outputs(dev: torch.device) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = (x > 0) & (y <= 0.5)
        return torch.where(mask, x * y, -x), mask

    x = torch.randn(257, device=dev)
    y = torch.rand(257, device=dev)
    with torch.no_grad():
        out, mask = compile_fl(f)(x, y)
    e_out, e_mask = on_cpu(f, x, y)
    assert_close(out, e_out, "where")
    assert_close(mask, e_mask, "mask")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_floating_dtypes(dev: torch.device, dtype: torch.dtype) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * 0.5 + 1) * torch.sigmoid(x)

    x = torch.randn(4096, device=dev).to(dtype)
    with torch.no_grad():
        actual = compile_fl(f)(x)
    expected = on_cpu(f, x.double()).to(dtype)
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    assert_close(actual, expected, f"gelu chain {dtype}", rtol=tol, atol=tol)


def test_strided_and_channels_last_layouts(dev: torch.device) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) * 2 - y

    x = torch.randn(2, 8, 5, 6, device=dev).to(memory_format=torch.channels_last)
    y = torch.randn(2, 6, 5, 8, device=dev).permute(0, 3, 2, 1)  # non-contiguous
    with torch.no_grad():
        actual = compile_fl(f)(x, y)
    expected = on_cpu(f, x, y)
    assert_close(actual, expected, "strided chain")
    assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())


def test_large_chain_splits_across_threads(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        for i in range(10):
            x = x * 1.01 + (0.1 * i)
            x = torch.tanh(x)
        return x

    x = torch.randn(300_001, device=dev)
    with torch.no_grad():
        actual = compile_fl(f)(x)
    assert_close(actual, on_cpu(f, x), "long chain")
    ((ops,),) = [accepted_ops(graph_reports())]
    assert len(ops) == 30, ops


def _one_region_matching_eager_bits(f: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]],
                                    dev: torch.device, numel: int) -> list[str]:
    """f(x, y) on two random device tensors of numel elements, compiled and
    eager: asserts every output is bit for bit eager's and returns the ops of
    the one region the graph fused."""
    x = torch.randn(numel, device=dev)
    y = torch.randn(numel, device=dev)
    with torch.no_grad():
        expected = f(x, y)
        actual = compile_fl(f)(x, y)
    ((ops,),) = [accepted_ops(graph_reports())]
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a.cpu(), e.cpu(), rtol=0, atol=0, msg=lambda m, i=i: f"output {i}: {m}")
    return ops


@pytest.mark.parametrize("numel", [1, 1000, 300_001])
def test_values_handed_over_in_registers_match_eager_bit_for_bit(dev: torch.device, numel: int) -> None:
    """flemu's executor keeps a value whose only use is the next op's first
    operand in vector registers and never stores it. A value used twice, a
    value that is also an output, a chain that takes another operand on the
    way, and a tile's last partial block must all come out exactly as
    eager's kernels compute them, op by op in float32."""

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x * 1.5 + 0.25  # a chain of two
        b = a * a  # a is used twice: stored
        c = (b - y) / 3.0  # a chain through another operand
        d = torch.maximum(c, y) * 0.5 - a  # c is also an output
        e = torch.where(d > 0.1, d, -d) * 2.0 + 1.0  # a select in a chain
        return c, e, torch.relu(-e) + torch.clamp(b, -1.0, 2.0)

    ops = _one_region_matching_eager_bits(f, dev, numel)
    assert len(ops) >= 14, ops


# 8193 elements split over the pool where a region evaluates exp, tanh or
# gelu (4096-element grain); 300_001 split anyway.
@pytest.mark.parametrize("numel", [1, 1000, 8193, 300_001])
def test_transcendental_regions_match_eager_bit_for_bit(dev: torch.device, numel: int) -> None:
    """exp, sigmoid, tanh, silu and gelu in both forms and their backward run
    in a region with the eager kernels' own float32 forms, over whole tiles:
    first, inside and last in a chain, two in a row, a value used twice, and
    an operand whose register the result may take must all come out as
    eager's kernels compute them."""
    gelu_backward = torch.ops.aten.gelu_backward.default

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.exp(x * 0.5) * 2.0 - 1.0  # exp inside a chain
        b = torch.tanh(torch.sigmoid(a))  # two in a row, tanh last in its chain
        c = torch.nn.functional.gelu(b + y)  # gelu ends a chain
        d = c * b  # c and b used again
        e = torch.nn.functional.silu(x) + torch.nn.functional.gelu(d, approximate="tanh")
        g = gelu_backward(e * 0.5, y)  # y's last use: the result may take its register
        h = gelu_backward(g, a, approximate="tanh") - torch.exp(c)
        return c, g, h * e

    ops = _one_region_matching_eager_bits(f, dev, numel)
    assert {"aten::gelu", "aten::gelu_backward", "aten::silu", "aten::tanh", "aten::exp"} <= set(ops), ops


@pytest.mark.parametrize("numel", [1, 1000, 8193, 300_001])
def test_math_regions_match_eager_bit_for_bit(dev: torch.device, numel: int) -> None:
    """log, log1p, erf, sin, cos, sqrt, rsqrt, exp2, expm1 and log2 in a region
    take the eager kernels' own float32 forms (sin and cos: the vector form in
    range, libm beyond 2^20, where x * 3e6 sends some values; exp2, expm1 and
    log2 evaluated in double), so a region's values are eager's bits: inside a
    chain, two in a row, and at a chain's end."""

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.log(x.abs() + 0.5) * 2.0  # log inside a chain
        b = torch.log1p(torch.sqrt(y * y + 1.0))  # two in a row
        c = torch.erf(a - b)  # erf ends a chain
        d = torch.sin(x * 3.0e6) + torch.cos(y * 40.0)  # beyond and within sin's vector range
        e = torch.rsqrt(b + 1.0) * torch.cos(c)
        h = torch.expm1(torch.exp2(c * 3.0) - 1.5) + torch.log2(b + 0.25)
        return c, d, e - torch.sin(d), h

    ops = _one_region_matching_eager_bits(f, dev, numel)
    assert {"aten::log", "aten::log1p", "aten::erf", "aten::sin", "aten::cos", "aten::sqrt",
            "aten::rsqrt", "aten::exp2", "aten::expm1", "aten::log2"} <= set(ops), ops


_UNARY = [torch.neg, torch.relu, torch.sigmoid, torch.tanh, torch.abs, torch.exp,
          lambda t: torch.clamp(t, -1.5, 2.0), lambda t: t * 0.5, lambda t: 1.0 - t,
          torch.nn.functional.silu, lambda t: torch.pow(t, 2), torch.erf]
_BINARY = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum,
           lambda a, b: torch.where(a > b, a, b * 0.25), lambda a, b: a / (b.abs() + 1.0)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shapes", [((3, 70), (70,)), ((2, 5000), (5000,)), ((5, 30011), (5, 30011))],
                         ids=["one-tile", "tiles-broadcast", "threads-dense"])
def test_random_elementwise_graphs(dev: torch.device, seed: int, shapes: tuple) -> None:
    """Random DAGs of elementwise ops (values reused several times, several
    outputs): register allocation and the op table against the CPU. Past one
    tile (1024 elements) flemu reads dense inputs and writes dense outputs
    where they are, the registers they share with other values remapped; a
    broadcast input is still copied; the last shape splits across threads
    and ends in a partial tile."""
    import random

    rng = random.Random(seed)
    plan = []
    for _ in range(14):
        if rng.random() < 0.5:
            plan.append(("u", rng.randrange(len(_UNARY)), rng.randrange(10**6), 0))
        else:
            plan.append(("b", rng.randrange(len(_BINARY)), rng.randrange(10**6), rng.randrange(10**6)))

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        vals = [x, y]
        for kind, op, i, j in plan:
            a = vals[i % len(vals)]
            if kind == "u":
                vals.append(_UNARY[op](a))
            else:
                vals.append(_BINARY[op](a, vals[j % len(vals)]))
        return vals[-1], vals[-4], vals[len(vals) // 2]

    x = torch.randn(*shapes[0], device=dev)
    y = torch.randn(*shapes[1], device=dev)
    with torch.no_grad():
        actual = compile_fl(f)(x, y)
    expected = on_cpu(f, x, y)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, f"graph {seed} output {i}", rtol=1e-5, atol=1e-5)
    assert accepted_ops(graph_reports()), graph_reports()[0].describe()


def test_fusing_a_sum_keeps_few_terms_alive(dev: torch.device) -> None:
    """A running sum of matmul results (an unrolled RNN's weight gradient):
    fusing the adds whole would run them after the last matmul, with every
    term alive at once. A region holds at most one output's worth of values
    produced after its first op, so the peak stays near eager's."""
    from test_memory_plan import _peak

    def f(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
        acc = x @ ws[0]
        for w in ws[1:]:
            acc = acc + x @ w
        return acc * 0.5

    x = torch.randn(128, 128, device=dev)
    ws = [(torch.randn(128, 128) / 12).to(dev) for _ in range(12)]
    expected, eager_peak = _peak(f, x, ws)
    actual, compiled_peak = _peak(compile_fl(f), x, ws)
    assert_close(actual, expected, "sum of matmuls", rtol=1e-4, atol=1e-4)
    assert accepted_ops(graph_reports()), graph_reports()[0].describe()
    term = 128 * 128 * 4
    assert compiled_peak <= eager_peak + term, (compiled_peak, eager_peak)
