"""Runs the suite in isolated worker processes and assembles the results.

Why our own workers rather than pytest-xdist: a certification must attribute a
process death to exactly the test that caused it, resume right after it, and cut
off a test that hangs inside the plugin (where no Python signal handler can run,
so the kill must come from outside). Each worker is a pytest process that loads
the plugin once, collects the suite, reports every test start and result through
a pipe, and runs the contiguous index ranges the runner hands it; neighbouring
tests share evaluations (the three checks of one op and dtype), and dynamic
chunks keep -j N workers busy until the end. When a worker dies, the test it had
started is CRASH (with the signal and the tail of its stderr), a fresh worker
takes over the rest of the chunk, and the run goes on. A test still running
`timeout + grace` seconds after it started is TIMEOUT and its worker is killed.
"""

from __future__ import annotations

import importlib.util
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torch_fl_conformance import kernel_watch, outcomes, protocol
from torch_fl_conformance.session import (
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    SUITE_DIR,
    evaluation_key,
    op_of,
)

MAX_RESTARTS = 200


def grace_s(timeout: float) -> float:
    """How long past its limit a test may run before the runner kills its worker:
    pytest-timeout gets this long to stop a test stuck in Python (between 5 and 20 s)."""
    return min(20.0, max(5.0, timeout))


class RunError(Exception):
    """The run could not start; the message says why and what to do."""


# What the suite's workers import beyond torch: pytest runs them, pytest-timeout
# stops a test stuck in Python, numpy and expecttest are what PyTorch's OpInfo
# database (torch.testing._internal) imports. torch-fl's wheel depends on them;
# an install without its dependencies (pip --no-deps, --target) may lack them.
SUITE_PACKAGES = {"pytest": "pytest", "pytest_timeout": "pytest-timeout", "numpy": "numpy",
                  "expecttest": "expecttest"}


