"""What each rank of a distributed test runs (started by ranks.py).

    python scenarios.py SCENARIO --rank R --world N --store PATH --out FILE

The rank side of the conformance suite's multi-rank harness
(torch_fl_conformance.ranks): its DDP parity and failure scenarios, and the
project's own: every collective, op and dtype of the tfl backend on flemu,
backend names, abort, mismatched sizes, FSDP, the all_reduce benchmark's peers.
Each scenario records named checks ("ok" or the failure with its traceback)
and facts in FILE as JSON; the tests in test_*.py assert on them, so one set
of processes serves many test cases.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch_fl_conformance.ranks import harness
from torch_fl_conformance.ranks import scenarios as shared
from torch_fl_conformance.ranks.checks import assert_equal, expected_reduction, values
from torch_fl_conformance.ranks.harness import Rank, Recorder

DEVICE_TYPE = "flemu"
BACKEND = "tfl"

OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}
DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
# The plugin ABI's own test (comm_check.cpp) runs every op on every dtype;
# here the bridge's mapping of each: every dtype with sum, every op on
# float32, the other ops on an integer, a 16-bit float and bool, avg on every
# floating type. World 1 only checks that each op runs.
_FLOATS = ("float16", "bfloat16", "float32", "float64")
ALL_REDUCE_CASES = {
    1: [("sum", "float32"), ("max", "int64")],
    2: [*(("sum", dt) for dt in DTYPES),
        *((op, "float32") for op in OPS if op != "sum"),
        *((op, dt) for op in ("product", "min", "max") for dt in ("int32", "bfloat16", "bool")),
        *(("avg", dt) for dt in _FLOATS if dt != "float32")],
    4: [*((op, "float32") for op in OPS), ("sum", "int64"), ("max", "bool"), ("avg", "bfloat16")],
}

OTHER_CHECKS = [
    "all_reduce_large",
    "all_reduce_async",
    "all_reduce_future",
    "all_reduce_complex",
    "all_reduce_functional",
    "all_reduce_premul_sum",
    "all_gather",
    "all_gather_uneven",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_uneven",
    "reduce_scatter_tensor",
    "broadcast",
    "all_to_all_single",
    "all_to_all_single_splits",
    "all_to_all",
    "send_recv",
    "isend_irecv",
    "barrier",
    "reduce",
    "gather",
    "scatter",
    "cpu_tensors_through_gloo",
    "wrong_device_error",
    "non_dense_error",
]


def collective_checks(world: int) -> list[str]:
    """The checks the collectives scenario records at this world size."""
    cases = ALL_REDUCE_CASES.get(world, ALL_REDUCE_CASES[2])
    return [*(f"all_reduce[{op}-{dt}]" for op, dt in cases), *OTHER_CHECKS]


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


def collectives(rec: Recorder, rank: int, world: int, dev: torch.device) -> None:
    for op, dt in ALL_REDUCE_CASES.get(world, ALL_REDUCE_CASES[2]):
        dtype = DTYPES[dt]

        def run(op: str = op, dtype: torch.dtype = dtype) -> None:
            for n in (3, 70001):  # fewer elements than ranks per chunk; uneven chunks past 256 KiB
                t = values(rank, n, dtype, op).to(dev)
                dist.all_reduce(t, op=OPS[op])
                assert_equal(t, expected_reduction(world, n, dtype, op), f"all_reduce {op} {dtype} n={n}")

        rec.check(f"all_reduce[{op}-{dt}]", run)

    def large() -> None:
        n = (4 << 20) // 4 + 3
        t = values(rank, n, torch.float32).to(dev)
        dist.all_reduce(t)
        assert_equal(t, expected_reduction(world, n, torch.float32, "sum"), "4 MiB all_reduce")

    rec.check("all_reduce_large", large)

    def async_op() -> None:
        t = values(rank, 100003, torch.float32).to(dev)
        work = dist.all_reduce(t, async_op=True)
        assert work is not None, "async_op=True returned no Work"
        assert work.wait() is True, "Work.wait() did not return True"
        assert work.is_completed(), "Work.is_completed() is False after wait()"
        assert work.is_success(), "Work.is_success() is False after a successful wait()"
        assert_equal(t, expected_reduction(world, 100003, torch.float32, "sum"), "async all_reduce")
        # Several in flight at once, waited in reverse.
        ts = [values(rank, 1000 * (k + 1), torch.float32).to(dev) for k in range(4)]
        works = [dist.all_reduce(x, async_op=True) for x in ts]
        for w in reversed(works):
            w.wait()
        for k, x in enumerate(ts):
            assert_equal(x, expected_reduction(world, 1000 * (k + 1), torch.float32, "sum"), f"in flight #{k}")

    rec.check("all_reduce_async", async_op)

    def future() -> None:
        t = values(rank, 4099, torch.float64).to(dev)
        fut = dist.all_reduce(t, async_op=True).get_future()
        chained = fut.then(lambda f: f.value()[0] * 2)
        out = chained.wait()
        assert_equal(out, expected_reduction(world, 4099, torch.float64, "sum") * 2, "future.then")

    rec.check("all_reduce_future", future)

    def complex_sum() -> None:
        real = values(rank, 33, torch.float32)
        t = torch.complex(real, -real).to(dev)
        dist.all_reduce(t)
        exp = expected_reduction(world, 33, torch.float32, "sum")
        assert_equal(t, torch.complex(exp, -exp), "complex all_reduce")

    rec.check("all_reduce_complex", complex_sum)

    def functional() -> None:
        import torch.distributed._functional_collectives as funcol

        t = values(rank, 129, torch.float32).to(dev)
        before = t.clone()
        out = funcol.all_reduce(t, "sum", dist.group.WORLD)
        out = funcol.wait_tensor(out) if hasattr(funcol, "wait_tensor") else out
        assert_equal(out, expected_reduction(world, 129, torch.float32, "sum"), "functional all_reduce")
        assert_equal(t, before.cpu(), "functional all_reduce left its input alone")

    rec.check("all_reduce_functional", functional)

    def premul_sum() -> None:
        t = values(rank, 65, torch.float32).to(dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        assert_equal(t, expected_reduction(world, 65, torch.float32, "sum") * 0.5, "premul_sum")

    rec.check("all_reduce_premul_sum", premul_sum)

    def all_gather() -> None:
        for n in (1, 1001):
            inp = values(rank, n, torch.float32).to(dev)
            outs = [torch.empty(n, device=dev) for _ in range(world)]
            dist.all_gather(outs, inp)
            for r in range(world):
                assert_equal(outs[r], values(r, n, torch.float32), f"all_gather slot {r} n={n}")

    rec.check("all_gather", all_gather)

    def all_gather_uneven() -> None:
        inp = values(rank, rank + 3, torch.int64).to(dev)
        outs = [torch.empty(r + 3, dtype=torch.int64, device=dev) for r in range(world)]
        dist.all_gather(outs, inp)
        for r in range(world):
            assert_equal(outs[r], values(r, r + 3, torch.int64), f"uneven all_gather slot {r}")

    rec.check("all_gather_uneven", all_gather_uneven)

    def all_gather_into_tensor() -> None:
        inp = values(rank, 2 * 7, torch.bfloat16).reshape(2, 7).to(dev)
        out = torch.empty(2 * world, 7, dtype=torch.bfloat16, device=dev)
        dist.all_gather_into_tensor(out, inp)
        exp = torch.cat([values(r, 14, torch.bfloat16).reshape(2, 7) for r in range(world)])
        assert_equal(out, exp, "all_gather_into_tensor")
        strided = torch.empty(7, 2 * world, dtype=torch.bfloat16, device=dev).t()  # a stand-in copied back
        dist.all_gather_into_tensor(strided, inp)
        assert_equal(strided, exp, "all_gather_into_tensor into a transposed output")

    rec.check("all_gather_into_tensor", all_gather_into_tensor)

    def reduce_scatter() -> None:
        n = 1003
        ins = [values(rank, n, torch.float32, offset=p * n).to(dev) for p in range(world)]
        out = torch.empty(n, device=dev)
        dist.reduce_scatter(out, ins)
        exp = sum(values(r, n, torch.float32, offset=rank * n) for r in range(world))
        assert_equal(out, exp, "reduce_scatter")

    rec.check("reduce_scatter", reduce_scatter)

    def reduce_scatter_uneven() -> None:
        sizes = [p + 2 for p in range(world)]
        ins = [values(rank, sizes[p], torch.int32, offset=10 * p).to(dev) for p in range(world)]
        out = torch.empty(sizes[rank], dtype=torch.int32, device=dev)
        dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
        exp = torch.stack([values(r, sizes[rank], torch.int32, offset=10 * rank) for r in range(world)]).amax(0)
        assert_equal(out, exp, "uneven reduce_scatter max")

    rec.check("reduce_scatter_uneven", reduce_scatter_uneven)

    def reduce_scatter_tensor() -> None:
        n = 50001
        inp = values(rank, n * world, torch.float32).to(dev)
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
        full = torch.stack([values(r, n * world, torch.float32) for r in range(world)]).sum(0) / world
        assert_equal(out, full[rank * n:(rank + 1) * n], "reduce_scatter_tensor avg")
        strided = torch.zeros(2 * n, device=dev)[::2]  # a stand-in copied back
        dist.reduce_scatter_tensor(strided, inp, op=dist.ReduceOp.AVG)
        assert_equal(strided, full[rank * n:(rank + 1) * n], "reduce_scatter_tensor into a strided output")

    rec.check("reduce_scatter_tensor", reduce_scatter_tensor)

    def broadcast() -> None:
        for root in {0, world - 1}:
            for n in (5, 300001):  # binomial tree, then the chain
                t = (values(root, n, torch.int64) if rank == root else torch.full((n,), -1)).to(dev)
                dist.broadcast(t, src=root)
                assert_equal(t, values(root, n, torch.int64), f"broadcast from {root} n={n}")

    rec.check("broadcast", broadcast)

    def all_to_all_single() -> None:
        n = 6
        inp = torch.arange(world * n, dtype=torch.float32).add(100 * rank).to(dev)
        out = torch.empty(world * n, device=dev)
        dist.all_to_all_single(out, inp)
        exp = torch.cat([torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32) + 100 * r for r in range(world)])
        assert_equal(out, exp, "all_to_all_single")

    rec.check("all_to_all_single", all_to_all_single)

    def all_to_all_single_splits() -> None:
        # Rank r sends (r + p) % 3 + 1 rows of 4 to rank p.
        send = [(rank + p) % 3 + 1 for p in range(world)]
        recv = [(p + rank) % 3 + 1 for p in range(world)]
        rows = [torch.full((send[p], 4), float(1000 * rank + p)) for p in range(world)]
        inp = torch.cat(rows).to(dev)
        out = torch.empty(sum(recv), 4, device=dev)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        exp = torch.cat([torch.full((recv[p], 4), float(1000 * p + rank)) for p in range(world)])
        assert_equal(out, exp, "all_to_all_single with splits")

    rec.check("all_to_all_single_splits", all_to_all_single_splits)

    def all_to_all() -> None:
        ins = [torch.full((p + 1,), float(10 * rank + p), device=dev) for p in range(world)]
        outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for p in range(world):
            assert_equal(outs[p], torch.full((rank + 1,), float(10 * p + rank)), f"all_to_all from {p}")

    rec.check("all_to_all", all_to_all)

    def send_recv() -> None:
        # Pairs (0,1), (2,3): the even rank sends first, the odd one receives first.
        peer = rank ^ 1
        if peer >= world:
            return
        mine = values(rank, 200003, torch.float64).to(dev)
        got = torch.empty(200003, dtype=torch.float64, device=dev)
        if rank % 2 == 0:
            dist.send(mine, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(mine, peer)
        assert_equal(got, values(peer, 200003, torch.float64), "blocking send/recv")

    rec.check("send_recv", send_recv)

    def isend_irecv() -> None:
        # A ring shift: everyone sends and receives at once; 4 MiB each so the
        # transfers cannot hide in socket buffers.
        n = 1 << 20
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        mine = values(rank, n, torch.float32).to(dev)
        got = torch.empty(n, device=dev)
        if world == 1:
            # Alone, the ring sends to itself: refused, not a hang.
            try:
                dist.isend(mine, nxt)
            except ValueError as exc:
                assert "this rank" in str(exc), f"unhelpful message: {exc}"
                return
            raise AssertionError("isend to this rank itself was accepted")
        works = [dist.isend(mine, nxt), dist.irecv(got, prv)]
        for w in works:
            w.wait()
        assert_equal(got, values(prv, n, torch.float32), "isend/irecv ring")
        ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got.zero_(), prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert_equal(got, values(prv, n, torch.float32), "batch_isend_irecv ring")

    rec.check("isend_irecv", isend_irecv)

    def barrier() -> None:
        for _ in range(3):
            dist.barrier()
        work = dist.barrier(async_op=True)
        work.wait()

    rec.check("barrier", barrier)

    def reduce() -> None:
        t = values(rank, 77, torch.int64).to(dev)
        before = t.clone()
        dist.reduce(t, dst=world - 1)
        if rank == world - 1:
            assert_equal(t, expected_reduction(world, 77, torch.int64, "sum"), "reduce on the root")
        else:
            assert_equal(t, before.cpu(), "reduce left a non-root tensor alone")

    rec.check("reduce", reduce)

    def gather() -> None:
        t = values(rank, 9, torch.float32).to(dev)
        outs = [torch.empty(9, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(t, outs, dst=0)
        if rank == 0:
            for r in range(world):
                assert_equal(outs[r], values(r, 9, torch.float32), f"gather slot {r}")

    rec.check("gather", gather)

    def scatter() -> None:
        out = torch.empty(11, dtype=torch.int32, device=dev)
        ins = [values(p, 11, torch.int32).to(dev) for p in range(world)] if rank == world - 1 else None
        dist.scatter(out, ins, src=world - 1)
        assert_equal(out, values(rank, 11, torch.int32), "scatter")

    rec.check("scatter", scatter)

    def cpu_tensors() -> None:
        t = values(rank, 10, torch.float32)
        dist.all_reduce(t)
        assert_equal(t, expected_reduction(world, 10, torch.float32, "sum"), "CPU all_reduce through gloo")
        backend = dist.get_backend()
        assert "gloo" in str(backend) and BACKEND in str(backend), f"the group's backend is {backend!r}"

    rec.check("cpu_tensors_through_gloo", cpu_tensors)

    def wrong_device() -> None:
        other = torch.device(DEVICE_TYPE, (dev.index + 1) % torch.accelerator.device_count())
        if other == dev:
            return
        try:
            dist.all_reduce(torch.ones(3, device=other))
        except Exception as exc:  # noqa: BLE001
            assert "one device per process" in str(exc), f"unhelpful message: {exc}"
        else:
            raise AssertionError("an all_reduce on another device than the group's was accepted")

    rec.check("wrong_device_error", wrong_device)

    def non_dense() -> None:
        t = torch.ones(4, 6, device=dev)[:, ::2]
        try:
            dist.all_reduce(t)
        except Exception as exc:  # noqa: BLE001
            assert "dense" in str(exc), f"unhelpful message: {exc}"
        else:
            raise AssertionError("all_reduce of a strided view was accepted")

    rec.check("non_dense_error", non_dense)


def backend_names(rec: Recorder, rank: int, world: int, dev: torch.device, store_path: str) -> None:
    """init_process_group by the device's name, by the backend's, and with no
    backend at all (the accelerator's default), one group after the other,
    each with device_id=; then with neither backend nor device_id.

    Every group is the default group, named "0", on the same store (as under
    torchrun, whose store outlives the groups); rank 0 comes late to each
    group's first collective after the first, so the other rank looks for the
    communicator's unique id before rank 0 publishes it and must not take the
    previous group's."""
    store = dist.FileStore(f"{store_path}.groups", world)
    late = False

    def all_reduce(what: str) -> None:
        if rank == 0 and late:
            time.sleep(0.3)
        t = torch.full((5,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        assert_equal(t, torch.full((5,), float(world * (world + 1) // 2)), f"all_reduce in {what}")

    for name in (DEVICE_TYPE, BACKEND, None):
        def run(name: str | None = name) -> None:
            dist.init_process_group(name, store=store, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=20), device_id=dev)
            try:
                all_reduce(f"group {name!r}")
                backend = str(dist.get_backend())
                rec.info[f"backend/{name}"] = backend
                assert (name or BACKEND) in backend, f"init_process_group({name!r}) made a {backend!r} group"
            finally:
                dist.destroy_process_group()

        rec.check(f"backend[{name}]", run)
        late = True

    # No backend and no device_id: torch picks the accelerator's default backend.
    torch.accelerator.set_device_index(dev.index)
    dist.init_process_group(store=store, rank=rank, world_size=world, timeout=timedelta(seconds=20))
    try:
        def ddp_step() -> None:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2).to(dev))
            model(torch.ones(3, 4, device=dev)).sum().backward()
            assert model.module.weight.grad is not None

        rec.check("backend[default]", lambda: all_reduce("the group made with no arguments"))
        rec.check("ddp[default]", ddp_step)
    finally:
        dist.destroy_process_group()


def abort(r: Rank) -> None:
    """Rank 0 aborts its process group while the others wait in an all_reduce."""
    dist.barrier()
    if r.rank == 0:
        time.sleep(0.5)
        start = time.monotonic()
        dist.distributed_c10d._abort_process_group()
        r.rec.info["abort_seconds"] = time.monotonic() - start
        return
    shared.failing_all_reduce(r, torch.ones(64, device=r.device))


def mismatch(r: Rank) -> None:
    """Rank 0 passes --elements' first count of floats to an all_reduce, the others
    the second: every rank must fail naming the operation and a rank."""
    elements = [int(n) for n in r.args.elements.split(",")]
    dist.barrier()
    shared.failing_all_reduce(r, torch.ones(elements[0] if r.rank == 0 else elements[1],
                                            device=r.device))


def fsdp(rec: Recorder, rank: int, world: int, dev: torch.device, store: dist.Store) -> None:
    """FSDP2 (fully_shard) of a small MLP on the device: every Linear its own
    group plus the root, 3 Adam steps, each rank on its shard of every batch,
    against single-process CPU training on the whole batch (every rank runs
    it: it is small). The last layer has 3 output rows, sharded unevenly."""
    import copy

    import torch_fl
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    steps, batch = 3, 16
    # FSDP places unsharded parameters on the current device, as with CUDA.
    torch.accelerator.set_device_index(dev.index)
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                    torch.nn.ReLU(), torch.nn.Linear(32, 3))
    initial = {k: v.clone() for k, v in reference.state_dict().items()}
    model = copy.deepcopy(reference).to(dev)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    shards = {}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), f"{name} is a {type(p).__name__} after fully_shard, not a DTensor"
        local = p.to_local()
        shards[name] = [str(local.device), list(local.shape)]
    rec.info["shards"] = shards
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)
    per = batch // world
    shard = slice(rank * per, (rank + 1) * per)
    losses, ref_losses = [], []
    with torch_fl.op_stats_scope() as scope:
        for step in range(steps):
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(batch, 12, generator=g), torch.randn(batch, 3, generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[shard].to(dev)), y[shard].to(dev))
            loss.backward()
            opt.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)  # equal shards: the whole batch's loss
            losses.append(mean_loss.item())
    rec.info["cpu_fallbacks"] = sorted({f"{r.op} {r.dtype}" for r in scope.table.fallbacks()})
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(batch, 12, generator=g), torch.randn(batch, 3, generator=g)
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    full = {k: v.full_tensor().cpu() if isinstance(v, DTensor) else v.cpu() for k, v in model.state_dict().items()}
    errors = {k: (full[k] - v).abs().max().item() for k, v in reference.state_dict().items()}
    rec.info["steps"] = steps
    rec.info["losses"] = losses
    rec.info["reference_losses"] = ref_losses
    rec.info["param_errors"] = errors
    rec.info["max_param_error"] = max(errors.values())
    rec.info["changed_from_init"] = max((v - initial[k]).abs().max().item() for k, v in reference.state_dict().items())


