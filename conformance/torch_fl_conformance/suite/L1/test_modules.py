"""L1 module semantics on the device: what nn.Module code takes for granted when it
moves a model and keeps training it.

- TFL-MOD-001 (MUST): parameter identity survives Module.to(device), so weights
  tied by sharing one Parameter stay one Parameter (an embedding and its output
  projection); a tie that comes apart trains two copies, silently.
- TFL-MOD-002 (MUST): an optimizer built before .to() updates the module's
  parameters (it holds the same objects).
- TFL-MOD-003 (MUST): state_dict / load_state_dict round trips between the CPU
  and the device, parameters and buffers, loading in place.
- TFL-MOD-004 (MUST): Module.to(device, memory_format=torch.channels_last) gives
  channels-last 4-d parameters, and the model computes what the CPU computes.
- TFL-MOD-005 (MUST): in-place operations on views of parameters (rows, columns,
  flattened views, .data) change the parameters and what the module computes.
- TFL-MOD-006 (MUST): torch.nn.utils.parametrize works on the device: the
  parametrized weight, the forward and the gradient of the original.
- TFL-MOD-007 (SHOULD): torch.utils.swap_tensors swaps device tensors (and a
  device tensor with a CPU one), and Module.to() under
  torch.__future__.set_swap_module_params_on_conversion(True) keeps the
  Parameter objects.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch_fl_conformance.kernel_watch import synchronize
from torch_fl_conformance.tolerances import compare


def _close(actual: Any, expected: Any, op: str | None, what: str, kind: str = "output") -> None:
    synchronize(actual.device if isinstance(actual, torch.Tensor) else "cpu")
    got = actual.detach().cpu() if isinstance(actual, torch.Tensor) else actual
    bad, _, _ = compare(got, expected.detach() if isinstance(expected, torch.Tensor)
                        else expected, kind, op)
    assert not bad, f"{what}: {bad[0].where}: {bad[0].message}"


def _tied(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    return nn.Sequential(emb, head)


@pytest.mark.requirement("TFL-MOD-001")
def test_tied_weights_stay_tied(device: str) -> None:
    model = _tied()
    shared = model[0].weight
    reference = copy.deepcopy(model)
    moved = model.to(device)
    assert moved is model, "Module.to() returned another module"
    assert model[1].weight is model[0].weight, (
        "the tied weight came apart on .to(): the embedding and the output layer now hold "
        "two Parameters")
    assert model[0].weight is shared, "Module.to() replaced the Parameter object"
    assert len(list(model.parameters())) == 1, \
        f"{len(list(model.parameters()))} parameters after .to(), 1 before"
    assert model[0].weight.device == torch.device(device), model[0].weight.device
    # One training step moves both uses of the weight, as on the CPU.
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for m, x in ((model, idx.to(device)), (reference, idx)):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(x).logsumexp(-1).sum().backward()
        opt.step()
    assert torch.equal(model[1].weight.detach().cpu(), model[0].weight.detach().cpu()), \
        "after a step the output layer's weight differs from the embedding's"
    _close(model[0].weight, reference[0].weight, "nn.functional.linear",
           "the tied weight after one SGD step")


@pytest.mark.requirement("TFL-MOD-002")
def test_optimizer_built_before_to(device: str) -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    reference = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model.to(device)
    held = [p for group in opt.param_groups for p in group["params"]]
    assert all(a is b for a, b in zip(held, model.parameters(), strict=True)), \
        "the optimizer's parameters are no longer the module's after .to()"
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    for _ in range(3):
        for m, o, xx, yy in ((model, opt, x.to(device), y.to(device)),
                             (reference, ref_opt, x, y)):
            o.zero_grad()
            nn.functional.mse_loss(m(xx), yy).backward()
            o.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert p.device == torch.device(device), f"{name} on {p.device}"
        _close(p, q, "nn.functional.linear", f"{name} after 3 SGD steps")


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.ReLU(), nn.Linear(7, 3))


@pytest.mark.requirement("TFL-MOD-003")
def test_state_dict_round_trip(device: str) -> None:
    src = _net(2)
    src.train()
    src(torch.randn(16, 5))  # running statistics and num_batches_tracked move
    state = src.state_dict()
    dev = _net(3).to(device)
    params = {k: v for k, v in dev.state_dict(keep_vars=True).items()}
    result = dev.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys, result
    for k, v in dev.state_dict(keep_vars=True).items():
        assert v is params[k], f"load_state_dict replaced {k} instead of copying into it"
        assert v.device == torch.device(device), f"{k} on {v.device} after load_state_dict"
        assert torch.equal(v.detach().cpu(), state[k]), f"{k}: loaded values differ"
    back = dev.state_dict()
    for k, v in back.items():
        assert v.device == torch.device(device), f"state_dict()[{k}] on {v.device}"
    cpu = _net(4)
    cpu.load_state_dict(back)
    for k, v in cpu.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, state[k]), f"{k}: device -> CPU differs"
    other = _net(5).to(device)
    other.load_state_dict(back)
    x = torch.randn(4, 5)
    dev.eval()
    other.eval()
    cpu.eval()
    assert torch.equal(other(x.to(device)).cpu(), dev(x.to(device)).cpu()), \
        "device -> device load computes otherwise"
    _close(dev(x.to(device)), cpu(x), "nn.functional.linear", "the loaded model's output")


@pytest.mark.requirement("TFL-MOD-004")
def test_channels_last_conversion(device: str) -> None:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3))
    reference = copy.deepcopy(model)
    model.to(device, memory_format=torch.channels_last)
    for name, p in model.named_parameters():
        assert p.device == torch.device(device), f"{name} on {p.device}"
        if p.dim() == 4:
            assert p.is_contiguous(memory_format=torch.channels_last), \
                f"{name}: strides {p.stride()} are not channels-last after .to(channels_last)"
    x = torch.randn(2, 3, 9, 9)
    out = model(x.to(device).contiguous(memory_format=torch.channels_last))
    ref = reference(x)
    _close(out, ref, "nn.functional.conv2d", "output of the channels-last model")
    g = torch.randn(ref.shape)
    out.backward(g.to(device))
    ref.backward(g)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        _close(p.grad, q.grad, "nn.functional.conv2d", f"gradient of {name}", kind="grad")


@pytest.mark.requirement("TFL-MOD-005")
def test_inplace_on_parameter_views(device: str) -> None:
    torch.manual_seed(7)
    model = nn.Linear(4, 3)
    reference = copy.deepcopy(model)
    model.to(device)
    for m in (model, reference):
        with torch.no_grad():
            m.weight[0].mul_(2)  # a row
            m.weight[:, 1].zero_()  # a column (strided)
            m.weight.t()[2].add_(1.5)  # a column through a transpose
            m.weight.view(-1)[5] = 7.0  # an element through a flattened view
            m.bias[1:].sub_(0.25)
        m.weight.data[2, 3] = -4.0  # through .data
    assert model.weight.device == torch.device(device)
    _close(model.weight, reference.weight, None, "the weight after in-place writes to views")
    _close(model.bias, reference.bias, None, "the bias after an in-place write to a slice")
    x = torch.randn(5, 4)
    _close(model(x.to(device)), reference(x), "nn.functional.linear",
           "the module's output after the writes")


class _Symmetric(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.triu() + x.triu(1).mT


@pytest.mark.requirement("TFL-MOD-006")
@pytest.mark.parametrize("when", ["before_to", "after_to"])
def test_parametrize(when: str, device: str) -> None:
    from torch.nn.utils import parametrize

    torch.manual_seed(8)
    model = nn.Linear(5, 5)
    reference = copy.deepcopy(model)
    parametrize.register_parametrization(reference, "weight", _Symmetric())
    if when == "before_to":
        parametrize.register_parametrization(model, "weight", _Symmetric())
        model.to(device)
    else:
        model.to(device)
        parametrize.register_parametrization(model, "weight", _Symmetric())
    original = model.parametrizations.weight.original
    assert original.device == torch.device(device), original.device
    w = model.weight
    assert torch.equal(w.detach().cpu(), w.detach().cpu().mT), "the parametrized weight is not symmetric"
    _close(w, reference.weight, None, "the parametrized weight")
    x = torch.randn(3, 5)
    out, ref = model(x.to(device)), reference(x)
    _close(out, ref, "nn.functional.linear", "the forward")
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    assert original.grad is not None, "no gradient reached parametrizations.weight.original"
    _close(original.grad, reference.parametrizations.weight.original.grad,
           "nn.functional.linear", "the gradient of the original weight", kind="grad")


@pytest.mark.requirement("TFL-MOD-007")
def test_swap_tensors(device: str) -> None:
    a = torch.arange(6.0).view(2, 3).to(device)
    b = torch.full((4,), -1.0, device=device)
    torch.utils.swap_tensors(a, b)
    assert a.shape == (4,) and b.shape == (2, 3), (a.shape, b.shape)
    assert torch.equal(a.cpu(), torch.full((4,), -1.0)), a.cpu()
    assert torch.equal(b.cpu(), torch.arange(6.0).view(2, 3)), b.cpu()
    c = torch.ones(3)
    d = torch.zeros(3, device=device)
    torch.utils.swap_tensors(c, d)
    assert c.device == torch.device(device) and d.device.type == "cpu", (c.device, d.device)
    assert torch.equal(c.cpu(), torch.zeros(3)) and torch.equal(d, torch.ones(3))
    torch.manual_seed(9)
    model = nn.Linear(3, 2)
    weight, values = model.weight, model.weight.detach().clone()
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to(device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)
    assert model.weight is weight, "Module.to() with swap_tensors replaced the Parameter object"
    assert weight.device == torch.device(device), weight.device
    assert torch.equal(weight.detach().cpu(), values), "swapping moved other values"
