"""L3 graph mode: torch.compile(model, backend="torchfl") on the device, per zoo model.

For each model one comparison serves both tests (they are adjacent): the model is
built twice from the same seed, one copy runs eagerly on the device and the other
through the torchfl backend, on the same batches:

- **parity** (TFL-COMPILE-001): the eval-mode forward and one training step (loss,
  every gradient, batch-norm statistics) of the compiled copy match the eager
  copy within the zoo's tolerances, and the backend really compiled the model
  (at least one graph, none fallen back to eager as a whole);
- **peak memory** (TFL-COMPILE-002): the peak device memory of the compiled
  training step is at most the eager one (plus 5% for allocator rounding).

Dropout is set to p = 0 on both copies: eager and compiled runs draw their masks
differently, and zoo mask replay works through Python state the compiler would
trace into. nn.LSTM is captured with ``torch._dynamo.config.allow_rnn`` (Dynamo
leaves RNN modules uncompiled otherwise). A plugin without the graph group is
SKIPPED with that reason.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
import torch
from torch import nn
from torch_fl_conformance.session import selected_models

CHECKS = {"parity": "TFL-COMPILE-001", "peak_memory": "TFL-COMPILE-002"}
MEMORY_SLACK = 1.05
_ZOO_ERROR: list[str] = []
_results: dict[tuple[str, str], CompileResult] = {}


@dataclass
class CompileResult:
    model: str
    graphs: int = 0
    graphs_run_eagerly: list[str] = field(default_factory=list)
    regions_accepted: int = 0
    regions_declined: int = 0
    eager_ops: int = 0
    forward_max_abs: float = 0.0
    grad_max_abs: float = 0.0
    loss_eager: float = 0.0
    loss_compiled: float = 0.0
    peak_eager_bytes: int = 0
    peak_compiled_bytes: int = 0
    failures: list[str] = field(default_factory=list)  # parity failures, actual and allowed
    error: str = ""  # an exception that ended the comparison


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model" not in metafunc.fixturenames:
        return
    params = []
    for name in selected_models(metafunc.config, _ZOO_ERROR):
        params.append(pytest.param(name, id=name))
    metafunc.parametrize("model", params)


@pytest.fixture
def spec(model: str) -> Any:
    if _ZOO_ERROR:
        raise RuntimeError(_ZOO_ERROR[0])
    from torch_fl_conformance.zoo import get_model

    return get_model(model)


def _build(spec: Any, device: str) -> nn.Module:
    torch.manual_seed(0)
    model = spec.build()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model.to(device)


def _to(x: Any, device: str) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().double().cpu() - b.detach().double().cpu()).abs().max()) if a.numel() else 0.0


def _check(result: CompileResult, label: str, got: torch.Tensor, want: torch.Tensor,
           atol: float, rtol: float) -> float:
    g, w = got.detach().double().cpu(), want.detach().double().cpu()
    if g.shape != w.shape:
        result.failures.append(f"{label}: shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        return float("inf")
    bad = (g - w).abs() > atol + rtol * w.abs()
    bad &= ~(g.isnan() & w.isnan())
    worst = _max_abs(g, w)
    if bool(bad.any()):
        result.failures.append(f"{label}: max |compiled - eager| {worst:.3g} beyond "
                               f"atol {atol:g} + rtol {rtol:g}")
    return worst


def _step_peak(mod: Any, model: nn.Module, spec: Any, inputs: tuple[Any, ...],
               target: Any) -> tuple[torch.Tensor, int]:
    for p in model.parameters():
        p.grad = None
    mod.synchronize()
    base = mod.memory_allocated()
    mod.reset_peak_memory_stats()
    loss = spec.loss_fn(model, inputs, target)
    loss.backward()
    mod.synchronize()
    return loss.detach(), mod.max_memory_allocated() - base


def _compare(spec: Any, device: str) -> CompileResult:
    import torch._dynamo
    import torch_fl.compile

    result = CompileResult(spec.name)
    mod = getattr(torch, torch.device(device).type)
    tol = spec.tolerances
    torch._dynamo.reset()
    torch_fl.compile.clear_reports()
    try:
        with torch._dynamo.config.patch(allow_rnn=True):
            eager = _build(spec, device)
            compiled_model = copy.deepcopy(eager)
            compiled = torch.compile(compiled_model, backend="torchfl")
            inputs, target = spec.make_batch(0)
            inputs = tuple(_to(x, device) for x in inputs)
            target = _to(target, device)

            # One training step: warm-up for both (compilation, caches), then
            # the measured step from the same parameters.
            eager.train()
            compiled_model.train()
            snapshot = copy.deepcopy(eager.state_dict())
            _step_peak(mod, eager, spec, inputs, target)
            _step_peak(mod, compiled, spec, inputs, target)
            eager.load_state_dict(snapshot)
            compiled_model.load_state_dict(snapshot)
            loss_e, result.peak_eager_bytes = _step_peak(mod, eager, spec, inputs, target)
            loss_c, result.peak_compiled_bytes = _step_peak(mod, compiled, spec, inputs, target)
            result.loss_eager, result.loss_compiled = float(loss_e), float(loss_c)
            _check(result, "loss", loss_c, loss_e, tol.forward_atol, tol.loss_rtol)
            # Gradients of both from the same state, for the comparison.
            eager.load_state_dict(snapshot)
            compiled_model.load_state_dict(snapshot)
            for p in (*eager.parameters(), *compiled_model.parameters()):
                p.grad = None
            spec.loss_fn(eager, inputs, target).backward()
            spec.loss_fn(compiled, inputs, target).backward()
            worst = 0.0
            for (name, p_e), p_c in zip(eager.named_parameters(), compiled_model.parameters()):
                if p_e.grad is None or p_c.grad is None:
                    if (p_e.grad is None) != (p_c.grad is None):
                        result.failures.append(f"gradient of {name}: present in only one run")
                    continue
                worst = max(worst, _check(result, f"gradient of {name}", p_c.grad, p_e.grad,
                                          tol.grad_atol, tol.grad_rtol))
            result.grad_max_abs = worst
            for (name, b_e), b_c in zip(eager.named_buffers(), compiled_model.buffers()):
                if b_e.is_floating_point():
                    _check(result, f"buffer {name}", b_c, b_e, tol.forward_atol, tol.forward_rtol)

            eager.eval()
            compiled_model.eval()
            with torch.no_grad():
                out_e = eager(*inputs)
                out_c = compiled(*inputs)
            result.forward_max_abs = _check(result, "eval forward", out_c, out_e,
                                            tol.forward_atol, tol.forward_rtol)
    except Exception as exc:  # noqa: BLE001 - the failure of this model, reported in its tests
        result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    reports = torch_fl.compile.reports()
    result.graphs = len(reports)
    result.graphs_run_eagerly = [f"{r.name}: {r.fallback_reason}" for r in reports
                                 if r.fallback_reason]
    result.regions_accepted = sum(len(r.accepted_regions) for r in reports)
    result.regions_declined = sum(len(r.declined_regions) for r in reports)
    result.eager_ops = sum(sum(r.eager_ops.values()) for r in reports)
    torch._dynamo.reset()
    return result


def _result(spec: Any, device: str) -> CompileResult:
    key = (spec.name, device)
    if key not in _results:
        _results.clear()
        _results[key] = _compare(spec, device)
    return _results[key]


@pytest.mark.requirement("TFL-COMPILE-001")
def test_compiled_parity(model: str, spec: Any, target: Any, device: str, record: Any) -> None:
    result = _result(spec, device)
    record("compile", asdict(result))
    if result.error:
        pytest.fail(f"{model}: compiled run failed: {result.error}", pytrace=False)
    if result.graphs == 0:
        pytest.fail(f"{model}: torch.compile captured no graph for the torchfl backend",
                    pytrace=False)
    if result.graphs_run_eagerly:
        pytest.fail(f"{model}: graphs left to eager: {'; '.join(result.graphs_run_eagerly)}",
                    pytrace=False)
    if result.failures:
        pytest.fail(f"{model}: " + "; ".join(result.failures[:6]), pytrace=False)


@pytest.mark.requirement("TFL-COMPILE-002")
def test_compiled_peak_memory(model: str, spec: Any, target: Any, device: str,
                              record: Any) -> None:
    result = _result(spec, device)
    record("compile_memory", {"model": model, "peak_eager_bytes": result.peak_eager_bytes,
                              "peak_compiled_bytes": result.peak_compiled_bytes})
    if result.error:
        pytest.fail(f"{model}: compiled run failed: {result.error}", pytrace=False)
    if result.peak_compiled_bytes > MEMORY_SLACK * result.peak_eager_bytes:
        pytest.fail(
            f"{model}: compiled training step peaked at {result.peak_compiled_bytes} bytes, "
            f"eager at {result.peak_eager_bytes} (allowed {MEMORY_SLACK:g}x)", pytrace=False)
