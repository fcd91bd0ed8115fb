"""The pipe protocol between the runner and its worker processes.

Two pipes per worker: commands (runner -> worker) and events (worker -> runner).
Each message is one JSON object on one line; its "type" member names the message.
Every message is a dataclass of this module, and encode()/decode() are the only
code that writes or reads the wire form, so neither side spells a message name or
a field as a string of its own.

    runner                               worker
      |  <- Collected (the test list)      |
      |  Block* (kernels/ops not to enter) |
      |  Run(start, stop) ->               |
      |  <- Started, Finished (per test)   |
      |  <- ChunkDone                      |
      |  Quit ->                           |
"""

from __future__ import annotations

import json
import os
import select
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

__all__ = [
    "Block",
    "ChunkDone",
    "Collected",
    "Command",
    "Event",
    "Finished",
    "LineReader",
    "ProtocolError",
    "Quit",
    "Run",
    "Started",
    "decode",
    "encode",
    "write",
]


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


# -- commands (runner -> worker) --------------------------------------------
@dataclass(frozen=True)
class Run:
    """Run the tests with collection indices start <= i < stop, then ChunkDone."""

    TYPE: ClassVar[str] = "run"
    start: int
    stop: int


@dataclass(frozen=True)
class Quit:
    """Leave the test loop; the worker then exits."""

    TYPE: ClassVar[str] = "quit"


@dataclass(frozen=True)
class Block:
    """Do not enter `kernel` on the device nor start tests of op_db operator `op`
    (either may be empty): a test did not come back from it. `by` is that test."""

    TYPE: ClassVar[str] = "block"
    op: str
    kernel: str
    by: str
    reason: str


# -- events (worker -> runner) ----------------------------------------------
@dataclass(frozen=True)
class Collected:
    """The worker collected the suite; sent once, before any command is read."""

    TYPE: ClassVar[str] = "collected"
    ids: list[str]
    sha: str
    meta: dict[str, dict[str, Any]]
    deselected: int
    stale: list[dict[str, str]]
    target: dict[str, Any]
    host: dict[str, Any]
    options: dict[str, Any]
    pid: int


@dataclass(frozen=True)
class Started:
    TYPE: ClassVar[str] = "started"
    id: str
    t: float


@dataclass(frozen=True)
class Finished:
    """One test's result (the fields of a report's test entry, less its metadata)."""

    TYPE: ClassVar[str] = "finished"
    id: str
    outcome: str
    duration_s: float
    message: str = ""
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ChunkDone:
    """The range of the last Run is done; op_stats: the process's cumulative table."""

    TYPE: ClassVar[str] = "chunk_done"
    start: int
    stop: int
    op_stats: list[dict[str, Any]]


Command = Run | Quit | Block
Event = Collected | Started | Finished | ChunkDone
_TYPES: dict[str, type] = {c.TYPE: c for c in (Run, Quit, Block, Collected, Started,
                                               Finished, ChunkDone)}


def encode(msg: Command | Event) -> bytes:
    return (json.dumps({"type": msg.TYPE, **asdict(msg)}, default=str) + "\n").encode()


def decode(line: bytes | str) -> Command | Event:
    try:
        obj = json.loads(line)
        cls = _TYPES[obj.pop("type")]
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in obj.items() if k in names})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"not a protocol message ({exc}): {line[:200]!r}") from None


def write(fd: int, msg: Command | Event) -> None:
    """Writes one message completely (a pipe may take it in parts)."""
    view = memoryview(encode(msg))
    while view:
        n = os.write(fd, view)
        view = view[n:]


class LineReader:
    """Messages from a pipe as they arrive: read() for a select loop (one read),
    poll() without waiting, next() waiting for one."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self._buffer = b""
        self._queue: deque[Command | Event] = deque()

    def _read_once(self) -> None:
        try:
            data = os.read(self.fd, 1 << 20)
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        self._queue.extend(decode(line) for line in lines if line.strip())

    def _drain(self) -> list[Command | Event]:
        out = list(self._queue)
        self._queue.clear()
        return out

    def read(self) -> list[Command | Event]:
        """The messages one read brings (it blocks until data or end of file)."""
        if not self._queue and not self.closed:
            self._read_once()
        return self._drain()

    def poll(self) -> list[Command | Event]:
        """Whatever has arrived, without waiting."""
        while not self.closed and select.select([self.fd], [], [], 0)[0]:
            self._read_once()
        return self._drain()

    def next(self) -> Command | Event | None:
        """The next message, waiting for it; None once the pipe is closed."""
        while not self._queue and not self.closed:
            self._read_once()
        return self._queue.popleft() if self._queue else None
