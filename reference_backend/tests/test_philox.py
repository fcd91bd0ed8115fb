"""flemu's Philox4x32-10 generator against the published known-answer vectors
(built from the header alone, no library or torch needed)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path


def test_philox_known_answers(build_program: Callable[..., Path]) -> None:
    binary = build_program("philox_check")
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip().endswith("checks, 0 failures"), proc.stdout
