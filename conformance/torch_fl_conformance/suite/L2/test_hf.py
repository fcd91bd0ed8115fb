"""L2 Hugging Face architectures: GPT-2, BERT, T5, ViT and Llama from ``transformers``,
tiny configs with random weights (nothing is downloaded), on the device against
the CPU: tying after ``.to()``, the forward, one training step, greedy
generation and the fallbacks of each model's training loop (zoo/hf.py).

Without ``transformers`` every test here is SKIPPED with the import error as its
reason; a requirement whose tests were all skipped that way is "unverified",
never met, so an L2 certification needs ``transformers`` installed.
"""

from __future__ import annotations

from typing import Any

import pytest

REQUIREMENTS = {"tied_weights": "TFL-HF-001", "forward": "TFL-HF-002",
                "train_step": "TFL-HF-003", "generate": "TFL-HF-004", "no_fallback": "TFL-HF-005"}
_AREA_ERROR: list[str] = []
_results: dict[tuple[str, str], Any] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "model" not in metafunc.fixturenames:
        return
    try:
        from torch_fl_conformance.zoo import hf
    except Exception as exc:  # noqa: BLE001 - reported as ERROR by every check, never a pass
        _AREA_ERROR.append(f"the Hugging Face area cannot be imported: {type(exc).__name__}: "
                           f"{exc}")
        cases = [("hf-unavailable", check) for check in REQUIREMENTS]
    else:
        cases = [(name, check) for name, spec in hf.MODELS.items() for check in hf.checks_of(spec)]
    metafunc.parametrize(("model", "check"), [
        pytest.param(name, check, id=f"{name}-{check}",
                     marks=pytest.mark.requirement(REQUIREMENTS[check]))
        for name, check in cases
    ])


def _result(model: str, device: str) -> Any:
    """One evaluation per model serves all its checks (they are adjacent)."""
    from torch_fl_conformance.zoo.hf import check_model

    key = (model, device)
    if key not in _results:
        _results.clear()
        _results[key] = check_model(model, device)
    return _results[key]


def test_hf(model: str, check: str, device: str, record: Any) -> None:
    if _AREA_ERROR:
        raise RuntimeError(_AREA_ERROR[0])
    from torch_fl_conformance.zoo.hf import unavailable

    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    result = _result(model, device)
    record("hf", {"check": check, **result.to_dict()})
    failures = result.failures[check]
    if failures:
        if result.kernels:  # what the model's loop ran, for the report's suspects
            record("kernels", result.kernels)
        more = f" (and {len(failures) - 6} more)" if len(failures) > 6 else ""
        pytest.fail(f"{model} {check}: " + "; ".join(failures[:6]) + more, pytrace=False)
