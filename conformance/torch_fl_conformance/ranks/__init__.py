"""Multi-rank runs: torch.distributed scenarios on ranks that are fresh interpreters.

One harness serves the L3 collectives tests and the project's distributed tests:

- `harness`: starts WORLD rank processes (never fork: a plugin does not survive
  it), bounds them by a time limit, and collects what each rank recorded; the rank
  side's entry (`main`) joins the process group and runs a named scenario.
- `checks`: the values ranks exchange (small integers, exact in every dtype) and
  the comparison of what arrived.
- `scenarios`: the scenarios both use: the L3 collectives, DDP training parity,
  a collective a peer never joins, a peer that dies.

`python -m torch_fl_conformance.ranks SCENARIO --rank R --world N --store PATH
--out FILE [--device NAME --library PATH]` runs one rank of a scenario.
"""
