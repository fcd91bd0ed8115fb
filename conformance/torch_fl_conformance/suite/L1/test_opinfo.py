"""L1: PyTorch's op_db on the device against the CPU, per operator and dtype.

The checks of one (op, dtype) are adjacent tests, so one evaluation serves them:
runs (TFL-OPS-001), outputs and inputs after the call match (TFL-OPS-002),
gradients match (TFL-OPS-003); on the operator's primary dtype also its derived
variants, each a test of its own so a report names the one that failed:
noncontiguous (and noncontiguous_grad), offset, broadcast, inplace, out
(TFL-OPS-002, gradients TFL-OPS-003). See opinfo_sweep and variants.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch_fl_conformance import opinfo_sweep
from torch_fl_conformance.session import KEY, per_test_seed

RUNS, OUTPUT, GRAD = "runs", "output", "grad"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash.get(KEY, None)
    params = []
    for case in opinfo_sweep.cases(state.ops if state is not None else None):
        for check in opinfo_sweep.checks_of(case):
            rid = opinfo_sweep.CHECKS[check][0]
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
    ev = opinfo_sweep.evaluate(case, device, run_state.samples,
                               per_test_seed(run_state.seed, case.id),
                               capabilities=frozenset(target.capabilities))
    result = ev.check(check) if check != RUNS else None
    if check == RUNS:
        record("opinfo", {**ev.to_dict(), "check": check})
    else:
        record("opinfo", {"op": case.op, "dtype": case.dtype, "check": check,
                          "samples": result.samples, "wrong": result.wrong,
                          "error": result.error})
    if ev.samples == 0:
        if ev.unsupported_samples:
            pytest.skip(opinfo_sweep.capability_reason(ev, target.plugin_name))
        pytest.skip(f"no sample of {case.op} for {case.dtype} runs on the CPU")
    if check == RUNS:
        errors = [(name, c) for name, c in ev.checks.items() if c.error]
        if errors:
            name, c = errors[0]
            record("kernels", c.kernels)
            where = {OUTPUT: "", GRAD: "backward "}.get(name, f"{name} variant: ")
            more = f" (and in {len(errors) - 1} more check(s))" if len(errors) > 1 else ""
            pytest.fail(f"{where}raises on {device} (the CPU runs it): {c.error}{more}",
                        pytrace=False)
        return
    assert result is not None
    if result.wrong:
        record("kernels", result.kernels)
        how = ev.backward if check.endswith(GRAD) else ev.forward
        what = {OUTPUT: "output", GRAD: "gradient"}.get(check, f"{check} variant")
        pytest.fail(f"{case.op} {case.dtype} {what} differs from the CPU ({how}): "
                    f"{result.wrong}", pytrace=False)
    if result.samples == 0:
        if result.error or (check == OUTPUT and ev.forward == "error"):
            pytest.skip("nothing to compare: the device raised (see the runs check)")
        if check == GRAD and ev.backward is None:
            pytest.skip("no gradient to compare: the backward did not run on the device"
                        if ev.check(OUTPUT).error or ev.forward == "error"
                        else "no sample with a differentiable, comparable output")
        pytest.skip(f"no sample of {case.op} {case.dtype} has a {check} form the CPU accepts")
