"""The torch-fl distribution pins the torch release its bridge was compiled against:
`torch==<major>.<minor>.*` in its requirements and `+torch<major><minor>` in its
version (sdk/build_metadata/torch_release.py, pyproject.toml's dynamic metadata). It also
requires what the conformance suite's workers import beyond torch."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version
from support import load_module
from torch_fl._build_info import TORCH_VERSION
from torch_fl_conformance.runner import SUITE_PACKAGES

ROOT = Path(__file__).resolve().parents[2]


def provider() -> ModuleType:
    return load_module(ROOT / "sdk" / "build_metadata" / "torch_release.py")


def test_installed_distribution_pins_the_torch_it_was_built_for() -> None:
    major, minor = Version(TORCH_VERSION).release[:2]
    dist = metadata.distribution("torch-fl")
    assert Version(dist.version).local == f"torch{major}{minor}", (
        f"torch-fl {dist.version}: expected the local label +torch{major}{minor} of the torch "
        f"{TORCH_VERSION} the bridge was built against"
    )
    pins = [
        Requirement(r) for r in dist.requires or [] if "extra ==" not in r
    ]
    torch_pins = [str(r.specifier) for r in pins if r.name == "torch"]
    assert torch_pins == [f"=={major}.{minor}.*"], f"torch requirements {torch_pins}"
    assert Requirement(f"torch{torch_pins[0]}").specifier.contains(torch.__version__), (
        torch_pins, torch.__version__
    )
    assert set(SUITE_PACKAGES.values()) <= {r.name for r in pins}, pins


@pytest.mark.parametrize(("torch_version", "tag"), [("2.14.1", "214"), ("2.13.0+cpu", "213")])
def test_provider_reads_the_installed_torch(
    torch_version: str, tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = provider()
    version_file = tmp_path / "__init__.py"
    version_file.write_text('__version__ = "0.3.1"\n', encoding="utf-8")
    monkeypatch.setattr(module.metadata, "version", lambda name: torch_version)
    found = module.dynamic_metadata({"version-file": str(version_file)}, {})
    release = f"{tag[0]}.{tag[1:]}"
    assert found["version"] == f"0.3.1+torch{tag}"
    assert found["dependencies"][0] == f"torch=={release}.*"
    # The rest: what the conformance suite's workers import beyond torch.
    assert set(found["dependencies"][1:]) == set(SUITE_PACKAGES.values()), found["dependencies"]


def test_provider_without_torch_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = provider()
    version_file = tmp_path / "__init__.py"
    version_file.write_text('__version__ = "0.3.1"\n', encoding="utf-8")

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(module.metadata, "version", missing)
    with pytest.raises(RuntimeError, match="install torch first"):
        module.dynamic_metadata({"version-file": str(version_file)}, {})
    with pytest.raises(RuntimeError, match="one setting, version-file"):
        module.dynamic_metadata({}, {})
