"""The append path's shortcuts give exactly what the slow, obvious path gives.

``StoreWriter`` composes each line from canonical parts (not one ``encode`` of the record) and
checks bodies with per-kind closures (not ``check_body``'s walk). These tests hold both to the
reference: every line equals the RFC 8785 serialization (the ``rfc8785`` package) of the whole
record, and the closure check accepts and refuses exactly what ``check_body`` does, with its
message.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.bodycheck import BodyChecker
from harness.receipts.store import StoreWriter, extend_tree
from harness.verify.canonical import jcs_bytes
from harness.verify.chain import GENESIS_MAC, derive_store_key
from harness.verify.errors import SchemaError
from harness.verify.merkle import CompactRange, leaf_hash
from harness.verify.records import BODY_SPECS, RECORD_VERSION, check_body, split_mac

from .evidence_helpers import MASTER, checkpoints_of, make_keys, verify_bytes
from .test_records import SAMPLE_BODIES

TIME = "2026-11-30T05:24:23.123456Z"
RUN = "run-1.a_b"
WRONG_VALUES: list[Any] = [
    None, 0, -1, 7, True, False, 1.5, "", "x", "0" * 64, "100644", "done", TIME,
    [], ["x"], [0], [-1], ["0" * 64], {}, {"a": 1}, {"a": 1.5},
]  # fmt: skip


def _verdict(check: Any, store: str, kind: str, body: Any) -> str | None:
    try:
        check(store, kind, body)
    except SchemaError as exc:
        return str(exc)
    return None


def _fast(store: str, kind: str, body: Any) -> None:
    BodyChecker(store).check(kind, body)


def _cases() -> list[tuple[str, str, Any]]:
    cases: list[tuple[str, str, Any]] = []
    for (store, kind), sample in SAMPLE_BODIES.items():
        cases.append((store, kind, sample))
        cases.append((store, kind, [sample]))  # not an object
        cases.append((store, kind, {**sample, "unknown": 1}))
        for name in sample:
            without = dict(sample)
            del without[name]
            cases.append((store, kind, without))
        for name in BODY_SPECS[store][kind]:
            for value in WRONG_VALUES:
                cases.append((store, kind, {**sample, name: value}))
    cases.append(("audit", "no.such.kind", {}))
    cases.append(("nostore", "event", {}))
    return cases


def test_fast_body_check_gives_check_body_verdicts() -> None:
    """Catches a closure that lets through what ``check_body`` refuses (a missing required
    member, an unknown member, a member its checker refuses) or refuses what it accepts."""
    refused = accepted = 0
    for store, kind, body in _cases():
        expected = _verdict(check_body, store, kind, body)
        assert _verdict(_fast, store, kind, body) == expected, (store, kind, body)
        refused += expected is not None
        accepted += expected is None
    assert refused > 1000 and accepted > len(SAMPLE_BODIES)  # both verdicts well exercised


def test_optional_members_get_check_body_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The closure for kinds with optional members (none in format 2 today, so a spec is
    added for the test, seen by both checks): absent is fine, present is checked, required
    still required, unknown still refused."""
    spec = {"need": (True, checker_of("_str")), "maybe": (False, checker_of("_nat"))}
    monkeypatch.setitem(BODY_SPECS["audit"], "test.optional", spec)
    bodies: list[Any] = [
        {"need": "x"}, {"need": "x", "maybe": 3}, {"need": "x", "maybe": -1},
        {"need": "x", "maybe": None}, {"maybe": 3}, {}, {"need": "", "maybe": 3},
        {"need": "x", "other": 1}, {"need": "x", "maybe": 3, "other": 1},
    ]  # fmt: skip
    verdicts = [_verdict(check_body, "audit", "test.optional", body) for body in bodies]
    assert verdicts[:2] == [None, None] and all(verdicts[2:])
    for body, expected in zip(bodies, verdicts, strict=True):
        assert _verdict(_fast, "audit", "test.optional", body) == expected, body


def checker_of(name: str) -> Any:
    from harness.verify import recordkinds

    return getattr(recordkinds, name)


