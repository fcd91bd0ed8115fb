"""Tamper evidence and signatures for reports.

`seal` embeds a SHA-256 digest of the report's canonical form (the JSON without
its "integrity" member, keys sorted, no whitespace, UTF-8); `check` recomputes it.
When TORCH_FL_CONFORMANCE_KEY names a file holding a secret key, an HMAC-SHA256
over the same bytes is added and checked too. `sign` adds an Ed25519 signature
over the same bytes (the `cryptography` package's Ed25519, nothing of our own),
naming the fingerprint of the public key it verifies with; `check` with that
public key verifies it.

What each protects against. The digest: accidental or careless edits (a changed
outcome, level, number or header field, a truncated file) — any change of content
breaks it; it is tamper evidence only, since anyone who edits the report on purpose
can recompute it (a checksum, not a signature). The HMAC: also deliberate edits by
anyone without the shared secret, but whoever can check it can forge it. The
signature: deliberate edits by anyone without the private key, checked by anyone
with the public key, who cannot sign. None shows that the run itself was honest (a
patched suite or plugin produces a valid report), and all cover the JSON only — the
HTML, Markdown and JUnit files are listed with their SHA-256 in the JSON's "files"
manifest, which `verify` checks when they are present.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["SigningError", "canonical_bytes", "check", "fingerprint", "generate_key_pair",
           "load_private_key", "load_public_key", "seal", "sign", "sign_file", "signature_of"]

KEY_ENV = "TORCH_FL_CONFORMANCE_KEY"
SIGNATURE_ALGORITHM = "ed25519"
SIGNATURE_BYTES = 64  # an Ed25519 signature (RFC 8032)
PUBLIC_SUFFIX = ".pub"


class SigningError(Exception):
    """A key or a report cannot be used for signing; the message says why and what to do."""


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


def check(report: dict[str, Any], public_key: Any = None) -> list[str]:
    """Problems found; empty when the report is intact. With `public_key` (from
    load_public_key), the report must also carry a signature it verifies."""
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
    if public_key is not None:
        problems += _signature_problems(seal_.get("signature"), data, public_key)
    return problems


# -- Ed25519 signatures ---------------------------------------------------------
def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SigningError("signing and checking signatures need the 'cryptography' package: "
                           "pip install cryptography (it is in requirements-dev.txt)") from None
    return ed25519


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: Any) -> str:
    """'sha256:' and the SHA-256 of the raw 32-byte Ed25519 public key."""
    return "sha256:" + hashlib.sha256(_raw_public(public_key)).hexdigest()


def _read_pem(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        hint = (f"create a key pair with `torchfl-conformance keygen {path}`"
                if what == "private" else "keygen writes it beside the private key, as KEY.pub")
        raise SigningError(f"no {what} key at '{path}': {hint}") from None
    except OSError as exc:
        raise SigningError(f"cannot read the {what} key '{path}': {exc.strerror}") from None


def load_private_key(path: str | os.PathLike[str]) -> Any:
    """The Ed25519 private key in a PEM file (as `torchfl-conformance keygen` writes)."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    data = _read_pem(path, "private")
    if b"PUBLIC KEY" in data:
        raise SigningError(f"'{path}' is a public key; signing takes the private key "
                           "(keygen writes KEY, private, and KEY.pub, public)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"'{path}' is not an unencrypted PEM private key ({exc}); "
                           "create one with `torchfl-conformance keygen`") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningError(f"'{path}' holds a {type(key).__name__}, not an Ed25519 key; "
                           "create one with `torchfl-conformance keygen`")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Any:
    """The Ed25519 public key in a PEM file (KEY.pub of `torchfl-conformance keygen`)."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    data = _read_pem(path, "public")
    if b"PRIVATE KEY" in data:
        raise SigningError(f"'{path}' is a private key; verifying takes the public key "
                           f"(the {PUBLIC_SUFFIX} file keygen wrote beside it) — keep the "
                           "private key where only the signer can read it")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"'{path}' is not a PEM public key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise SigningError(f"'{path}' holds a {type(key).__name__}, not an Ed25519 key")
    return key


def generate_key_pair(path: str | os.PathLike[str]) -> tuple[Path, Path, str]:
    """Writes a new Ed25519 key pair: `path` (private, PKCS#8 PEM, mode 0600) and
    `path`.pub (public, PEM). Refuses to replace an existing file. Returns both
    paths and the public key's fingerprint."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    private = Path(path)
    public = private.with_name(private.name + PUBLIC_SUFFIX)
    for p in (private, public):
        if p.exists():
            raise SigningError(f"'{p}' exists; keygen never replaces a key (a report signed "
                               "with it could no longer be checked): choose another name")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise SigningError(f"cannot create '{private}': {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)  # whatever the umask: only the owner reads it
        f.write(pem)
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public, fingerprint(key.public_key())


def sign(report: dict[str, Any], private_key: Any) -> dict[str, Any]:
    """Adds an Ed25519 signature over the canonical bytes (those the digest covers)
    to report["integrity"]; returns the signature member."""
    if not isinstance(report.get("integrity"), dict):
        raise SigningError("the report has no integrity member to sign into; sign the "
                           "report.json a run writes")
    signature = {
        "algorithm": SIGNATURE_ALGORITHM,
        "public_key_fingerprint": fingerprint(private_key.public_key()),
        "value": base64.b64encode(private_key.sign(canonical_bytes(report))).decode("ascii"),
    }
    report["integrity"]["signature"] = signature
    return signature


def sign_file(report_path: str | os.PathLike[str], private_key: Any) -> dict[str, Any]:
    """Signs a report.json in place, after checking its digest (a report altered
    since it was written is not signed). Returns the signature member."""
    path = Path(report_path)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SigningError(f"cannot read the report '{path}': {exc}") from None
    problems = check(report)
    if problems:
        raise SigningError(f"refusing to sign '{path}': " + "; ".join(problems))
    signature = sign(report, private_key)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return signature


def signature_of(report: dict[str, Any]) -> dict[str, Any] | None:
    """The report's signature member, None when it is not signed."""
    seal_ = report.get("integrity")
    sig = seal_.get("signature") if isinstance(seal_, dict) else None
    return sig if isinstance(sig, dict) else None


def _short(fp: str) -> str:
    return fp[:23] + "…" if len(fp) > 24 else fp


def _signature_problems(sig: Any, data: bytes, public_key: Any) -> list[str]:
    from cryptography.exceptions import InvalidSignature

    mine = fingerprint(public_key)
    if sig is None:
        return [f"the report is not signed: --key asks for a signature by {_short(mine)} "
                "(sign with `run --sign KEY` or `torchfl-conformance sign`)"]
    if not isinstance(sig, dict) or sig.get("algorithm") != SIGNATURE_ALGORITHM:
        algorithm = sig.get("algorithm") if isinstance(sig, dict) else type(sig).__name__
        return [f"signature: algorithm {algorithm!r} is not {SIGNATURE_ALGORITHM}, the one "
                "this suite signs and checks"]
    try:
        value = base64.b64decode(str(sig.get("value", "")), validate=True)
    except ValueError as exc:
        return [f"the signature is truncated or malformed (not valid base64: {exc})"]
    if len(value) != SIGNATURE_BYTES:
        return [f"the signature is truncated or malformed: {len(value)} bytes where an "
                f"Ed25519 signature has {SIGNATURE_BYTES}"]
    named = str(sig.get("public_key_fingerprint", ""))
    try:
        public_key.verify(value, data)
    except InvalidSignature:
        if named != mine:
            return [f"signed with another key: the report names key {_short(named)}, "
                    f"--key is {_short(mine)} (or the report was altered as well)"]
        return ["signature mismatch: the report's content was altered after it was signed "
                "(anyone can recompute the digest; nobody without the private key can "
                "recompute the signature)"]
    if named != mine:
        return [f"the signature verifies with --key ({_short(mine)}) but names key "
                f"{_short(named)}: the integrity member was edited"]
    return []
