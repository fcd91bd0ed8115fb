"""L3 collectives: the plugin's torch.distributed backend on ranks spawned on loopback.

Each rank is a fresh interpreter running this file as a script: it registers
the plugin under test by its library path, joins a ``"cpu:gloo,<device>:tfl"``
group with ``device_id=`` (rendezvous through a FileStore) and records named
checks as JSON. One set of ranks per world size (2 and 4) serves every test of
the module.

- **TFL-COLL-001** ``test_collective[<name>]``: all_reduce with every reduce op
  on the dtypes the plugin advertises (float32 and int64 always; float64,
  float16, bfloat16 with their capabilities), counts below the world size and
  uneven ones, async work + wait; all_gather and reduce_scatter in list form
  (uneven sizes) and into/from one tensor (out of place); broadcast from the
  first and the last rank; all_to_all with even and uneven splits; blocking
  send/recv and an isend/irecv ring; barrier, blocking and async. Expected
  values are computed on the host from small integers (exact in every dtype).
- **TFL-COLL-002** ``test_ddp_parity``: the zoo's LSTM language model trained
  for three steps with DistributedDataParallel on 2 ranks, each on half of
  every batch, against single-process CPU training on the whole batch (the
  dropout masks recorded on the device are replayed on the CPU): losses within
  1e-3 relative, parameters within 1e-3 absolute.
- **TFL-COLL-003** ``test_timeout_is_an_error``: on 2 ranks with a 3 s group
  timeout, rank 0 enters an all_reduce that rank 1 never joins; it must raise a
  torch.distributed error naming the operation and rank 1 after 3 s (not
  before, and within 10 s more). ``test_dead_rank_is_an_error``: rank 0 is
  killed once the communicator is up while rank 1 enters an all_reduce; with a
  60 s group timeout rank 1 must raise such an error naming rank 0 within
  20 s. The ranks of both are bounded by subprocess time limits, so a hang
  fails the test instead of stalling the run.

A rank that fails to start, crashes or outlives its time limit fails the tests
that needed it, with its output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "barrier"]
WORLDS = (2, 4)
RANK_TIME_LIMIT = 240.0
_runs: dict[tuple[str, int], list[dict[str, Any]]] = {}


# ---------------------------------------------------------------------------
# The tests (run by pytest)
# ---------------------------------------------------------------------------


def _dtypes(target: Any) -> list[str]:
    extra = [d for d, cap in (("float64", "fp64"), ("float16", "fp16"), ("bfloat16", "bf16"))
             if target.has(cap)]
    return ["float32", "int64", *extra]


def _spawn(target: Any, scenario: str, world: int, workdir: Path, time_limit: float = RANK_TIME_LIMIT,
           group_timeout: float = 120.0) -> list[dict[str, Any]]:
    """Runs `scenario` on `world` ranks; one dict per rank: returncode
    (None: killed after `time_limit` seconds), checks, info, output."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the ranks register the plugin under test themselves
    procs = []
    for rank in range(world):
        cmd = [sys.executable, __file__, scenario, "--rank", str(rank), "--world", str(world),
               "--store", str(workdir / "store"), "--out", str(workdir / f"rank{rank}.json"),
               "--device", target.device_type, "--library", target.library,
               "--dtypes", ",".join(_dtypes(target)), "--timeout", str(group_timeout)]
        log = open(workdir / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        procs.append((rank, log, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True)))
    deadline = time.monotonic() + time_limit
    results = []
    for rank, log, proc in procs:
        try:
            returncode: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = None
        log.close()
        out = workdir / f"rank{rank}.json"
        data = json.loads(out.read_text()) if out.exists() else {"checks": {}, "info": {}}
        results.append({"rank": rank, "returncode": returncode, **data,
                        "output": (workdir / f"rank{rank}.log").read_text(errors="replace")[-3000:]})
    return results


