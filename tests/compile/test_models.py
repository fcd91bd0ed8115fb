"""Every zoo model compiled with backend="torchfl" matches eager: inference,
and training steps (loss, every gradient, updated buffers)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import compile_fl
from helpers import assert_close, graph_reports
from models import ModelCase, capturing, dynamo_config, model_cases

CASES = model_cases()


def _describe() -> list[str]:
    return [r.describe() for r in graph_reports()]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_inference_matches_eager(case: ModelCase, dev: torch.device) -> None:
    model = case.build(dev).eval()
    inputs, _ = case.batch(dev)
    tol = case.spec.tolerances
    with torch.no_grad(), capturing(model):
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
    with capturing(eager):
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


def test_lstm_without_allow_rnn_runs_eagerly(dev: torch.device) -> None:
    """Dynamo's default: a forward that calls nn.LSTM is not traced at all.
    The result is still right, and no graph reaches the backend — models
    with recurrent layers need torch._dynamo.config.allow_rnn = True."""
    import torch._dynamo

    (case,) = [c for c in CASES if c.name == "lstm_lm"]
    model = case.build(dev).eval()
    assert dynamo_config(model) == {"allow_rnn": True}
    inputs, _ = case.batch(dev)
    with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=False):
        expected = model(*inputs)
        actual = compile_fl(model)(*inputs)
    assert_close(actual, expected, "lstm_lm without allow_rnn", rtol=0, atol=0)
    assert graph_reports() == [], _describe()
