"""The wheel a vendor ships: the generated plugin built and repaired by the steps of
its own CI workflow (`jobs.wheel` of .github/workflows/ci.yml, run here as written),
then what must hold of that wheel.

One wheel per architecture serves every Python and torch release: it is tagged
py3-none-manylinux_2_<x>, the library inside asks the system for glibc alone (the
C++ runtime is linked in; no libstdc++, libtorch or libpython), glibc alone sets
its manylinux tag, its metadata names no torch, and installed into a throwaway
environment it registers and computes on the device.

The workflow builds in the manylinux_2_28 image (glibc 2.28), so its wheel is
manylinux_2_28. A build machine with a newer glibc binds the library to that
glibc's symbol versions whatever is linked statically (Debian 12: GLIBC_2.36 for
libstdc++'s own calls), so here the repair asks for the lowest policy the build
meets and the tests check that nothing but glibc raised it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
import torch_fl
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from template_project import BIN, DEFAULT_DEVICE, DEFAULT_PACKAGE, generate, layered_venv

pytestmark = pytest.mark.slow

LIBRARY = f"lib{DEFAULT_DEVICE}.so"
# torch's own x86_64 wheels need glibc 2.28: a lower plugin policy buys no user.
POLICY_FLOOR = 28
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64")
# NEEDED entries the library must not have: the C++ runtime is linked in, and a
# plugin links neither torch nor Python.
FORBIDDEN_NEEDED = re.compile(r"lib(stdc\+\+|gcc_s|torch\w*|c10\w*|python[\d.]*)\.so")


def tool(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    assert found is not None, f"{name} is not installed; it comes with requirements-dev.txt"
    return found


def host_glibc() -> tuple[int, int]:
    libc, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")
    assert libc == "glibc", f"the plugin wheel is a manylinux (glibc) wheel; this host has {libc}"
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def repair_platform(workflow_platform: str) -> str:
    """The workflow's policy where this host's glibc can meet it; on a newer host
    "auto", auditwheel's lowest policy the build meets."""
    match = MANYLINUX.fullmatch(workflow_platform)
    assert match, f"MANYLINUX_PLAT {workflow_platform!r} is not a manylinux_2_<x>_x86_64 policy"
    policy = (int(match.group(1)), int(match.group(2)))
    return workflow_platform if host_glibc() <= policy else "auto"


@dataclass(frozen=True)
class WheelJob:
    """`jobs.wheel` of the generated project's CI workflow, its steps run here."""

    project: Path
    steps: dict[str, str]  # step id -> its `run` script
    env: dict[str, str]

    def run(self, step_id: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.steps[step_id]],
            cwd=self.project,
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )


@dataclass(frozen=True)
class Shipped:
    job: WheelJob
    wheel: Path  # the repaired wheel


def report(what: str, proc: subprocess.CompletedProcess) -> str:
    return (
        f"{what} exited with {proc.returncode}\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Shipped:
    tool("auditwheel")
    tool("patchelf")  # auditwheel repair refuses to start without it
    project = generate(tmp_path_factory.mktemp("plugin_wheel"))
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    job = workflow["jobs"]["wheel"]
    job_env = {k: str(v) for k, v in job.get("env", {}).items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(job_env)
    env["MANYLINUX_PLAT"] = repair_platform(job_env["MANYLINUX_PLAT"])
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    steps = {s["id"]: s["run"] for s in job["steps"] if "id" in s}
    wheel_job = WheelJob(project, steps, env)
    for step_id in ("build", "repair"):
        proc = wheel_job.run(step_id)
        assert proc.returncode == 0, report(f"the CI step {step_id!r}", proc)
    wheels = sorted((project / "dist").glob("*.whl"))
    assert len(wheels) == 1, f"the repair step should leave one wheel in dist/, found {wheels}"
    return Shipped(wheel_job, wheels[0])


def dist_info(wheel: Path, name: str) -> str:
    """A file of the wheel's .dist-info directory, as text."""
    with zipfile.ZipFile(wheel) as archive:
        found = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}")]
        assert len(found) == 1, f"{wheel.name} should hold one .dist-info/{name}, holds {found}"
        return archive.read(found[0]).decode()


def library_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(f"/{LIBRARY}")]
        assert names == [f"{DEFAULT_PACKAGE}/{LIBRARY}"], (
            f"{wheel.name} should hold {DEFAULT_PACKAGE}/{LIBRARY} once, holds {names}"
        )
        return archive.read(names[0])


