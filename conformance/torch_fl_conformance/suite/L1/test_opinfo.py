"""L1: PyTorch's op_db on the device against the CPU, per operator and dtype.

Three checks per (op, dtype), adjacent so one evaluation serves them:
runs (TFL-OPS-001), outputs match (TFL-OPS-002), gradients match (TFL-OPS-003).
"""

from __future__ import annotations

from typing import Any

import pytest
from torch_fl_conformance import opinfo_sweep
from torch_fl_conformance.session import KEY, per_test_seed

CHECKS = {"runs": "TFL-OPS-001", "output": "TFL-OPS-002", "grad": "TFL-OPS-003"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash.get(KEY, None)
    params = []
    for case in opinfo_sweep.cases(state.ops if state is not None else None):
        for check, rid in CHECKS.items():
            if check == "grad" and not case.grad:
                continue
            params.append(pytest.param(case, check, id=f"{case.id}-{check}",
                                       marks=pytest.mark.requirement(rid)))
    metafunc.parametrize(("case", "check"), params)


def test_op(case: opinfo_sweep.Case, check: str, target: Any, device: str, run_state: Any,
            record: Any) -> None:
    missing = target.sweep_dtypes()[case.dtype]
    if missing:
        record("opinfo", {"op": case.op, "dtype": case.dtype, "class": "unsupported",
                          "check": check})
        pytest.skip(f"{missing} not advertised by {target.plugin_name}")
    ev = opinfo_sweep.evaluate(case, device, run_state.samples or 3,
                               per_test_seed(run_state.seed, case.id),
                               capabilities=frozenset(target.capabilities))
    record("opinfo", {**ev.to_dict(), "check": check})
    if ev.samples == 0:
        if ev.unsupported_samples:
            pytest.skip(opinfo_sweep.capability_reason(ev, target.plugin_name))
        pytest.skip(f"no sample of {case.op} for {case.dtype} runs on the CPU")
    if check == "runs":
        if ev.forward_error:
            pytest.fail(f"raises on {device} (the CPU runs it): {ev.forward_error}",
                        pytrace=False)
        if ev.backward_error:
            pytest.fail(f"backward raises on {device} (the CPU runs it): {ev.backward_error}",
                        pytrace=False)
    elif check == "output":
        if ev.forward == "error":
            pytest.skip("no output to compare: the op raised on the device (see the runs check)")
        if ev.wrong:
            pytest.fail(f"{case.op} {case.dtype} output differs from the CPU "
                        f"({ev.forward}): {ev.wrong}", pytrace=False)
    else:
        if ev.backward is None:
            pytest.skip("no gradient to compare: the backward did not run on the device"
                        if ev.backward_error or ev.forward == "error"
                        else "no sample with a differentiable, comparable output")
        if ev.grad_wrong:
            pytest.fail(f"{case.op} {case.dtype} gradient differs from the CPU "
                        f"({ev.backward}): {ev.grad_wrong}", pytrace=False)
