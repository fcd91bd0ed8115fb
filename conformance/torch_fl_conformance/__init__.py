"""torch-fl conformance: certification of any torch-fl plugin."""

from __future__ import annotations

__version__ = "0.1.0"