def _ranks(target: Any, scenario: str, world: int, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    key = (scenario, world)
    if key not in _runs:
        _runs[key] = _spawn(target, scenario, world, tmp_path_factory.mktemp(f"{scenario}{world}"))
    for r in _runs[key]:
        if r["returncode"] != 0:
            status = "was killed after the time limit" if r["returncode"] is None else f"exited with {r['returncode']}"
            pytest.fail(f"{scenario}, world {world}: rank {r['rank']} {status}:\n{r['output']}", pytrace=False)
    return _runs[key]


@pytest.mark.requirement("TFL-COLL-001")
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective(collective: str, target: Any, tmp_path_factory: pytest.TempPathFactory,
                    record: Callable[[str, Any], None]) -> None:
    failures, ran = [], 0
    for world in WORLDS:
        for r in _ranks(target, "collectives", world, tmp_path_factory):
            mine = {k: v for k, v in r["checks"].items() if k.split("[")[0] == collective}
            if not mine:
                failures.append(f"world {world}, rank {r['rank']}: no {collective} check ran")
            ran += len(mine)
            failures += [f"world {world}, rank {r['rank']}, {k}: {v}" for k, v in mine.items() if v != "ok"]
    record("checks", ran)
    assert not failures, f"{len(failures)} of {ran} checks failed:\n" + "\n".join(failures[:10])


@pytest.mark.requirement("TFL-COLL-002")
def test_ddp_parity(target: Any, tmp_path_factory: pytest.TempPathFactory,
                    record: Callable[[str, Any], None]) -> None:
    results = _ranks(target, "ddp", 2, tmp_path_factory)
    failed = {f"rank {r['rank']}": r["checks"].get("ddp", "not run") for r in results}
    assert all(v == "ok" for v in failed.values()), failed
    info = results[0]["info"]
    record("losses", info["losses"])
    record("max_param_error", info["max_param_error"])
    assert results[1]["info"]["digest"] == info["digest"], "the ranks ended with different parameters"
    for step, (loss, ref) in enumerate(zip(info["losses"], info["reference_losses"], strict=True)):
        assert abs(loss - ref) <= 1e-3 * abs(ref), f"step {step}: DDP loss {loss}, single-process loss {ref}"
    assert info["changed_from_init"] > 1e-4, f"training did not move the parameters: {info['changed_from_init']}"
    assert info["max_param_error"] <= 1e-3, (
        f"parameters after {len(info['losses'])} steps differ from single-process training by up to "
        f"{info['max_param_error']:.2e} (allowed 1e-3)")


def _failed_collective(results: list[dict[str, Any]], rank: int, case: str) -> dict[str, Any]:
    """What rank `rank` recorded about the all_reduce meant to fail; fails
    the test if the rank hung, crashed or returned normally."""
    r = results[rank]
    if r["returncode"] is None:
        pytest.fail(f"{case}: rank {rank} hung (killed after the time limit):\n{r['output']}", pytrace=False)
    if r["returncode"] != 0 or "seconds" not in r["info"]:
        pytest.fail(f"{case}: rank {rank} exited with {r['returncode']} before reporting:\n{r['output']}",
                    pytrace=False)
    info = r["info"]
    assert "error" in info, f"{case}: rank {rank}'s all_reduce returned normally after {info['seconds']:.1f} s"
    assert info["dist_error"], (
        f"{case}: rank {rank} raised {info['error_type']}, not a torch.distributed error (DistError): "
        f"{info['error']}")
    assert "all_reduce" in info["error"], f"{case}: the error does not name the operation: {info['error']}"
    return info


def _names_rank(message: str, rank: int) -> bool:
    return re.search(rf"\brank\W{{0,3}}{rank}\b", message, re.IGNORECASE) is not None


@pytest.mark.requirement("TFL-COLL-003")
def test_timeout_is_an_error(target: Any, tmp_path_factory: pytest.TempPathFactory,
                             record: Callable[[str, Any], None]) -> None:
    group_timeout = 3.0
    results = _spawn(target, "timeout", 2, tmp_path_factory.mktemp("timeout2"), time_limit=90,
                     group_timeout=group_timeout)
    if results[1]["returncode"] != 0:
        pytest.fail(f"rank 1 (waiting on the store) exited with {results[1]['returncode']}:\n"
                    f"{results[1]['output']}", pytrace=False)
    info = _failed_collective(results, 0, "all_reduce rank 1 never joins")
    record("seconds", round(info["seconds"], 2))
    record("error", info["error"][:500])
    assert info["seconds"] >= 0.9 * group_timeout, (
        f"the all_reduce failed after {info['seconds']:.2f} s, before the {group_timeout:g} s group timeout: "
        f"{info['error']}")
    assert info["seconds"] <= group_timeout + 10, (
        f"the all_reduce failed only after {info['seconds']:.1f} s (group timeout {group_timeout:g} s)")
    assert _names_rank(info["error"], 1), f"the error does not name rank 1, which never joined: {info['error']}"


@pytest.mark.requirement("TFL-COLL-003")
def test_dead_rank_is_an_error(target: Any, tmp_path_factory: pytest.TempPathFactory,
                               record: Callable[[str, Any], None]) -> None:
    # Rank 0 dies: in most libraries it also hosts the communicator's rendezvous.
    group_timeout = 60.0
    results = _spawn(target, "dead_rank", 2, tmp_path_factory.mktemp("dead_rank2"), time_limit=group_timeout + 30,
                     group_timeout=group_timeout)
    assert results[0]["returncode"] not in (0, None), (
        f"rank 0 was to kill itself but exited with {results[0]['returncode']}:\n{results[0]['output']}")
    info = _failed_collective(results, 1, "all_reduce with rank 0 dead")
    record("seconds", round(info["seconds"], 2))
    record("error", info["error"][:500])
    assert info["seconds"] <= 20, (
        f"rank 1 took {info['seconds']:.1f} s to fail (group timeout {group_timeout:g} s): a dead peer must be "
        "noticed, not waited out")
    assert _names_rank(info["error"], 0), f"the error does not name rank 0, which died: {info['error']}"


# ---------------------------------------------------------------------------
# The ranks (this file run as a script)
# ---------------------------------------------------------------------------


def _rank_main() -> int:
    from datetime import timedelta

    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["collectives", "ddp", "timeout", "dead_rank"])
    for opt in ("--store", "--out", "--device", "--library", "--dtypes"):
        parser.add_argument(opt, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120.0, help="the group timeout in seconds")
    args = parser.parse_args()
    checks: dict[str, str] = {}
    info: dict[str, Any] = {}

    def write() -> None:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"checks": checks, "info": info}, f)
        os.replace(tmp, args.out)

    def check(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded for the test to report
            checks[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"

    import torch
    import torch.distributed as dist
    import torch_fl

    torch_fl.register_device_plugin(args.device, plugin_path=args.library)
    dev = torch.device(args.device, args.rank % torch.accelerator.device_count())
    store = dist.FileStore(args.store, args.world)
    dist.init_process_group(f"cpu:gloo,{args.device}:tfl", store=store,
                            rank=args.rank, world_size=args.world, timeout=timedelta(seconds=args.timeout),
                            device_id=dev)
    try:
        if args.scenario == "collectives":
            _collectives(check, args.rank, args.world, dev, args.dtypes.split(","))
        elif args.scenario == "ddp":
            check("ddp", lambda: _ddp(info, args.rank, args.world, dev))
        else:
            _failure(args.scenario, info, args.rank, dev, store)
    finally:
        write()
    if args.scenario in ("timeout", "dead_rank"):
        # The group is broken on purpose: leave without the collective teardown.
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()
    return 0


def _failure(scenario: str, info: dict[str, Any], rank: int, dev: Any, store: Any) -> None:
    """timeout: rank 0 enters an all_reduce that rank 1 never joins (rank 1
    waits on the store meanwhile, alive). dead_rank: rank 0 kills itself once
    the communicator is up; rank 1 enters an all_reduce."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)  # the communicator is up on both ranks
    torch.accelerator.synchronize(dev)
    if scenario == "timeout" and rank == 1:
        store.wait(["rank0_done"], timedelta(seconds=120))
        return
    if scenario == "dead_rank" and rank == 0:
        time.sleep(0.5)  # rank 1 is in its all_reduce by now
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        torch.accelerator.synchronize(dev)
    except Exception as exc:  # noqa: BLE001 - recorded for the test to judge
        info["error_type"] = type(exc).__name__
        info["dist_error"] = isinstance(exc, dist.DistError)
        info["error"] = str(exc)
    info["seconds"] = time.monotonic() - start
    if scenario == "timeout":
        store.set("rank0_done", "1")


def _values(rank: int, n: int, dtype: Any, op: str = "sum", offset: int = 0) -> Any:
    """Rank `rank`'s input: small integers, exact in every dtype (products stay below 2^world)."""
    import torch

    i = torch.arange(offset, offset + n, dtype=torch.int64)
    if op == "product":
        return ((i + rank) % 2 + 1).to(dtype)
    return ((i + 3 * rank) % 5 + 1).to(dtype)


def _expect_equal(actual: Any, expected: Any, what: str) -> None:
    import torch

    actual = actual.cpu()
    expected = expected.to(actual.dtype)
    if actual.dtype.is_floating_point:
        ok = torch.allclose(actual.double(), expected.double(), rtol=1e-2 if actual.element_size() == 2 else 1e-6,
                            atol=0)
    else:
        ok = torch.equal(actual, expected)
    if not ok:
        bad = (actual != expected).nonzero()
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {bad[0].tolist() if len(bad) else []}: "
                             f"actual {actual.flatten()[:6].tolist()} expected {expected.flatten()[:6].tolist()}")


def _collectives(check: Callable[[str, Callable[[], None]], None], rank: int, world: int, dev: Any,
                 dtypes: list[str]) -> None:
    import torch
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}

    def expected(n: int, dtype: Any, op: str) -> Any:
        stack = torch.stack([_values(r, n, dtype, op).double() for r in range(world)])
        out = {"sum": stack.sum(0), "product": stack.prod(0), "min": stack.amin(0), "max": stack.amax(0),
               "avg": stack.sum(0) / world}[op]
        return out.to(dtype)

    for dt in dtypes:
        dtype = getattr(torch, dt)
        for op, reduce_op in ops.items():
            if op == "avg" and not dtype.is_floating_point:
                continue

            def all_reduce(op: str = op, reduce_op: Any = reduce_op, dtype: Any = dtype) -> None:
                for n in (world - 1, 70001):  # fewer elements than ranks; uneven chunks
                    t = _values(rank, n, dtype, op).to(dev)
                    dist.all_reduce(t, op=reduce_op)
                    _expect_equal(t, expected(n, dtype, op), f"all_reduce {op} {dtype} of {n}")

            check(f"all_reduce[{op}-{dt}]", all_reduce)

    def all_reduce_async() -> None:
        ts = [_values(rank, 1000 * (k + 1), torch.float32).to(dev) for k in range(3)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in reversed(works):
            w.wait()
            assert w.is_completed(), "Work.is_completed() is False after wait()"
        for k, t in enumerate(ts):
            _expect_equal(t, expected(1000 * (k + 1), torch.float32, "sum"), f"async all_reduce #{k}")

    check("all_reduce[async]", all_reduce_async)

    def all_gather_list() -> None:
        inp = _values(rank, rank + 3, torch.float32).to(dev)  # uneven sizes
        outs = [torch.empty(r + 3, device=dev) for r in range(world)]
        dist.all_gather(outs, inp)
        for r in range(world):
            _expect_equal(outs[r], _values(r, r + 3, torch.float32), f"all_gather slot {r}")

    check("all_gather[list-uneven]", all_gather_list)

    def all_gather_tensor() -> None:
        inp = _values(rank, 1001, torch.float32).to(dev)
        out = torch.empty(world * 1001, device=dev)
        dist.all_gather_into_tensor(out, inp)
        _expect_equal(out, torch.cat([_values(r, 1001, torch.float32) for r in range(world)]),
                      "all_gather_into_tensor")

    check("all_gather[into-tensor]", all_gather_tensor)

    def reduce_scatter_list() -> None:
        sizes = [p + 2 for p in range(world)]
        ins = [_values(rank, sizes[p], torch.float32, offset=10 * p).to(dev) for p in range(world)]
        out = torch.empty(sizes[rank], device=dev)
        dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
        exp = torch.stack([_values(r, sizes[rank], torch.float32, offset=10 * rank) for r in range(world)]).amax(0)
        _expect_equal(out, exp, "uneven reduce_scatter max")

    check("reduce_scatter[list-uneven]", reduce_scatter_list)

    def reduce_scatter_tensor() -> None:
        n = 50001
        inp = _values(rank, n * world, torch.float32).to(dev)
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, inp)
        full = torch.stack([_values(r, n * world, torch.float32) for r in range(world)]).sum(0)
        _expect_equal(out, full[rank * n:(rank + 1) * n], "reduce_scatter_tensor sum")

    check("reduce_scatter[from-tensor]", reduce_scatter_tensor)

    def broadcast() -> None:
        for root in sorted({0, world - 1}):
            for n in (5, 300001):
                t = (_values(root, n, torch.int64) if rank == root else torch.full((n,), -1)).to(dev)
                dist.broadcast(t, src=root)
                _expect_equal(t, _values(root, n, torch.int64), f"broadcast from rank {root}, {n} elements")

    check("broadcast[roots]", broadcast)

    def all_to_all_even() -> None:
        n = 6
        inp = torch.arange(world * n, dtype=torch.float32).add(100 * rank).to(dev)
        out = torch.empty(world * n, device=dev)
        dist.all_to_all_single(out, inp)
        exp = torch.cat([torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32) + 100 * r for r in range(world)])
        _expect_equal(out, exp, "all_to_all_single")

    check("all_to_all[even]", all_to_all_even)

    def all_to_all_splits() -> None:
        send = [(rank + p) % 3 + 1 for p in range(world)]
        recv = [(p + rank) % 3 + 1 for p in range(world)]
        inp = torch.cat([torch.full((send[p], 4), float(1000 * rank + p)) for p in range(world)]).to(dev)
        out = torch.empty(sum(recv), 4, device=dev)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        exp = torch.cat([torch.full((recv[p], 4), float(1000 * p + rank)) for p in range(world)])
        _expect_equal(out, exp, "all_to_all_single with uneven splits")

    check("all_to_all[splits]", all_to_all_splits)

    def send_recv() -> None:
        peer = rank ^ 1
        if peer >= world:
            return
        mine = _values(rank, 200003, torch.float32).to(dev)
        got = torch.empty(200003, device=dev)
        if rank % 2 == 0:
            dist.send(mine, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(mine, peer)
        _expect_equal(got, _values(peer, 200003, torch.float32), "send/recv")

    check("send_recv[blocking]", send_recv)

    def isend_irecv() -> None:
        n = 1 << 20
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        mine = _values(rank, n, torch.float32).to(dev)
        got = torch.empty(n, device=dev)
        for w in [dist.isend(mine, nxt), dist.irecv(got, prv)]:
            w.wait()
        _expect_equal(got, _values(prv, n, torch.float32), "isend/irecv ring")

    check("send_recv[ring]", isend_irecv)

    def barrier() -> None:
        for _ in range(3):
            dist.barrier()
        dist.barrier(async_op=True).wait()

    check("barrier[blocking-async]", barrier)


def _ddp(info: dict[str, Any], rank: int, world: int, dev: Any) -> None:
    import copy

    import torch
    import torch.distributed as dist
    from torch_fl_conformance.zoo import get_model
    from torch_fl_conformance.zoo.dropout import DropoutTape, dropout_tape

    spec = get_model("lstm_lm")
    torch.manual_seed(0)
    reference = spec.build()
    initial = [p.detach().clone() for p in reference.parameters()]
    model = copy.deepcopy(reference).to(dev)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = spec.make_optimizer(ddp_model.parameters(), dev.type)
    ref_opt = spec.make_optimizer(reference.parameters(), "cpu")
    losses, ref_losses = [], []
    for step in range(3):
        inputs, target = spec.make_batch(step)
        per = target.shape[0] // world
        shard = slice(rank * per, (rank + 1) * per)
        tape = DropoutTape("record")
        opt.zero_grad()
        with dropout_tape(tape):
            loss = spec.loss_fn(ddp_model, tuple(x[shard].to(dev) for x in inputs), target[shard].to(dev))
        loss.backward()
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, op=dist.ReduceOp.AVG)  # equal shards: the whole batch's loss
        losses.append(mean_loss.item())
        masks = []
        for m in tape.masks:  # CPU tensors, through gloo
            parts = [torch.empty_like(m, dtype=torch.uint8) for _ in range(world)]
            dist.all_gather(parts, m.to(torch.uint8))
            masks.append(torch.cat(parts).to(m.dtype))
        if rank == 0:
            ref_opt.zero_grad()
            with dropout_tape(DropoutTape("replay", masks)):
                ref_loss = spec.loss_fn(reference, inputs, target)
            ref_loss.backward()
            ref_opt.step()
            ref_losses.append(ref_loss.item())
    info["losses"] = losses
    flat = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    info["digest"] = [flat.double().sum().item(), flat.double().abs().sum().item()]
    if rank == 0:
        info["reference_losses"] = ref_losses
        info["max_param_error"] = max((p.detach().cpu() - r.detach()).abs().max().item()
                                      for p, r in zip(model.parameters(), reference.parameters(), strict=True))
        info["changed_from_init"] = max((p.detach() - q).abs().max().item()
                                        for p, q in zip(reference.parameters(), initial, strict=True))


if __name__ == "__main__":
    sys.exit(_rank_main())
