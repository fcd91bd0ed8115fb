"""torch.amp.GradScaler on flemu: its two kernels (unscale with the
non-finite check, the scale update) against the CPU's, and a mixed-precision
training loop with fallbacks forbidden."""

from __future__ import annotations

import pytest
import torch
from native_check import DEVICE, assert_close, make, run_native

UNSCALE = "aten::_amp_foreach_non_finite_check_and_unscale_"
UPDATE = "aten::_amp_update_scale_"


def _grads() -> list[torch.Tensor]:
    return [make((5, 4), torch.float32, seed=1), make((7,), torch.float16, seed=2),
            make((3, 6), torch.bfloat16, seed=3).t(),  # strided
            make((4, 4), torch.float64, seed=4)[::2, 1:],  # sliced
            torch.empty(0)]


@pytest.mark.parametrize("poison", [None, float("inf"), float("-inf"), float("nan")], ids=str)
@pytest.mark.parametrize("inv_scale", [0.125, 1.0])
def test_unscale_and_non_finite_check(poison: float | None, inv_scale: float) -> None:
    cpu = [g.clone() for g in _grads()]
    if poison is not None:
        cpu[2][1, 0] = poison  # inside the strided one
    dev_grads = [g.to(DEVICE) for g in cpu]
    for g, c in zip(dev_grads, cpu):
        assert g.stride() == c.stride()
    found_cpu, inv_cpu = torch.zeros(1), torch.full((1,), inv_scale)

    def run() -> torch.Tensor:
        found = torch.zeros(1, device=DEVICE)
        torch._amp_foreach_non_finite_check_and_unscale_(dev_grads, found, inv_cpu.to(DEVICE))
        return found

    found_dev = run_native(run, [UNSCALE])
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_cpu, inv_cpu)
    assert found_dev.item() == found_cpu.item() == (0.0 if poison is None else 1.0)
    assert_close(dev_grads, cpu, atol=0.0, rtol=0.0)


def test_found_inf_is_only_ever_raised() -> None:
    found = torch.ones(1, device=DEVICE)
    grads = [torch.ones(3, device=DEVICE)]
    run_native(lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones(1, device=DEVICE)),
               [UNSCALE])
    assert found.item() == 1.0


def test_update_scale_follows_the_cpu_over_a_run_of_steps() -> None:
    # found_inf per step: back-offs, growth every third clean step, growth
    # that would overflow float32 refused.
    pattern = [0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0]
    cases = [(65536.0, 2.0, 0.5, 3), (3.0e38, 2.0, 0.25, 1), (1.0, 1.7, 0.3, 2)]
    for scale0, growth, backoff, interval in cases:
        cpu_scale, cpu_tracker = torch.full((1,), scale0), torch.zeros(1, dtype=torch.int32)
        dev_scale, dev_tracker = cpu_scale.to(DEVICE), cpu_tracker.to(DEVICE)
        for step, inf in enumerate(pattern):
            found = torch.full((1,), float(inf))
            out = run_native(lambda: torch._amp_update_scale_(dev_scale, dev_tracker, found.to(DEVICE),
                                                              growth, backoff, interval), [UPDATE])
            torch._amp_update_scale_(cpu_scale, cpu_tracker, found, growth, backoff, interval)
            assert out.data_ptr() == dev_scale.data_ptr()
            what = f"scale {scale0}, growth {growth}, backoff {backoff}, interval {interval}, step {step}"
            assert torch.equal(dev_scale.cpu(), cpu_scale), what
            assert torch.equal(dev_tracker.cpu(), cpu_tracker), what


def test_bad_operands_are_refused_with_what_is_wrong() -> None:
    scale = torch.ones(2, device=DEVICE)
    with pytest.raises(Exception, match="one-element float32"):
        torch._amp_update_scale_(scale, torch.zeros(1, dtype=torch.int32, device=DEVICE),
                                 torch.zeros(1, device=DEVICE), 2.0, 0.5, 3)


def test_mixed_precision_training_with_grad_scaler_is_fully_native() -> None:
    """autocast + GradScaler: forward in float16, unscale, inf check, step and
    scale update on the device, nothing on the CPU; the scale evolves as on
    the CPU (a huge initial scale forces back-offs)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = make((6, 8), torch.float32, seed=5), make((6, 4), torch.float32, seed=6)

    def train(m: torch.nn.Module, device: str) -> tuple[list[float], list[torch.Tensor]]:
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**40, growth_interval=2)
        scales = []
        for _ in range(6):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(m(x.to(device)).float(), y.to(device))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return scales, [p.detach().cpu() for p in m.parameters()]

    dev_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    dev_model.load_state_dict(model.state_dict())
    dev_scales, dev_params = run_native(lambda: train(dev_model.to(DEVICE), DEVICE), [UNSCALE, UPDATE])
    cpu_scales, cpu_params = train(model, "cpu")
    assert dev_scales == cpu_scales
    assert dev_scales[0] < 2.0**40, "the first steps overflow float16 and must back off"
    for d, c in zip(dev_params, cpu_params):
        torch.testing.assert_close(d, c, atol=2e-3, rtol=2e-3)
