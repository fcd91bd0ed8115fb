"""The model zoo trains on flemu like on the CPU, with every CPU fallback
forbidden: forward outputs, gradients, 10 optimizer steps of loss tracking,
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
