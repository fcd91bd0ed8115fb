"""Every zoo model compiled with backend="torchfl" matches eager: inference,
and training steps (loss, every gradient, updated buffers)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import compile_fl
from helpers import assert_close, graph_reports
from models import ModelCase, model_cases

CASES = model_cases()


def _describe() -> list[str]:
    return [r.describe() for r in graph_reports()]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_inference_matches_eager(case: ModelCase, dev: torch.device) -> None:
    model = case.build(dev).eval()
    inputs, _ = case.batch(dev)
    tol = case.spec.tolerances
    with torch.no_grad():
        expected = model(*inputs)
        actual = compile_fl(model)(*inputs)
    assert_close(actual, expected, f"{case.name} inference", rtol=tol.forward_rtol,
                 atol=tol.forward_atol)
    assert graph_reports(), "nothing was compiled"
    assert {r.kind for r in graph_reports()} == {"inference"}, _describe()
    assert not any(r.fallback_reason for r in graph_reports()), _describe()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_training_steps_match_eager(case: ModelCase, dev: torch.device) -> None:
    eager = case.build(dev).train()
    compiled_model = copy.deepcopy(eager)
    compiled = compile_fl(compiled_model)
    tol = case.spec.tolerances
    for step in range(2):
        inputs, target = case.batch(dev, seed=step)
        expected_loss = case.loss(eager, inputs, target)
        expected_loss.backward()
        actual_loss = case.loss(compiled, inputs, target)
        actual_loss.backward()
        assert_close(actual_loss, expected_loss, f"{case.name} loss, step {step}",
                     rtol=tol.loss_rtol, atol=tol.forward_atol)
        for (name, p_e), p_c in zip(eager.named_parameters(), compiled_model.parameters()):
            assert p_c.grad is not None, f"{case.name}: no gradient for {name}"
            assert_close(p_c.grad, p_e.grad, f"{case.name} grad {name}, step {step}",
                         rtol=tol.grad_rtol, atol=tol.grad_atol)
        for (name, b_e), b_c in zip(eager.named_buffers(), compiled_model.buffers()):
            assert_close(b_c, b_e, f"{case.name} buffer {name}, step {step}",
                         rtol=tol.forward_rtol, atol=tol.forward_atol)
        with torch.no_grad():
            for p_e, p_c in zip(eager.parameters(), compiled_model.parameters()):
                p_e -= 0.05 * p_e.grad
                p_c -= 0.05 * p_c.grad
                p_e.grad = None
                p_c.grad = None
    kinds = {r.kind for r in graph_reports()}
    assert {"forward", "backward"} <= kinds, _describe()
    assert not any(r.fallback_reason for r in graph_reports()), _describe()
