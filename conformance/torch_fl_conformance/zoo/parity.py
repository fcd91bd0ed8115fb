"""Parity of a zoo model between a device and the CPU.

``check_parity`` builds the model once (``torch.manual_seed(0)``), copies it to
the device, and trains both copies side by side on the same batches
(``spec.make_batch(step)``) with the optimizer ``spec.make_optimizer`` gives
each device type. Every step starts the device copy from the CPU's state
(parameters, buffers and optimizer state), so each comparison measures one
step of the device, not ten steps of training dynamics: a relative change of
1e-6 in the weights of the zoo's ResNet-18 grows to 6.5e-3 in its eval output
after ten free-running steps, which would fail a correct device whose GEMM
sums in another order than the CPU's, and pass or fail a device by luck.
Checked:

- **forward**: the train-mode output of step 0 (captured with a forward hook
  while ``spec.loss_fn`` runs), device against CPU, within
  ``forward_atol``/``forward_rtol``;
- **gradients**: every parameter's gradient after each step's backward, within
  ``grad_atol``/``grad_rtol``;
- **loss tracking**: the loss of each of `steps` optimizer steps, relative
  difference within ``loss_rtol``;
- **updates**: after each step, every parameter's change (new minus old
  value) against what the CPU optimizer does with the device's gradients from
  the same state, within ``forward_rtol`` of the change and of the parameter's
  largest change (a wrong optimizer fails here), and every buffer (batch
  norm's running statistics) within the forward tolerances;
- **eval** (``check_eval``): after training, both copies in eval mode on a
  held-out batch (batch norm then uses the running statistics the steps
  accumulated), within the forward tolerances;
- **AMP** (``check_amp`` and ``spec.amp_dtype``): the device's eval forward
  under ``torch.autocast(device, dtype=spec.amp_dtype)`` against the
  **float32 CPU** eval forward, within ``amp_atol``/``amp_rtol``. Float32 is
  the reference because it is the result AMP approximates; CPU autocast rounds
  in other places, so comparing two reduced-precision runs would measure the
  two autocast policies rather than the device.

Elementwise checks are ``|device - cpu| <= atol + rtol * |cpu|``. The reported
``*_max_rel`` is the largest ``|device - cpu| / |cpu|`` over elements whose
reference exceeds the absolute tolerance (smaller ones are judged by atol).

Decisions the two sides may take differently are taped (``zoo.tape``): both
copies draw different random numbers, so the zoo's ``Dropout`` modules record
their masks on the device (through the device's own ``native_dropout``) and
the CPU step replays them; and a ReLU input within rounding of 0 may pass on
one side and stop on the other, which changes every gradient below it, so
the CPU step takes the device's side of each ReLU element where the two
disagree and the CPU's input lies within ``forward_atol`` of 0 (anywhere else
the CPU keeps its own). Dropout inside fused ops (attention probabilities,
between LSTM layers) is left out of the zoo models for the same reason.

Every operator call of the training loop is counted with
``torch_fl.op_stats_scope``; ``fallback_ops`` lists those that ran on the CPU
fallback or failed. An exception inside the loop (for instance a fallback under
``TORCH_FL_FALLBACK=error``) ends the loop and becomes a failure.

Each failure starts with the check it concerns, so reports can sort them:
"training step N raised", "forward (train mode, step 0)", "gradients (step 0)",
"loss at step N", "update at step N", "buffers after step N", "operators not
native in the training loop", "eval forward", "AMP forward".
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from ._spec import ModelSpec, Tolerances
from .tape import Tape, use_tape

__all__ = ["ParityResult", "check_parity"]


@dataclass
class ParityResult:
    model: str
    device: str
    forward_max_abs: float
    forward_max_rel: float
    grad_max_abs: float
    grad_max_rel: float
    losses_cpu: list[float]
    losses_device: list[float]
    eval_max_abs: float | None  # None when not checked
    amp_max_abs: float | None
    fallback_ops: list[str]  # "aten::op (dtype)" that hit the CPU fallback or failed in the loop
    step_time_s: float  # median device training step
    peak_memory_bytes: int  # device, during the loop
    cpu_step_time_s: float = math.nan  # median CPU training step, same loop
    failures: list[str] = field(default_factory=list)  # every unmet tolerance, actual and allowed

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["passed"] = self.passed
        return d


@dataclass
class _Diff:
    max_abs: float = 0.0
    max_rel: float = 0.0
    violations: list[str] = field(default_factory=list)

    def add(self, label: str, device: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> None:
        if device.shape != ref.shape:
            self.violations.append(
                f"{label}: device shape {tuple(device.shape)} != CPU shape {tuple(ref.shape)}"
            )
            self.max_abs = math.inf
            return
        if ref.numel() == 0:
            return
        d = device.detach().to("cpu", torch.float64)
        r = ref.detach().to("cpu", torch.float64)
        diff = (d - r).abs()
        # NaN on either side counts as an infinite error unless both agree on it.
        both_nan = d.isnan() & r.isnan()
        diff = torch.where(both_nan, torch.zeros_like(diff), diff.nan_to_num(nan=math.inf))
        self.max_abs = max(self.max_abs, float(diff.max()))
        big = r.abs() > atol
        if bool(big.any()):
            self.max_rel = max(self.max_rel, float((diff[big] / r.abs()[big]).max()))
        bound = atol + rtol * r.abs()
        bad = diff > bound
        n_bad = int(bad.sum())
        if n_bad:
            worst = int(torch.argmax(diff - bound))
            self.violations.append(
                f"{label}: {n_bad} of {diff.numel()} elements outside atol={atol:g} rtol={rtol:g}; "
                f"worst |device - cpu| = {float(diff.flatten()[worst]):.3g} where cpu = "
                f"{float(r.flatten()[worst]):.6g} (allowed {float(bound.flatten()[worst]):.3g}); "
                f"max abs error {float(diff.max()):.3g}"
            )


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _to(x: Any, device: torch.device) -> Any:
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, x)


@contextlib.contextmanager
def _capture_output(model: nn.Module, sink: list[Any]) -> Iterator[None]:
    """Keeps the output of the first forward of `model` while the block runs."""

    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        if not sink:
            sink.append(tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, output))

    handle = model.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _device_module(device: torch.device) -> Any:
    return getattr(torch, device.type, None) if device.type != "cpu" else None


def _synchronize(device: torch.device) -> None:
    mod = _device_module(device)
    if mod is not None and hasattr(mod, "synchronize"):
        mod.synchronize()


def _op_scope() -> contextlib.AbstractContextManager[Any]:
    try:
        import torch_fl
    except ImportError:  # parity against a device torch-fl does not serve
        return contextlib.nullcontext(None)
    return torch_fl.op_stats_scope()


def _not_native(scope: Any) -> list[str]:
    if scope is None:
        return []
    return sorted(
        f"{row.op} ({row.dtype})" for row in scope.table if row.cpu_fallback > 0 or row.failed > 0
    )


def _train_step(
    spec: ModelSpec,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    batch: tuple[tuple[Any, ...], Any],
    tape: Tape,
    output_sink: list[Any] | None,
) -> torch.Tensor:
    inputs, target = batch
    opt.zero_grad(set_to_none=True)
    capture = _capture_output(model, output_sink) if output_sink is not None else contextlib.nullcontext()
    with use_tape(tape), capture:
        loss = spec.loss_fn(model, inputs, target)
    loss.backward()
    opt.step()
    return loss.detach()


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    """The gradients the last backward left (the optimizers used here do not
    change them), on the CPU."""
    return {n: p.grad.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None}


def _start_from(dev_model: nn.Module, dev_opt: torch.optim.Optimizer, cpu_model: nn.Module,
                cpu_opt: torch.optim.Optimizer) -> None:
    """The device copy takes the CPU copy's parameters, buffers and optimizer
    state (momentum buffers and the like), in place; the device optimizer keeps
    its own hyperparameters, which are part of what is checked."""
    dev_model.load_state_dict(cpu_model.state_dict())
    state = cpu_opt.state_dict()
    state["param_groups"] = dev_opt.state_dict()["param_groups"]
    dev_opt.load_state_dict(state)


def _step_differences(step: int, spec: ModelSpec, dev_model: nn.Module, cpu_model: nn.Module,
                      before: dict[str, torch.Tensor], opt_state: dict[str, Any],
                      grads_dev: dict[str, torch.Tensor], tol: Tolerances) -> list[str]:
    """The device's optimizer step against the CPU optimizer's rule applied to
    the device's own gradients from the same state (rounding in the gradients,
    which Adam turns into large changes of tiny updates, is judged once, by the
    gradient check), and the buffers the step updated."""
    named = [n for n, _ in cpu_model.named_parameters()]
    shadow = [nn.Parameter(before[n].clone()) for n in named]
    for n, p in zip(named, shadow):
        if n in grads_dev:
            p.grad = grads_dev[n].to(p.dtype)
    reference = spec.make_optimizer(shadow, "cpu")
    reference.load_state_dict(opt_state)
    reference.step()
    update, buffers = _Diff(), _Diff()
    dev_params = dict(dev_model.named_parameters())
    for n, ref in zip(named, shadow):
        old = before[n].double()
        if old.numel() == 0:
            continue
        d_ref = ref.detach().double() - old
        d_dev = dev_params[n].detach().to("cpu", torch.float64) - old
        # Elements the step hardly moved are judged against the tensor's largest
        # change, and never more finely than float32 resolves the parameter.
        atol = max(tol.forward_rtol * float(d_ref.abs().max()),
                   4 * torch.finfo(torch.float32).eps * float(old.abs().max()))
        update.add(f"update of {n}", d_dev, d_ref, atol, tol.forward_rtol)
    dev_buffers = dict(dev_model.named_buffers())
    for n, b in cpu_model.named_buffers():
        if n in dev_buffers and b.is_floating_point():
            buffers.add(f"buffer {n}", dev_buffers[n], b, tol.forward_atol, tol.forward_rtol)
    return ([f"update at step {step}: {v}" for v in update.violations]
            + [f"buffers after step {step}: {v}" for v in buffers.violations])


def check_parity(
    spec: ModelSpec,
    device: str = "flemu",
    steps: int = 10,
    check_eval: bool = True,
    check_amp: bool = True,
) -> ParityResult:
    """Trains `spec` on `device` and on the CPU side by side; see the module doc."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    dev = torch.device(device)
    tol = spec.tolerances
    failures: list[str] = []
    fwd, grad = _Diff(), _Diff()
    losses_cpu: list[float] = []
    losses_dev: list[float] = []
    step_times: list[float] = []
    cpu_step_times: list[float] = []
    eval_max_abs: float | None = None
    amp_max_abs: float | None = None
    mod = _device_module(dev)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cpu_model = spec.build()
        dev_model = copy.deepcopy(cpu_model).to(dev)
        cpu_model.train()
        dev_model.train()
        cpu_opt = spec.make_optimizer(cpu_model.parameters(), "cpu")
        dev_opt = spec.make_optimizer(dev_model.parameters(), dev.type)

        if mod is not None and hasattr(mod, "reset_peak_memory_stats"):
            _synchronize(dev)
            mod.reset_peak_memory_stats()
        step = 0
        with _op_scope() as loop_scope:
            try:
                for step in range(steps):
                    batch = spec.make_batch(step)
                    first = step == 0
                    if not first:
                        _start_from(dev_model, dev_opt, cpu_model, cpu_opt)
                    before = {n: p.detach().clone() for n, p in cpu_model.named_parameters()}
                    opt_state = copy.deepcopy(cpu_opt.state_dict())
                    out_dev: list[Any] = []
                    out_cpu: list[Any] = []
                    tape = Tape()
                    _synchronize(dev)
                    start = time.perf_counter()
                    loss_d = _train_step(
                        spec, dev_model, dev_opt, _to(batch, dev), tape,
                        out_dev if first else None,
                    )
                    _synchronize(dev)
                    elapsed = time.perf_counter() - start
                    if not first or steps == 1:
                        step_times.append(elapsed)
                    start = time.perf_counter()
                    loss_c = _train_step(
                        spec, cpu_model, cpu_opt, batch, tape.replay(tie_atol=tol.forward_atol),
                        out_cpu if first else None,
                    )
                    if not first or steps == 1:
                        cpu_step_times.append(time.perf_counter() - start)
                    losses_dev.append(float(loss_d))
                    losses_cpu.append(float(loss_c))
                    grads_dev, grads_cpu = _grads(dev_model), _grads(cpu_model)
                    if first:
                        for i, (d, c) in enumerate(zip(_tensors(out_dev), _tensors(out_cpu))):
                            fwd.add(f"forward output {i}", d, c, tol.forward_atol, tol.forward_rtol)
                    step_grad = _Diff()
                    for name, g in grads_cpu.items():
                        if name not in grads_dev:
                            step_grad.violations.append(f"grad {name}: missing on {device}")
                            continue
                        step_grad.add(f"grad {name}", grads_dev[name], g, tol.grad_atol, tol.grad_rtol)
                    grad.max_abs = max(grad.max_abs, step_grad.max_abs)
                    grad.max_rel = max(grad.max_rel, step_grad.max_rel)
                    failures += [f"gradients (step {step}): {v}" for v in step_grad.violations]
                    failures += _step_differences(step, spec, dev_model, cpu_model, before, opt_state,
                                                  grads_dev, tol)
            except Exception as e:  # noqa: BLE001 - every failure becomes part of the result
                failures.append(f"training step {step} raised {type(e).__name__}: {_first_line(e)}")
        fallback_ops = _not_native(loop_scope)
        peak = 0
        if mod is not None and hasattr(mod, "max_memory_allocated"):
            _synchronize(dev)
            peak = int(mod.max_memory_allocated())

        failures += [f"forward (train mode, step 0): {v}" for v in fwd.violations]
        for i, (ld, lc) in enumerate(zip(losses_dev, losses_cpu)):
            rel = abs(ld - lc) / max(abs(lc), 1e-12)
            if not rel <= tol.loss_rtol:
                failures.append(
                    f"loss at step {i}: device {ld:.6g} vs cpu {lc:.6g}, relative difference "
                    f"{rel:.3g} > loss_rtol {tol.loss_rtol:g}"
                )
        if fallback_ops:
            failures.append(f"operators not native in the training loop: {', '.join(fallback_ops)}")

        trained = len(losses_dev) == steps
        want_amp = check_amp and spec.amp_dtype is not None
        if trained and (check_eval or want_amp):
            cpu_model.eval()
            dev_model.eval()
            inputs, _ = spec.make_batch(10_000)  # held out: no training step saw it
            inputs_dev = _to(inputs, dev)
            with torch.no_grad():
                ref = _tensors(cpu_model(*inputs))
            if check_eval:
                ev = _Diff()
                with _op_scope() as scope:
                    try:
                        with torch.no_grad():
                            out = _tensors(dev_model(*inputs_dev))
                        for i, (d, c) in enumerate(zip(out, ref)):
                            ev.add(f"output {i}", d, c, tol.forward_atol, tol.forward_rtol)
                        eval_max_abs = ev.max_abs
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"eval forward raised {type(e).__name__}: {_first_line(e)}")
                failures += [f"eval forward (after {steps} steps): {v}" for v in ev.violations]
                if _not_native(scope):
                    failures.append(f"eval forward: operators not native: {', '.join(_not_native(scope))}")
            if want_amp:
                amp = _Diff()
                with _op_scope() as scope:
                    try:
                        with torch.no_grad(), torch.autocast(dev.type, dtype=spec.amp_dtype):
                            out = _tensors(dev_model(*inputs_dev))
                        for i, (d, c) in enumerate(zip(out, ref)):
                            amp.add(f"output {i}", d.float(), c, tol.amp_atol, tol.amp_rtol)
                        amp_max_abs = amp.max_abs
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"AMP forward raised {type(e).__name__}: {_first_line(e)}")
                failures += [
                    f"AMP forward ({spec.amp_dtype}) vs float32 CPU: {v}" for v in amp.violations
                ]
                if _not_native(scope):
                    failures.append(f"AMP forward: operators not native: {', '.join(_not_native(scope))}")

    return ParityResult(
        model=spec.name,
        device=str(dev),
        forward_max_abs=fwd.max_abs,
        forward_max_rel=fwd.max_rel,
        grad_max_abs=grad.max_abs,
        grad_max_rel=grad.max_rel,
        losses_cpu=losses_cpu,
        losses_device=losses_dev,
        eval_max_abs=eval_max_abs,
        amp_max_abs=amp_max_abs,
        fallback_ops=fallback_ops,
        step_time_s=statistics.median(step_times) if step_times else math.nan,
        cpu_step_time_s=statistics.median(cpu_step_times) if cpu_step_times else math.nan,
        peak_memory_bytes=peak,
        failures=failures,
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)
