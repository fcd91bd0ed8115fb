"""docs/plugin-guide.md: every code block is checked (see guide_snippets.py for
the tags); the e2e blocks are run by test_template_e2e.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch_fl
from guide_snippets import CHECKS, ROOT, Snippet, guide_snippets, tree_paths
from support import assert_ok, run_python
from template_project import BIN, DEFAULT_DEVICE, compile_library, generate

SNIPPETS = guide_snippets()


def by_check(*checks: str) -> list[Snippet]:
    return [s for s in SNIPPETS if s.check in checks]


def ids(snippets: list[Snippet]) -> list[str]:
    return [f"line{s.line}" for s in snippets]


def scratch_with_templates(tmp_path: Path) -> Path:
    """A directory like the root of a torch-fl checkout, as the guide's commands expect."""
    (tmp_path / "templates").symlink_to(ROOT / "templates", target_is_directory=True)
    return tmp_path


def shell_env() -> dict[str, str]:
    return {**os.environ, "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("guide"))


def test_every_block_says_how_it_is_checked() -> None:
    unchecked = [
        f"{s.where()}: ```{s.language} {s.check}".rstrip()
        for s in SNIPPETS
        if s.check not in CHECKS
    ]
    assert not unchecked, (
        "code blocks without a check tag (see tests/template/guide_snippets.py):\n"
        + "\n".join(unchecked)
    )
    assert len(by_check("e2e")) >= 5, (
        "the guide's step-by-step path has fewer e2e blocks than expected"
    )


def test_every_output_block_follows_a_command() -> None:
    for i, s in enumerate(SNIPPETS):
        if s.check == "output":
            assert i > 0 and SNIPPETS[i - 1].check in ("run", "fails", "e2e"), (
                f"{s.where()}: no command before it"
            )


@pytest.mark.parametrize("snippet", by_check("compile"), ids=ids(by_check("compile")))
def test_compile_snippet(snippet: Snippet, tmp_path: Path) -> None:
    c = snippet.language == "c"
    assert snippet.language in ("c", "cpp"), (
        f"{snippet.where()}: compile needs c or cpp, got {snippet.language}"
    )
    compiler = shutil.which("gcc" if c else "g++")
    assert compiler is not None, "gcc/g++ is needed to compile the guide's snippets"
    source = tmp_path / ("snippet.c" if c else "snippet.cpp")
    source.write_text(snippet.code, encoding="utf-8")
    cmd = [
        compiler,
        "-std=c11" if c else "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        f"-I{torch_fl.get_include()}",
        "-c",
        str(source),
        "-o",
        str(tmp_path / "snippet.o"),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        f"{snippet.where()} does not compile:\n{snippet.code}\n{proc.stderr}"
    )


def run_shell(snippet: Snippet, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", snippet.code],
        cwd=cwd,
        env=shell_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("snippet", by_check("run"), ids=ids(by_check("run")))
def test_shell_snippet_succeeds(snippet: Snippet, tmp_path: Path) -> None:
    proc = run_shell(snippet, scratch_with_templates(tmp_path))
    assert proc.returncode == 0, (
        f"{snippet.where()} failed:\n{snippet.code}\n{proc.stdout}\n{proc.stderr}"
    )
    check_output_block(snippet, proc)


@pytest.mark.parametrize("snippet", by_check("fails"), ids=ids(by_check("fails")))
def test_shell_snippet_fails_as_shown(snippet: Snippet, tmp_path: Path) -> None:
    proc = run_shell(snippet, scratch_with_templates(tmp_path))
    assert proc.returncode != 0, (
        f"{snippet.where()} should fail but succeeded:\n{proc.stdout}\n{proc.stderr}"
    )
    check_output_block(snippet, proc)


def check_output_block(snippet: Snippet, proc: subprocess.CompletedProcess) -> None:
    following = SNIPPETS[SNIPPETS.index(snippet) + 1 :]
    if not following or following[0].check != "output":
        return
    printed = proc.stdout + proc.stderr
    for line in following[0].code.splitlines():
        assert line.strip() in printed, (
            f"{following[0].where()}: {line!r} is not in what it printed:\n{printed}"
        )


def test_tree_is_the_generated_project(project: Path) -> None:
    (tree,) = by_check("tree")
    listed = set(tree_paths(tree.code))
    missing = sorted(p for p in listed if not (project / p).exists())
    assert not missing, f"{tree.where()} lists paths the template does not generate: {missing}"
    generated = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}
    unlisted = sorted(generated - listed)
    assert not unlisted, f"{tree.where()} leaves out generated files: {unlisted}"


@pytest.mark.parametrize("snippet", by_check("excerpt"), ids=ids(by_check("excerpt")))
def test_excerpt_matches_the_generated_file(snippet: Snippet, project: Path) -> None:
    relative = Path(snippet.argument).relative_to(project.name)
    text = (project / relative).read_text(encoding="utf-8")
    assert snippet.code.strip() in text, (
        f"{snippet.where()} is not in {snippet.argument}:\n{snippet.code}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("snippet", by_check("kernel"), ids=ids(by_check("kernel")))
def test_kernel_snippet_runs_natively(snippet: Snippet, project: Path, tmp_path: Path) -> None:
    kernels = project / "src" / "kernels.cpp"
    original = kernels.read_text(encoding="utf-8")
    table = next(
        line
        for line in original.splitlines()
        if line.startswith("const TFL_KernelDesc* const kKernelTable[]")
    )
    try:
        kernels.write_text(original.replace(table, snippet.code.rstrip()), encoding="utf-8")
        library = compile_library(project, tmp_path / f"lib{DEFAULT_DEVICE}.so")
    finally:
        kernels.write_text(original, encoding="utf-8")
    registered = re.search(r'TFL_KernelDesc_STRUCT_SIZE,\s*"(aten::\w+)"', snippet.code)
    assert registered, f"{snippet.where()}: no TFL_KernelDesc for an aten:: operator"
    op = registered.group(1)
    name = op.removeprefix("aten::")
    proc = run_python(
        f"""
        import torch, torch_fl
        torch_fl.register_device_plugin("{DEFAULT_DEVICE}", plugin_path={str(library)!r})
        x = torch.linspace(-2, 2, 101)
        with torch_fl.fallback_mode("error"), torch_fl.op_stats_scope() as scope:
            y = getattr(torch, "{name}")(x.to("{DEFAULT_DEVICE}"))
        expected = getattr(torch, "{name}")(x)
        assert torch.allclose(y.cpu(), expected), (y.cpu(), expected)
        stat = scope.table.get("{op}")
        assert stat.native == 1, str(scope.table)
        print("native", stat.native)
        """,
        env={"TORCH_FL_AUTOLOAD": "0"},
    )
    assert "native 1" in assert_ok(proc), f"{snippet.where()}: {op} did not run natively"


def test_python_in_the_guide_is_valid() -> None:
    for s in SNIPPETS:
        if s.language == "python":
            compile(s.code, s.where(), "exec")
