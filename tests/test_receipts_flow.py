"""Receipts end to end: export adds them, the bundle verifier binds them, the receipt CLI
checks one artifact file, and every link of the binding fails when tampered."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.bundle import export_bundle, receipt_for_path
from harness.receipts.dsse import sign_envelope
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.errors import VerificationError
from harness.verify.layout import attestation_member, receipt_member
from harness.verify.policy import TrustPolicy
from harness.verify.receipt import ReceiptError, check_artifact, verify_receipt

from .corpus import Bundle
from .evidence_helpers import make_keys

CONTENT = {"src/app.py": b"print('v2')\n", "README.md": b"# demo\n"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: str, data: bytes, step: int) -> tuple[str, dict[str, Any]]:
    return (
        "artifact.write",
        {
            "actor": "agent",
            "model": "m",
            "mode": "100644",
            "parents": [],
            "parent_mode": None,
            "path": path,
            "sha256": _sha(data),
            "step": step,
            "task": "t1",
        },
    )


def _record(state: Path, keys: OperatorKeys, run_id: str = "run-1") -> None:
    with RunRecorder(state, run_id, keys) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "p"}})
        lineage = run.store("lineage")
        lineage.append(*_write("src/app.py", b"print('v1')\n", 0))
        lineage.append(*_write("tmp/scratch.txt", b"x", 1))
        lineage.append(
            "artifact.delete",
            {
                "actor": "agent",
                "model": None,
                "parents": [_sha(b"x")],
                "parent_mode": "100644",
                "path": "tmp/scratch.txt",
                "step": 2,
                "task": "t1",
            },
        )
        lineage.checkpoint(keys.note_signer())
        lineage.append(*_write("src/app.py", CONTENT["src/app.py"], 3))
        lineage.append(*_write("README.md", CONTENT["README.md"], 4))
        run.record("audit", "run.end", {"outcome": "succeeded"})


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, OperatorKeys, bytes]:
    keys = make_keys()
    state = tmp_path / "state"
    _record(state, keys)
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return state, keys, bundle.read_bytes()


def _verify(data: bytes, keys: OperatorKeys) -> Any:
    return verify_bundle(io.BytesIO(data), pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def test_export_carries_receipts_for_final_artifacts_only(exported: tuple) -> None:
    _, keys, data = exported
    bundle = Bundle.from_tar(data, keys)
    run = bundle.manifest["runs"][0]
    # src/app.py final write is seq 3, README.md seq 4; the deleted scratch file has none.
    assert run["receipts"] == [3, 4]
    for seq in (3, 4):
        receipt = verify_receipt(bundle.members[receipt_member("run-1", seq)])
        assert receipt.leaf_index == seq and receipt.tree_size == 5
    report = _verify(data, keys)
    assert report.status.value == "verified", report.failure
    assert report.check("receipts").outcome.value == "passed"


def _reseal(data: bytes, keys: OperatorKeys, edit: Callable[[Bundle], None]) -> bytes:
    bundle = Bundle.from_tar(data, keys)
    edit(bundle)
    return bundle.resign()


def _receipt_doc(bundle: Bundle, seq: int) -> dict[str, Any]:
    doc: dict[str, Any] = parse_canonical(bundle.members[receipt_member("run-1", seq)])
    return doc


def _set_receipt(bundle: Bundle, seq: int, doc: dict[str, Any]) -> None:
    bundle.members[receipt_member("run-1", seq)] = canonical_bytes(doc)


def _swap_receipts(bundle: Bundle) -> None:
    a, b = _receipt_doc(bundle, 3), _receipt_doc(bundle, 4)
    _set_receipt(bundle, 3, b)
    _set_receipt(bundle, 4, a)


def _flip_last_byte(bundle: Bundle, member: str) -> None:
    data = bundle.members[member]
    bundle.members[member] = data[:-1] + bytes([data[-1] ^ 0x01])


def _resign_statement(bundle: Bundle, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    member = attestation_member("run-1", f"{name}.dsse.json")
    envelope = json.loads(bundle.members[member])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    change(statement)
    bundle.members[member] = sign_envelope(
        envelope["payloadType"],
        canonical_bytes(statement),
        bundle.keys.signing_key,
        keyid=bundle.keys.key_id,
    )


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_swap_receipts, "does not match this bundle's lineage log \\(leaf index"),
        (
            lambda b: b.members.pop(receipt_member("run-1", 4)),
            "receipts/00000000000000000004.json: required by the runs but absent",
        ),
        (
            lambda b: _resign_statement(
                b, "lineage", lambda s: s["subject"][0]["digest"].update(sha256="0" * 64)
            ),
            "subjects are not exactly",
        ),
        (
            lambda b: _resign_statement(
                b, "run-summary", lambda s: s["predicate"]["stores"]["audit"].update(records=9)
            ),
            "does not state exactly what the verified records hold",
        ),
        (
            lambda b: _resign_statement(
                b, "run-summary", lambda s: s["predicate"]["stores"]["control"].update(records=True)
            ),
            "does not state exactly",
        ),
        (
            lambda b: _resign_statement(
                b, "lineage", lambda s: s["predicate"]["artifacts"][0].update(actor="someone")
            ),
            "does not state exactly",
        ),
        (
            lambda b: _resign_statement(
                b,
                "provenance",
                lambda s: s["predicate"]["runDetails"]["builder"].update(id="urn:evil"),
            ),
            "does not state exactly",
        ),
        (
            lambda b: _resign_statement(
                b, "run-summary", lambda s: s["predicate"].update(producer="other 9.9")
            ),
            "does not state exactly",
        ),
        (
            lambda b: _flip_last_byte(b, attestation_member("run-1", "run-summary.cose")),
            "run-summary.cose",
        ),
    ],
)
def test_bundle_receipt_bindings_fail_when_broken(
    exported: tuple, edit: Callable[[Bundle], None], reason: str
) -> None:
    _, keys, data = exported
    report = _verify(_reseal(data, keys, edit), keys)
    assert report.exit_code == 1
    assert report.failure is not None
    assert report.failure.check in {"receipts", "members"}
    assert __import__("re").search(reason, report.failure.reason), report.failure.reason


def test_receipt_from_another_run_is_refused(tmp_path: Path, exported: tuple) -> None:
    _, keys, data = exported
    other_state = tmp_path / "other"
    _record(other_state, keys, run_id="run-1")  # same run id and key, different run
    _, foreign = receipt_for_path(other_state, keys, "src/app.py")

    def swap(bundle: Bundle) -> None:
        bundle.members[receipt_member("run-1", 3)] = foreign

    report = _verify(_reseal(data, keys, swap), keys)
    assert report.failure is not None and report.failure.check == "receipts"
    assert "does not match this bundle's lineage log" in report.failure.reason


# ---- one receipt against one file -------------------------------------------------------------


@pytest.fixture
def single(tmp_path: Path) -> tuple[OperatorKeys, bytes]:
    keys = make_keys()
    state = tmp_path / "state"
    _record(state, keys)
    run_id, data = receipt_for_path(state, keys, "src/app.py")
    assert run_id == "run-1"
    return keys, data


def test_receipt_verifies_and_binds_the_artifact(single: tuple) -> None:
    keys, data = single
    receipt = verify_receipt(data)
    assert receipt.signer_key_id == keys.key_id
    check_artifact(receipt, CONTENT["src/app.py"], "src/app.py")
    with pytest.raises(ReceiptError, match="SHA-256"):
        check_artifact(receipt, b"print('edited')\n", "src/app.py")
    with pytest.raises(ReceiptError, match=r"not 'other\.py'"):
        check_artifact(receipt, CONTENT["src/app.py"], "other.py")


def _flip_hex(value: str) -> str:
    return ("0" if value[0] != "0" else "1") + value[1:]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(leaf_index=d["leaf_index"] - 1), "seq 3 is not leaf index 2"),
        (lambda d: d.update(tree_size=d["tree_size"] + 1), "seals 5 records"),
        (lambda d: d["audit_path"].__setitem__(0, _flip_hex(d["audit_path"][0])), "inclusion"),
        (lambda d: d.update(record=d["record"].replace('"step":3', '"step":4')), "inclusion"),
        (lambda d: d.update(checkpoint=d["checkpoint"].replace("\n5\n", "\n6\n")), "checkpoint"),
        (lambda d: d.update(signer=make_keys(3).note_signer().verifier_key()), "checkpoint"),
        (lambda d: d.update(run="run-2"), "not this run's lineage"),
        (lambda d: d.update(cose=d["cose"][:-8] + "AAAAAAA="), "COSE"),
        (lambda d: d.update(v=1), "unsupported receipt"),
        (lambda d: d.update(extra=1), "members must be"),
    ],
)
def test_receipt_tampering_is_refused(
    single: tuple, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    _, data = single
    doc = parse_canonical(data)
    change(doc)
    with pytest.raises(VerificationError, match=reason):
        verify_receipt(canonical_bytes(doc))


def test_receipt_cose_must_carry_the_same_proof(single: tuple) -> None:
    """A valid COSE receipt for another leaf of the same tree must not pass as this one's."""
    keys, data = single
    doc = parse_canonical(data)
    other_doc = parse_canonical(data)
    # Forge: keep everything, but give the JSON proof a different (wrong) leaf index.
    other_doc["leaf_index"] = 4
    with pytest.raises(VerificationError):
        verify_receipt(canonical_bytes(other_doc))
    assert verify_receipt(canonical_bytes(doc)).leaf_index == 3
    del keys


