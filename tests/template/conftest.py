"""Fixtures shared by the template tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from template_project import DEFAULT_DEVICE, compile_library, generate


@pytest.fixture(scope="session")
def template_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lib<device>.so of the project cookiecutter generates with the defaults,
    built once per session (not installed: tests register it by path)."""
    scratch = tmp_path_factory.mktemp("template_library")
    project = generate(scratch)
    return compile_library(project, scratch / f"lib{DEFAULT_DEVICE}.so")
