"""Build-time metadata of the torch-fl distribution (a scikit-build-core
dynamic-metadata provider, pyproject.toml's [[tool.dynamic-metadata]]).

The bridge, torch_fl._C, is compiled against the torch installed where it is
built and refuses any other release at import (torch_fl/_build_check.py). So each
built wheel says which torch it was built for, in the two places pip reads:

- dependencies: ``torch==<major>.<minor>.*``, that release and any of its patches;
- version: the package version with the local label ``+torch<major><minor>``
  (``0.1.0+torch213``), so builds for two releases are two distinct wheels.

The release is read from the installed torch's distribution metadata, not by
importing torch (importing it would run every installed plugin's autoload). The
package version itself lives once, in torch_fl/__init__.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["dynamic_metadata", "release_of", "torch_release"]

_VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)
_RELEASE = re.compile(r"(\d+)\.(\d+)")


def release_of(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version such as "2.13.0+cpu"."""
    match = _RELEASE.match(version)
    if match is None:
        raise RuntimeError(f"cannot read a torch release (major.minor) from version {version!r}")
    return int(match.group(1)), int(match.group(2))


def torch_release() -> tuple[int, int]:
    """The release of the torch this build compiles the bridge against."""
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            "torch-fl builds its bridge against an installed torch, and none is installed "
            "where this build runs; install torch first and build with "
            "`pip install --no-build-isolation .`"
        ) from None
    return release_of(installed)


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """settings["version-file"]: the file holding ``__version__ = "..."``."""
    unknown = set(settings) - {"version-file"}
    if unknown or "version-file" not in settings:
        raise RuntimeError(
            f"torch_release takes one setting, version-file; got {sorted(settings)}"
        )
    path = Path(settings["version-file"])
    found = _VERSION.search(path.read_text(encoding="utf-8"))
    if found is None:
        raise RuntimeError(f'{path} has no line `__version__ = "..."`')
    if "+" in found.group(1):
        raise RuntimeError(
            f"{path}: __version__ {found.group(1)!r} already has a local label; "
            "the build adds +torch<release>"
        )
    major, minor = torch_release()
    return {
        "version": f"{found.group(1)}+torch{major}{minor}",
        # The conformance suite's workers need the others (torch_fl_conformance.runner.SUITE_PACKAGES).
        "dependencies": [f"torch=={major}.{minor}.*", "pytest", "pytest-timeout", "numpy", "expecttest"],
    }
