"""Which kernels a worker has entered on the device, and kernels it must not enter.

A kernel that hangs or kills the process leaves nothing behind in the worker: the
runner only sees a test that never finished. The watch is a TorchDispatchMode
around every suite test of a worker that notes each ATen op dispatched to the
device in a small memory-mapped file (the trace). An asynchronous device returns
from a launch at once and hangs later, in whatever waits for it, so the trace
keeps every op entered since the device was last known idle (a synchronize, a
blocking copy to the host, .item()): when the worker dies or is killed, the
runner reads the trace, and the plugin's kernels in it are the ones that were
running.

Kernels the runner has blocked (a test did not come back from them) raise
KernelBlocked before they are entered, so one hung kernel costs one time limit,
not one per test that calls it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["KernelBlocked", "Trace", "Watch", "install", "kernels_of", "pending",
           "plugin_kernels", "running", "synchronize", "watching"]

_SIZE = 8192
_MAX_PENDING = 48


class KernelBlocked(BaseException):
    """A blocked kernel was about to be entered. A BaseException, so the suite's
    `except Exception` (which records device errors) lets it through."""

    def __init__(self, kernel: str, reason: str) -> None:
        super().__init__(f"{kernel}: {reason}")
        self.kernel, self.reason = kernel, reason


class Trace:
    """The memory-mapped file: NUL-terminated text, one op name per line. Writes
    land in the page cache at once, so they survive the process being killed."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "wb") as f:
            f.write(b"\0" * _SIZE)
        self._file = open(path, "r+b")  # noqa: SIM115 - mapped for the process lifetime
        self._map = mmap.mmap(self._file.fileno(), _SIZE)

    def write(self, names: Iterable[str]) -> None:
        data = "\n".join(names).encode()[: _SIZE - 1] + b"\0"
        self._map[: len(data)] = data

    @staticmethod
    def read(path: str) -> list[str]:
        try:
            with open(path, "rb") as f:
                data = f.read(_SIZE)
        except OSError:
            return []
        text = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        return [line for line in text.splitlines() if line]


def plugin_kernels(handle: Any) -> frozenset[str]:
    """Schema names of the kernels the plugin registered ('aten::mm', ...)."""
    return frozenset(str(k).split(" ", 1)[0] for k in getattr(handle, "kernels", ()))


def kernels_of(table: Any) -> dict[str, list[str]]:
    """The ATen ops of an op_stats table by how they ran: the plugin's kernels
    ("native"), PyTorch decompositions, the CPU fallback, failed calls; schema names."""
    out: dict[str, list[str]] = {}
    for how, attr in (("native", "native"), ("decomposed", "decomposed"),
                      ("fallback", "cpu_fallback"), ("failed", "failed")):
        names = sorted({r.op for r in table if getattr(r, attr)})
        if names:
            out[how] = names
    return out


def running(trace: list[str]) -> list[str]:
    """The kernels of a trace that were entered and never seen to finish in that
    process: where it hung or died (others finished before, at least once)."""
    return [line for line in trace if not line.endswith(_SEEN)]


def pending(trace: list[str]) -> list[str]:
    """Every kernel of a trace (entered since the device was last idle)."""
    return [line.removesuffix(_SEEN) for line in trace]


_SEEN = "\tseen"


class Watch:
    """The dispatch mode's state for one worker: the trace and the blocked kernels.
    `kernels`: the plugin's kernel names; only they are traced."""

    def __init__(self, device_type: str, trace: Trace | None,
                 kernels: frozenset[str] = frozenset()) -> None:
        self.device_type = device_type
        self.trace = trace
        self.kernels = kernels
        self.blocked: dict[str, str] = {}  # kernel -> reason
        self._pending: list[str] = []
        self._finished: set[str] = set()

    # -- what the runner and the suite tell it --------------------------------
    def block(self, kernel: str, reason: str) -> None:
        if kernel:
            self.blocked.setdefault(kernel, reason)

    def idle(self) -> None:
        """The device finished everything launched so far (after a synchronize)."""
        if self._pending:
            self._finished.update(self._pending)
            self._pending.clear()
            if self.trace is not None:
                self.trace.write(())

    def _entered(self, name: str) -> None:
        if name in self._pending or name not in self.kernels:
            return
        self._pending.append(name)
        del self._pending[:-_MAX_PENDING]
        if self.trace is not None:
            self.trace.write(k + _SEEN if k in self._finished else k for k in self._pending)

    # -- the mode ---------------------------------------------------------------
    def mode(self) -> Any:
        """A fresh TorchDispatchMode instance (enter it with `with`)."""
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        watch = self
        dev = self.device_type
        blocking_ops = {"aten::_local_scalar_dense", "aten::_to_copy", "aten::copy_",
                        "aten::_copy_from", "aten::_copy_from_and_resize"}

        tensor = torch.Tensor

        def on_device(args: Any, kwargs: dict[str, Any]) -> bool:
            for a in (*args, *kwargs.values()):
                if isinstance(a, tensor):
                    if a.device.type == dev:
                        return True
                elif isinstance(a, (list, tuple)) and any(
                        isinstance(t, tensor) and t.device.type == dev for t in a):
                    return True
            return False

        def waited(name: str, args: Any, kwargs: dict[str, Any], out: Any) -> bool:
            """Whether `out` being returned means the device is idle: a blocking
            read of device data into host memory."""
            if name not in blocking_ops or kwargs.get("non_blocking"):
                return False
            if name == "aten::_local_scalar_dense":
                return True
            if len(args) > 2 and args[2] is True:  # copy_(dst, src, non_blocking)
                return False
            return isinstance(out, torch.Tensor) and out.device.type == "cpu"

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                                   kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                if not on_device(args, kwargs):
                    return func(*args, **kwargs)
                name = func.name()
                reason = watch.blocked.get(name)
                if reason is not None:
                    raise KernelBlocked(name, reason)
                watch._entered(name)
                out = func(*args, **kwargs)
                if waited(name, args, kwargs, out):
                    watch.idle()
                return out

        return Mode()


_active: Watch | None = None


def install(watch: Watch | None) -> None:
    """Makes `watch` the one suite code reports synchronizations to (see synchronized)."""
    global _active
    _active = watch


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """The installed watch's dispatch mode around a block (nothing when none is
    installed, as outside a worker). The sweep watches its device runs only: its
    comparisons on the CPU need no watch, and a dispatch mode costs each op."""
    if _active is None:
        yield
        return
    with _active.mode():
        yield


def synchronize(device: Any) -> None:
    """Waits for all work on `device` (every stream of it): results are read only
    after this. Tells the watch that the device is idle."""
    import torch

    dev = torch.device(device)
    getattr(torch, dev.type).synchronize(dev.index)
    if _active is not None:
        _active.idle()


def remove_trace(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
