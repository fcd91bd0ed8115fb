from __future__ import annotations

import sys

from torch_fl_conformance.cli import main

sys.exit(main())
