"""What `cookiecutter templates/plugin` generates, before anything is built: the
answers it accepts and refuses, the files and what they say."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import torch_fl
import yaml
from template_project import DEFAULT_DEVICE, DEFAULT_PACKAGE, generate, run_cookiecutter


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("generated"))


def test_defaults_need_no_input(project: Path) -> None:
    assert project.name == DEFAULT_PACKAGE, (
        f"project directory {project.name}, expected {DEFAULT_PACKAGE}"
    )
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    eps = meta["project"]["entry-points"]
    expected_backends = {DEFAULT_DEVICE: f"{DEFAULT_PACKAGE}:_autoload"}
    expected_plugins = {DEFAULT_DEVICE: f"{DEFAULT_PACKAGE}:plugin_spec"}
    assert eps["torch.backends"] == expected_backends, eps
    assert eps["torch_fl.plugins"] == expected_plugins, eps
    assert meta["build-system"]["build-backend"] == "scikit_build_core.build", meta["build-system"]
    assert (project / "python" / DEFAULT_PACKAGE / "__init__.py").is_file()


def test_every_answer_reaches_every_file(tmp_path: Path) -> None:
    project = generate(
        tmp_path,
        vendor_name="Acme Devices",
        chip_name="Rocket 2",
        device_name="rocket",
        c_prefix="RKT",
        version="2.1.0",
    )
    assert project.name == "torch_rocket", project.name
    leftovers = []
    for path in sorted(p for p in project.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(project)
        if "cookiecutter" in text or "{{" in text or "{%" in text:
            leftovers.append(f"{rel}: unrendered template text")
        if re.search("nova", text, re.IGNORECASE) or "Example Silicon" in text:
            leftovers.append(f"{rel}: still names the default chip or vendor")
    assert not leftovers, "\n".join(leftovers)
    source = (project / "src" / "abi.cpp").read_text(encoding="utf-8")
    assert '"Acme Devices"' in source and '"rocket"' in source and '"2.1.0"' in source
    assert "RKT_DEVICE_COUNT" in (project / "src" / "config.cpp").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("answer", "value", "reason"),
    [
        ("device_name", "fl2000", "must match [a-z_]+"),
        ("device_name", "Nova", "must match [a-z_]+"),
        ("device_name", "cuda", "built-in device types"),
        ("package_slug", "torch", "would shadow"),
        ("package_slug", "2fast", "Python import name"),
        ("package_slug", "class", "Python import name"),
        ("c_prefix", "nova", "[A-Z][A-Z0-9_]*"),
        ("c_prefix", "TORCH_FL", "taken by PyTorch or torch-fl"),
        ("vendor_name", 'Acme "Labs"', "leave out quotes"),
        ("chip_name", " ", "is empty"),
        ("version", "first", "not a version"),
    ],
)
def test_refused_answers_name_the_rule(
    tmp_path: Path, answer: str, value: str, reason: str
) -> None:
    proc = run_cookiecutter(tmp_path, **{answer: value})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{answer}={value!r} was accepted:\n{output}"
    assert f"{answer} " in output and reason in output, (
        f"refusing {answer}={value!r} should say '{reason}', got:\n{output}"
    )
    assert not any(tmp_path.iterdir()), f"a refused run left {sorted(tmp_path.iterdir())}"


def test_refusal_suggests_a_valid_device_name(tmp_path: Path) -> None:
    proc = run_cookiecutter(tmp_path, device_name="fl2000")
    assert "for example 'fl'" in proc.stderr, proc.stderr


def test_sources_compile_cleanly_with_the_installed_headers(project: Path) -> None:
    cxx = shutil.which("g++")
    assert cxx is not None, "g++ is needed to compile the generated plugin"
    for source in sorted((project / "src").glob("*.cpp")):
        cmd = [
            cxx,
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DTFL_BUILDING_PLUGIN",
            f"-I{torch_fl.get_include()}",
            str(source),
        ]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{source.name} does not compile cleanly:\n{proc.stderr}"


def test_error_plumbing_comes_from_the_sdk_helpers(project: Path) -> None:
    # One home for TFL_Error, guarded() and the struct-size check: the SDK's
    # torch_fl/plugin_helpers.h. A copy in the generated sources would drift.
    sources = {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted((project / "src").iterdir())
        if p.suffix in (".h", ".cpp")
    }
    plumbing = (r"struct\s+TFL_Error\s*\{", r"\bTFL_Error\*\s+guarded\(", r"catch\s*\(")
    own_copies = {
        name: found
        for name, text in sources.items()
        if (found := [pattern for pattern in plumbing if re.search(pattern, text)])
    }
    assert not own_copies, f"the generated sources re-implement the SDK's helpers: {own_copies}"
    throwing = sorted(
        name
        for name, text in sources.items()
        if name.endswith(".cpp")
        and re.search(r"\btfl::(fail|invalid_argument|unimplemented)\(", text)
    )
    without = [n for n in throwing if '#include "torch_fl/plugin_helpers.h"' not in sources[n]]
    assert throwing and not without, (
        f"sources that throw through tfl:: {throwing}; without the helper header: {without}"
    )
    abi = sources["abi.cpp"]
    for name in ("tfl::Error_Destroy", "tfl::Error_Message", "tfl::Error_GetCode"):
        assert name in abi, f"abi.cpp's core table should use the SDK's {name}"
    stale = [name for name in ("errors.h", "errors.cpp", "plugin.cpp") if name in sources]
    assert not stale, f"generated sources the SDK helpers and abi.cpp replaced: {stale}"


def test_python_files_are_valid(project: Path) -> None:
    for path in sorted(project.rglob("*.py")):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")


def test_build_finds_torch_fl_through_its_cmake_package(project: Path) -> None:
    cmake = (project / "CMakeLists.txt").read_text(encoding="utf-8")
    assert "find_package(TorchFL 1.0" in cmake and "torch_fl.cmake_prefix_path()" in cmake, cmake
    assert "torch_fl::abi" in cmake, cmake
    assert "sdk/include" not in cmake and "../" not in cmake, (
        "the build must not reach into torch-fl's sources"
    )


def test_ci_workflow_builds_installs_and_runs_the_smoke_test(project: Path) -> None:
    workflow = yaml.safe_load(
        (project / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    )
    wheel = workflow["jobs"]["wheel"]
    built = {step.get("id"): step for step in wheel["steps"] if step.get("id")}
    assert set(built) >= {"build", "repair", "requires"}, sorted(built)
    assert "pip wheel --no-build-isolation --no-deps" in built["build"]["run"], built["build"]
    assert "auditwheel repair" in built["repair"]["run"], built["repair"]
    assert wheel["container"].startswith("quay.io/pypa/manylinux_2_28"), wheel["container"]
    # The smoke job tests the repaired wheel, not a fresh build.
    assert workflow["jobs"]["smoke"]["needs"] == "wheel"
    steps = {step.get("id"): step for step in workflow["jobs"]["smoke"]["steps"] if step.get("id")}
    assert set(steps) >= {"install", "links", "smoke", "certify"}, sorted(steps)
    assert "dist/*.whl" in steps["install"]["run"], steps["install"]
    assert "ldd" in steps["links"]["run"] and "libtorch" in steps["links"]["run"], steps["links"]
    assert "pytest" in steps["smoke"]["run"], steps["smoke"]
    certify = steps["certify"]["run"]
    assert f"--plugin {DEFAULT_DEVICE}" in certify and "--level L0" in certify, certify
