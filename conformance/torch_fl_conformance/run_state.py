"""State of one conformance session inside pytest: the plugin under test, the
options, expectations, and the results as they come in. Registered as a pytest
plugin only when the suite is active."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from torch_fl_conformance import kernel_watch, outcomes, protocol
from torch_fl_conformance.expectations import Expectations
from torch_fl_conformance.requirements import LEVELS, load_requirements
from torch_fl_conformance.session import (
    SUITE_DIR,
    is_suite_item,
    item_id,
    op_of,
    opinfo_case_of,
    per_test_seed,
)
from torch_fl_conformance.target import Target, host_info, load_target

# Levels whose tests run under the kernel watch (L3 compiles graphs, and a dispatch
# mode would change what Dynamo traces; its ranks are separate processes anyway).
WATCHED_LEVELS = ("L0", "L1", "L2")


@dataclass
class TestMeta:
    id: str
    requirement: str
    strength: str
    level: str
    area: str
    capability: str
    expectation: dict[str, str] | None = None


@dataclass
class RunState:
    config: pytest.Config
    target: Target
    seed: int
    timeout: float
    level: str
    samples: int | None
    ops: list[str] | None
    models: list[str] | None
    certify: bool
    expectations: Expectations
    report_dir: str | None
    worker_fds: tuple[int, int] | None
    trace_path: str | None = None
    meta: dict[str, TestMeta] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    deselected: int = 0
    # op_db operator -> why its tests are not started (a test hung in it)
    blocked_ops: dict[str, str] = field(default_factory=dict)
    # test id -> why it is BLOCKED (set while it runs, read by logreport)
    _blocked: dict[str, str] = field(default_factory=dict)
    _kernels: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    _watch: kernel_watch.Watch | None = None
    _commands: protocol.LineReader | None = None
    _queued: list[Any] = field(default_factory=list)
    _runner_pid: int = 0

    # -- construction ------------------------------------------------------
    @classmethod
    def from_config(cls, config: pytest.Config) -> RunState:
        from torch_fl_conformance.expectations import ExpectationError
        from torch_fl_conformance.target import NoPluginChosen

        worker = config.getoption("--torchfl-worker")
        plugin = config.getoption("--torchfl-plugin")
        import torch_fl

        try:
            target = load_target(plugin)
        except NoPluginChosen as exc:
            raise pytest.UsageError(str(exc)) from None
        except torch_fl.PluginError as exc:
            raise pytest.UsageError(f"the plugin {plugin!r} cannot be loaded: "
                                    f"{type(exc).__name__}: {exc}") from None

        # The sweeps classify fallbacks through op_stats; warnings would only be noise.
        torch_fl.set_fallback_mode("silent")
        path = config.getoption("--torchfl-expectations")
        try:
            exp = Expectations.load(path) if path else Expectations()
        except ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None

        def names(opt: str) -> list[str] | None:
            raw = config.getoption(opt)
            return [n.strip() for n in raw.split(",") if n.strip()] if raw else None

        fds, trace = None, None
        if worker:
            r, w, trace = worker.split(",", 2)
            fds = (int(r), int(w))
        return cls(
            config=config,
            target=target,
            seed=config.getoption("--torchfl-seed"),
            timeout=config.getoption("--torchfl-timeout"),
            level=config.getoption("--torchfl-level"),
            samples=(None if config.getoption("--torchfl-samples") is None
                     else max(1, config.getoption("--torchfl-samples"))),
            ops=names("--torchfl-ops"),
            models=names("--torchfl-models"),
            certify=config.getoption("--torchfl-certify"),
            expectations=exp,
            report_dir=config.getoption("--torchfl-report"),
            worker_fds=fds,
            trace_path=trace,
        )

    def options(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "seed": self.seed,
            "timeout_s": self.timeout,
            "samples": self.samples,
            "ops": self.ops,
            "models": self.models,
            "certify": self.certify,
            "expectations": self.expectations.source or None,
        }

    # -- collection --------------------------------------------------------
    def modify_items(self, items: list[pytest.Item]) -> None:
        reqs = load_requirements()
        problems = []
        for item in items:
            if not is_suite_item(item):
                continue
            tid = item_id(item)
            marks = list(item.iter_markers("requirement"))
            if len(marks) != 1 or len(marks[0].args) != 1:
                problems.append(f"{tid}: needs exactly one @pytest.mark.requirement('TFL-...')")
                continue
            rid = marks[0].args[0]
            if rid not in reqs:
                problems.append(f"{tid}: requirement {rid!r} is not in requirements.toml")
                continue
            r = reqs[rid]
            if r.retired:
                problems.append(f"{tid}: requirement {rid} is retired")
                continue
            cap = r.capability
            cap_mark = item.get_closest_marker("capability")
            if cap_mark is not None:
                cap = cap_mark.args[0]
            area = item.path.stem.removeprefix("test_")
            folder = Path(item.path).resolve().relative_to(SUITE_DIR).parts[0]
            if folder != r.level:
                problems.append(f"{tid}: lives in {folder}/ but checks {rid}, a {r.level} "
                                "requirement")
                continue
            self.meta[tid] = TestMeta(tid, rid, r.strength, r.level, area, cap)
        if problems:
            raise pytest.UsageError(
                "conformance suite error (a bug in the suite, not in the plugin):\n  "
                + "\n  ".join(problems)
            )
        max_level = LEVELS.index(self.level)
        keep, drop = [], []
        refused = []
        for item in items:
            if not is_suite_item(item):
                keep.append(item)
                continue
            m = self.meta[item_id(item)]
            exp = self.expectations.match(m.id)  # against every test, so staleness is exact
            if LEVELS.index(m.level) > max_level:
                drop.append(item)
                continue
            keep.append(item)
            if exp is not None:
                m.expectation = {"kind": exp.kind, "id": exp.id, "reason": exp.reason}
                if self.certify and m.strength == "MUST":
                    refused.append(f"{m.id} ({m.requirement} MUST): {exp.kind} '{exp.id}'")
                if exp.kind == "skip":
                    item.add_marker(pytest.mark.skip(reason=f"expectation file: {exp.reason}"))
                else:
                    item.add_marker(pytest.mark.xfail(reason=exp.reason, strict=False))
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(self.timeout, method="signal"))
        if refused:
            raise pytest.UsageError(
                "--certify refuses expected failures or skips of MUST requirements; a "
                "certification must show them failing. Remove these entries or run without "
                "--certify:\n  " + "\n  ".join(refused[:50])
                + (f"\n  ... and {len(refused) - 50} more" if len(refused) > 50 else "")
            )
        if drop:
            self.deselected = len(drop)
            self.config.hook.pytest_deselected(items=drop)
            items[:] = keep

    def stale_expectations(self) -> list[dict[str, str]]:
        return [{"kind": e.kind, "id": e.id, "reason": e.reason} for e in self.expectations.stale()]

    # -- hooks -------------------------------------------------------------
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        t = self.target
        return [
            (f"torchfl-conformance: {t.plugin_name} {t.version} by {t.vendor} as '{t.device_type}'"
            f" (ABI {t.abi}, {t.device_count} device(s)), level <= {self.level}, seed {self.seed}"),
            f"  capabilities: {', '.join(t.capabilities) or 'none'}",
            f"  library: {t.library} sha256 {t.library_sha256[:16]}...",
        ]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not is_suite_item(item):
            return
        m = self.meta[item_id(item)]
        self._take_commands()
        op = op_of(m.id)
        if op is not None and op in self.blocked_ops:
            self._blocked[m.id] = self.blocked_ops[op]
            pytest.skip(self.blocked_ops[op])
        if m.capability and not self.target.has(m.capability):
            pytest.skip(f"{m.capability} not advertised by {self.target.plugin_name}")
        import torch

        torch.manual_seed(per_test_seed(self.seed, m.id))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        if not is_suite_item(item):
            return (yield)
        m = self.meta[item_id(item)]
        with self._watched(m), self._kernel_scope(m):
            return (yield)

    @contextlib.contextmanager
    def _watched(self, m: TestMeta) -> Iterator[None]:
        """The kernel watch around a test (the sweep watches its own device runs)."""
        whole = self._watch is not None and m.level in WATCHED_LEVELS \
            and opinfo_case_of(m.id) is None
        try:
            with self._watch.mode() if whole else contextlib.nullcontext():
                yield
        except kernel_watch.KernelBlocked as exc:
            self._blocked[m.id] = exc.reason
            pytest.skip(exc.reason)

    @contextlib.contextmanager
    def _kernel_scope(self, m: TestMeta) -> Iterator[None]:
        """The kernels a test ran, kept for its report entry should it fail (the
        sweep records its own, per failing sample)."""
        if opinfo_case_of(m.id) is not None:
            yield
            return
        import torch_fl

        scope = None
        try:
            with torch_fl.op_stats_scope() as scope:
                yield
        finally:  # the table is there once the scope closed, also after a failure
            if scope is not None:
                self._kernels[m.id] = kernel_watch.kernels_of(scope.table)

    def _take_commands(self) -> None:
        """Block commands the runner sent while this worker was busy. A worker whose
        runner is gone (killed) stops instead of running its chunk to the end."""
        if self._commands is None:
            return
        if os.getppid() != self._runner_pid:
            os._exit(3)
        for cmd in self._commands.poll():
            self._apply(cmd)

    def _apply(self, cmd: Any) -> None:
        if isinstance(cmd, protocol.Block):
            if cmd.op:
                self.blocked_ops.setdefault(cmd.op, cmd.reason)
            if cmd.kernel and self._watch is not None:
                self._watch.block(cmd.kernel, cmd.reason)
        else:
            self._queued.append(cmd)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        tid = self._tid_of(nodeid)
        if tid is None:
            return
        self.results[tid] = {"id": tid, "outcome": outcomes.PASS, "duration_s": 0.0,
                             "message": "", "detail": "", "data": {}}
        self._emit(protocol.Started(tid, time.time()))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tid = self._tid_of(report.nodeid)
        if tid is None or tid not in self.results:
            return
        res = self.results[tid]
        res["duration_s"] += report.duration
        wasxfail = hasattr(report, "wasxfail")
        message, detail = _messages(report)
        phase = outcomes.classify_report(report.when, report.outcome, wasxfail, message)
        if tid in self._blocked and report.when != "teardown":
            phase, message, detail = outcomes.BLOCKED, self._blocked[tid], ""
        if report.when == "setup" and report.passed:
            return
        if report.when == "teardown":
            if not report.failed or res["outcome"] not in (outcomes.PASS, outcomes.XPASS,
                                                           outcomes.SKIP):
                return
            phase = outcomes.TIMEOUT if phase == outcomes.TIMEOUT else outcomes.ERROR
            message = f"teardown failed: {message}"
        res["outcome"] = phase
        res["message"], res["detail"] = message, detail
        if wasxfail and not res["message"]:
            res["message"] = f"expected failure: {report.wasxfail}"
        for key, value in report.user_properties:
            if key.startswith("torchfl."):
                res["data"][key[len("torchfl."):]] = value
        kernels = self._kernels.get(tid)
        if kernels and phase in outcomes.BAD and "kernels" not in res["data"]:
            res["data"]["kernels"] = kernels

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        tid = self._tid_of(nodeid)
        if tid is None or tid not in self.results:
            return
        self._kernels.pop(tid, None)
        self._blocked.pop(tid, None)
        self._emit(protocol.Finished(**self.results[tid]))

    def _tid_of(self, nodeid: str) -> str | None:
        item = self._items.get(nodeid) if hasattr(self, "_items") else None
        if item is None:
            return None
        return item_id(item)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._items = {i.nodeid: i for i in session.items if is_suite_item(i)}
        self.order = [item_id(i) for i in self._items.values()]  # after -k and level

    def _emit(self, msg: protocol.Event) -> None:
        if self.worker_fds is not None:
            protocol.write(self.worker_fds[1], msg)

    # -- worker mode -------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if self.worker_fds is None:
            return None
        items = [i for i in session.items if is_suite_item(i)]
        ids = [item_id(i) for i in items]
        trace = kernel_watch.Trace(self.trace_path) if self.trace_path else None
        self._watch = kernel_watch.Watch(self.target.device_type, trace,
                                         kernel_watch.plugin_kernels(self.target.handle))
        kernel_watch.install(self._watch)
        self._commands = protocol.LineReader(self.worker_fds[0])
        self._runner_pid = os.getppid()
        self._emit(protocol.Collected(
            ids=ids, sha=hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            meta={t: vars(self.meta[t]) for t in ids}, deselected=self.deselected,
            stale=self.stale_expectations(), target=self.target.header(), host=host_info(),
            options=self.options(), pid=os.getpid()))
        while True:
            cmd = self._queued.pop(0) if self._queued else self._commands.next()
            if cmd is None or isinstance(cmd, protocol.Quit):
                break
            if not isinstance(cmd, protocol.Run):
                self._apply(cmd)
                continue
            for k in range(cmd.start, cmd.stop):
                nxt = items[k + 1] if k + 1 < cmd.stop else None
                items[k].config.hook.pytest_runtest_protocol(item=items[k], nextitem=nxt)
            self._emit(protocol.ChunkDone(cmd.start, cmd.stop, _op_stats_rows()))
        return True

    # -- plain pytest mode -------------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker_fds is not None or not self.report_dir or not self.results:
            return
        from torch_fl_conformance.report.build import build_report
        from torch_fl_conformance.report.write import write_all

        tests = []
        for tid in self.order:
            meta = vars(self.meta[tid])
            res = self.results.get(tid) or {"outcome": outcomes.NOT_RUN, "duration_s": 0.0,
                                            "message": "not run", "detail": "", "data": {}}
            tests.append({**meta, **res, "id": tid})
        report = build_report(
            target=self.target.header(), host=host_info(), options=self.options(),
            tests=tests, op_stats=_op_stats_rows(), stale=self.stale_expectations(),
            started=self.started, finished=time.time(), deselected=self.deselected,
            workers=1, restarts=0,
        )
        paths = write_all(report, self.report_dir)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.ensure_newline()
            tr.write_line(f"torchfl-conformance: level {report['level']['achieved']}; "
                          f"report in {paths['html']}")


def _messages(report: pytest.TestReport) -> tuple[str, str]:
    """(one-line summary, longer detail) of a phase report."""
    if report.passed:
        return "", ""
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2]).removeprefix("Skipped: ")
        return reason, ""
    crash = getattr(longrepr, "reprcrash", None)
    summary = crash.message if crash is not None else str(longrepr).strip().splitlines()[-1:]
    if isinstance(summary, list):
        summary = summary[0] if summary else ""
    text = report.longreprtext or ""
    return str(summary)[:500], text[-4000:]


def _op_stats_rows() -> list[dict[str, Any]]:
    """The process's cumulative op statistics as report rows."""
    import torch_fl

    fields = ("native", "decomposed", "cpu_fallback", "failed", "time_ns", "bytes_copied")
    return [{"op": r.op, "dtype": r.dtype, **{f: getattr(r, f) for f in fields}}
            for r in sorted(torch_fl.op_stats(), key=lambda r: (r.op, r.dtype))]

