"""Signed certification reports: `keygen`, `run --sign` / `sign`, `verify --key`.

The digest alone is tamper evidence only: a forger who turns failures into passes,
claims L3 and recomputes it gets a report `verify` calls intact. With the signer's
public key, `verify` refuses that report, one signed with another key, and one whose
signature was cut short, each with a message that says which.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FAKE_HOST, FAKE_TARGET, cli_env, load_report, run_cli
from cryptography.hazmat.primitives.asymmetric import ed25519
from torch_fl_conformance.report import integrity
from torch_fl_conformance.report.build import build_report
from torch_fl_conformance.report.write import write_all
from torch_fl_conformance.requirements import load_requirements

TARGET, HOST = FAKE_TARGET, FAKE_HOST
FAILING = ("TFL-MEM-002", "TFL-OPS-002")  # MUST requirements: the report reaches L0 only


def _write_report(directory: Path) -> Path:
    """A report of one test per L0/L1 requirement, two of them failing, as a run writes it."""
    tests = []
    for r in load_requirements().values():
        if r.level not in ("L0", "L1"):
            continue
        outcome = "FAIL" if r.id in FAILING else "PASS"
        if r.capability and r.capability not in TARGET["capabilities"]:
            outcome = "SKIP"
        tests.append({"id": f"{r.level}/test_x.py::test_{r.id}", "requirement": r.id,
                      "strength": r.strength, "level": r.level, "area": r.area.lower(),
                      "capability": r.capability, "outcome": outcome, "duration_s": 0.1,
                      "message": "differs" if outcome == "FAIL" else "", "detail": "",
                      "data": {}, "expectation": None})
    opts = {"level": "L1", "seed": 1, "timeout_s": 10.0, "samples": 1, "ops": None,
            "models": None, "certify": False, "expectations": None}
    report = build_report(target=TARGET, host=HOST, options=opts, tests=tests, op_stats=[],
                          stale=[], started=0.0, finished=1.0, deselected=0, workers=1,
                          restarts=0)
    write_all(report, str(directory))
    return directory / "report.json"


def _keygen(directory: Path, name: str) -> tuple[Path, Path]:
    r = run_cli("keygen", str(directory / name))
    assert r.returncode == 0, r.stdout + r.stderr
    return directory / name, directory / f"{name}.pub"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("keys")
    return {"signer": _keygen(d, "signer"), "other": _keygen(d, "other")}


@pytest.fixture()
def signed(tmp_path: Path, keys: dict[str, tuple[Path, Path]]) -> Path:
    path = _write_report(tmp_path / "out")
    r = run_cli("sign", str(path), "--key", str(keys["signer"][0]))
    assert r.returncode == 0, r.stdout + r.stderr
    return path


def _verify(path: Path, key: Path | None = None) -> Any:
    return run_cli("verify", str(path), *(["--key", str(key)] if key else []))


def _edit(path: Path, change: Any) -> None:
    report = json.loads(path.read_text(encoding="utf-8"))
    change(report)
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    r = run_cli("keygen", str(tmp_path / "release"))
    assert r.returncode == 0, r.stdout + r.stderr
    private, public = tmp_path / "release", tmp_path / "release.pub"
    mode = stat.S_IMODE(private.stat().st_mode)
    assert mode == 0o600, oct(mode)
    key = integrity.load_private_key(private)
    pub = integrity.load_public_key(public)
    assert isinstance(key, ed25519.Ed25519PrivateKey) and isinstance(pub, ed25519.Ed25519PublicKey)
    assert integrity.fingerprint(key.public_key()) == integrity.fingerprint(pub)
    assert integrity.fingerprint(pub) in r.stdout, r.stdout
    before = private.read_bytes()
    again = run_cli("keygen", str(private))
    assert again.returncode == 2 and "exists" in again.stderr, again.stdout + again.stderr
    assert private.read_bytes() == before, "keygen replaced an existing key"


def test_signed_report_verifies(signed: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    report = load_report(signed.parent)
    sig = integrity.signature_of(report)
    assert sig is not None and sig["algorithm"] == "ed25519", report["integrity"]
    pub = integrity.load_public_key(keys["signer"][1])
    assert sig["public_key_fingerprint"] == integrity.fingerprint(pub)
    # The signature is over exactly the bytes the digest covers.
    pub.verify(base64.b64decode(sig["value"]), integrity.canonical_bytes(report))
    assert report["integrity"]["digest"] == hashlib.sha256(
        integrity.canonical_bytes(report)).hexdigest()
    r = _verify(signed, keys["signer"][1])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "intact" in r.stdout and "signature valid" in r.stdout, r.stdout
    assert sig["public_key_fingerprint"] in r.stdout, r.stdout


def test_verify_without_key_says_signed_but_unchecked(signed: Path) -> None:
    r = _verify(signed)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "signed by key" in r.stdout and "NOT checked" in r.stdout, r.stdout


def _forge(report: dict[str, Any]) -> None:
    """Every failure a pass, level L3, the digest recomputed; the signature kept."""
    for t in report["tests"]:
        if t["outcome"] == "FAIL":
            t["outcome"], t["message"] = "PASS", ""
    report["summary"]["outcomes"]["PASS"] += report["summary"]["outcomes"]["FAIL"]
    report["summary"]["outcomes"]["FAIL"] = 0
    report["level"]["achieved"] = "L3"
    report["integrity"]["digest"] = hashlib.sha256(integrity.canonical_bytes(report)).hexdigest()


def test_forged_report_fails_verify_with_the_key(signed: Path,
                                                  keys: dict[str, tuple[Path, Path]]) -> None:
    assert load_report(signed.parent)["level"]["achieved"] == "L0"
    _edit(signed, _forge)
    # The recomputed digest fools verify without a key: it is tamper evidence only.
    r = _verify(signed)
    assert r.returncode == 0 and "level L3" in r.stdout and "NOT checked" in r.stdout, r.stdout
    r = _verify(signed, keys["signer"][1])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ALTERED" in r.stdout and "signature mismatch" in r.stdout, r.stdout
    assert "altered after it was signed" in r.stdout, r.stdout
    # ... and dropping the signature does not help.
    _edit(signed, lambda rep: rep["integrity"].pop("signature"))
    r = _verify(signed, keys["signer"][1])
    assert r.returncode == 1 and "not signed" in r.stdout, r.stdout


def test_report_signed_with_another_key_fails(tmp_path: Path,
                                              keys: dict[str, tuple[Path, Path]]) -> None:
    path = _write_report(tmp_path / "out")
    r = run_cli("sign", str(path), "--key", str(keys["other"][0]))
    assert r.returncode == 0, r.stdout + r.stderr
    r = _verify(path, keys["signer"][1])
    assert r.returncode == 1, r.stdout + r.stderr
    other = integrity.fingerprint(integrity.load_public_key(keys["other"][1]))
    assert "signed with another key" in r.stdout and other[:23] in r.stdout, r.stdout
    assert _verify(path, keys["other"][1]).returncode == 0


@pytest.mark.parametrize("cut", [4, 7], ids=["whole-base64-groups", "mid-group"])
def test_truncated_signature_fails(signed: Path, keys: dict[str, tuple[Path, Path]],
                                   cut: int) -> None:
    def truncate(report: dict[str, Any]) -> None:
        sig = report["integrity"]["signature"]
        sig["value"] = sig["value"][:-cut]

    _edit(signed, truncate)
    r = _verify(signed, keys["signer"][1])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "signature is truncated or malformed" in r.stdout, r.stdout
    if cut == 4:  # 84 base64 characters: 63 bytes
        assert "63 bytes where an Ed25519 signature has 64" in r.stdout, r.stdout


def test_sign_refuses_an_altered_report(tmp_path: Path,
                                        keys: dict[str, tuple[Path, Path]]) -> None:
    path = _write_report(tmp_path / "out")
    _edit(path, lambda rep: rep["level"].update(achieved="L3"))
    r = run_cli("sign", str(path), "--key", str(keys["signer"][0]))
    assert r.returncode == 2 and "refusing to sign" in r.stderr, r.stdout + r.stderr
    assert integrity.signature_of(load_report(path.parent)) is None


def test_public_and_private_keys_are_not_interchangeable(
        signed: Path, keys: dict[str, tuple[Path, Path]]) -> None:
    r = _verify(signed, keys["signer"][0])
    assert r.returncode == 2 and "is a private key" in r.stderr, r.stdout + r.stderr
    r = run_cli("sign", str(signed), "--key", str(keys["signer"][1]))
    assert r.returncode == 2 and "is a public key" in r.stderr, r.stdout + r.stderr
    r = _verify(signed, signed.parent / "no-such.pub")
    assert r.returncode == 2 and "no public key" in r.stderr, r.stdout + r.stderr


@pytest.mark.slow
def test_run_sign_signs_the_report_it_writes(tmp_path: Path, flemu_library: str,
                                              keys: dict[str, tuple[Path, Path]]) -> None:
    t0 = time.time()
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(tmp_path / "bad"),
                "--sign", str(tmp_path / "missing-key"), "--", "-k", "test_load")
    assert r.returncode == 2 and "keygen" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "bad").exists() and time.time() - t0 < 60, "a bad key cost a run"
    out = tmp_path / "out"
    r = run_cli("run", "--plugin", "flemu", "--level", "L0", "--report", str(out),
                "--sign", str(keys["signer"][0]), "--", "-k", "test_load")
    # A slice leaves most L0 requirements untested: no level, status 1; signed all the same.
    assert r.returncode == 1 and "signed: ed25519" in r.stdout, r.stdout + r.stderr
    r = _verify(out / "report.json", keys["signer"][1])
    assert r.returncode == 0 and "signature valid" in r.stdout, r.stdout + r.stderr


def test_missing_cryptography_is_explained(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "cryptography"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('cryptography hidden by the test')\n")
    env = cli_env(PYTHONPATH=os.pathsep.join(
        [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = run_cli("keygen", str(tmp_path / "k"), env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install cryptography" in r.stderr, r.stderr
    assert not (tmp_path / "k").exists()
