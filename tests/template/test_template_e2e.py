"""End to end: the plugin guide's path from `cookiecutter` to certification, run as
written (its `e2e` blocks, in order) in a scratch directory — then what must hold
of the result.

The guide's `pip install` puts the plugin into a throwaway environment layered on
this one (template_project.layered_venv), never into the project's environment,
where it would shadow flemu for the rest of the suite and for anyone else using it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from guide_snippets import ROOT, Snippet, guide_snippets, output_mismatches
from template_project import BIN, DEFAULT_DEVICE, DEFAULT_PACKAGE, LayeredVenv, layered_venv

pytestmark = pytest.mark.slow

SNIPPETS = guide_snippets()
E2E = [s for s in SNIPPETS if s.check == "e2e"]
# e2e blocks followed by the output the guide shows for them.
SHOWN = [(s, SNIPPETS[i + 1]) for i, s in enumerate(SNIPPETS[:-1])
         if s.check == "e2e" and SNIPPETS[i + 1].check == "output"]


@dataclass
class Step:
    snippet: Snippet
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def report(self) -> str:
        return (
            f"{self.snippet.where()} exited with {self.returncode} after {self.seconds:.1f} s\n"
            f"--- block\n{self.snippet.code}--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


@dataclass
class Walkthrough:
    scratch: Path
    venv: LayeredVenv
    env: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    first_tensor_seconds: float | None = None

    @property
    def project(self) -> Path:
        return self.scratch / DEFAULT_PACKAGE

    @property
    def library(self) -> Path:
        """Where the guide's `pip install` puts the plugin library."""
        return self.venv.site_packages / DEFAULT_PACKAGE / f"lib{DEFAULT_DEVICE}.so"


def run_block(
    snippet: Snippet, index: int, cwd: Path, venv: LayeredVenv, env: dict[str, str]
) -> subprocess.CompletedProcess:
    if snippet.language == "sh":
        cmd = ["bash", "-euo", "pipefail", "-c", snippet.code]
    else:
        assert snippet.language == "python", f"{snippet.where()}: e2e blocks are sh or python"
        script = cwd / f"guide_block_{index}.py"
        script.write_text(snippet.code, encoding="utf-8")
        cmd = [str(venv.python), str(script)]
    return subprocess.run(
        cmd, cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=1200
    )


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    scratch = tmp_path_factory.mktemp("vendor")
    (scratch / "templates").symlink_to(ROOT / "templates", target_is_directory=True)
    venv = layered_venv(tmp_path_factory.mktemp("venv") / "venv")
    # The guide's path runs with autoload on, as a vendor's shell would.
    switches = ("TORCH_DEVICE_BACKEND_AUTOLOAD", "TORCH_FL_AUTOLOAD")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in switches}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env = venv.env(env)
    # flemu is installed too (in the layer below), as it is next to a vendor's plugin
    # in a torch-fl checkout: the template's priority must make the new plugin win.
    env.pop("TORCH_FL_PLUGINS", None)
    result = Walkthrough(scratch, venv, env)
    start = time.perf_counter()
    for index, snippet in enumerate(E2E):
        began = time.perf_counter()
        proc = run_block(snippet, index, scratch, venv, env)
        result.steps.append(
            Step(snippet, proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - began)
        )
        if proc.returncode != 0:
            break  # later blocks build on this one
        if snippet.argument == "first-tensor":
            result.first_tensor_seconds = time.perf_counter() - start
    yield result


@pytest.mark.parametrize("index", range(len(E2E)), ids=[f"line{s.line}" for s in E2E])
def test_guide_step(walkthrough: Walkthrough, index: int) -> None:
    ran = walkthrough.steps
    if index >= len(ran):
        failed = ran[-1]
        pytest.fail(f"{E2E[index].where()} did not run: an earlier block failed\n{failed.report()}")
    step = ran[index]
    assert step.returncode == 0, step.report()


def test_first_tensor_on_the_new_device(
    walkthrough: Walkthrough, capsys: pytest.CaptureFixture[str]
) -> None:
    step = next((s for s in walkthrough.steps if s.snippet.argument == "first-tensor"), None)
    assert step is not None and step.returncode == 0, "the first-tensor block did not run or failed"
    assert f"{DEFAULT_DEVICE}:0 12.0" in step.stdout, step.report()
    assert walkthrough.first_tensor_seconds is not None
    with capsys.disabled():
        print(
            f"\ncookiecutter to the first tensor on '{DEFAULT_DEVICE}:0' (build included): "
            f"{walkthrough.first_tensor_seconds:.1f} s; per block: "
            + ", ".join(f"line {s.snippet.line} {s.seconds:.1f} s" for s in walkthrough.steps)
        )


@pytest.mark.parametrize("block, output", SHOWN, ids=[f"line{s.line}" for s, _ in SHOWN])
def test_the_guide_shows_what_its_commands_print(
    walkthrough: Walkthrough, block: Snippet, output: Snippet
) -> None:
    step = next((s for s in walkthrough.steps if s.snippet == block), None)
    assert step is not None and step.returncode == 0, f"{block.where()} did not run or failed"
    problems = output_mismatches(output.code, step.stdout + "\n" + step.stderr)
    assert not problems, (
        f"{output.where()} is not what {block.where()} prints:\n" + "\n".join(problems)
        + f"\n{step.report()}"
    )


