"""Running the ABI-level test programs (runtime_check, fault_check,
contract_check) that conftest.py's build_program fixture builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run(binary: Path, library: str, mode: str = "all", env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs a test program with a clean FLEMU_* environment plus `env`."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLEMU_")}
    child_env.update(env or {})
    return subprocess.run([str(binary), library, mode], capture_output=True, text=True, env=child_env,
                          timeout=timeout)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
