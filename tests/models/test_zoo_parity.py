"""The model zoo trains on flemu like on the CPU, with every CPU fallback
forbidden: forward outputs, gradients, 10 optimizer steps of loss tracking and
per-step updates (each step from the CPU's state),
eval mode after training (batch-norm running statistics) and bfloat16 AMP for
the models that declare it (ResNet-18, the encoder, the UNet)."""

from __future__ import annotations

import pytest
import torch
import torch_fl
from torch_fl_conformance.zoo import ModelSpec, Tolerances, all_models, get_model
from torch_fl_conformance.zoo.parity import ParityResult, check_parity

MODELS = [s.name for s in all_models()]


def _report(r: ParityResult) -> str:
    lines = [f"{r.model} on {r.device}: {len(r.failures)} failure(s)", *(f"  - {f}" for f in r.failures)]
    lines.append(f"  losses cpu    {[round(x, 5) for x in r.losses_cpu]}")
    lines.append(f"  losses device {[round(x, 5) for x in r.losses_device]}")
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_model_trains_like_the_cpu(name: str) -> None:
    spec = get_model(name)
    with torch_fl.fallback_mode("error"):
        result = check_parity(spec, device="flemu", steps=10)
    assert result.passed, _report(result)
    assert result.fallback_ops == [], result.fallback_ops
    assert len(result.losses_device) == 10
    assert result.peak_memory_bytes > 0, "the training loop allocated no device memory"
    if name in ("resnet18", "bert_mlm"):
        assert result.eval_max_abs is not None, "eval mode was not checked"
        assert spec.amp_dtype == torch.bfloat16 and result.amp_max_abs is not None, "AMP was not checked"


def test_zoo_api() -> None:
    assert MODELS == ["resnet18", "bert_mlm", "lstm_lm", "unet"]
    assert {s.family for s in all_models()} == {"cnn", "transformer", "sequence", "generative"}
    with pytest.raises(KeyError, match="resnet18"):
        get_model("vgg")
    for spec in all_models():
        assert isinstance(spec, ModelSpec) and isinstance(spec.tolerances, Tolerances)


@pytest.mark.parametrize("name", MODELS)
def test_models_are_deterministic_and_batches_on_cpu(name: str) -> None:
    spec = get_model(name)
    torch.manual_seed(0)
    a = spec.build()
    torch.manual_seed(0)
    b = spec.build()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), f"{name}: parameter {n} differs between two builds under one seed"
    inputs, target = spec.make_batch(3)
    again, target2 = spec.make_batch(3)
    for x, y in zip([*inputs, target], [*again, target2]):
        assert x.device.type == "cpu" and torch.equal(x, y), f"{name}: make_batch(3) is not reproducible"
    loss = spec.loss_fn(a.train(), inputs, target)
    assert loss.dim() == 0 and torch.isfinite(loss), f"{name}: loss {loss}"


class _OffOnDevice(torch.nn.Module):
    """A linear model whose output is shifted by 0.01 off the CPU: a device
    that computes the wrong thing."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        return out if x.device.type == "cpu" else out + 0.01


def _broken_spec() -> ModelSpec:
    return ModelSpec(
        name="off_on_device", family="cnn", description="test double",
        build=_OffOnDevice,
        make_batch=lambda seed: ((torch.randn(5, 4, generator=torch.Generator().manual_seed(seed)),),
                                 torch.zeros(5, 3)),
        loss_fn=lambda m, inputs, target: torch.nn.functional.mse_loss(m(*inputs), target),
        make_optimizer=lambda params, device_type: torch.optim.SGD(params, lr=0.1),
        amp_dtype=None,
    )


def test_parity_reports_a_wrong_device_result() -> None:
    with torch_fl.fallback_mode("error"):
        result = check_parity(_broken_spec(), device="flemu", steps=3)
    assert not result.passed
    assert result.forward_max_abs == pytest.approx(0.01, rel=1e-3), result.forward_max_abs
    forward = [f for f in result.failures if f.startswith("forward")]
    assert forward and "atol=0.001" in forward[0] and "15 of 15 elements" in forward[0], result.failures
    assert any(f.startswith("eval forward") for f in result.failures), result.failures
    assert result.to_dict()["passed"] is False
    assert result.eval_max_abs is not None and result.amp_max_abs is None


def _small_cnn_spec(make_optimizer, bn_momentum_on_device: float = 0.1) -> ModelSpec:
    """A convolution, batch norm and linear head trained with SGD; the device
    copy's batch norm may use another running-statistics momentum."""

    class _Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 6 * 6, 3)

        def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - nn.Module's hook for .to()
            out = super()._apply(fn, recurse)
            on_device = any(p.device.type != "cpu" for p in self.parameters())
            self.bn.momentum = bn_momentum_on_device if on_device else 0.1
            return out

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))

    return ModelSpec(
        name="small_cnn", family="cnn", description="test double",
        build=_Net,
        make_batch=lambda seed: ((torch.randn(4, 3, 6, 6, generator=torch.Generator().manual_seed(seed)),),
                                 torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(seed))),
        loss_fn=lambda m, inputs, target: torch.nn.functional.cross_entropy(m(*inputs), target),
        make_optimizer=make_optimizer,
        amp_dtype=None,
    )


def _sgd(momentum_on_device: float = 0.9, lr_on_device: float = 0.05):
    def make(params, device_type: str) -> torch.optim.Optimizer:
        if device_type == "cpu":
            return torch.optim.SGD(params, lr=0.05, momentum=0.9)
        return torch.optim.SGD(params, lr=lr_on_device, momentum=momentum_on_device)
    return make


def test_parity_passes_the_small_cnn_and_steps_from_the_cpu_state() -> None:
    with torch_fl.fallback_mode("error"):
        result = check_parity(_small_cnn_spec(_sgd()), device="flemu", steps=4)
    assert result.passed, _report(result)
    assert result.eval_max_abs is not None and result.eval_max_abs < 1e-5, result.eval_max_abs


@pytest.mark.parametrize(("optimizer", "bn_momentum", "expected"), [
    # An optimizer that ignores momentum takes step 0 like SGD (the buffer starts as the gradient).
    (_sgd(momentum_on_device=0.0), 0.1, "update at step 1: update of "),
    (_sgd(lr_on_device=0.06), 0.1, "update at step 0: update of "),
    (_sgd(), 0.2, "buffers after step 0: buffer bn.running_mean"),
])
def test_parity_reports_a_wrong_step(optimizer, bn_momentum: float, expected: str) -> None:  # noqa: ANN001
    with torch_fl.fallback_mode("error"):
        result = check_parity(_small_cnn_spec(optimizer, bn_momentum), device="flemu", steps=3)
    assert not result.passed
    assert any(f.startswith(expected) for f in result.failures), result.failures
    # Forward and gradients of step 0 agree: the step itself is what differs.
    assert not any(f.startswith(("forward", "gradients")) for f in result.failures), result.failures
