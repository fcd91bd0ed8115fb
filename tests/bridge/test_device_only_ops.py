"""Ops PyTorch sends non-CPU devices to but implements only for CUDA (the fused
LSTM/GRU cells) run through the bridge's own decompositions on any plugin."""

from __future__ import annotations

import copy

import pytest
import torch
import torch_fl
from torch import nn


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU], ids=lambda c: c.__name__)
def test_recurrent_layers_match_cpu_forward_and_backward(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    cpu = cls(4, 8, num_layers=2, batch_first=True)
    dev = copy.deepcopy(cpu).to("flemu")
    x = torch.randn(3, 5, 4)
    out, _ = cpu(x)
    with torch_fl.fallback_mode("silent"), torch_fl.op_stats_scope() as scope:
        out_d, _ = dev(x.to("flemu"))
        grad = torch.randn_like(out)
        out.backward(grad)
        out_d.backward(grad.to("flemu"))
    assert torch.allclose(out_d.cpu(), out, atol=1e-5), (out_d.cpu() - out).abs().max()
    for (name, p), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert torch.allclose(pd.grad.cpu(), p.grad, atol=1e-5), name
    cell = "lstm" if cls is nn.LSTM else "gru"
    ran = {r.op for r in scope.table if r.native or r.decomposed}
    assert f"aten::_thnn_fused_{cell}_cell" in ran, scope.table
    failed = [r.op for r in scope.table if r.failed]
    assert not failed, failed


def test_cell_outputs_undefined_gradients_when_no_bias() -> None:
    torch.manual_seed(1)
    cpu = nn.LSTM(3, 4, bias=False)
    dev = copy.deepcopy(cpu).to("flemu")
    x = torch.randn(2, 1, 3)
    cpu(x)[0].sum().backward()
    with torch_fl.fallback_mode("silent"):
        dev(x.to("flemu"))[0].sum().backward()
    for p, pd in zip(cpu.parameters(), dev.parameters()):
        assert torch.allclose(pd.grad.cpu(), p.grad, atol=1e-5)
