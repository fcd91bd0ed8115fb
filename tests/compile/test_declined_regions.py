"""Regions the plugin declines run eagerly ("mixed execution") and still
match; a region declined for one node is offered again without it."""

from __future__ import annotations

import torch
from conftest import compile_fl
from helpers import accepted_ops, assert_close, graph_reports, on_cpu


def test_unsupported_op_splits_the_region(dev: torch.device) -> None:
    # flemu's fused executor has no atan2: it declines that node by index,
    # and the chains before and after it are offered (and accepted) alone.
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x * 3 + 1) - y
        b = torch.atan2(a, y)
        return torch.sigmoid(b * 2) + a

    x = torch.randn(128, device=dev)
    y = torch.rand(128, device=dev) + 0.1
    with torch.no_grad():
        actual = compile_fl(f)(x, y)
    assert_close(actual, on_cpu(f, x, y), "split chain")
    (report,) = graph_reports()
    declined = report.declined_regions
    assert [r.ops for r in declined] == [["aten::atan2"]], report.describe()
    assert "aten::atan2" in declined[0].reason, declined[0].reason
    accepted = accepted_ops([report])
    assert len(accepted) == 2 and all(len(ops) >= 2 for ops in accepted), report.describe()
    assert report.eager_ops == {"aten::atan2": 1}, report.eager_ops


def test_integer_region_is_declined_and_runs_eagerly(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3 + 7) * x - 2

    x = torch.arange(-50, 50, device=dev, dtype=torch.int64)
    with torch.no_grad():
        actual = compile_fl(f)(x)
    assert_close(actual, on_cpu(f, x), "int64 chain")
    (report,) = graph_reports()
    assert report.regions and not any(r.accepted for r in report.regions), report.describe()
    assert any("int64" in r.reason for r in report.regions), report.describe()
    assert sum(report.eager_ops.values()) == 4, report.eager_ops


def test_graph_compiler_off_runs_everything_eagerly(dev: torch.device) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 2) + 1

    x = torch.randn(64, device=dev)
    with torch.no_grad():
        actual = compile_fl(f, graph_compiler=False)(x)
    assert_close(actual, on_cpu(f, x), "eager chain")
    (report,) = graph_reports()
    assert not accepted_ops([report]), report.describe()
    assert all(r.reason == "graph compiler off" for r in report.regions), report.describe()


def test_cpu_graphs_compile_without_the_device(flemu: object) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ x.T) * 2 + 1

    x = torch.randn(16, 16)
    with torch.no_grad():
        actual = compile_fl(f)(x)
    assert_close(actual, on_cpu(f, x), "cpu graph")
    (report,) = graph_reports()
    assert report.regions == [], report.describe()
