"""FLEMU_FAULT: each fault, driven through the ABI by fault_check.cpp, does what
the catalogue says and nothing else; bad names fail Plugin_Initialize with the
whole catalogue."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from abi_programs import describe, run

# The names are a contract with the conformance suite, which injects them.
FAULTS = [
    "add_ignores_alpha",
    "mul_ignores_strides",
    "exp_ignores_offset",
    "sub_broadcast_wrong",
    "mul_out_ignored",
    "add_inplace_aliasing",
    "gelu_backward_scaled",
    "softmax_backward_wrong",
    "fp64_computed_in_fp32",
    "exp_low_precision",
    "sum_fp16_accumulator",
    "mm_crash",
    "mm_hang",
    "event_early",
    "stream_sync_noop",
    "free_leaks",
    "memory_overreport",
    "oob_write",
    "uniform_range_wrong",
    "seed_ignored",
    "peer_copy_corrupt",
]


@pytest.fixture(scope="session")
def fault_check(build_program: Callable[[str], Path]) -> Path:
    return build_program("fault_check")


@pytest.fixture(scope="session")
def runtime_check(build_program: Callable[[str], Path]) -> Path:
    return build_program("runtime_check")


def catalogue(runtime_check: Path, library: str) -> dict[str, str]:
    """The fault list of the error an unknown name gets: name -> description."""
    proc = run(runtime_check, library, "init", {"FLEMU_FAULT": "no_such_fault"})
    assert proc.returncode == 3, describe(proc)
    return dict(re.findall(r"^  (\w+): (.+)$", proc.stdout, re.M))


def test_catalogue_is_the_contract(runtime_check: Path, fault_check: Path, library: str) -> None:
    listed = catalogue(runtime_check, library)
    assert list(listed) == FAULTS, f"catalogue {list(listed)}, expected {FAULTS}"
    assert all(len(d) > 20 for d in listed.values()), listed
    scenarios = run(fault_check, library, "list").stdout.split()
    assert scenarios == FAULTS, f"fault_check scenarios {scenarios}, expected {FAULTS}"


def test_unknown_fault_lists_every_fault(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "init", {"FLEMU_FAULT": "add_ignores_alpha,no_such_fault"})
    assert proc.returncode == 3, f"an unknown fault must fail Plugin_Initialize: {describe(proc)}"
    for fragment in ("[code 2] flemu: Plugin_Initialize: invalid FLEMU_FAULT=", "unknown fault 'no_such_fault'",
                     *(f"  {name}: " for name in FAULTS)):
        assert fragment in proc.stdout, f"message lacks {fragment!r}: {proc.stdout!r}"


@pytest.mark.parametrize("value", ["", ",", "add_ignores_alpha,,mm_hang"])
def test_empty_fault_names_are_rejected(runtime_check: Path, library: str, value: str) -> None:
    proc = run(runtime_check, library, "init", {"FLEMU_FAULT": value})
    if value == "":  # an empty variable counts as unset
        assert proc.returncode == 0, describe(proc)
        return
    assert proc.returncode == 3 and "empty fault name" in proc.stdout, describe(proc)


def test_several_faults_at_once(runtime_check: Path, library: str) -> None:
    proc = run(runtime_check, library, "init", {"FLEMU_FAULT": "add_ignores_alpha, mm_hang,event_early"})
    assert proc.returncode == 0, describe(proc)
    assert "FLEMU_FAULT=add_ignores_alpha,mm_hang,event_early" in proc.stderr, describe(proc)


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "mm_crash"])
def test_fault_does_what_it_says(fault_check: Path, library: str, fault: str) -> None:
    # fault_check passes the fault as the FLEMU_FAULT Initialize option.
    proc = run(fault_check, library, fault, timeout=60)
    assert proc.returncode == 0, f"FLEMU_FAULT={fault}: {describe(proc)}"
    assert re.search(r"\d+ checks, 0 failures", proc.stdout), describe(proc)
    assert f"FLEMU_FAULT={fault} shows: " in proc.stdout, describe(proc)


def test_mm_crash_kills_the_process_in_the_kernel(fault_check: Path, library: str) -> None:
    proc = run(fault_check, library, "mm_crash", {"FLEMU_FAULT": "mm_crash"})  # the environment works too
    assert proc.returncode == -signal.SIGABRT, f"expected death by SIGABRT: {describe(proc)}"
    assert "addmm ok, launching mm" in proc.stdout and "still alive" not in proc.stdout, describe(proc)
    assert "FLEMU_FAULT=mm_crash: aten::mm aborts in the kernel" in proc.stderr, describe(proc)
