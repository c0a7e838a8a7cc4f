"""Bundle bytes the single-byte flip test cannot reach, and quarantined tails in bundles."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes
from harness.verify.layout import MANIFEST_SIG, quarantine_member
from harness.verify.policy import TrustPolicy
from harness.verify.report import Report

from .corpus import Bundle, read_members, write_tar
from .evidence_helpers import make_keys


def _verify(data: bytes, keys: OperatorKeys) -> Report:
    return verify_bundle(io.BytesIO(data), pins=TrustPolicy(frozenset({keys.key_id}), "t"))


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[bytes, OperatorKeys]:
    keys = make_keys()
    with RunRecorder(tmp_path / "state", "run-1", keys) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "p"}})
    data = export_bundle(tmp_path / "state", tmp_path / "b.tar", keys).path.read_bytes()
    assert _verify(data, keys).status.value == "verified"
    return data, keys


def test_appended_zero_record_is_refused(bundle: tuple) -> None:
    data, keys = bundle
    report = _verify(data + bytes(tarfile.RECORDSIZE), keys)
    assert report.exit_code == 4
    assert "zero bytes after the last member" in report.failure.reason


def test_members_in_another_order_are_refused(bundle: tuple) -> None:
    data, keys = bundle
    members = read_members(data)
    reordered = write_tar([members[1], members[0], *members[2:]])
    report = _verify(reordered, keys)
    assert report.exit_code == 4
    assert "exporter's order" in report.failure.reason


def test_extra_signature_line_in_manifest_sig_is_refused(bundle: tuple) -> None:
    data, keys = bundle
    members = dict(read_members(data))
    other = make_keys(7).note_signer()
    text = members[MANIFEST_SIG].split(b"\n\n", 1)[0] + b"\n"
    members[MANIFEST_SIG] = members[MANIFEST_SIG] + other.sign(text).split(b"\n\n", 1)[1]
    report = _verify(Bundle(members, keys).tar(), keys)
    assert report.exit_code == 1
    assert "exactly one" in report.failure.reason


def _torn_bundle(tmp_path: Path) -> tuple[bytes, OperatorKeys]:
    keys = make_keys()
    state = tmp_path / "torn-state"
    with RunRecorder(state, "run-1", keys) as run:
        run.record("audit", "event", {"name": "a", "data": {}})
    store = state / "runs" / "run-1" / "audit.jsonl"
    with store.open("ab") as handle:
        handle.write(b'{"body":{"data":{},"name":"tor')  # a crash mid-append
    with RunRecorder(state, "run-1", keys) as run:
        run.record("audit", "event", {"name": "b", "data": {}})
    data = export_bundle(state, tmp_path / "torn.tar", keys).path.read_bytes()
    return data, keys


def test_quarantined_tail_travels_and_verifies(tmp_path: Path) -> None:
    data, keys = _torn_bundle(tmp_path)
    report = _verify(data, keys)
    assert report.status.value == "verified", report.failure
    audit = next(s for s in report.stores if s.store == "audit")
    assert audit.kinds == {"event": 2, "store.recovered": 1}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda e: e.update(data_b64=base64.b64encode(b"other").decode()), "length and SHA-256"),
        (lambda e: e.update(store="lineage"), "not 'audit'"),
        (lambda e: e.update(found="yesterday"), "found must be"),
        (lambda e: e.update(offset=e["offset"] + 1), "do not match the store.recovered"),
        (lambda e: e.update(extra=1), "exactly the members"),
    ],
)
def test_quarantine_entries_are_fully_checked(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    data, keys = _torn_bundle(tmp_path)
    edited = Bundle.from_tar(data, keys)
    member = quarantine_member("run-1", "audit")
    entry = json.loads(edited.members[member])
    change(entry)
    edited.members[member] = canonical_bytes(entry) + b"\n"
    report = _verify(edited.resign(), keys)
    assert report.exit_code == 1
    assert reason in report.failure.reason
