"""Tamper evidence for reports.

`seal` embeds a SHA-256 digest of the report's canonical form (the JSON without
its "integrity" member, keys sorted, no whitespace, UTF-8); `check` recomputes it.
When TORCH_FL_CONFORMANCE_KEY names a file holding a secret key, an HMAC-SHA256
over the same bytes is added and checked too.

What it protects against: accidental or careless edits of a report (a changed
outcome, level, number or header field, a truncated file) — any change of content
breaks the digest. With a key, also deliberate edits by anyone without the key.
What it does not: without a key, someone who edits the report on purpose can
recompute the digest (it is a checksum, not a signature); it cannot show that the
run itself was honest (a patched suite or plugin produces a valid report); and it
covers the JSON only — the HTML, Markdown and JUnit files are listed with their
SHA-256 in the JSON's "files" manifest, which `verify` checks when they are present.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

__all__ = ["canonical_bytes", "check", "seal"]

KEY_ENV = "TORCH_FL_CONFORMANCE_KEY"


def canonical_bytes(report: dict[str, Any]) -> bytes:
    body = {k: v for k, v in report.items() if k != "integrity"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=True).encode("utf-8")


def _key() -> bytes | None:
    path = os.environ.get(KEY_ENV)
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read().strip()


def seal(report: dict[str, Any]) -> dict[str, Any]:
    data = canonical_bytes(report)
    out: dict[str, Any] = {
        "algorithm": "sha256",
        "canonicalization": "JSON without 'integrity', sorted keys, compact separators, UTF-8",
        "digest": hashlib.sha256(data).hexdigest(),
    }
    key = _key()
    if key:
        out["hmac_sha256"] = hmac.new(key, data, hashlib.sha256).hexdigest()
    return out


def check(report: dict[str, Any]) -> list[str]:
    """Problems found; empty when the report is intact."""
    seal_ = report.get("integrity")
    if not isinstance(seal_, dict) or "digest" not in seal_:
        return ["the report has no integrity digest"]
    problems = []
    data = canonical_bytes(report)
    if hashlib.sha256(data).hexdigest() != seal_["digest"]:
        problems.append("content digest mismatch: the report was altered after it was written")
    if "hmac_sha256" in seal_:
        key = _key()
        if key is None:
            problems.append(f"the report carries an HMAC; set {KEY_ENV} to the key file to "
                            "check it")
        elif not hmac.compare_digest(hmac.new(key, data, hashlib.sha256).hexdigest(),
                                     seal_["hmac_sha256"]):
            problems.append("HMAC mismatch: altered, or sealed with a different key")
    return problems
