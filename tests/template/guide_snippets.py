"""The code blocks of docs/plugin-guide.md and how the tests exercise each one.

A block's info string is `<language> <check> [label]`. The check says which test
runs the block and how:

    sh e2e / python e2e   test_template_e2e.py runs these in order, in one scratch
                          directory holding a link to templates/: the guide's
                          step-by-step path from cookiecutter to certification
    sh run                run in a fresh scratch directory; must succeed
    sh fails              run in a fresh scratch directory; must fail
    text output           after a run/fails block: lines it must print; after an
                          e2e block: exactly what it prints, stdout then stderr,
                          "..." standing for any text within a line
    text tree             every path must exist in the generated project
    toml excerpt=<path>   must appear verbatim in that file of the generated project
    c compile / cpp compile
                          compiled alone against the ABI headers, -Wall -Wextra -Werror
    cpp kernel            spliced into the generated src/kernels.cpp in place of its
                          kernel table, built and run through the bridge
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugin-guide.md"
TEMPLATE = ROOT / "templates" / "plugin"

CHECKS = ("e2e", "run", "fails", "output", "tree", "excerpt", "compile", "kernel")

_FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Snippet:
    language: str
    check: str  # one of CHECKS, or "" when the block has none
    argument: str  # the value after "=" (excerpt=<path>) or the label word
    code: str
    line: int  # line of the opening fence, 1-based

    def where(self) -> str:
        return f"{GUIDE.relative_to(ROOT)}:{self.line}"


def parse(text: str) -> list[Snippet]:
    snippets: list[Snippet] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match.group(1), match.group(2).split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        language = info[0] if info else ""
        check, _, argument = (info[1] if len(info) > 1 else "").partition("=")
        if not argument and len(info) > 2:
            argument = info[2]
        snippets.append(Snippet(language, check, argument, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return snippets


def guide_snippets() -> list[Snippet]:
    return parse(GUIDE.read_text(encoding="utf-8"))


def tree_paths(code: str) -> list[str]:
    """The paths a `text tree` block lists, relative to the directory it shows."""
    paths: list[str] = []
    stack: list[str] = []
    for raw in code.splitlines()[1:]:  # the first line names the project directory
        start = next((k for k, c in enumerate(raw) if c.isalnum() or c in "._"), None)
        if start is None:
            continue
        depth = start // 4 - 1  # "├── " marks the first level
        names = [n.strip() for n in re.split(r"\s{2,}", raw[start:])[0].split(",")]
        del stack[depth:]
        for name in names:
            paths.append("/".join([*stack, name.rstrip("/")]))
        if names[-1].endswith("/"):
            stack.append(names[-1].rstrip("/"))
    return paths


def _line_matches(expected: str, printed: str) -> bool:
    """`printed` is `expected` with each "..." standing for any text."""
    pattern = ".*".join(re.escape(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, printed.strip()) is not None


def output_mismatches(expected: str, printed: str) -> list[str]:
    """How the lines a command printed differ from an output block, both ways:
    lines of the block nothing printed, and printed lines the block does not show."""
    want = [line for line in expected.splitlines() if line.strip()]
    got = [line for line in printed.splitlines() if line.strip()]
    problems = [f"not printed: {w!r}" for w in want if not any(_line_matches(w, g) for g in got)]
    problems += [f"printed but not shown: {g!r}" for g in got
                 if not any(_line_matches(w, g) for w in want)]
    return problems
