"""flemu's stream queue on its own: stream_check.cpp compiles src/stream.cpp
into a program that checks order, chunk recycling, wake-ups, draining, error
reporting and concurrent producers, and with src/thread_pool.cpp a waiting
thread's share in the pool's work (no library or torch needed). It runs
optimized and under ThreadSanitizer, which sees a data race in the lock-free
queue that a passing run might not."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.mark.parametrize("flags", [("-O2", "-fopenmp"), ("-O1", "-g", "-fsanitize=thread", "-fopenmp")],
                         ids=["O2", "tsan"])
def test_stream_queue(build_program: Callable[..., Path], flags: tuple[str, ...]) -> None:
    binary = build_program("stream_check", flags)
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip().endswith("checks, 0 failures"), proc.stdout
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr
