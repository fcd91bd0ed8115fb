"""Autograd on the device: nn.Linear and nn.Conv2d forward/backward match CPU."""

from __future__ import annotations

import torch
import torch_fl
from torch import nn


def _compare(module: nn.Module, x: torch.Tensor, atol: float = 1e-4) -> None:
    cpu = module
    dev = _copy_to_device(module)
    xc = x.clone().requires_grad_(True)
    xd = x.clone().to("flemu").requires_grad_(True)
    yc = cpu(xc)
    yd = dev(xd)
    assert yd.device.type == "flemu"
    assert torch.allclose(yd.cpu(), yc, atol=atol), (yd.cpu() - yc).abs().max()
    grad = torch.randn_like(yc)
    yc.backward(grad)
    yd.backward(grad.to("flemu"))
    assert torch.allclose(xd.grad.cpu(), xc.grad, atol=atol), (xd.grad.cpu() - xc.grad).abs().max()
    for (name, pc), (_, pd) in zip(cpu.named_parameters(), dev.named_parameters()):
        assert pd.grad is not None and pd.grad.device.type == "flemu", name
        assert torch.allclose(pd.grad.cpu(), pc.grad, atol=atol * 10), (
            name, (pd.grad.cpu() - pc.grad).abs().max())


def _copy_to_device(module: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(module).to("flemu")


def test_linear_forward_backward_matches_cpu() -> None:
    torch.manual_seed(0)
    _compare(nn.Linear(16, 8), torch.randn(5, 16))


def test_conv2d_forward_backward_matches_cpu() -> None:
    torch.manual_seed(0)
    _compare(nn.Conv2d(3, 4, kernel_size=3, padding=1, stride=2), torch.randn(2, 3, 9, 9), atol=1e-4)


def test_small_mlp_trains_like_cpu() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    dev_model = _copy_to_device(model)
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_d = torch.optim.SGD(dev_model.parameters(), lr=0.05)
    xd, yd = x.to("flemu"), y.to("flemu")
    for _ in range(5):
        for m, opt, a, b in ((model, opt_c, x, y), (dev_model, opt_d, xd, yd)):
            opt.zero_grad()
            loss = ((m(a) - b) ** 2).mean()
            loss.backward()
            opt.step()
    for pc, pd in zip(model.parameters(), dev_model.parameters()):
        assert torch.allclose(pd.cpu(), pc, atol=1e-4)


def test_linear_hot_path_is_native(flemu: torch_fl.PluginHandle) -> None:
    m = nn.Linear(8, 8).to("flemu")
    x = torch.randn(4, 8, device="flemu", requires_grad=True)
    with torch_fl.op_stats_scope() as s:
        m(x).sum().backward()
    t = s.table
    assert t.get("aten::addmm").native == 1, t
    assert t.get("aten::mm").native >= 2, t


def test_zero_gradients_are_zero_tensors_without_memory() -> None:
    # sgn's derivative is autograd's efficient zero tensor: no storage, zeros on read.
    x = torch.randn(4, device="flemu", requires_grad=True)
    torch.sgn(x).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.zeros(4))
    z = torch.ops.aten._efficientzerotensor([3], device="flemu")
    assert z._is_zerotensor() and z.device.type == "flemu"
    assert torch.equal((z + 1).cpu(), torch.ones(3))