def bench_peer(rec: Recorder, rank: int, world: int, dev: torch.device, store: dist.Store) -> None:
    """A rank other than 0 of bench/test_allreduce.py: runs the all_reduces
    rank 0 announces (backend 0 gloo, 1 the device; -1 ends) and times nothing."""
    while True:
        command = torch.zeros(3, dtype=torch.int64)
        dist.broadcast(command, src=0)
        backend, numel, calls = command.tolist()
        if backend < 0:
            return
        target = dev if backend == 1 else torch.device("cpu")
        t = torch.ones(numel, device=target)
        for _ in range(calls):
            dist.all_reduce(t)
            if target.type != "cpu":
                torch.accelerator.synchronize(target)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    shared.add_arguments(parser)
    parser.add_argument("--elements", default="16,32",
                        help="mismatch: rank 0's count, the others' count")


SCENARIOS: dict[str, harness.Scenario] = {
    **shared.SCENARIOS,  # ddp, timeout, dead_rank (and the conformance suite's collectives)
    "collectives": lambda r: collectives(r.rec, r.rank, r.world, r.device),
    "backend_names": lambda r: backend_names(r.rec, r.rank, r.world, r.device, r.args.store),
    "abort": abort,
    "mismatch": mismatch,
    "fsdp": lambda r: fsdp(r.rec, r.rank, r.world, r.device, r.store),
    "bench_peer": lambda r: bench_peer(r.rec, r.rank, r.world, r.device, r.store),
}
# The group is broken on purpose: the ranks leave without the collective teardown.
BROKEN = {"timeout", "dead_rank", "abort", "mismatch"}


if __name__ == "__main__":
    sys.exit(harness.main(SCENARIOS, broken=BROKEN, own_group={"backend_names"},
                          add_arguments=_add_arguments))
