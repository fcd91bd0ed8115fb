"""Parameter identity and aliasing through Module.to(), load_state_dict,
parametrize and swap_tensors behave as on CUDA: a tensor on the device and one
on the CPU are shallow-copy compatible, so PyTorch moves a Parameter's data in
place instead of replacing the Parameter (which would untie tied weights and
leave an optimizer built before .to() updating nothing)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrize

DEV = "flemu"


def tied_model() -> nn.Sequential:
    e = nn.Embedding(10, 4)
    h = nn.Linear(4, 10, bias=False)
    h.weight = e.weight
    return nn.Sequential(e, h)


def test_device_and_cpu_tensors_are_shallow_copy_compatible() -> None:
    cpu, dev = torch.zeros(2), torch.zeros(2, device=DEV)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, dev)
    assert not torch._has_compatible_shallow_copy_type(dev, torch.zeros(2).to_sparse())


def test_tied_weights_stay_tied_across_to_and_back() -> None:
    m = tied_model()
    p = m[0].weight
    m.to(DEV)
    assert m[1].weight is m[0].weight is p, "tied weights came apart on .to(device)"
    assert p.device.type == DEV, p.device
    m.cpu()
    assert m[1].weight is m[0].weight is p and p.device.type == "cpu", p.device


def test_tied_weights_train_like_the_cpu() -> None:
    torch.manual_seed(0)
    cpu = tied_model()
    dev = copy.deepcopy(cpu).to(DEV)
    tokens = torch.randint(0, 10, (6, 5))
    losses = {}
    for name, m, x in (("cpu", cpu, tokens), ("dev", dev, tokens.to(DEV))):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        losses[name] = []
        for _ in range(4):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x).flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    assert dev[1].weight is dev[0].weight
    torch.testing.assert_close(torch.tensor(losses["dev"]), torch.tensor(losses["cpu"]),
                               rtol=1e-5, atol=1e-6)


def test_optimizer_built_before_to_updates_the_model() -> None:
    lin = nn.Linear(3, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    lin.to(DEV)
    before = lin.weight.detach().cpu().clone()
    lin(torch.randn(4, 3, device=DEV)).sum().backward()
    opt.step()
    assert not torch.equal(before, lin.weight.detach().cpu()), "the optimizer updated nothing"


def test_gradients_move_with_their_parameter() -> None:
    lin = nn.Linear(3, 2)
    lin(torch.randn(4, 3)).sum().backward()
    grad = lin.weight.grad
    lin.to(DEV)
    assert lin.weight.grad is grad and grad.device.type == DEV, grad.device


def test_load_state_dict_keeps_identity_and_values() -> None:
    m = nn.Linear(3, 2).to(DEV)
    w = m.weight
    src = nn.Linear(3, 2)
    m.load_state_dict(src.state_dict())
    assert m.weight is w and w.device.type == DEV, w.device
    assert torch.equal(m.weight.detach().cpu(), src.weight.detach())


def test_swap_tensors_between_cpu_and_device() -> None:
    a, b = torch.ones(3), torch.zeros(3, device=DEV)
    torch.utils.swap_tensors(a, b)
    assert a.device.type == DEV and b.device.type == "cpu", (a.device, b.device)
    assert torch.equal(a.cpu(), torch.zeros(3)) and torch.equal(b, torch.ones(3))


def test_swap_module_params_on_conversion() -> None:
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m = nn.Linear(3, 2)
        w = m.weight
        m.to(DEV)
        assert m.weight is w and w.device.type == DEV, w.device
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)


def test_parametrized_module_moves_with_its_original() -> None:
    class Symmetric(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.triu() + x.triu(1).transpose(-1, -2)

    lin = nn.Linear(3, 3)
    parametrize.register_parametrization(lin, "weight", Symmetric())
    original = lin.parametrizations.weight.original
    lin.to(DEV)
    assert lin.parametrizations.weight.original is original
    w = lin.weight.detach().cpu()
    assert lin.weight.device.type == DEV and torch.equal(w, w.t()), w


@pytest.mark.parametrize("memory_format", [torch.channels_last, torch.contiguous_format])
def test_to_memory_format(memory_format: torch.memory_format) -> None:
    conv = nn.Conv2d(3, 4, 3)
    w = conv.weight
    conv.to(DEV, memory_format=memory_format)
    assert conv.weight is w and w.device.type == DEV
    assert w.is_contiguous(memory_format=memory_format), w.stride()


def test_in_place_ops_on_parameter_views() -> None:
    cpu = nn.Linear(4, 4)
    dev = copy.deepcopy(cpu).to(DEV)
    for m in (cpu, dev):
        with torch.no_grad():
            m.weight[:, 0].zero_()
            m.weight.t()[1].add_(1)
            m.weight[2:].mul_(2)
    torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach())
