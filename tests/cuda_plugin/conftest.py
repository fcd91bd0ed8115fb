"""Fixtures of the CUDA plugin tests: libflcuda.so, built once per source state."""

from __future__ import annotations

import pytest
from cuda_plugin_project import BuiltPlugin, build_plugin


@pytest.fixture(scope="session")
def flcuda_build() -> BuiltPlugin:
    built = build_plugin()
    if built.seconds:
        print(f"\nlibflcuda.so built in {built.seconds:.1f} s at {built.build_dir}")
    return built
