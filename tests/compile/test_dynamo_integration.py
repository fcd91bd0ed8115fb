"""The backend as Dynamo sees it: registration, options, graph breaks,
recompilation on new shapes, dynamic shapes."""

from __future__ import annotations

import logging

import pytest
import torch
import torch_fl.compile
from conftest import compile_fl
from helpers import accepted_ops, assert_close, graph_reports, on_cpu
from support import assert_ok, run_python


def test_import_torch_fl_does_not_import_dynamo_but_registers_the_backend() -> None:
    out = assert_ok(run_python(
        """
        import sys, torch, torch_fl
        print("dynamo imported by torch_fl:", "torch._dynamo" in sys.modules)
        import torch._dynamo
        print("torchfl" in torch._dynamo.list_backends())
        """
    ))
    assert "dynamo imported by torch_fl: False" in out, out
    assert out.strip().endswith("True"), out


def test_registered_even_when_dynamo_was_imported_first() -> None:
    out = assert_ok(run_python(
        """
        import os
        os.environ["TORCH_FL_AUTOLOAD"] = "0"
        import torch, torch._dynamo
        import torch_fl
        from torch._dynamo.backends.registry import lookup_backend
        print(lookup_backend("torchfl").__module__)
        """
    ))
    assert out.strip() == "torch_fl.compile", out


def test_unknown_option_names_the_valid_ones(dev: torch.device) -> None:
    fn = compile_fl(lambda x: x + 1, memory_plan="reuse")
    with pytest.raises(Exception, match="unknown option.*memory_plan.*valid options are"):
        fn(torch.ones(2, device=dev))


def test_bad_option_value_is_named(dev: torch.device) -> None:
    fn = compile_fl(lambda x: x + 1, memory_planning="always")
    with pytest.raises(Exception, match="memory_planning must be one of reuse, liveness, none"):
        fn(torch.ones(2, device=dev))


def test_graph_breaks(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x * 2 + 1)
        torch._dynamo.graph_break()
        return torch.sigmoid(y - 3) * y

    x = torch.randn(100, device=dev)
    with torch.no_grad():
        actual = compile_fl(f)(x)
    assert_close(actual, on_cpu(f, x), "graph break")
    reports = graph_reports()
    assert len(reports) == 2, [r.describe() for r in reports]
    assert len(accepted_ops(reports)) == 2, [r.describe() for r in reports]


def test_data_dependent_branch_breaks_and_matches(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if y.sum() > 0:  # needs the value: Dynamo breaks the graph here
            return torch.tanh(y) + 1
        return torch.sigmoid(y) - 1

    fn = compile_fl(f)
    for sign in (1.0, -1.0):
        x = torch.rand(50, device=dev) * sign
        with torch.no_grad():
            assert_close(fn(x), on_cpu(f, x), f"branch {sign}")


def test_recompiles_for_a_new_shape_static(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 - 1) * x

    fn = torch.compile(f, backend="torchfl", dynamic=False)
    with torch.no_grad():
        for n in (32, 48):
            x = torch.randn(n, device=dev)
            assert_close(fn(x), on_cpu(f, x), f"shape {n}")
    shapes = [r.regions[0].shape for r in graph_reports()]
    assert shapes == [(32,), (48,)], shapes


def test_dynamic_graph_is_specialized_per_shape(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 - 1) * x

    fn = torch.compile(f, backend="torchfl", dynamic=True)
    with torch.no_grad():
        for n in (32, 48, 32):
            x = torch.randn(n, 3, device=dev)
            assert_close(fn(x), on_cpu(f, x), f"shape {n}")
    shapes = [r.regions[0].shape for r in graph_reports() if r.regions]
    assert shapes == [(32, 3), (48, 3)], [r.describe() for r in graph_reports()]


def test_dynamic_graph_can_fall_back_to_eager_with_a_reason(
    dev: torch.device, caplog: pytest.LogCaptureFixture
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 - 1) * x

    fn = torch.compile(f, backend="torchfl", dynamic=True, options={"dynamic_shapes": "eager"})
    x = torch.randn(7, device=dev)
    with caplog.at_level(logging.INFO, logger="torch_fl.compile"), torch.no_grad():
        assert_close(fn(x), on_cpu(f, x), "eager dynamic")
    assert graph_reports() == []
    assert any("dynamic shapes" in r.getMessage() and "runs eagerly" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_specialization_limit_falls_back_to_eager(
    dev: torch.device, caplog: pytest.LogCaptureFixture
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 - 1) * x

    fn = torch.compile(f, backend="torchfl", dynamic=True, options={"max_specializations": 1})
    with caplog.at_level(logging.WARNING, logger="torch_fl.compile"), torch.no_grad():
        for n in (5, 6, 7):
            x = torch.randn(n, device=dev)
            assert_close(fn(x), on_cpu(f, x), f"shape {n}")
    assert any("more than 1 shapes" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert len(graph_reports()) == 1


def test_reports_are_data(dev: torch.device) -> None:
    x = torch.randn(10, device=dev)
    with torch.no_grad():
        compile_fl(lambda t: torch.exp(t) * 2)(x)
    (report,) = torch_fl.compile.reports()
    assert isinstance(report, torch_fl.compile.GraphReport)
    assert report.kind == "inference" and report.nodes > 0
    assert "def inference_graph" in report.source, report.source
