"""L2 training: every model of the zoo trains on the device with parity to the CPU."""

from __future__ import annotations

from typing import Any

import pytest
from torch_fl_conformance.session import selected_models

CHECKS = {"parity": "TFL-TRAIN-001", "no_fallback": "TFL-TRAIN-002", "amp": "TFL-TRAIN-003"}
_ZOO_ERROR: list[str] = []
_results: dict[tuple[str, str], Any] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model" not in metafunc.fixturenames:
        return
    params = []
    for name in selected_models(metafunc.config, _ZOO_ERROR):
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


def _parity(spec: Any, device: str) -> Any:
    """One training comparison per model serves its three checks (they are adjacent)."""
    from torch_fl_conformance.zoo.parity import check_parity

    key = (spec.name, device)
    if key not in _results:
        _results.clear()
        _results[key] = check_parity(spec, device=device, check_eval=True, check_amp=True)
    return _results[key]


def _split(failures: list[str]) -> dict[str, list[str]]:
    """check_parity's failures by the requirement they concern."""
    out: dict[str, list[str]] = {"parity": [], "no_fallback": [], "amp": []}
    for f in failures:
        if f.startswith("AMP"):
            out["amp"].append(f)
        elif "operators not native" in f:
            out["no_fallback"].append(f)
        else:
            out["parity"].append(f)
    return out


def test_model(model: str, check: str, spec: Any, target: Any, device: str,
               record: Any) -> None:
    if check == "amp":
        if spec.amp_dtype is None:
            pytest.skip(f"{model} declares no autocast dtype")
        cap = {"float16": "fp16", "bfloat16": "bf16"}.get(str(spec.amp_dtype).split(".")[-1])
        if cap and not target.has(cap):
            pytest.skip(f"{cap} not advertised by {target.plugin_name}")
    result = _parity(spec, device)
    record("training", {"model": model, "check": check, **result.to_dict()})
    failures = _split(result.failures)[check]
    if check == "no_fallback" and result.fallback_ops and not failures:
        failures = [(f"operators not native in the training loop: "
                    f"{', '.join(result.fallback_ops)}")]
    if check == "amp" and result.amp_max_abs is None and not failures:
        pytest.fail(f"{model}: the AMP comparison did not run", pytrace=False)
    if failures:
        pytest.fail(f"{model} {check}: " + "; ".join(failures[:6]), pytrace=False)
