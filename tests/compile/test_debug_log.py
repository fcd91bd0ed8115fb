"""TORCH_FL_LOG=debug prints each graph's partition (logger torch_fl.compile)."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import compile_fl
from support import assert_ok, run_python


def test_partition_in_debug_log(dev: torch.device, caplog: pytest.LogCaptureFixture) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.atan2(torch.relu(x * 2) + 1, x) @ x.T

    x = torch.randn(8, 8, device=dev)
    with caplog.at_level(logging.DEBUG, logger="torch_fl.compile"), torch.no_grad():
        compile_fl(f)(x)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "partition of inference_graph" in text, text
    assert "-> plugin" in text and "aten::relu" in text, text
    assert "-> eager (declined:" in text and "aten::atan2" in text, text
    assert "eager: " in text and "aten::mm" in text, text
    assert "memory plan:" in text, text


def test_torch_fl_log_env_enables_the_log() -> None:
    proc = run_python(
        """
        import torch
        x = torch.randn(16, device="flemu")
        with torch.no_grad():
            torch.compile(lambda t: torch.relu(t * 2) - 1, backend="torchfl")(x)
        """,
        env={"TORCH_FL_LOG": "debug"},
    )
    assert_ok(proc)
    assert "torch_fl.compile: torch_fl.compile: partition of" not in proc.stderr
    assert "partition of inference_graph" in proc.stderr, proc.stderr
    assert "region 0: 3 ops -> plugin" in proc.stderr, proc.stderr
