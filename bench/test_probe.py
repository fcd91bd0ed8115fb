"""Capability probing: a float32 GEMM on flemu with the probed blocking, against
flemu's default blocking and against the slowest candidates, in the same run.

The probe times each candidate on its own 512^3 workload; the benchmark runs a
different shape (768 x 1024 @ 1024 x 640) through torch, so it shows whether
the choice carries over to real calls.

- test_gemm_probed: probed / default (below 1 when the probe found a better setting)
- test_gemm_worst: worst / probed (how much a bad blocking costs)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import torch_fl
from torch_fl.tooling import probe

SHAPE = (768, 1024, 640)


@pytest.fixture(scope="module")
def settings() -> Iterator[dict[str, dict[str, int]]]:
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    tunables = probe.list_tunables(0)
    defaults = {t.name: t.default for t in tunables}
    (result,) = probe.probe(device=0, rounds=3, save=False)
    worst = {name: max(times, key=times.get) for name, times in result.timings.items()}
    print(f"\n{result}")
    yield {"default": defaults, "probed": result.chosen, "worst": worst}
    for name, value in defaults.items():
        probe.set_tunable(name, value, 0)


@pytest.fixture(scope="module")
def operands() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n, k, m = SHAPE
    return (torch.randn(n, k, generator=g).to("flemu"), torch.randn(k, m, generator=g).to("flemu"))


def _run(benchmark, operands, values: dict[str, int]) -> None:  # noqa: ANN001
    for name, value in values.items():
        probe.set_tunable(name, value, 0)
    a, b = operands

    def gemm() -> None:
        torch.mm(a, b)
        torch.flemu.synchronize()

    gemm()
    benchmark.extra_info["settings"] = dict(values)
    benchmark.pedantic(gemm, rounds=15, warmup_rounds=2)


def test_gemm_default(benchmark, settings, operands) -> None:  # noqa: ANN001
    _run(benchmark, operands, settings["default"])


def test_gemm_probed(benchmark, settings, operands) -> None:  # noqa: ANN001
    benchmark.extra_info.update(baseline="test_gemm_default")
    _run(benchmark, operands, settings["probed"])


def test_gemm_worst(benchmark, settings, operands) -> None:  # noqa: ANN001
    benchmark.extra_info.update(baseline="test_gemm_probed")
    _run(benchmark, operands, settings["worst"])