@dataclass(frozen=True)
class Requirements:
    needed: list[str]  # DT_NEEDED entries
    versions: dict[str, set[str]]  # library -> symbol versions required from it


def requirements(library: Path) -> Requirements:
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError:  # pragma: no cover - a setup problem, said plainly
        pytest.fail("pyelftools is not installed; it comes with auditwheel (requirements-dev.txt)")
    with library.open("rb") as stream:
        elf = ELFFile(stream)
        dynamic = elf.get_section_by_name(".dynamic")
        assert dynamic is not None, f"{library} has no dynamic section"
        needed = [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
        versions: dict[str, set[str]] = {}
        verneed = elf.get_section_by_name(".gnu.version_r")
        if verneed is not None:
            for entry, aux in verneed.iter_versions():
                versions.setdefault(entry.name, set()).update(a.name for a in aux)
    return Requirements(needed, versions)


@pytest.fixture(scope="module")
def library(shipped: Shipped, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("unpacked") / LIBRARY
    path.write_bytes(library_bytes(shipped.wheel))
    return path


def glibc_floor(reqs: Requirements) -> int:
    """The highest GLIBC_2.<x> the library requires, of any system library."""
    minors = [
        int(m.group(1))
        for names in reqs.versions.values()
        for name in names
        if (m := re.fullmatch(r"GLIBC_2\.(\d+)(?:\.\d+)?", name))
    ]
    assert minors, f"no GLIBC_ version requirement read from the library: {reqs.versions}"
    return max(minors)


def test_one_wheel_for_every_python(shipped: Shipped) -> None:
    name, _, _, tags = parse_wheel_filename(shipped.wheel.name)
    assert name == canonicalize_name(DEFAULT_PACKAGE), (name, DEFAULT_PACKAGE)
    wrong = sorted(str(t) for t in tags if (t.interpreter, t.abi) != ("py3", "none"))
    assert not wrong, f"{shipped.wheel.name}: tags {wrong}, expected py3-none-<platform> only"
    platforms = sorted(t.platform for t in tags)
    assert all(MANYLINUX.fullmatch(p) for p in platforms), (
        f"{shipped.wheel.name}: platforms {platforms}, expected manylinux_2_<x>_x86_64"
    )
    wheel_info = dist_info(shipped.wheel, "WHEEL")
    declared = sorted(line.split(":", 1)[1].strip() for line in wheel_info.splitlines()
                      if line.startswith("Tag:"))
    assert declared == sorted(str(t) for t in tags), (
        f"WHEEL declares {declared}, the file name says {sorted(map(str, tags))}"
    )
    assert "Root-Is-Purelib: false" in wheel_info, wheel_info


def test_library_needs_no_cxx_runtime_torch_or_python(library: Path) -> None:
    reqs = requirements(library)
    forbidden = [n for n in reqs.needed if FORBIDDEN_NEEDED.match(n)]
    assert not forbidden, f"{LIBRARY} NEEDED {reqs.needed}: {forbidden} must not be among them"
    cxx = sorted(
        f"{lib}: {v}"
        for lib, names in reqs.versions.items()
        for v in names
        if v.startswith(("GLIBCXX_", "CXXABI_", "GCC_"))
    )
    assert not cxx, f"{LIBRARY} asks for C++ runtime versions {cxx}; expected none (linked in)"


def auditwheel_show(wheel: Path) -> dict:
    proc = subprocess.run(
        [tool("auditwheel"), "show", "--json", str(wheel)],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, report(f"auditwheel show --json {wheel.name}", proc)
    audit = json.loads(proc.stdout)
    assert audit.get("version") == 1, (
        f"auditwheel show --json wrote schema version {audit.get('version')}; this test reads 1"
    )
    return audit


def test_glibc_alone_sets_the_manylinux_tag(shipped: Shipped, library: Path) -> None:
    _, _, _, tags = parse_wheel_filename(shipped.wheel.name)
    policy = min(int(MANYLINUX.fullmatch(t.platform).group(2)) for t in tags)
    audit = auditwheel_show(shipped.wheel)
    assert audit["overall_tag"] == f"manylinux_2_{policy}_x86_64", (
        f"auditwheel show: {audit['overall_tag']}, the wheel is tagged manylinux_2_{policy}"
    )
    assert audit["external_libs"] == {}, (
        f"the template's library needs no library auditwheel would bundle: {audit['external_libs']}"
    )
    not_glibc = {
        lib: sorted(v for v in versions if not v.startswith("GLIBC_"))
        for lib, versions in audit["versioned_symbols"].items()
    }
    assert not any(not_glibc.values()), (
        f"symbol versions other than glibc's constrain the wheel: {not_glibc}"
    )
    assert audit["sym_tag"] == audit["overall_tag"], audit
    floor = glibc_floor(requirements(library))
    assert floor <= policy, (
        f"manylinux_2_{policy} promises glibc 2.{policy}, the library needs 2.{floor}"
    )
    if floor <= POLICY_FLOOR:  # what the workflow's manylinux_2_28 image builds
        assert policy <= POLICY_FLOOR, (
            f"the library needs glibc 2.{floor}, yet the wheel is manylinux_2_{policy}, above "
            f"manylinux_2_{POLICY_FLOOR}"
        )


def test_the_workflow_requirement_check_passes(shipped: Shipped) -> None:
    proc = shipped.job.run("requires")
    assert proc.returncode == 0, report("the CI step 'requires'", proc)
    _, _, _, tags = parse_wheel_filename(shipped.wheel.name)
    platforms = {t.platform for t in tags}
    assert "NEEDED" in proc.stdout and any(f'"{p}"' in proc.stdout for p in platforms), (
        f"the step should print auditwheel's verdict ({sorted(platforms)}) and the NEEDED "
        f"entries:\n{proc.stdout}"
    )


def test_metadata_names_no_torch_and_the_abi_major_of_torch_fl(shipped: Shipped) -> None:
    metadata = Parser().parsestr(dist_info(shipped.wheel, "METADATA"))
    runtime = [
        Requirement(line)
        for line in metadata.get_all("Requires-Dist") or []
        if "extra ==" not in line
    ]
    by_name = {canonicalize_name(r.name): r for r in runtime}
    assert "torch" not in by_name, (
        f"the plugin wheel requires {by_name['torch']}; it needs no torch of its own"
    )
    assert set(by_name) == {"torch-fl"}, f"runtime requirements {sorted(map(str, runtime))}"
    spec = by_name["torch-fl"].specifier
    installed = Version(torch_fl.__version__)
    assert spec.contains(installed), f"torch-fl{spec} excludes the installed torch-fl {installed}"
    next_major = Version(f"{installed.major + 1}")
    assert not spec.contains(next_major), (
        f"torch-fl{spec} admits torch-fl {next_major}, the next ABI major, which may refuse "
        "the plugin"
    )


def test_the_installed_wheel_computes_on_the_device(
    shipped: Shipped, tmp_path_factory: pytest.TempPathFactory
) -> None:
    venv = layered_venv(tmp_path_factory.mktemp("wheel_venv") / "venv")
    env = {k: v for k, v in venv.env().items() if not k.startswith("PYTEST_")}
    env.pop("TORCH_FL_PLUGINS", None)
    # flemu is installed in the layer below: registration by name picks this plugin.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    proc = subprocess.run(
        [str(venv.python), "-m", "pip", "install", "--no-deps", "--no-index", str(shipped.wheel)],
        env=env, check=False, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, report(f"pip install {shipped.wheel.name}", proc)
    code = (
        "import torch, torch_fl\n"
        f"h = torch_fl.register_device_plugin({DEFAULT_DEVICE!r})\n"
        "print(h.library)\n"
        f"x = torch.ones(2, 3, device='{DEFAULT_DEVICE}:0')\n"
        "print(x.device, (x + x).sum().item())\n"
    )
    proc = subprocess.run(
        [str(venv.python), "-c", code],
        cwd=tmp_path_factory.mktemp("wheel_run"),
        env=env, check=False, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, report("registering the installed plugin", proc)
    loaded, result = proc.stdout.splitlines()[-2:]
    expected = venv.site_packages / DEFAULT_PACKAGE / LIBRARY
    assert Path(loaded) == expected.resolve(), f"loaded {loaded}, expected the wheel's {expected}"
    assert Path(loaded).read_bytes() == library_bytes(shipped.wheel), (
        f"{loaded} differs from the library inside {shipped.wheel.name}"
    )
    assert result == f"{DEFAULT_DEVICE}:0 12.0", f"printed {result!r}, expected 'nova:0 12.0'"
