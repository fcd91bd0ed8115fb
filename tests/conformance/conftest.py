"""Helpers for the tests of the conformance suite itself: they run
`torchfl-conformance` as a user would, on small slices of the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


# The target and host of reports built in-process from synthetic test results.
FAKE_TARGET = {
    "device_type": "fake", "plugin_name": "fake", "vendor": "v", "version": "1", "abi": "1.0",
    "host_abi": "1.0", "library": "/x.so", "library_sha256": "0" * 64, "device_count": 1,
    "devices": [], "groups": {}, "capabilities": ["fp16"], "native_kernels": 0,
}
FAKE_HOST = {"hostname": "h", "platform": "p", "machine": "m", "python": "3", "cpu_count": 2,
             "torch": "2.13", "torch_fl": "0.1", "suite": "0.1"}

def cli_env(**extra: str) -> dict[str, str]:
    """This process's environment without flemu's and torch-fl's settings (a run
    sets its own), keeping FLEMU_LIBRARY: which build of flemu is certified."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLEMU_", "TORCH_FL_", "PYTEST_")) or k == "FLEMU_LIBRARY"}
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_fl_conformance.cli", *args],
        check=False, capture_output=True, text=True, env=env or cli_env(), timeout=timeout,
        cwd=ROOT,
    )


def load_report(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "report.json").read_text(encoding="utf-8"))


def outcomes_of(report: dict[str, Any]) -> dict[str, str]:
    return {t["id"]: t["outcome"] for t in report["tests"]}


@pytest.fixture(scope="session")
def flemu_library() -> str:
    flemu = pytest.importorskip("flemu")
    return str(flemu.library_path())
