"""Advanced indexing with index tensors on the CPU, as PyTorch allows for its
own devices: it moves the indices to the indexed tensor's device. Other
operators still refuse a CPU tensor that is not 0-dim, as on CUDA."""

from __future__ import annotations

import pytest
import torch
import torch_fl

DEV = "flemu"


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    cpu = torch.arange(20.0).reshape(4, 5)
    return cpu.to(DEV), cpu.clone()


def test_index_with_cpu_indices_runs_natively() -> None:
    dev, cpu = _pair()
    index = torch.tensor([3, 0, 2])
    with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as s:
        got = dev[index]
        got2 = dev[:, torch.tensor([4, 1])]
    assert torch.equal(got.cpu(), cpu[index]) and torch.equal(got2.cpu(), cpu[:, [4, 1]])
    assert s.table.get("aten::index.Tensor").native == 2, s.table


@pytest.mark.parametrize("where", ["int", "bool"])
def test_assignment_and_index_put_with_cpu_indices(where: str) -> None:
    dev, cpu = _pair()
    index = torch.tensor([1, 3]) if where == "int" else cpu > 12
    with torch_fl.fallback_mode("silent"):
        dev[index] = 1.5
        cpu[index] = 1.5
        assert torch.equal(dev.cpu(), cpu)
        values = torch.full((int(cpu[index].numel() / (5 if where == "int" else 1)),), 7.0)
        if where == "int":
            values = torch.full((2, 5), 7.0)
        dev.index_put_((index,), values.to(DEV), accumulate=True)
        cpu.index_put_((index,), values, accumulate=True)
        assert torch.equal(dev.cpu(), cpu)
        assert torch.equal(dev[index].cpu(), cpu[index])


def test_other_ops_refuse_cpu_tensors_as_on_cuda() -> None:
    dev, _ = _pair()
    with pytest.raises(RuntimeError) as err:
        torch.index_select(dev, 0, torch.tensor([0, 1]))
    assert "same device" in str(err.value), str(err.value)
    with pytest.raises(RuntimeError):
        dev + torch.ones(4, 5)