def _cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _receipt_on_disk(tmp_path: Path) -> tuple[Path, OperatorKeys, list[Any]]:
    """A repository holding src/app.py as a recorded run wrote it, the operator keys (made by
    ``harness keys init``), its receipt from ``harness receipt``, and the verify command."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    state = tmp_path / "state"
    made = _cli("harness.cli", "keys", "init", "--dir", state / "keys", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    from harness.receipts.keys import load_keys

    keys = load_keys(state / "keys")
    _record(state, keys)
    (repo / "src" / "app.py").write_bytes(CONTENT["src/app.py"])
    wrote = _cli(
        "harness.cli", "receipt", "src/app.py", "--state", state, "--out", tmp_path / "r.json",
        cwd=repo,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    return (
        repo,
        keys,
        ["harness.verify.cli", "receipt", tmp_path / "r.json", "--artifact", "src/app.py"],
    )


def test_receipt_commands_end_to_end(tmp_path: Path) -> None:
    repo, keys, verify = _receipt_on_disk(tmp_path)
    ok = _cli(*verify, "--trusted-key", keys.key_id, "--format", "json", cwd=repo)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["status"] == "verified"
    assert _cli(*verify, cwd=repo).returncode == 3
    (repo / "src" / "app.py").write_bytes(b"print('hand edit')\n")
    edited = _cli(*verify, "--trusted-key", keys.key_id, cwd=repo)
    assert edited.returncode == 1
    assert "changed after the agent wrote it" in edited.stdout
    missing = _cli(*verify[:-1], "src/none.py", "--trusted-key", keys.key_id, cwd=repo)
    assert missing.returncode == 4


def _receipt_formats(verify: list[Any], key: list[Any], repo: Path) -> tuple[Any, ...]:
    sarif = _cli(*verify, *key, "--format", "sarif", cwd=repo)
    junit = _cli(*verify, *key, "--format", "junit", cwd=repo)
    return sarif.returncode, json.loads(sarif.stdout), junit.returncode, ET.fromstring(junit.stdout)


def test_receipt_sarif_and_junit_place_the_file(tmp_path: Path) -> None:
    # the per-file CI check in the formats code scanning and test reports read: nothing to
    # report when verified and pinned; a warning when the signer is not pinned; an error at
    # the file's repository path (under %SRCROOT%) when it changed after the agent wrote it
    repo, keys, verify = _receipt_on_disk(tmp_path)
    pinned = ["--trusted-key", keys.key_id]

    code, sarif, jcode, suite = _receipt_formats(verify, pinned, repo)
    assert code == jcode == 0
    run = sarif["runs"][0]
    assert sarif["version"] == "2.1.0" and run["results"] == []
    assert run["tool"]["driver"]["rules"][0]["id"] == "receipt"
    assert run["invocations"] == [{"executionSuccessful": True, "exitCode": 0}]
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert suite.find("testcase").get("name") == "src/app.py"

    code, sarif, jcode, suite = _receipt_formats(verify, [], repo)
    assert code == jcode == 3
    [result] = sarif["runs"][0]["results"]
    assert result["level"] == "warning" and "not pinned" in result["message"]["text"]
    assert suite.get("failures") == "1"

    (repo / "src" / "app.py").write_bytes(b"print('hand edit')\n")
    code, sarif, jcode, suite = _receipt_formats(verify, pinned, repo)
    assert code == jcode == 1
    [result] = sarif["runs"][0]["results"]
    assert result["level"] == "error" and result["ruleId"] == "receipt"
    assert "changed after the agent wrote it" in result["message"]["text"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "src/app.py", "uriBaseId": "%SRCROOT%"}
    assert "%SRCROOT%" in sarif["runs"][0]["originalUriBaseIds"]
    failure = suite.find("testcase/failure")
    assert failure is not None and "changed after the agent wrote it" in failure.get("message")
