"""One rank of a scenario of torch_fl_conformance.ranks.scenarios (see the package)."""

from __future__ import annotations

import sys

from torch_fl_conformance.ranks import harness, scenarios

if __name__ == "__main__":
    sys.exit(harness.main(scenarios.SCENARIOS, broken=scenarios.BROKEN,
                              add_arguments=scenarios.add_arguments))
