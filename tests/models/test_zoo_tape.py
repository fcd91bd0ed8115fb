"""zoo.tape: what the parity check replays on the CPU, and what it must not.

A ReLU input within rounding of 0 may pass on the device and stop on the CPU;
the replay takes the device's side there, and only there: a device whose
ReLU decides differently away from 0 still fails the parity check."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_fl
from torch_fl_conformance.zoo import ModelSpec
from torch_fl_conformance.zoo.parity import check_parity
from torch_fl_conformance.zoo.tape import Dropout, Tape, relu, use_tape


def _replayed_relu_grad(x_recorded: torch.Tensor, x_replayed: torch.Tensor, tie_atol: float
                        ) -> tuple[torch.Tensor, torch.Tensor, int]:
    tape = Tape()
    with use_tape(tape):
        relu(x_recorded)
    replay = tape.replay(tie_atol=tie_atol)
    x = x_replayed.clone().requires_grad_()
    with use_tape(replay):
        out = relu(x)
    out.sum().backward()
    assert x.grad is not None
    return out.detach(), x.grad, replay.ties_taken


def test_a_tie_takes_the_recorded_side_in_value_and_gradient() -> None:
    recorded = torch.tensor([-1.0, 1e-6, -1e-6, 2.0])
    replayed = torch.tensor([-1.0, -1e-6, 1e-6, 2.0])  # the middle two cross 0
    out, grad, taken = _replayed_relu_grad(recorded, replayed, tie_atol=1e-3)
    assert taken == 2
    assert grad.tolist() == [0.0, 1.0, 0.0, 1.0], grad
    assert out.tolist() == pytest.approx([0.0, -1e-6, 0.0, 2.0]), out


def test_a_disagreement_beyond_the_tie_window_keeps_the_replaying_side() -> None:
    recorded = torch.tensor([0.5, -0.5, 1e-6])
    replayed = torch.tensor([-0.5, 0.5, -1e-6])
    out, grad, taken = _replayed_relu_grad(recorded, replayed, tie_atol=1e-3)
    assert taken == 1, taken  # only the last element lies within 1e-3 of 0
    assert grad.tolist() == [0.0, 1.0, 1.0], grad
    assert out[:2].tolist() == [0.0, 0.5], out


def test_without_a_window_nothing_is_taken() -> None:
    _, grad, taken = _replayed_relu_grad(torch.tensor([1e-6]), torch.tensor([-1e-6]), tie_atol=0.0)
    assert taken == 0 and grad.tolist() == [0.0]


def test_dropout_masks_replay_and_a_different_forward_is_refused() -> None:
    torch.manual_seed(0)
    x = torch.randn(64)
    drop = Dropout(0.5).train()
    tape = Tape()
    with use_tape(tape):
        recorded = relu(drop(x))
    assert tape.kinds == ["dropout", "relu"]
    with use_tape(tape.replay()):
        assert torch.equal(relu(drop(x)), recorded)
    with pytest.raises(RuntimeError, match="call 0 is relu but the recorded forward called dropout"):
        with use_tape(tape.replay()):
            relu(x)
    with pytest.raises(RuntimeError, match="used 1 of 2 recorded calls"):
        with use_tape(tape.replay()):
            drop(x)
    with pytest.raises(ValueError, match="1 masks for 1 recorded dropout calls|2 masks for 1"):
        tape.replay(masks=[torch.ones(64), torch.ones(64)])


class _TiedUnit(torch.nn.Module):
    """Linear(4, 3) -> ReLU -> Linear(3, 1). Unit 0's pre-activation is 0 on
    the CPU for every input (zero weights and bias); off the CPU it is
    `shift`, as a device's rounding (1e-6) or a wrong kernel (0.01) gives."""

    def __init__(self, shift: float, zoo_relu: bool) -> None:
        super().__init__()
        self.shift, self.zoo_relu = shift, zoo_relu
        self.fc1 = torch.nn.Linear(4, 3)
        self.fc2 = torch.nn.Linear(3, 1)
        with torch.no_grad():
            self.fc1.weight[0].zero_()
            self.fc1.bias[0] = 0.0
            self.fc2.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if x.device.type != "cpu":
            h = h + torch.tensor([self.shift, 0.0, 0.0], device=x.device)
        return self.fc2(relu(h) if self.zoo_relu else F.relu(h))


def _tied_spec(shift: float, zoo_relu: bool = True) -> ModelSpec:
    return ModelSpec(
        name="tied_unit", family="cnn", description="test double",
        build=lambda: _TiedUnit(shift, zoo_relu),
        make_batch=lambda seed: ((torch.randn(6, 4, generator=torch.Generator().manual_seed(seed)),),
                                 torch.ones(6, 1)),
        loss_fn=lambda m, inputs, target: F.mse_loss(m(*inputs), target),
        make_optimizer=lambda params, device_type: torch.optim.SGD(params, lr=0.0),
        amp_dtype=None,
    )


def test_parity_passes_a_device_that_rounds_across_a_relu_tie() -> None:
    with torch_fl.fallback_mode("error"):
        result = check_parity(_tied_spec(1e-6), device="flemu", steps=2, check_eval=False)
    assert result.passed, result.failures
    # The same device against plain F.relu: the unit's weights get a gradient
    # on the device and none on the CPU, and the check fails by luck of rounding.
    with torch_fl.fallback_mode("error"):
        untaped = check_parity(_tied_spec(1e-6, zoo_relu=False), device="flemu", steps=2, check_eval=False)
    assert any(f.startswith("gradients (step 0): grad fc1.weight") for f in untaped.failures), untaped.failures


def test_parity_fails_a_device_whose_relu_input_is_off_beyond_the_window() -> None:
    with torch_fl.fallback_mode("error"):
        result = check_parity(_tied_spec(0.01), device="flemu", steps=2, check_eval=False)
    assert not result.passed
    # Unit 0 passes on the device only: fc2's gradient for it is 0 on the CPU.
    assert any(f.startswith("gradients (step 0): grad fc2.weight") for f in result.failures), result.failures
