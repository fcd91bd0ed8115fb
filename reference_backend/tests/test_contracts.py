"""FLEMU_CHECK_CONTRACTS=1: kernels verify what the host promised for the flags
and dtypes they declared, and guard regions around every allocation catch
writes past its ends (contract_check.cpp, through the ABI alone)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from abi_programs import describe, run


@pytest.fixture(scope="session")
def contract_check(build_program: Callable[[str], Path]) -> Path:
    return build_program("contract_check")


@pytest.mark.parametrize("strict", ["0", "1"])
@pytest.mark.parametrize("mode", ["all", "guards"])
def test_contract_check(contract_check: Path, library: str, mode: str, strict: str) -> None:
    proc = run(contract_check, library, mode, {"FLEMU_STRICT": strict})
    assert proc.returncode == 0, f"contract_check {mode} with FLEMU_STRICT={strict}: {describe(proc)}"
    assert re.search(r"\d+ checks, 0 failures", proc.stdout), describe(proc)
    assert "contract checking on" in proc.stderr, describe(proc)


def test_contract_checking_is_off_by_default(build_program: Callable[[str], Path], library: str) -> None:
    proc = run(build_program("runtime_check"), library, "init")
    assert proc.returncode == 0 and "contract checking on" not in proc.stderr, describe(proc)


def test_bad_value_is_rejected(build_program: Callable[[str], Path], library: str) -> None:
    proc = run(build_program("runtime_check"), library, "init", {"FLEMU_CHECK_CONTRACTS": "sometimes"})
    assert proc.returncode == 3 and "invalid FLEMU_CHECK_CONTRACTS='sometimes'" in proc.stdout, describe(proc)
