"""Everyday tooling behind the `torchfl` command: plugin listing, the health
check, the CUDA-usage scanner, capability probing and the op-statistics view."""

from __future__ import annotations
