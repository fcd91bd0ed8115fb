"""L2 training: every model of the zoo trains on the device with parity to the CPU."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from torch_fl_conformance.pytest_plugin import KEY

CHECKS = {"parity": "TFL-TRAIN-001", "no_fallback": "TFL-TRAIN-002", "amp": "TFL-TRAIN-003"}
_ZOO_ERROR: list[str] = []
_results: dict[tuple[str, str, bool], Any] = {}


def _model_names() -> list[str]:
    try:
        from torch_fl_conformance.zoo import all_models
    except Exception as exc:  # reported as ERROR in every training test, never a pass
        _ZOO_ERROR.append(f"the model zoo cannot be imported: {type(exc).__name__}: {exc}")
        return ["zoo-unavailable"]
    return [m.name for m in all_models()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash.get(KEY, None)
    pats = state.models if state is not None else None
    params = []
    for name in _model_names():
        if pats and name != "zoo-unavailable" and not any(fnmatch.fnmatchcase(name, p)
                                                          for p in pats):
            continue
        for check, rid in CHECKS.items():
            marks = [pytest.mark.requirement(rid)]
            if check == "amp":
                marks.append(pytest.mark.capability("amp"))
            params.append(pytest.param(name, check, id=f"{name}-{check}", marks=marks))
    metafunc.parametrize(("model", "check"), params)


@pytest.fixture
def spec(model: str) -> Any:
    if _ZOO_ERROR:
        raise RuntimeError(_ZOO_ERROR[0])
    from torch_fl_conformance.zoo import get_model

    return get_model(model)


def _parity(spec: Any, device: str, amp: bool) -> Any:
    from torch_fl_conformance.zoo.parity import check_parity

    key = (spec.name, device, amp)
    if key not in _results:
        _results[key] = check_parity(spec, device=device, check_eval=not amp, check_amp=amp)
    return _results[key]


def test_model(model: str, check: str, spec: Any, target: Any, device: str,
               record: Any) -> None:
    if check == "amp":
        if spec.amp_dtype is None:
            pytest.skip(f"{model} declares no autocast dtype")
        cap = {"float16": "fp16", "bfloat16": "bf16"}.get(str(spec.amp_dtype).split(".")[-1])
        if cap and not target.has(cap):
            pytest.skip(f"{cap} not advertised by {target.plugin_name}")
    result = _parity(spec, device, amp=check == "amp")
    data = result.to_dict()
    record("training", {"model": model, "check": check, **data})
    if check == "no_fallback":
        if result.fallback_ops:
            pytest.fail(f"{len(result.fallback_ops)} operator(s) ran on the CPU fallback inside "
                        f"the training loop: {', '.join(result.fallback_ops[:12])}",
                        pytrace=False)
        return
    if not result.passed or result.failures:
        pytest.fail(f"{model} {check}: " + "; ".join(result.failures[:6]), pytrace=False)
