"""What profiling the device costs: 20 forwards of a small MLP (16 -> 64 -> ReLU -> 4,
batch 32) on flemu, unprofiled against the same forwards inside each profiler, in the
same rounds (_interleave.py; a profiling session of its own for each round's profiled
turn, opened and closed untimed).

- stubs: torch.autograd.profiler.profile(use_device="flemu") (two timing events per
  operator; target <= 2.0x)
- kernels: torch.profiler.profile(activities=[CPU, PrivateUse1]) (two timing events per
  native kernel, linked to its operator; target <= 2.0x)
- cpu only: torch.profiler with ProfilerActivity.CPU alone, PyTorch's own host-side cost,
  for comparison
- *_session: a whole profiling session around the 20 forwards, entering and leaving the
  profiler included (fixed costs that PyTorch's CPU-only profiler pays as well)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
import torch
from torch import nn
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity

import torch_fl
from _interleave import interleaved
from _report import row

FORWARDS = 20
ROUNDS = 100
INTERLEAVED_ROUNDS = 30


@pytest.fixture(scope="module")
def forwards() -> Callable[[], None]:
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).to("flemu")
    x = torch.randn(32, 16, device="flemu")

    def run() -> None:
        with torch.no_grad():
            for _ in range(FORWARDS):
                model(x)
        torch.flemu.synchronize()

    for _ in range(5):  # output metadata is computed once per call shape
        run()
    return run


PROFILERS: dict[str, Callable[[], AbstractContextManager]] = {
    "stubs": lambda: autograd_profile(use_device="flemu"),
    "kernels": lambda: torch.profiler.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]),
    "cpu_only": lambda: torch.profiler.profile(activities=[ProfilerActivity.CPU]),
}


LABELS = {"stubs": "`use_device=` stubs", "kernels": "device kernels", "cpu_only": "CPU only"}


@pytest.fixture(params=list(PROFILERS))
def profiler(request: pytest.FixtureRequest) -> Iterator[tuple[str, Callable]]:
    yield request.param, PROFILERS[request.param]


def test_mlp_unprofiled(benchmark, forwards) -> None:  # noqa: ANN001
    benchmark.pedantic(forwards, rounds=ROUNDS, warmup_rounds=2)


def test_mlp_profiled(benchmark, forwards, profiler) -> None:  # noqa: ANN001
    """Profiled forwards against unprofiled ones in the same rounds
    (_interleave.py): each round's profiled turn runs in a profiling session
    of its own, opened before its settling calls and closed, its events
    processed, before the next unprofiled turn, all untimed."""
    name, make = profiler
    row(benchmark, f"{FORWARDS} MLP forwards profiled vs unprofiled", LABELS[name],
        2.0 if name != "cpu_only" else None)
    session: list[AbstractContextManager] = []

    def switch(profiled: bool) -> None:
        if session:
            session.pop().__exit__(None, None, None)
        if profiled:
            session.append(make())
            session[0].__enter__()

    interleaved(benchmark, forwards, forwards, "unprofiled forwards, interleaved", rounds=INTERLEAVED_ROUNDS,
                warmup=2, switch=switch)


def test_mlp_profiled_session(benchmark, forwards, profiler) -> None:  # noqa: ANN001
    name, make = profiler
    benchmark.extra_info.update(baseline="test_mlp_unprofiled")
    row(benchmark, f"the same, a profiling session around the {FORWARDS} forwards vs unprofiled",
        LABELS[name])

    def session() -> None:
        with make():
            forwards()

    benchmark.pedantic(session, rounds=ROUNDS, warmup_rounds=2)
