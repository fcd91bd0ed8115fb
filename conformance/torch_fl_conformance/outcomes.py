"""Test outcomes of a certification run and how they count."""

from __future__ import annotations

__all__ = ["BAD", "OUTCOMES", "classify_report", "worst"]

PASS = "PASS"
FAIL = "FAIL"
ERROR = "ERROR"  # the test itself could not run (setup failure, suite import error)
SKIP = "SKIP"  # a capability is missing, or an expectation file says skip
XFAIL = "XFAIL"  # failed as an expectation file said it would
XPASS = "XPASS"  # passed although an expectation file said it would fail
CRASH = "CRASH"  # the worker process died inside the test
TIMEOUT = "TIMEOUT"  # the test ran past its time limit
NOT_RUN = "NOT_RUN"  # never started (the run was interrupted)
BLOCKED = "BLOCKED"  # not run: an earlier test hung in the kernel or operator it needs

OUTCOMES = (PASS, FAIL, ERROR, SKIP, XFAIL, XPASS, CRASH, TIMEOUT, NOT_RUN, BLOCKED)
# Outcomes that mean a requirement is not met.
BAD = frozenset({FAIL, ERROR, XFAIL, CRASH, TIMEOUT, NOT_RUN, BLOCKED})

TIMEOUT_MARK = "Timeout (>"  # pytest-timeout's failure message prefix


def classify_report(when: str, outcome: str, wasxfail: bool, message: str) -> str:
    """Maps a pytest phase report to an outcome."""
    if outcome == "skipped":
        return XFAIL if wasxfail else SKIP
    if outcome == "passed":
        return XPASS if wasxfail else PASS
    if TIMEOUT_MARK in message or "Timeout >" in message:
        return TIMEOUT
    return FAIL if when == "call" else ERROR


RANK = {PASS: 0, SKIP: 1, XPASS: 2, XFAIL: 3, NOT_RUN: 4, BLOCKED: 5, FAIL: 6, ERROR: 7,
        TIMEOUT: 8, CRASH: 9}


def worst(a: str, b: str) -> str:
    return a if RANK[a] >= RANK[b] else b
