"""Expectation files: tests a plugin is known to fail (xfail) or must not run (skip).

    # expectations for myplugin 1.2
    [[xfail]]
    id = "test_opinfo.py::test_matches_cpu[nn.functional.gelu-bfloat16"
    reason = "bf16 gelu uses the tanh approximation; fixed in 1.3"

    [[skip]]
    id = "test_memory.py::test_oom"
    reason = "the driver aborts on exhaustion (vendor bug 1234)"

`id` is a prefix of test ids (as printed by the runner and in reports); the longest
matching entry wins. Every entry needs a reason. Entries that match no test are
stale and are reported, so a file does not rot as the plugin improves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tomllib

__all__ = ["Expectation", "ExpectationError", "Expectations"]

KINDS = ("xfail", "skip")


class ExpectationError(ValueError):
    """An expectation file is malformed; the message names the file and entry."""


@dataclass(frozen=True)
class Expectation:
    kind: str
    id: str
    reason: str


@dataclass
class Expectations:
    entries: list[Expectation] = field(default_factory=list)
    source: str = ""
    _used: set[int] = field(default_factory=set)

    @classmethod
    def load(cls, path: str) -> Expectations:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError as exc:
            raise ExpectationError(f"expectation file '{path}' does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ExpectationError(f"expectation file '{path}' is not valid TOML: {exc}") from exc
        return cls.parse(data, path)

    @classmethod
    def parse(cls, data: dict, source: str = "<expectations>") -> Expectations:
        unknown = set(data) - set(KINDS)
        if unknown:
            raise ExpectationError(
                f"{source}: unknown tables {sorted(unknown)}; use [[xfail]] or [[skip]]"
            )
        entries = []
        seen: dict[str, str] = {}
        for kind in KINDS:
            for i, raw in enumerate(data.get(kind, [])):
                where = f"{source}: [[{kind}]] #{i + 1}"
                if not isinstance(raw, dict) or set(raw) - {"id", "reason"}:
                    raise ExpectationError(f"{where}: an entry has exactly 'id' and 'reason'")
                test_id, reason = raw.get("id"), raw.get("reason")
                if not isinstance(test_id, str) or not test_id.strip():
                    raise ExpectationError(f"{where}: 'id' must be a non-empty test-id prefix")
                if not isinstance(reason, str) or not reason.strip():
                    raise ExpectationError(f"{where} ({test_id}): every entry needs a reason")
                if test_id in seen:
                    raise ExpectationError(
                        f"{where}: '{test_id}' is listed twice (also as {seen[test_id]})"
                    )
                seen[test_id] = kind
                entries.append(Expectation(kind, test_id.strip(), reason.strip()))
        return cls(entries, source)

    def match(self, test_id: str) -> Expectation | None:
        """The longest entry whose id is a prefix of test_id; marks it used."""
        best: tuple[int, Expectation] | None = None
        for i, e in enumerate(self.entries):
            if test_id.startswith(e.id) and (best is None or len(e.id) > len(best[1].id)):
                best = (i, e)
        if best is None:
            return None
        self._used.add(best[0])
        return best[1]

    def stale(self) -> list[Expectation]:
        """Entries no collected test matched."""
        return [e for i, e in enumerate(self.entries) if i not in self._used]
