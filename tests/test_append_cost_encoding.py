"""The cheaper append path (issue 14) writes exactly the bytes of the obvious definition.

``StoreWriter.append_many`` now reads a caller's plain ``dict`` body without copying it, takes
the lock without a generator and skips the catch-up read when the file has not grown. These
hold it, on arbitrary bodies cut into arbitrary group commits (as the runtime's ticks cut
them), to the definition: every line is
the RFC 8785 serialization (the ``rfc8785`` package) of the whole record, its MAC chains over
the record without ``mac``, each acknowledgement describes its line, and a body that is not
a plain dict (a mapping, a dict subclass) is checked and written as its plain-dict copy.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.store import FOLD_LEAVES, Appended, StoreWriter
from harness.verify.canonical import jcs_bytes
from harness.verify.chain import GENESIS_MAC, derive_store_key
from harness.verify.errors import SchemaError
from harness.verify.merkle import CompactRange, leaf_hash
from harness.verify.records import RECORD_VERSION, split_mac

from .evidence_helpers import MASTER, checkpoints_of, make_keys, verify_bytes

TIME = "2026-12-06T07:00:00.000001Z"
RUN = "run-append"

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_event = st.fixed_dictionaries(
    {"name": _text.filter(bool), "data": st.dictionaries(_text, _json, max_size=5)}
)


def _check_store(path: Path, bodies: list[dict[str, Any]], acks: list[Appended]) -> None:
    lines = path.read_bytes().split(b"\n")[:-1]
    assert len(lines) == len(bodies) == len(acks)
    key = derive_store_key(MASTER, "audit", RUN)
    prev = GENESIS_MAC
    for seq, (body, line, ack) in enumerate(zip(bodies, lines, acks, strict=True)):
        record = {
            "body": body, "kind": "event", "run": RUN, "seq": seq, "store": "audit",
            "time": TIME, "v": RECORD_VERSION,
        }  # fmt: skip
        mac_hex, unsigned = split_mac(line)
        assert unsigned == jcs_bytes(record)
        assert line == jcs_bytes({**record, "mac": mac_hex})
        assert mac_hex == hmac.new(key, prev + unsigned, hashlib.sha256).hexdigest()
        prev = bytes.fromhex(mac_hex)
        assert type(ack) is Appended
        assert (ack.seq, ack.mac, ack.leaf_hash, ack.line, ack.time) == (
            seq, mac_hex, leaf_hash(line), line, TIME,
        )  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(_event, min_size=1, max_size=24), cuts=st.lists(st.integers(1, 9)))
def test_any_bodies_in_any_group_commits_give_the_canonical_lines(
    tmp_path_factory: pytest.TempPathFactory, bodies: list[dict[str, Any]], cuts: list[int]
) -> None:
    """Catches a composed line or MAC that differs from the whole record's RFC 8785 bytes for
    some body (escapes, non-BMP key order, nesting), a chain or tree state carried wrongly
    from one group commit to the next, and an acknowledgement that is not an ``Appended``
    describing its line."""
    path = tmp_path_factory.mktemp("append") / "audit.jsonl"
    before = copy.deepcopy(bodies)
    acks: list[Appended] = []
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME) as w:
        start = 0
        for size in [*cuts, len(bodies)]:
            batch = [("event", body) for body in bodies[start : start + size]]
            acks += w.append_many(batch)
            start += size
            if start >= len(bodies):
                break
    assert bodies == before  # the caller's dicts are read, never changed
    _check_store(path, bodies, acks)
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME) as w:
        assert w.size == len(bodies)  # a fresh writer accepts every line (catch-up)


class _Lying(dict):  # type: ignore[type-arg]
    """A dict subclass whose ``keys`` hides a member: the check must see the member all the
    same (``dict(body)`` copies every item, whatever ``keys`` says)."""

    def keys(self) -> Any:
        return {key for key in dict(self) if key != "extra"}


def _mappings() -> Iterator[Mapping[str, Any]]:
    body = {"name": "n", "data": {"k": [1, "x"]}}
    yield MappingProxyType(body)
    yield dict(body)


def test_a_body_that_is_not_a_plain_dict_is_written_as_its_copy(tmp_path: Path) -> None:
    """Catches the no-copy shortcut taken for a mapping that is not a plain dict: a mapping
    proxy is written as its dict, and a dict subclass is copied (``dict(body)``) before the
    check, so the check and the encoding read the same plain members."""
    acks = []
    path = tmp_path / "audit.jsonl"
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME) as w:
        for body in _mappings():
            acks += w.append_many([("event", body)])
        lying = _Lying(name="n", data={}, extra=1)
        assert lying.keys() == {"name", "data"}  # what a check of the subclass itself sees
        with pytest.raises(SchemaError, match="audit record 2"):
            w.append_many([("event", lying)])  # the copy has ``extra``: an unknown member
        assert w.size == 2
    expected = {"name": "n", "data": {"k": [1, "x"]}}
    _check_store(path, [expected, expected], acks)


def test_a_refused_body_in_a_group_commit_writes_nothing(tmp_path: Path) -> None:
    """Catches a group commit that writes (or advances the chain for) the records before a
    refused one: all or none."""
    path = tmp_path / "audit.jsonl"
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME) as w:
        good = {"name": "n", "data": {}}
        with pytest.raises(SchemaError, match="audit record 1"):
            w.append_many([("event", good), ("event", {"name": "n", "data": {"f": 1.5}})])
        assert w.size == 0 and path.read_bytes() == b""
        acks = w.append_many([("event", good)])
    _check_store(path, [good], acks)


def _expected_root(path: Path) -> tuple[int, bytes]:
    tree = CompactRange()
    for line in path.read_bytes().split(b"\n")[:-1]:
        tree.append(leaf_hash(line))
    return tree.size, tree.root()


def test_leaves_joined_in_batches_give_the_leaf_by_leaf_tree(tmp_path: Path) -> None:
    """Catches a writer whose held leaves (joined to the tree FOLD_LEAVES at a time) are lost,
    joined twice or out of order: across small commits, another writer's appends read in
    between (its lines join after ours), a reopen, and checkpoints, the size and root are
    always those of the store's lines hashed one by one."""
    path = tmp_path / "audit.jsonl"
    keys = make_keys()
    one = StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME)
    two = StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER, clock=lambda: TIME)
    with one, two:
        written = 0
        for commit in range(90):
            writer = two if commit % 9 == 4 else one
            size = 1 + (commit * 7) % 13
            writer.append_many(
                [("event", {"name": f"e{written + i}", "data": {}}) for i in range(size)]
            )
            written += size
            assert writer.size == written
            if commit % 17 == 16:  # a checkpoint now and then: the root of exactly these
                note = writer.checkpoint(keys.note_signer())
                assert int(note.stem) == written
                assert (writer.size, writer.root()) == _expected_root(path)
        assert written > FOLD_LEAVES * 2
        one.append_many([("event", {"name": "last", "data": {}})])
        assert (one.size, one.root()) == _expected_root(path)
        assert one.unsealed == one.size - one.sealed_size
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER) as reopened:
        assert (reopened.size, reopened.root()) == _expected_root(path)
        reopened.checkpoint(keys.note_signer())
    result = verify_bytes(
        path.read_bytes(), checkpoints_of(reopened, keys), store="audit", run_id=RUN
    )
    assert result.size == written + 1 and result.keyed
