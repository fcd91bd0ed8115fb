"""Calls the compiled graphs need not make: detaches read through
(torch_fl.compile.passes.drop_detaches)."""

from __future__ import annotations

import torch
from conftest import compile_fl
from helpers import assert_close, graph_reports
from torch import nn
from torch_fl.compile.passes import drop_detaches

aten = torch.ops.aten


def test_detaches_the_graph_reads_are_read_through_and_a_returned_one_stays() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    inner = g.call_function(aten.detach.default, (x,))
    outer = g.call_function(aten.detach.default, (inner,))
    relu = g.call_function(aten.relu.default, (outer,))
    returned = g.call_function(aten.detach.default, (x,))
    g.output((relu, returned))
    assert drop_detaches(g) == 2
    assert relu.args == (x,)
    assert [n for n in g.nodes if n.target is aten.detach.default] == [returned]


def test_a_training_step_calls_no_detach_and_matches_eager(dev: torch.device) -> None:
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Tanh()).to(dev)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Tanh()).to(dev)
    model.load_state_dict(eager.state_dict())
    step = compile_fl(model)
    x = torch.randn(2, 3, 8, 8, device=dev)
    eager(x).square().sum().backward()
    step(x).square().sum().backward()
    for (name, p_e), p_c in zip(eager.named_parameters(), model.parameters()):
        assert_close(p_c.grad, p_e.grad, f"gradient of {name}", rtol=1e-4, atol=1e-5)
    (bw,) = graph_reports("backward")
    assert bw.detaches_removed > 0 and "aten::detach" not in bw.eager_ops, bw.describe()
