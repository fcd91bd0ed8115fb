"""flemu's matrix products against PyTorch's own CPU GEMM (MKL), same run: the
shapes of the zoo BERT encoder's projections and feed-forward layers (tokens x
hidden @ hidden x 4*hidden and back), its attention's batched products, and a
square 512^3. Ratio of medians flemu / CPU (target: <= 1.1x), the two sides
timed in the same rounds (_interleave.py); nothing fails on a time. Each side
first runs its product 60 times: a fresh process's threads may start on one
core (flemu's stream thread and pool helper then take turns, twice as slow,
until the kernel's load balancer moves one, tens of milliseconds later), and
the figure is the steady state a training run sees."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_fl
from _interleave import interleaved
from _report import row

LABELS = {"mm_256x128x512": "256×128×512", "mm_256x512x128": "256×512×128", "mm_512x512x512": "512³",
          "bmm_16x64x32x64": "bmm 16×(64×32×64)"}
SHAPES = {
    "mm_256x128x512": ("mm", (256, 128), (128, 512)),
    "mm_256x512x128": ("mm", (256, 512), (512, 128)),
    "mm_512x512x512": ("mm", (512, 512), (512, 512)),
    "bmm_16x64x32x64": ("bmm", (16, 64, 32), (16, 32, 64)),
}


def _product(name: str, device: str) -> Callable[[], None]:
    op, sa, sb = SHAPES[name]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(sa, generator=g).to(device)
    b = torch.randn(sb, generator=g).to(device)
    fn = torch.mm if op == "mm" else torch.bmm

    def run() -> None:
        fn(a, b)
        if device != "cpu":
            torch.flemu.synchronize()

    run()
    return run


@pytest.mark.parametrize("name", SHAPES)
def test_gemm_flemu(benchmark, name: str) -> None:  # noqa: ANN001
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    row(benchmark, "float32 GEMM with a synchronize, flemu vs CPU (MKL)", LABELS[name], 1.1)
    with torch_fl.fallback_mode("error"):
        interleaved(benchmark, _product(name, "flemu"), _product(name, "cpu"),
                    f"CPU {name}, interleaved", rounds=40, warmup=60)
