"""The scenarios the L3 collectives tests and the project's distributed tests share.

Each takes a harness.Rank. `collectives` checks every collective of TFL-COLL-001;
`ddp` trains the zoo's LSTM language model with DistributedDataParallel against
single-process CPU training; `timeout` and `dead_rank` run an all_reduce that
must fail (a peer never joins; a peer dies) and record the error and its time.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from torch_fl_conformance.ranks.checks import assert_equal, expected_reduction, values
from torch_fl_conformance.ranks.harness import Rank, Scenario

__all__ = [
    "BROKEN",
    "SCENARIOS",
    "add_arguments",
    "collectives",
    "ddp",
    "dead_rank",
    "failing_all_reduce",
    "timeout",
]


def collectives(r: Rank) -> None:
    """Every collective of TFL-COLL-001 on the dtypes given by --dtypes."""
    import torch
    import torch.distributed as dist

    check, rank, world, dev = r.rec.check, r.rank, r.world, r.device
    dtypes = r.args.dtypes.split(",")

    ops = {
        "sum": dist.ReduceOp.SUM,
        "product": dist.ReduceOp.PRODUCT,
        "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX,
        "avg": dist.ReduceOp.AVG,
    }

    def expected(n: int, dtype: Any, op: str) -> Any:
        return expected_reduction(world, n, dtype, op)

    for dt in dtypes:
        dtype = getattr(torch, dt)
        for op, reduce_op in ops.items():
            if op == "avg" and not dtype.is_floating_point:
                continue

            def all_reduce(op: str = op, reduce_op: Any = reduce_op, dtype: Any = dtype) -> None:
                for n in (world - 1, 70001):  # fewer elements than ranks; uneven chunks
                    t = values(rank, n, dtype, op).to(dev)
                    dist.all_reduce(t, op=reduce_op)
                    assert_equal(t, expected(n, dtype, op), f"all_reduce {op} {dtype} of {n}")

            check(f"all_reduce[{op}-{dt}]", all_reduce)

    def all_reduce_async() -> None:
        ts = [values(rank, 1000 * (k + 1), torch.float32).to(dev) for k in range(3)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in reversed(works):
            w.wait()
            assert w.is_completed(), "Work.is_completed() is False after wait()"
        for k, t in enumerate(ts):
            assert_equal(
                t, expected(1000 * (k + 1), torch.float32, "sum"), f"async all_reduce #{k}"
            )

    check("all_reduce[async]", all_reduce_async)

    def all_gather_list() -> None:
        inp = values(rank, rank + 3, torch.float32).to(dev)  # uneven sizes
        outs = [torch.empty(p + 3, device=dev) for p in range(world)]
        dist.all_gather(outs, inp)
        for p in range(world):
            assert_equal(outs[p], values(p, p + 3, torch.float32), f"all_gather slot {p}")

    check("all_gather[list-uneven]", all_gather_list)

    def all_gather_tensor() -> None:
        inp = values(rank, 1001, torch.float32).to(dev)
        out = torch.empty(world * 1001, device=dev)
        dist.all_gather_into_tensor(out, inp)
        assert_equal(
            out,
            torch.cat([values(p, 1001, torch.float32) for p in range(world)]),
            "all_gather_into_tensor",
        )

    check("all_gather[into-tensor]", all_gather_tensor)

    def reduce_scatter_list() -> None:
        sizes = [p + 2 for p in range(world)]
        ins = [values(rank, sizes[p], torch.float32, offset=10 * p).to(dev) for p in range(world)]
        out = torch.empty(sizes[rank], device=dev)
        dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
        exp = torch.stack(
            [values(p, sizes[rank], torch.float32, offset=10 * rank) for p in range(world)]
        ).amax(0)
        assert_equal(out, exp, "uneven reduce_scatter max")

    check("reduce_scatter[list-uneven]", reduce_scatter_list)

    def reduce_scatter_tensor() -> None:
        n = 50001
        inp = values(rank, n * world, torch.float32).to(dev)
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, inp)
        full = torch.stack([values(p, n * world, torch.float32) for p in range(world)]).sum(0)
        assert_equal(out, full[rank * n : (rank + 1) * n], "reduce_scatter_tensor sum")

    check("reduce_scatter[from-tensor]", reduce_scatter_tensor)

    def broadcast() -> None:
        for root in sorted({0, world - 1}):
            for n in (5, 300001):
                t = (values(root, n, torch.int64) if rank == root else torch.full((n,), -1)).to(dev)
                dist.broadcast(t, src=root)
                assert_equal(
                    t, values(root, n, torch.int64), f"broadcast from rank {root}, {n} elements"
                )

    check("broadcast[roots]", broadcast)

    def all_to_all_even() -> None:
        n = 6
        inp = torch.arange(world * n, dtype=torch.float32).add(100 * rank).to(dev)
        out = torch.empty(world * n, device=dev)
        dist.all_to_all_single(out, inp)
        exp = torch.cat(
            [
                torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32) + 100 * p
                for p in range(world)
            ]
        )
        assert_equal(out, exp, "all_to_all_single")

    check("all_to_all[even]", all_to_all_even)

    def all_to_all_splits() -> None:
        send = [(rank + p) % 3 + 1 for p in range(world)]
        recv = [(p + rank) % 3 + 1 for p in range(world)]
        inp = torch.cat(
            [torch.full((send[p], 4), float(1000 * rank + p)) for p in range(world)]
        ).to(dev)
        out = torch.empty(sum(recv), 4, device=dev)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        exp = torch.cat([torch.full((recv[p], 4), float(1000 * p + rank)) for p in range(world)])
        assert_equal(out, exp, "all_to_all_single with uneven splits")

    check("all_to_all[splits]", all_to_all_splits)

    def send_recv() -> None:
        peer = rank ^ 1
        if peer >= world:
            return
        mine = values(rank, 200003, torch.float32).to(dev)
        got = torch.empty(200003, device=dev)
        if rank % 2 == 0:
            dist.send(mine, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(mine, peer)
        assert_equal(got, values(peer, 200003, torch.float32), "send/recv")

    check("send_recv[blocking]", send_recv)

    def isend_irecv() -> None:
        n = 1 << 20
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        mine = values(rank, n, torch.float32).to(dev)
        got = torch.empty(n, device=dev)
        for w in [dist.isend(mine, nxt), dist.irecv(got, prv)]:
            w.wait()
        assert_equal(got, values(prv, n, torch.float32), "isend/irecv ring")

    check("send_recv[ring]", isend_irecv)

    def barrier() -> None:
        for _ in range(3):
            dist.barrier()
        dist.barrier(async_op=True).wait()

    check("barrier[blocking-async]", barrier)


def ddp(r: Rank, steps: int = 3) -> None:
    """DDP training of the zoo's LSTM language model on the device, each rank on
    its shard of every batch, against single-process CPU training on the whole
    batch (rank 0 runs it). The zoo's dropout records its masks on the device; the
    ranks gather them (through gloo) so the CPU run drops the same elements.

    Records losses (the whole batch's, averaged over the ranks), on rank 0
    reference_losses, param_errors, max_param_error and changed_from_init, and
    on every rank digest (sums of its parameters, computed on the host)."""

    def run() -> None:
        _ddp(r, steps)

    r.rec.check("ddp", run)


def _ddp(r: Rank, steps: int) -> None:
    import copy

    import torch
    import torch.distributed as dist

    from torch_fl_conformance.zoo import get_model
    from torch_fl_conformance.zoo.tape import Tape, use_tape

    rank, world, dev, info = r.rank, r.world, r.device, r.rec.info
    spec = get_model("lstm_lm")
    torch.manual_seed(0)
    reference = spec.build()
    initial = [p.detach().clone() for p in reference.parameters()]
    model = copy.deepcopy(reference).to(dev)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = spec.make_optimizer(ddp_model.parameters(), dev.type)
    ref_opt = spec.make_optimizer(reference.parameters(), "cpu")
    losses, ref_losses = [], []
    for step in range(steps):
        inputs, target = spec.make_batch(step)
        per = target.shape[0] // world
        shard = slice(rank * per, (rank + 1) * per)
        tape = Tape()
        opt.zero_grad()
        with use_tape(tape):
            loss = spec.loss_fn(
                ddp_model, tuple(x[shard].to(dev) for x in inputs), target[shard].to(dev)
            )
        loss.backward()
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)  # equal shards: the whole batch's
        losses.append(mean_loss.item())
        masks = []
        for m in tape.masks:  # CPU tensors, through gloo
            parts = [torch.empty_like(m, dtype=torch.uint8) for _ in range(world)]
            dist.all_gather(parts, m.to(torch.uint8))
            masks.append(torch.cat(parts).to(m.dtype))
        if rank == 0:
            ref_opt.zero_grad()
            with use_tape(tape.replay(masks=masks)):
                ref_loss = spec.loss_fn(reference, inputs, target)
            ref_loss.backward()
            ref_opt.step()
            ref_losses.append(ref_loss.item())
    info["steps"] = steps
    info["losses"] = losses
    flat = torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).double()
    info["digest"] = [flat.sum().item(), flat.abs().sum().item()]
    if rank == 0:
        info["reference_losses"] = ref_losses
        errors = {
            name: (p.detach().cpu() - q.detach()).abs().max().item()
            for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True)
        }
        info["param_errors"] = errors
        info["max_param_error"] = max(errors.values())
        info["changed_from_init"] = max(
            (p.detach() - q).abs().max().item()
            for p, q in zip(reference.parameters(), initial, strict=True)
        )


def failing_all_reduce(r: Rank, t: Any) -> None:
    """Runs an all_reduce expected to fail (and waits for it); records the error,
    whether it is a torch.distributed error, and how long it took."""
    import torch
    import torch.distributed as dist

    start = time.monotonic()
    try:
        dist.all_reduce(t)
        torch.accelerator.synchronize(t.device)
    except Exception as exc:  # noqa: BLE001 - the error is what the test checks
        r.rec.info["error_type"] = type(exc).__name__
        r.rec.info["dist_error"] = isinstance(exc, dist.DistError)
        r.rec.info["error"] = str(exc)
    r.rec.info["seconds"] = time.monotonic() - start


def timeout(r: Rank) -> None:
    """Rank 0 enters an all_reduce that rank 1 never joins (rank 1 waits on the
    store meanwhile, alive)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.barrier()  # every rank has the communicator
    if r.rank == 0:
        failing_all_reduce(r, torch.ones(1024, device=r.device))
        r.store.set("rank0_done", "1")
    else:
        r.store.wait(["rank0_done"], timedelta(seconds=120))


def dead_rank(r: Rank) -> None:
    """Rank --victim (default the last) is killed once the communicator is up; the
    others run an all_reduce that must fail naming it, well before the timeout."""
    import torch
    import torch.distributed as dist

    victim = r.args.victim % r.world
    dist.barrier()
    if r.rank == victim:
        time.sleep(0.5)  # the others are past the barrier and into the all_reduce
        os.kill(os.getpid(), signal.SIGKILL)
    failing_all_reduce(r, torch.ones(1 << 18, device=r.device))


def add_arguments(parser: Any) -> None:
    """The scenarios' own options."""
    parser.add_argument("--dtypes", default="float32,int64", help="collectives: dtypes to check")
    parser.add_argument("--victim", type=int, default=-1,
                        help="dead_rank: the rank killed (default: the last)")


SCENARIOS: dict[str, Scenario] = {
    "collectives": collectives,
    "ddp": ddp,
    "timeout": timeout,
    "dead_rank": dead_rank,
}
# Scenarios that leave the group broken on purpose.
BROKEN = frozenset({"timeout", "dead_rank"})
