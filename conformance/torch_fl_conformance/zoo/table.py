"""The regression table a vendor keeps per release: each zoo model trained for N
steps on the device and on the CPU side by side (`check_parity`), one row per
model with the final-loss delta, the largest output and gradient errors, step
times on both sides and their ratio, peak device memory and the operators that
left the device.

    torchfl-conformance zoo --plugin flemu --steps 10 --out zoo-table

writes zoo-table/zoo-table.md and zoo-table/zoo-table.json; two JSON tables of
the same plugin compare release to release.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from torch_fl_conformance.zoo.parity import ParityResult

SCHEMA = "torch-fl-zoo-table/1"


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def row(result: ParityResult) -> dict[str, Any]:
    """One model's row; times in seconds, memory in bytes, NaN/inf as null."""
    final_dev = result.losses_device[-1] if result.losses_device else None
    final_cpu = result.losses_cpu[-1] if result.losses_cpu else None
    delta = None
    if final_dev is not None and final_cpu is not None:
        delta = abs(final_dev - final_cpu) / max(abs(final_cpu), 1e-12)
    ratio = None
    if math.isfinite(result.step_time_s) and math.isfinite(result.cpu_step_time_s) \
            and result.cpu_step_time_s > 0:
        ratio = result.step_time_s / result.cpu_step_time_s
    return {
        "model": result.model,
        "passed": result.passed,
        "steps": len(result.losses_device),
        "final_loss_device": final_dev,
        "final_loss_cpu": final_cpu,
        "final_loss_rel_delta": delta,
        "forward_max_abs": _finite(result.forward_max_abs),
        "grad_max_abs": _finite(result.grad_max_abs),
        "eval_max_abs": _finite(result.eval_max_abs),
        "amp_max_abs": _finite(result.amp_max_abs),
        "step_time_device_s": _finite(result.step_time_s),
        "step_time_cpu_s": _finite(result.cpu_step_time_s),
        "step_time_ratio": ratio,
        "peak_memory_bytes": result.peak_memory_bytes,
        "fallback_count": len(result.fallback_ops),
        "fallback_ops": list(result.fallback_ops),
        "failures": list(result.failures),
    }


def build_table(results: Iterable[ParityResult], header: dict[str, Any], steps: int) -> dict[str, Any]:
    rows = [row(r) for r in results]
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plugin": header,
        "steps": steps,
        "passed": all(r["passed"] for r in rows),
        "rows": rows,
    }


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def render_markdown(table: dict[str, Any]) -> str:
    p = table["plugin"]
    lines = [
        (f"# Model zoo on {p.get('plugin_name', '?')} {p.get('version', '')} "
         f"(device '{p.get('device_type', '?')}'), {table['steps']} training steps"),
        "",
        ("| model | parity | final loss Δ (rel) | fwd max err | grad max err | eval max err "
         "| AMP max err | step device (ms) | step CPU (ms) | ratio | peak memory (MiB) | fallbacks |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        ms = [None if t is None else t * 1e3 for t in (r["step_time_device_s"], r["step_time_cpu_s"])]
        lines.append(
            f"| {r['model']} | {'pass' if r['passed'] else 'FAIL'} "
            f"| {_num(r['final_loss_rel_delta'], '.2e')} | {_num(r['forward_max_abs'], '.2e')} "
            f"| {_num(r['grad_max_abs'], '.2e')} | {_num(r['eval_max_abs'], '.2e')} "
            f"| {_num(r['amp_max_abs'], '.2e')} | {_num(ms[0], '.1f')} | {_num(ms[1], '.1f')} "
            f"| {_num(r['step_time_ratio'], '.2f')}x | {r['peak_memory_bytes'] / 2**20:.1f} "
            f"| {r['fallback_count']} |"
        )
    failing = [r for r in table["rows"] if r["failures"]]
    if failing:
        lines += ["", "## Failures", ""]
        for r in failing:
            lines += [f"- **{r['model']}**: {f}" for f in r["failures"]]
    return "\n".join(lines) + "\n"