def check_suite_packages() -> None:
    missing = [dist for module, dist in SUITE_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise RunError(
            f"the suite needs {', '.join(missing)}, which {sys.executable} cannot import; "
            f"install {'it' if len(missing) == 1 else 'them'} there (pip install {' '.join(missing)}) "
            f"and run again"
        )


@dataclass
class RunConfig:
    plugin: str
    level: str = "L3"
    report_dir: str = "conformance-report"
    expectations: str | None = None
    certify: bool = False
    jobs: int = 1
    seed: int = DEFAULT_SEED
    timeout: float = DEFAULT_TIMEOUT
    ops: str | None = None
    models: str | None = None
    samples: int | None = None
    pytest_args: list[str] = field(default_factory=list)
    progress: IO[str] = sys.stdout

    def worker_args(self) -> list[str]:
        args = [
            "--torchfl-plugin", self.plugin, "--torchfl-level", self.level,
            "--torchfl-seed", str(self.seed), "--torchfl-timeout", str(self.timeout),
        ]
        if self.samples is not None:
            args += ["--torchfl-samples", str(self.samples)]
        if self.expectations:
            args += ["--torchfl-expectations", os.path.abspath(self.expectations)]
        if self.certify:
            args.append("--torchfl-certify")
        if self.ops:
            args += ["--torchfl-ops", self.ops]
        if self.models:
            args += ["--torchfl-models", self.models]
        return args + list(self.pytest_args)


class Worker:
    def __init__(self, cfg: RunConfig, number: int, log_dir: Path) -> None:
        self.number = number
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()
        env = dict(os.environ)
        env["TORCH_FL_AUTOLOAD"] = "0"  # the worker registers the plugin it was asked for
        env["PYTHONFAULTHANDLER"] = "1"  # a crash leaves the Python stack in the log
        env.setdefault("TORCH_FL_FALLBACK", "silent")
        self.log_path = log_dir / f"worker-{number}.log"
        self.trace_path = str(log_dir / f"worker-{number}.trace")
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the worker
        cmd = [
            sys.executable, "-m", "pytest", str(SUITE_DIR),
            "-c", str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR),
            "-p", "no:cacheprovider", "-q", "--no-header",
            "--torchfl-worker", f"{cmd_r},{ev_w},{self.trace_path}",
            *_plugin_arg(), *cfg.worker_args(),
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, pass_fds=(cmd_r, ev_w), env=env)
        os.close(cmd_r)
        os.close(ev_w)
        self.commands = cmd_w
        self.events = ev_r
        self.reader = protocol.LineReader(ev_r)
        self.collected: protocol.Collected | None = None
        self.chunk: tuple[int, int] | None = None
        self.quitting = False
        self.current: tuple[str, float] | None = None
        self.op_stats: list[dict[str, Any]] = []

    @property
    def alive(self) -> bool:
        return not self.reader.closed

    def send(self, msg: protocol.Command) -> None:
        try:
            protocol.write(self.commands, msg)
        except (BrokenPipeError, OSError):
            pass

    def running_kernels(self) -> list[str]:
        """The plugin kernels this worker had entered and never seen finish."""
        return kernel_watch.running(kernel_watch.Trace.read(self.trace_path))

    def log_tail(self, lines: int = 25) -> str:
        try:
            self.log.flush()
            text = self.log_path.read_bytes()[-16000:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        for fd in (self.commands, self.events):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


def _plugin_arg() -> list[str]:
    """`-p` for our pytest plugin unless the installed entry point already loads it
    (loading it twice is an error)."""
    from importlib.metadata import entry_points

    if any(ep.value == "torch_fl_conformance.pytest_plugin"
           for ep in entry_points(group="pytest11")):
        return []
    return ["-p", "torch_fl_conformance.pytest_plugin"]


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "was killed"
    if code < 0:
        try:
            return f"died of signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with status {code}"


class Progress:
    """The progress line, and each MUST test that does not pass the moment it ends.
    SHOULD failures only count in the line: the summary at the end lists them, one
    line per requirement, after the blockers."""

    def __init__(self, out: IO[str], total: int,
                 strength: dict[str, str] | None = None) -> None:
        self.out, self.total = out, total
        self.strength = strength or {}
        self.counts: dict[str, int] = {}
        self.done = 0
        self.t0 = time.time()
        self.last = 0.0
        self.tty = hasattr(out, "isatty") and out.isatty()

    def result(self, res: dict[str, Any]) -> None:
        self.done += 1
        o = res["outcome"]
        self.counts[o] = self.counts.get(o, 0) + 1
        strength = self.strength.get(res["id"], "MUST")
        if o in (outcomes.FAIL, outcomes.ERROR, outcomes.CRASH, outcomes.TIMEOUT) and \
                (strength == "MUST" or o in (outcomes.CRASH, outcomes.TIMEOUT)):
            self._clear()
            msg = (res.get("message") or "").splitlines()[0][:160] if res.get("message") else ""
            print(f"{o:<8} {strength:<6} {res['id']}  {msg}", file=self.out, flush=True)
        self.tick()

    def tick(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < (0.5 if self.tty else 15.0):
            return
        self.last = now
        pct = 100.0 * self.done / max(1, self.total)
        el = int(now - self.t0)
        counts = " ".join(f"{k.lower()} {v}" for k, v in sorted(self.counts.items()))
        line = f"[{self.done:>6}/{self.total} {pct:5.1f}%] {el // 60:02d}:{el % 60:02d} {counts}"
        if self.tty:
            self.out.write("\r" + line[:160].ljust(100))
            self.out.flush()
        else:
            print(line, file=self.out, flush=True)

    def _clear(self) -> None:
        if self.tty:
            self.out.write("\r" + " " * 100 + "\r")

    def finish(self) -> None:
        self.tick(force=True)
        if self.tty:
            self.out.write("\n")


def chunks(ids: list[str], size: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of about `size` tests; tests that share one evaluation
    stay in one chunk, so no worker repeats another's op_db evaluation."""
    out: list[tuple[int, int]] = []
    start = 0
    while start < len(ids):
        stop = min(len(ids), start + size)
        while stop < len(ids) and evaluation_key(ids[stop]) == evaluation_key(ids[stop - 1]):
            stop += 1
        out.append((start, stop))
        start = stop
    return out


def run(cfg: RunConfig) -> dict[str, Any]:
    """Runs the suite; returns the report dictionary (also written to cfg.report_dir)."""
    check_suite_packages()
    report_dir = Path(cfg.report_dir)
    log_dir = report_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in (*log_dir.glob("worker-*.log"), *log_dir.glob("worker-*.trace")):
        old.unlink()
    started = time.time()
    jobs = max(1, cfg.jobs)
    sel = selectors.DefaultSelector()
    workers: list[Worker] = []
    next_number = [0]
    blocks: list[protocol.Block] = []  # sent to every worker, present and future

    def spawn() -> Worker:
        w = Worker(cfg, next_number[0], log_dir)
        next_number[0] += 1
        sel.register(w.events, selectors.EVENT_READ, w)
        workers.append(w)
        return w

    first = spawn()
    collected = _wait_collected(first, sel)
    ids = collected.ids
    meta = collected.meta
    print(_header_line(collected), file=cfg.progress, flush=True)
    for e in collected.stale:
        print(f"warning: stale expectation ({e['kind']}) matches no test: {e['id']}",
              file=cfg.progress, flush=True)
    for _ in range(min(jobs, max(1, len(ids))) - 1):
        spawn()

    results: dict[str, dict[str, Any]] = {}
    pending: deque[tuple[int, int]] = deque()
    pending.extend(chunks(ids, max(1, min(64, len(ids) // (jobs * 8) or 1))))
    progress = Progress(cfg.progress, len(ids),
                        {tid: m.get("strength", "MUST") for tid, m in meta.items()})
    restarts = 0
    op_stats_done: list[list[dict[str, Any]]] = []
    hard_limit = cfg.timeout + grace_s(cfg.timeout)

    def record(tid: str, outcome: str, t0: float, message: str, detail: str = "",
               data: dict[str, Any] | None = None) -> None:
        results[tid] = {"id": tid, "outcome": outcome, "duration_s": round(time.time() - t0, 3),
                        "message": message, "detail": detail, "data": data or {}}
        progress.result(results[tid])

    def block_after(tid: str, kernels: list[str], how: str) -> None:
        """A test did not come back: its operator's remaining tests, and every later
        entry into the kernel it was in (when the trace names exactly one), are BLOCKED."""
        op = op_of(tid) or ""
        kernel = kernels[0] if len(kernels) == 1 else ""
        if not op and not kernel:
            return
        what = " and ".join(x for x in (f"kernel {kernel}" if kernel else "",
                                       f"operator {op}" if op else "") if x)
        reason = f"not run: {tid} {how} ({what}); one hang costs one time limit"
        blk = protocol.Block(op=op, kernel=kernel, by=tid, reason=reason)
        blocks.append(blk)
        for other in workers:
            other.send(blk)

    def finish_worker(w: Worker, outcome: str | None, why: str) -> None:
        """A worker is gone: charge the running test, requeue the rest of its chunk."""
        nonlocal restarts
        sel.unregister(w.events)
        workers.remove(w)
        if w.op_stats:
            op_stats_done.append(w.op_stats)
        if w.chunk is not None:
            start, stop = w.chunk
            if w.current is not None and outcome is not None:
                tid, t0 = w.current
                kernels = w.running_kernels()
                data = {"kernels": {"running": kernels}} if kernels else {}
                if kernels:
                    why += f"; in the plugin's kernel(s) {', '.join(kernels)}"
                record(tid, outcome, t0, why, w.log_tail(), data)
                if outcome == outcomes.TIMEOUT:
                    block_after(tid, kernels, "did not return within its time limit")
                else:
                    shared = evaluation_key(tid)
                    for k in range(start, stop):
                        if ids[k] not in results and ids[k] != tid and \
                                evaluation_key(ids[k]) == shared != ids[k]:
                            record(ids[k], outcomes.CRASH, time.time(),
                                   f"not re-run: it shares its evaluation with {tid}, "
                                   "which crashed the worker", data=data)
            rest = [k for k in range(start, stop) if ids[k] not in results]
            if rest:
                pending.appendleft((rest[0], stop))
        w.close()
        if pending and restarts < MAX_RESTARTS:
            restarts += 1
            spawn()

    interrupted = False
    try:
        while workers:
            for w in workers:
                if w.chunk is None and w.collected is not None and w.alive and not w.quitting:
                    if pending:
                        w.chunk = pending.popleft()
                        w.send(protocol.Run(*w.chunk))
                    else:
                        w.send(protocol.Quit())
                        w.quitting = True
            for key, _ in sel.select(timeout=0.5):
                w = key.data
                for ev in w.reader.read():
                    if isinstance(ev, protocol.Collected):
                        if ev.sha != collected.sha:
                            raise RunError(
                                "workers collected different test lists; the suite's collection "
                                "must be deterministic (check --torchfl-ops/--torchfl-models)"
                            )
                        w.collected = ev
                        for blk in blocks:
                            w.send(blk)
                    elif isinstance(ev, protocol.Started):
                        w.current = (ev.id, ev.t)
                    elif isinstance(ev, protocol.Finished):
                        results[ev.id] = ev.result()
                        w.current = None
                        progress.result(results[ev.id])
                    elif isinstance(ev, protocol.ChunkDone):
                        w.chunk = None
                        w.op_stats = ev.op_stats
                if not w.alive:
                    code = w.proc.wait()
                    if w.quitting:
                        if w.op_stats:
                            op_stats_done.append(w.op_stats)
                        sel.unregister(w.events)
                        workers.remove(w)
                        w.close()
                        continue
                    why = f"the worker process {_describe_exit(code)} during this test"
                    finish_worker(w, outcomes.CRASH, why)
            now = time.time()
            for w in list(workers):  # noqa: PERF101 - finish_worker mutates it
                if w.current is not None and now - w.current[1] > hard_limit:
                    w.proc.kill()
                    w.proc.wait()
                    why = (f"still running {hard_limit:.0f} s after it started (time limit "
                           f"{cfg.timeout:g} s, and it did not respond to the soft timeout); "
                           "the worker was killed")
                    finish_worker(w, outcomes.TIMEOUT, why)
            progress.tick()
    except KeyboardInterrupt:
        # Ctrl-C: stop the workers and still write what was measured; the tests
        # not finished are NOT_RUN and the report says the run was interrupted.
        interrupted = True
        for w in list(workers):  # noqa: PERF101 - copy: we close them
            w.proc.kill()
            w.proc.wait()
            w.close()
        print("\ninterrupted: writing a partial report", file=cfg.progress, flush=True)
    progress.finish()

    tests = []
    for tid in ids:
        res = results.get(tid) or {"id": tid, "outcome": outcomes.NOT_RUN, "duration_s": 0.0,
                                   "message": "never started: the run was interrupted"
                                   if interrupted else "never started: the run stopped "
                                   "before it",
                                   "detail": "", "data": {}}
        tests.append({**meta[tid], **res, "id": tid})
    from torch_fl_conformance.report.build import build_report, merge_op_stats
    from torch_fl_conformance.report.write import render_console, write_all

    report = build_report(
        target=collected.target, host=collected.host, options=collected.options,
        tests=tests, op_stats=merge_op_stats(op_stats_done), stale=collected.stale,
        started=started, finished=time.time(), deselected=collected.deselected,
        workers=jobs, restarts=restarts,
    )
    report["files"] = write_all(report, str(report_dir))
    print(render_console(report), file=cfg.progress, flush=True)
    return report


def _header_line(c: protocol.Collected) -> str:
    t, h, o = c.target, c.host, c.options
    return (
        f"torchfl-conformance {h['suite']}: {t['plugin_name']} {t['version']} by {t['vendor']} "
        f"as '{t['device_type']}' (ABI {t['abi']}, {t['device_count']} device(s), capabilities: "
        f"{', '.join(t['capabilities']) or 'none'}); torch {h['torch']}, torch-fl "
        f"{h['torch_fl']}; level <= {o['level']}, seed {o['seed']}, "
        f"{len(c.ids)} tests"
    )


def _wait_collected(w: Worker, sel: selectors.BaseSelector) -> protocol.Collected:
    while True:
        for key, _ in sel.select(timeout=1.0):
            for ev in key.data.reader.read():
                if isinstance(ev, protocol.Collected):
                    w.collected = ev
                    return ev
        if not w.alive or w.proc.poll() is not None:
            w.proc.wait()
            tail = w.log_tail(40)
            raise RunError(_explain_startup_failure(tail))


def _explain_startup_failure(tail: str) -> str:
    lines = [ln for ln in tail.splitlines() if ln.strip()]
    usage = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR: ")]
    if usage:
        i = lines.index(next(ln for ln in lines if ln.startswith("ERROR: ")))
        return "\n".join([usage[0], *lines[i + 1:]])
    return "the suite could not start:\n" + "\n".join(lines[-40:])
