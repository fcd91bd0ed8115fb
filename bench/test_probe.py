"""Capability probing: a GEMM on flemu's blocked engine with the probed blocking,
against flemu's default blocking and against the slowest candidates, in the
same run. The tunables set the blocking of flemu's own GEMM, which computes in
float32 for every dtype but runs the half types only (float32 and float64 go to
OpenBLAS), so the benchmark multiplies bfloat16 matrices.

The probe times each candidate on its own 512^3 float32 workload; the benchmark
runs a different shape (768 x 1024 @ 1024 x 640) and dtype through torch, so it
shows whether the choice carries over to real calls. Two probes run: one from flemu's
defaults, and one starting from the slowest candidates (a mis-tuned plugin or
a stale cache), which must find its way back.

- test_gemm_probed: probed / default (about 1 when the defaults are already good)
- test_gemm_worst: worst / probed (what a bad blocking costs)
- test_gemm_recovered: probed from the worst start / worst

On a shared machine medians move with the load; the module also times the
settings interleaved (round-robin, best of 25 each) and prints those ratios.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch

import torch_fl
from torch_fl.tooling import probe
from _report import row

SHAPE = (768, 1024, 640)
INTERLEAVED_ROUNDS = 25
_ROW = "bfloat16 GEMM 768×1024×640 on flemu's blocked engine, one blocking vs another"


def _apply(values: dict[str, int]) -> None:
    for name, value in values.items():
        probe.set_tunable(name, value, 0)


@pytest.fixture(scope="module")
def operands() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n, k, m = SHAPE
    return (torch.randn(n, k, generator=g).to("flemu", torch.bfloat16),
            torch.randn(k, m, generator=g).to("flemu", torch.bfloat16))


def _gemm_once(a: torch.Tensor, b: torch.Tensor) -> float:
    start = time.perf_counter()
    torch.mm(a, b)
    torch.flemu.synchronize()
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def settings(operands: tuple[torch.Tensor, torch.Tensor]) -> Iterator[dict[str, dict[str, int]]]:
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    defaults = {t.name: t.default for t in probe.list_tunables(0)}
    (from_default,) = probe.probe(device=0, rounds=5, save=False)
    worst = {name: max(times, key=times.get) for name, times in from_default.timings.items()}
    _apply(worst)
    (from_worst,) = probe.probe(device=0, rounds=5, save=False, reset=False)
    print(f"\nprobe from the defaults:\n{from_default}\nprobe from the worst:\n{from_worst}")
    chosen = {"default": defaults, "probed": from_default.chosen, "worst": worst,
              "recovered": from_worst.chosen}

    best: dict[str, float] = {}
    a, b = operands
    for r in range(INTERLEAVED_ROUNDS):
        names = list(chosen) if r % 2 == 0 else list(reversed(chosen))
        for name in names:
            _apply(chosen[name])
            _gemm_once(a, b)  # warm-up after each change of settings
            best[name] = min(best.get(name, float("inf")), _gemm_once(a, b))
    print("interleaved, best of "
          f"{INTERLEAVED_ROUNDS}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in best.items()))
    print(f"interleaved ratios: probed/default {best['probed'] / best['default']:.2f}x, "
          f"worst/probed {best['worst'] / best['probed']:.2f}x, "
          f"recovered/worst {best['recovered'] / best['worst']:.2f}x")
    yield chosen
    _apply(defaults)


def _run(benchmark, operands, values: dict[str, int]) -> None:  # noqa: ANN001
    _apply(values)
    a, b = operands

    def gemm() -> None:
        torch.mm(a, b)
        torch.flemu.synchronize()

    benchmark.extra_info["settings"] = dict(values)
    benchmark.pedantic(gemm, rounds=25, warmup_rounds=2)


def test_gemm_default(benchmark, settings, operands) -> None:  # noqa: ANN001
    _run(benchmark, operands, settings["default"])


def test_gemm_probed(benchmark, settings, operands) -> None:  # noqa: ANN001
    benchmark.extra_info.update(baseline="test_gemm_default")
    row(benchmark, _ROW, "probed vs default")
    _run(benchmark, operands, settings["probed"])


def test_gemm_worst(benchmark, settings, operands) -> None:  # noqa: ANN001
    benchmark.extra_info.update(baseline="test_gemm_probed")
    row(benchmark, _ROW, "worst vs probed")
    _run(benchmark, operands, settings["worst"])


def test_gemm_recovered(benchmark, settings, operands) -> None:  # noqa: ANN001
    benchmark.extra_info.update(baseline="test_gemm_worst")
    row(benchmark, _ROW, "probed from the worst vs worst")
    _run(benchmark, operands, settings["recovered"])
