"""A training step (forward, backward, SGD with momentum) of each tiny Hugging
Face model the conformance zoo certifies (GPT-2, BERT, T5, ViT, Llama: a few
32-wide layers, random weights, nothing downloaded) on flemu against the same
step on the CPU, timed in the same rounds (_interleave.py), PyTorch on one
thread; flemu keeps its own threads. Ratio of medians flemu / CPU; no target.
Each op of these models is tiny, so the ratio is mostly the host's cost per
op against PyTorch's CPU kernels': the bridge, flemu's launch and the stream
round trips. Every op of the timed steps runs natively (fallback "error").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch_fl
from _interleave import interleaved
from _report import row
from torch_fl_conformance.zoo import hf

ROUNDS = 15


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


class _Trainer:
    def __init__(self, name: str, device: str) -> None:
        self.device = torch.device(device)
        self.model = hf.build(name).to(self.device)
        self.opt = hf.make_optimizer(self.model)
        self.batch = {k: v.to(self.device) for k, v in hf.MODELS[name].batch().items()}
        for _ in range(2):  # output metadata, allocator pools, optimizer state
            self.step()

    def step(self) -> None:
        hf.train_step(self.model, self.batch, self.opt)
        if self.device.type != "cpu":
            torch.flemu.synchronize()


@pytest.mark.parametrize("name", list(hf.MODELS))
def test_hf_step_flemu(benchmark, name: str) -> None:  # noqa: ANN001
    reason = hf.unavailable()
    assert reason is None, f"the Hugging Face models cannot be built: {reason}"
    assert torch_fl.get_plugin() is not None, "the benchmark needs the flemu plugin"
    row(benchmark, "tiny Hugging Face model training step, flemu vs CPU (PyTorch on one thread)", name)
    with torch_fl.fallback_mode("error"):
        flemu, cpu = _Trainer(name, "flemu"), _Trainer(name, "cpu")
        interleaved(benchmark, flemu.step, cpu.step, f"CPU {name} step, interleaved", rounds=ROUNDS)
