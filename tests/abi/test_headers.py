"""The plugin ABI headers: each compiles alone as C11 and as C++17, warning-free,
and the frozen layouts hold."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support import ROOT

INCLUDE = ROOT / "sdk" / "include"
HEADERS = sorted((INCLUDE / "torch_fl").glob("*.h"))
STRICT = ["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only", f"-I{INCLUDE}"]


def test_all_groups_are_declared() -> None:
    names = {h.name for h in HEADERS}
    assert {"types.h", "core.h", "device.h", "memory.h", "stream.h", "kernel.h",
            "collectives.h", "graph.h", "tunables.h", "plugin_api.h"} <= names, names


@pytest.mark.parametrize("header", HEADERS, ids=lambda h: h.name)
@pytest.mark.parametrize("lang", ["c11", "c++17"])
def test_header_compiles_alone(header: Path, lang: str, tmp_path: Path) -> None:
    compiler = shutil.which("gcc" if lang == "c11" else "g++")
    assert compiler, "gcc/g++ is needed"
    src = tmp_path / ("t.c" if lang == "c11" else "t.cpp")
    src.write_text(f'#include "torch_fl/{header.name}"\n#include "torch_fl/{header.name}"\n')
    proc = subprocess.run([compiler, f"-std={lang}", *STRICT, str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_frozen_layouts_and_struct_sizes(tmp_path: Path) -> None:
    src = tmp_path / "layout.c"
    src.write_text("""
#include <stdio.h>
#include "torch_fl/plugin_api.h"
int main(void) {
  printf("%zu %zu %zu %zu\\n", sizeof(TFL_Value), sizeof(TFL_CommUniqueId),
         (size_t)TFL_Tensor_STRUCT_SIZE, (size_t)TFL_Api_STRUCT_SIZE);
  return 0;
}
""")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-std=c11", f"-I{INCLUDE}", str(src), "-o", str(exe)], check=True)
    value, unique_id, tensor, api = map(int, subprocess.check_output([str(exe)]).split())
    assert value == 32, value
    assert unique_id == 128, unique_id
    # struct_size stops at the last field, so appending fields never changes it.
    assert tensor == 8 * 2 + 4 * 4 + 8 * 4, tensor
    assert api == 8 + 4 + 4 + 8 * 8, api


def test_changelog_covers_the_current_version() -> None:
    text = (INCLUDE / "torch_fl" / "types.h").read_text()
    major = int(text.split("#define TFL_ABI_MAJOR")[1].split()[0])
    minor = int(text.split("#define TFL_ABI_MINOR")[1].split()[0])
    changelog = (INCLUDE / "torch_fl" / "ABI_CHANGELOG.md").read_text()
    assert f"## {major}.{minor}" in changelog, (major, minor)