TRICKY_DATA: dict[str, Any] = {
    # Keys that sort differently by UTF-16 code units (RFC 8785) and by code points: U+1F600
    # is a surrogate pair (0xD83D...) and so comes before U+FF5A in RFC 8785's order.
    "\U0001f600": "emoji \U0001f600 value",
    "\uff5a": 1,
    "z": 'quote " backslash \\ newline \n tab \t nul \x00 del \x7f sep \u2028 \u2029',
    "\u00e9": [1, -2, 9007199254740991, True, None, {"": ""}],
    "a": {"nested": {"deeper": ["\ud7ff", "\ue000"]}},
}


def _records() -> list[tuple[str, str, dict[str, Any]]]:
    rows = [(store, kind, copy.deepcopy(body)) for (store, kind), body in SAMPLE_BODIES.items()]
    rows.append(("audit", "event", {"name": "tricky", "data": TRICKY_DATA}))
    rows.append(("audit", "event", {"name": "plain \U0001f600", "data": {}}))
    return rows


@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_lines_are_the_canonical_form_of_the_whole_record(tmp_path: Path, batch: int) -> None:
    """Catches a composed line that differs from RFC 8785's serialization of the record (a
    member out of order, an escape, a non-BMP key order), a MAC over other bytes than the
    record without ``mac``, and an acknowledgement that does not describe the written line."""
    rows = _records()
    keys = make_keys()
    for store in BODY_SPECS:
        mine = [(kind, body) for row_store, kind, body in rows if row_store == store]
        path = tmp_path / f"{store}.jsonl"
        writer = StoreWriter(path, store=store, run_id=RUN, hmac_master=MASTER, clock=lambda: TIME)
        with writer:
            acks = []
            for start in range(0, len(mine), batch):
                acks += writer.append_many(mine[start : start + batch])
            writer.checkpoint(keys.note_signer())
        lines = path.read_bytes().split(b"\n")[:-1]
        assert len(lines) == len(mine) == len(acks)
        store_key = derive_store_key(MASTER, store, RUN)
        prev = GENESIS_MAC
        for seq, ((kind, body), line, ack) in enumerate(zip(mine, lines, acks, strict=True)):
            mac_hex, unsigned = split_mac(line)
            record = {
                "body": body, "kind": kind, "run": RUN, "seq": seq, "store": store,
                "time": TIME, "v": RECORD_VERSION,
            }  # fmt: skip
            assert unsigned == jcs_bytes(record)
            assert line == jcs_bytes({**record, "mac": mac_hex})
            assert mac_hex == hmac.new(store_key, prev + unsigned, hashlib.sha256).hexdigest()
            prev = bytes.fromhex(mac_hex)
            assert ack == (seq, mac_hex, leaf_hash(line), line, TIME)
        result = verify_bytes(
            path.read_bytes(), checkpoints_of(writer, keys), store=store, run_id=RUN
        )
        assert result.size == len(mine) and result.keyed


def test_acknowledgements_are_immutable(tmp_path: Path) -> None:
    with StoreWriter(
        tmp_path / "audit.jsonl", store="audit", run_id=RUN, hmac_master=MASTER
    ) as writer:
        ack = writer.append("event", {"name": "x", "data": {}})
    with pytest.raises(AttributeError):
        ack.seq = 5  # type: ignore[misc]


def test_extend_tree_reaches_the_leaf_by_leaf_state() -> None:
    """Catches a batch cut into subtrees that are not aligned at the tree's size, or of the
    wrong height: every size, peak and root must be those of appending one leaf at a time."""
    leaves = [hashlib.sha256(b"%d" % i).digest() for i in range(300)]
    for first in range(0, 70):
        for batch in (1, 2, 3, 5, 8, 13, 64, 100, 230 - first):
            by_leaf, batched = CompactRange(), CompactRange()
            for leaf in leaves[:first]:
                by_leaf.append(leaf)
                batched.append(leaf)
            for leaf in leaves[first : first + batch]:
                by_leaf.append(leaf)
            extend_tree(batched, leaves[first : first + batch])
            assert (batched.size, batched.peaks) == (by_leaf.size, by_leaf.peaks), (first, batch)
            assert batched.root() == by_leaf.root()
    empty = CompactRange()
    extend_tree(empty, [])
    assert empty.size == 0 and empty.root() == CompactRange().root()
