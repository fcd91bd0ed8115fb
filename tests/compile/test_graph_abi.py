"""The graph group through the bridge: offering regions in the IR directly
(torch_fl._C.graph_compile), accept/decline answers, execution checks."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_close, on_cpu
from torch_fl import _C

INPUT, OUTPUT, INTERMEDIATE = 0, 1, 2


def _value(kind: int, shape: list[int], dtype: torch.dtype = torch.float32) -> tuple:
    t = torch.empty(shape)
    return (kind, dtype, list(shape), list(t.stride()))


def test_flemu_advertises_a_graph_compiler(flemu: object) -> None:
    assert _C.graph_available()
    assert flemu.groups.get("graph"), flemu.groups  # type: ignore[attr-defined]


def test_compile_and_run_a_region(dev: torch.device) -> None:
    # out = relu(x * y + 1.5)
    values = [_value(INPUT, [4, 5]), _value(INPUT, [5]), _value(INTERMEDIATE, [4, 5]),
              _value(INTERMEDIATE, [4, 5]), _value(OUTPUT, [4, 5])]
    nodes = [
        ("aten::mul.Tensor", [("ref", 0), ("ref", 1)], [2]),
        ("aten::add.Scalar", [("ref", 2), ("double", 1.5), ("int", 1)], [3]),
        ("aten::relu", [("ref", 3)], [4]),
    ]
    exe, reason, node = _C.graph_compile(0, values, nodes, [0, 1], [4])
    assert exe is not None, (reason, node)
    assert (exe.num_inputs, exe.num_outputs, exe.device) == (2, 1, 0)
    x = torch.randn(4, 5, device=dev)
    y = torch.randn(5, device=dev)
    out = torch.empty(4, 5, device=dev)
    exe.run([x, y], [out])
    assert_close(out, on_cpu(lambda a, b: torch.relu(a * b + 1.5), x, y), "region output")


@pytest.mark.parametrize("numel", [1000, 4096, 300_000])
def test_an_output_may_overwrite_an_input(dev: torch.device, numel: int) -> None:
    # o1 = x * y goes into x's own memory, and exp(x), after it in the
    # program, must still read the x it was given: an output that overlaps
    # an input is kept in the register file until the tile's code is done
    # (over one partial tile, whole tiles, and chunks on two threads).
    values = [_value(INPUT, [numel]), _value(INPUT, [numel]), _value(OUTPUT, [numel]),
              _value(INTERMEDIATE, [numel]), _value(OUTPUT, [numel])]
    nodes = [
        ("aten::mul.Tensor", [("ref", 0), ("ref", 1)], [2]),
        ("aten::exp", [("ref", 0)], [3]),
        ("aten::add.Tensor", [("ref", 3), ("ref", 1), ("int", 1)], [4]),
    ]
    exe, reason, node = _C.graph_compile(0, values, nodes, [0, 1], [2, 4])
    assert exe is not None, (reason, node)
    # o1 over x, then o2 over y; the other output into memory of its own.
    for over in (0, 1):
        x = torch.randn(numel, device=dev)
        y = torch.randn(numel, device=dev)
        want = on_cpu(lambda a, b: (a * b, torch.exp(a) + b), x, y)
        outs = [x, torch.empty(numel, device=dev)] if over == 0 else [torch.empty(numel, device=dev), y]
        exe.run([x, y], outs)
        for i, (got, expected) in enumerate(zip(outs, want)):
            assert_close(got, expected, f"output {i}, output {over} written over input {over}")


def test_decline_names_the_node(flemu: object) -> None:
    values = [_value(INPUT, [3]), _value(INTERMEDIATE, [3]), _value(OUTPUT, [3])]
    nodes = [
        ("aten::exp", [("ref", 0)], [1]),
        ("aten::cumsum", [("ref", 1), ("int", 0), ("none", None)], [2]),
    ]
    exe, reason, node = _C.graph_compile(0, values, nodes, [0], [2])
    assert exe is None
    assert node == 1, (reason, node)
    assert "aten::cumsum" in reason, reason


def test_decline_for_a_dtype(flemu: object) -> None:
    values = [_value(INPUT, [3], torch.int32), _value(OUTPUT, [3], torch.int32)]
    nodes = [("aten::neg", [("ref", 0)], [1])]
    exe, reason, node = _C.graph_compile(0, values, nodes, [0], [1])
    assert exe is None and "int32" in reason and node == 0, (reason, node)


def test_malformed_region_is_an_error(flemu: object) -> None:
    values = [_value(INPUT, [3]), _value(OUTPUT, [3])]
    nodes = [("aten::neg", [("ref", 7)], [1])]
    with pytest.raises(ValueError, match="Graph_Compile failed with TFL_ERR_INVALID_ARGUMENT.*value 7"):
        _C.graph_compile(0, values, nodes, [0], [1])


def test_unknown_argument_tag_is_named(flemu: object) -> None:
    values = [_value(INPUT, [3]), _value(OUTPUT, [3])]
    with pytest.raises(RuntimeError, match="unknown argument tag 'tensor'"):
        _C.graph_compile(0, values, [("aten::neg", [("tensor", 0)], [1])], [0], [1])


def test_run_checks_what_the_region_declared(dev: torch.device) -> None:
    values = [_value(INPUT, [2, 3]), _value(OUTPUT, [2, 3])]
    exe, reason, _ = _C.graph_compile(0, values, [("aten::neg", [("ref", 0)], [1])], [0], [1])
    assert exe is not None, reason
    out = torch.empty(2, 3, device=dev)
    with pytest.raises(RuntimeError, match=r"input 0 has sizes \[3, 2\].*declared \[2, 3\]"):
        exe.run([torch.randn(3, 2, device=dev)], [out])
    with pytest.raises(RuntimeError, match="input 0 has dtype Double"):
        exe.run([torch.randn(2, 3, device=dev, dtype=torch.float64)], [out])
    with pytest.raises(RuntimeError, match="input 0 is on cpu"):
        exe.run([torch.randn(2, 3)], [out])
    with pytest.raises(RuntimeError, match="got 2 inputs, the region has 1"):
        exe.run([out, out], [out])
