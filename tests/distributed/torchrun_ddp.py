"""A plain DDP training script, as a user would hand it to torchrun:

    python -m torch.distributed.run --standalone --nproc_per_node 2 torchrun_ddp.py OUT

Nothing torch-fl specific: the device comes from torch.accelerator (flemu,
autoloaded), the process group from init_process_group(device_id=...) with
no backend (torch picks the one registered for the device). Each rank checks an all_reduce, then trains a small MLP
with DistributedDataParallel on its half of every batch; rank 0 also trains
a copy on the CPU on the whole batch. Rank r writes what it saw to OUT.r
(an exception of the training is recorded there, not raised).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

STEPS = 4
BATCH = 16


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 12, generator=g), torch.randn(BATCH, 3, generator=g)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main() -> int:
    out = sys.argv[1]
    local_rank = int(os.environ["LOCAL_RANK"])
    acc = torch.accelerator.current_accelerator()
    assert acc is not None, "no accelerator: the plugin did not autoload"
    dev = torch.device(acc.type, local_rank % torch.accelerator.device_count())
    torch.accelerator.set_device_index(dev.index)
    dist.init_process_group(device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    info: dict[str, object] = {
        "backend": str(dist.get_backend()),
        "device": str(dev),
        "world": world,
        "all_reduce": sorted(set(t.cpu().tolist())),
    }
    try:
        train(info, rank, world, dev)
    except Exception as exc:  # noqa: BLE001 - recorded for the test to report
        info["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
    with open(f"{out}.{rank}", "w") as f:
        json.dump(info, f)
    dist.destroy_process_group()
    return 0


def train(info: dict[str, object], rank: int, world: int, dev: torch.device) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    initial = [p.detach().clone() for p in reference.parameters()]
    model = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(reference).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    per = BATCH // world
    losses, ref_losses = [], []
    for step in range(STEPS):
        x, y = batch(step)
        shard = slice(rank * per, (rank + 1) * per)
        losses.append(train_step(model, opt, x[shard].to(dev), y[shard].to(dev)))
        if rank == 0:
            ref_losses.append(train_step(reference, ref_opt, x, y))
    params = [p.detach().cpu() for p in model.module.parameters()]
    info["param_device"] = str(next(model.module.parameters()).device)
    info["losses"] = losses
    info["digest"] = [float(sum(p.double().sum() for p in params)), float(sum(p.double().abs().sum() for p in params))]
    if rank == 0:
        info["reference_losses"] = ref_losses
        info["max_param_error"] = max((p - r.detach()).abs().max().item()
                                      for p, r in zip(params, reference.parameters(), strict=True))
        info["changed_from_init"] = max((p - q).abs().max().item()
                                        for p, q in zip(params, initial, strict=True))


if __name__ == "__main__":
    sys.exit(main())
