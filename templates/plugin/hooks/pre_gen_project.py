"""Refuses answers the generated plugin could not work with, naming the rule each breaks.

cookiecutter renders the answers into this file before running it; a non-zero
exit stops generation before any file is written.
"""

from __future__ import annotations

import json
import keyword
import re
import sys

# The answers, as JSON rendered in by cookiecutter (escaped, so any text is safe here).
_CONTEXT = json.loads(r"""{{ cookiecutter | jsonify }}""")
ANSWERS: dict[str, str] = {
    key: str(_CONTEXT.get(key, ""))
    for key in ("vendor_name", "chip_name", "device_name", "package_slug", "c_prefix", "version")
}

# PyTorch's own device types: renaming PrivateUse1 to one of them cannot work.
# The same set torch_fl.register_device_plugin refuses.
RESERVED_DEVICES = frozenset(
    {
        "cpu",
        "cuda",
        "meta",
        "mps",
        "xpu",
        "xla",
        "hpu",
        "mtia",
        "ipu",
        "lazy",
        "vulkan",
        "fpga",
        "maia",
        "privateuseone",
        "hip",
        "ve",
        "ort",
        "opengl",
        "opencl",
        "ideep",
        "mkldnn",
    }
)
# Import names a plugin package must not shadow.
RESERVED_PACKAGES = frozenset(
    {"torch", "torch_fl", "torch_fl_conformance", "torchgen", "functorch"}
)
# Environment prefixes that belong to PyTorch and torch-fl.
RESERVED_PREFIXES = frozenset({"TORCH", "TORCH_FL", "PYTORCH"})

DEVICE_NAME = re.compile(r"[a-z_]+")
PACKAGE = re.compile(r"[a-z_][a-z0-9_]*")
C_PREFIX = re.compile(r"[A-Z][A-Z0-9_]*")
VERSION = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")


def check_text(field: str, value: str) -> list[str]:
    """Free text ends up in C string literals and TOML strings."""
    if not value.strip():
        return [f"{field} is empty: give a name"]
    bad = sorted({c for c in value if c in '"\\{}' or ord(c) < 0x20})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return [
            (
                f"{field} {value!r} contains {shown}: it is written into C and TOML strings; "
                "leave out quotes, backslashes, braces and control characters"
            )
        ]
    return []


def check_device_name(name: str) -> list[str]:
    if not DEVICE_NAME.fullmatch(name):
        suggestion = re.sub(r"[^a-z_]", "", name.lower()).strip("_")
        hint = f" (for example {suggestion!r})" if suggestion else ""
        return [
            (
                f"device_name {name!r} is refused: a torch-fl device name must match [a-z_]+, "
                "lowercase letters and underscores only; PyTorch accepts names such as 'fl2000' "
                f"when renaming PrivateUse1 but then cannot parse 'fl2000:0'. Choose another{hint}"
            )
        ]
    if name in RESERVED_DEVICES:
        return [
            (
                f"device_name {name!r} is one of PyTorch's built-in device types; "
                "choose a name of your own"
            )
        ]
    return []


def check_package(slug: str) -> list[str]:
    if not PACKAGE.fullmatch(slug) or keyword.iskeyword(slug):
        return [
            (
                f"package_slug {slug!r} is refused: it is the Python import name, so it must be "
                "lowercase letters, digits and underscores, not start with a digit and not be a "
                "Python keyword (for example 'torch_nova')"
            )
        ]
    if slug in RESERVED_PACKAGES:
        return [
            (
                f"package_slug {slug!r} would shadow the installed package of that name; "
                "choose another (for example 'torch_<device_name>')"
            )
        ]
    return []


def check_prefix(prefix: str) -> list[str]:
    if not C_PREFIX.fullmatch(prefix):
        return [
            (
                f"c_prefix {prefix!r} is refused: it prefixes the plugin's environment "
                "variables (<PREFIX>_DEVICE_COUNT), so it must match [A-Z][A-Z0-9_]* "
                "(for example 'NOVA')"
            )
        ]
    if prefix in RESERVED_PREFIXES:
        return [
            (
                f"c_prefix {prefix!r} is taken by PyTorch or torch-fl's own environment "
                "variables; choose your chip's name (for example 'NOVA')"
            )
        ]
    return []


def check_version(version: str) -> list[str]:
    if not VERSION.fullmatch(version):
        return [
            f"version {version!r} is not a version Python packaging accepts (for example '0.1.0')"
        ]
    return []


def main() -> int:
    problems = (
        check_text("vendor_name", ANSWERS["vendor_name"])
        + check_text("chip_name", ANSWERS["chip_name"])
        + check_device_name(ANSWERS["device_name"])
        + check_package(ANSWERS["package_slug"])
        + check_prefix(ANSWERS["c_prefix"])
        + check_version(ANSWERS["version"])
    )
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    if problems:
        print(
            "No project was generated; run cookiecutter again with other answers.", file=sys.stderr
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