def installed_library(walkthrough: Walkthrough) -> Path:
    assert len(walkthrough.steps) >= 3 and all(s.returncode == 0 for s in walkthrough.steps[:2]), (
        "the plugin was not built and installed"
    )
    library = walkthrough.library
    assert library.is_file(), f"the installed plugin library is not at {library}"
    return library


def test_library_links_neither_libtorch_nor_libpython(walkthrough: Walkthrough) -> None:
    library = installed_library(walkthrough)
    ldd = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True).stdout
    linked = re.findall(r"lib(?:torch\w*|c10\w*|python[\d.]*)\.so\S*", ldd)
    assert not linked, f"{library.name} links {linked}:\n{ldd}"
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    foreign = [
        line.split()[-1]
        for line in undefined.splitlines()
        if re.search(r"\b(_ZN3c10|_ZN2at|_ZN5torch|Py[A-Z_]|_Py)", line)
    ]
    assert not foreign, f"{library.name} needs torch or Python symbols: {foreign}"


def test_library_exports_only_the_entry_point_and_symbol_kernels(walkthrough: Walkthrough) -> None:
    library = installed_library(walkthrough)
    defined = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in defined.splitlines() if line.strip()}
    names = {n.split("@")[0] for n in names}
    extra = sorted(n for n in names if n != "TFL_GetPluginApi" and not n.startswith("torch_fl_op_"))
    assert "TFL_GetPluginApi" in names and "torch_fl_op_mul_Tensor" in names, sorted(names)
    assert not extra, f"{library.name} exports more than the ABI needs: {extra}"


def autoloaded(walkthrough: Walkthrough, env: dict[str, str]) -> tuple[str, str, str]:
    proc = subprocess.run(
        [
            str(walkthrough.venv.python),
            "-c",
            (
                "import torch, torch_fl; h = torch_fl.get_plugin(); "
                "print(h.name); print(', '.join(h.passed_over))"
            ),
        ],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    name, passed_over = proc.stdout.splitlines()[-2:]
    return name, passed_over, proc.stderr


def test_autoload_chooses_the_vendor_plugin_over_flemu(walkthrough: Walkthrough) -> None:
    installed_library(walkthrough)
    chosen, passed_over, stderr = autoloaded(walkthrough, walkthrough.env)
    assert chosen == DEFAULT_DEVICE, (
        f"the template's priority should beat flemu's, but {chosen} loaded; stderr:\n{stderr}"
    )
    assert passed_over == "flemu (priority 0)", (
        f"flemu should be recorded as not loaded, got {passed_over!r}"
    )
    # Nothing conflicts (different priorities), so nothing is warned at import torch.
    assert "torch_fl:" not in stderr and "Warning" not in stderr, stderr
    # TORCH_FL_PLUGINS comes before every installed plugin: it chooses flemu back.
    import flemu

    chosen, passed_over, stderr = autoloaded(
        walkthrough, {**walkthrough.env, "TORCH_FL_PLUGINS": f"flemu={flemu.library_path()}"}
    )
    assert chosen == "flemu" and f"{DEFAULT_DEVICE} (priority 100)" in passed_over, (
        chosen, passed_over, stderr)
    assert "torch_fl:" not in stderr, stderr


def test_plugin_spec_names_the_installed_library(walkthrough: Walkthrough) -> None:
    library = installed_library(walkthrough)
    code = (
        "from importlib.metadata import entry_points\n"
        f"import {DEFAULT_PACKAGE} as p\n"
        "print(p.plugin_spec())\n"
        "print(sorted(e.value for e in entry_points(group='torch.backends', "
        f"name='{DEFAULT_DEVICE}')))"
    )
    proc = subprocess.run(
        [str(walkthrough.venv.python), "-c", code],
        env=walkthrough.env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    spec, backends = proc.stdout.splitlines()
    # Above flemu's 0, so that installing the plugin next to flemu selects it.
    expected = {"name": DEFAULT_DEVICE, "library": str(library.resolve()), "priority": 100}
    assert spec == str(expected), (spec, expected)
    assert backends == str([f"{DEFAULT_PACKAGE}:_autoload"]), (
        f"the torch.backends entry point of the installed package: {backends}"
    )


def test_ci_workflow_link_check_passes(walkthrough: Walkthrough) -> None:
    installed_library(walkthrough)
    workflow = yaml.safe_load(
        (walkthrough.project / ".github" / "workflows" / "ci.yml").read_text()
    )
    (links,) = [s for s in workflow["jobs"]["smoke"]["steps"] if s.get("id") == "links"]
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", links["run"]],
        cwd=walkthrough.project,
        env=walkthrough.env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"the CI step '{links['name']}' failed:\n{proc.stdout}\n{proc.stderr}"
    )


def test_the_project_environment_is_untouched(walkthrough: Walkthrough) -> None:
    installed_library(walkthrough)
    proc = subprocess.run(
        [str(BIN / "python"), "-m", "pip", "show", "--quiet", DEFAULT_PACKAGE],
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0, (
        f"{DEFAULT_PACKAGE} was installed into the project's environment ({BIN.parent}); "
        f"it belongs in the throwaway one ({walkthrough.venv.root}):\n{proc.stdout}"
    )
