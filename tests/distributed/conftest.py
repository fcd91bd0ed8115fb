"""The distributed tests start their ranks as fresh interpreters running
scenarios.py (see ranks.py); this directory is importable for them."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
