"""Every check of store verification has a case that makes it fail, with a precise message."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.receipts.keys import OperatorKeys
from harness.receipts.store import StoreWriter
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.checkpoint import Checkpoint
from harness.verify.errors import (
    CanonicalEncodingError,
    ChainError,
    CheckpointError,
    InvalidSignatureError,
    SchemaError,
    UnverifiedNoteError,
    VerificationError,
)
from harness.verify.runcheck import open_checkpoints
from harness.verify.storecheck import iter_store_lines

from .evidence_helpers import checkpoints_of, event, make_keys, open_writer, verify_bytes


@pytest.fixture
def sealed(tmp_path: Path) -> tuple[bytes, list[Checkpoint], StoreWriter, OperatorKeys]:
    keys = make_keys()
    with open_writer(tmp_path / "audit.jsonl") as writer:
        writer.append_many([event(i) for i in range(4)])
        writer.checkpoint(keys.note_signer())
        writer.append_many([event(i) for i in range(4, 7)])
        writer.checkpoint(keys.note_signer())
    data = (tmp_path / "audit.jsonl").read_bytes()
    return data, checkpoints_of(writer, keys), writer, keys


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def test_intact_store_verifies_keyed_and_keyless(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    assert verify_bytes(data, checkpoints).size == 7
    assert verify_bytes(data, checkpoints, hmac_master=None).keyed is False


Mutation = Callable[[list[bytes]], list[bytes]]


def _edit_body(lines: list[bytes]) -> list[bytes]:
    lines[2] = lines[2].replace(b'"e2"', b'"eX"')
    return lines


def _swap(lines: list[bytes]) -> list[bytes]:
    lines[1], lines[2] = lines[2], lines[1]
    return lines


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (lambda ls: ls[:2] + ls[3:], ChainError, "line 3 .*seq 3 where 2 was expected"),
        (lambda ls: ls[:3] + ls[2:], ChainError, "seq 2 where 3 was expected"),
        (_swap, ChainError, "seq 2 where 1 was expected"),
        (lambda ls: ls[:-1], CheckpointError, "covers 7 records but the store has 6"),
        (lambda ls: ls[:-3], CheckpointError, "covers 7 records but the store has 4"),
        (lambda ls: [], CheckpointError, "covers 7 records but the store has 0"),
        (_edit_body, CheckpointError, "Merkle root of the first 4 records"),
        (lambda ls: [*ls[:-1], ls[-1][:-1]], SchemaError, "line 7: not terminated"),
        (lambda ls: [ls[0].replace(b":", b": ", 1), *ls[1:]], CanonicalEncodingError, "line 1"),
        (lambda ls: [b"\n", *ls], CanonicalEncodingError, "line 1"),
    ],
)
def test_keyless_tamper_is_caught(
    sealed: tuple, mutate: Mutation, error: type[Exception], message: str
) -> None:
    data, checkpoints, _, _ = sealed
    tampered = b"".join(mutate(_lines(data)))
    with pytest.raises(error, match=message):
        verify_bytes(tampered, checkpoints, hmac_master=None)


def _reseal_line(line: bytes, **changes: object) -> bytes:
    """Edit envelope members and keep the line canonical (the MAC stays stale)."""
    obj = parse_canonical(line.rstrip(b"\n"))
    obj.update(changes)
    return canonical_bytes(obj) + b"\n"


def test_edit_resealed_by_another_key_is_not_trusted(sealed: tuple) -> None:
    """An attacker without the signing key can rebuild roots but not sign them as us."""
    data, _, _, keys = sealed
    forged = b"".join(_edit_body(_lines(data)))
    attacker = make_keys(seed=9)
    with pytest.raises(UnverifiedNoteError):
        _resign(forged, attacker, trusted=keys)


def test_keyed_chain_catches_what_the_tree_cannot_see(sealed: tuple) -> None:
    """Records rewritten by someone with the signing key but not the HMAC key fail the chain."""
    data, _, _, keys = sealed
    lines = _lines(data)
    lines[1] = _reseal_line(lines[1], body={"name": "forged", "data": {}})
    forged = b"".join(lines)
    # Re-sign checkpoints over the forged tree with the real signing key (insider threat).
    checkpoints = _resign(forged, keys, trusted=keys)
    assert verify_bytes(forged, checkpoints, hmac_master=None).size == 7
    with pytest.raises(ChainError, match=r"line 2 \(seq 1\): MAC does not chain"):
        verify_bytes(forged, checkpoints)


def _resign(data: bytes, keys: OperatorKeys, *, trusted: OperatorKeys) -> list[Checkpoint]:
    from harness.receipts.checkpoint import format_checkpoint_body
    from harness.receipts.merkle import MerkleTree
    from harness.verify.merkle import leaf_hash
    from harness.verify.storecheck import checkpoint_origin

    tree = MerkleTree(leaf_hash(line) for line in data.splitlines())
    body = format_checkpoint_body(checkpoint_origin("run-1", "audit"), len(tree), tree.root())
    note = keys.note_signer().sign(body)
    return open_checkpoints([("cp", note)], [trusted.note_signer().verifier_key()])


def test_wrong_hmac_key_fails_first_record(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    with pytest.raises(ChainError, match=r"line 1 \(seq 0\)"):
        verify_bytes(data, checkpoints, hmac_master=b"\x07" * 32)


def test_record_of_another_run_or_store(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    with pytest.raises(CheckpointError, match="origin"):
        verify_bytes(data, checkpoints, run_id="run-2")
    lines = _lines(data)
    lines[0] = _reseal_line(lines[0], run="run-2")
    with pytest.raises(SchemaError, match=r"line 1: run id 'run-2' is not 'run-1'"):
        verify_bytes(b"".join(lines), checkpoints, hmac_master=None)


def test_time_must_not_go_backwards(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    lines = _lines(data)
    lines[3] = _reseal_line(lines[3], time="2000-01-01T00:00:00.000000Z")
    with pytest.raises(ChainError, match="earlier than the previous record"):
        verify_bytes(b"".join(lines), checkpoints, hmac_master=None)


def test_checkpoint_rules(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    first, last = checkpoints
    with pytest.raises(CheckpointError, match="no signed checkpoint"):
        verify_bytes(data, [])
    with pytest.raises(CheckpointError, match="strictly increase"):
        verify_bytes(data, [last, first])
    with pytest.raises(CheckpointError, match="strictly increase"):
        verify_bytes(data, [first, first, last])
    with pytest.raises(CheckpointError, match="not covered by any signed checkpoint"):
        verify_bytes(data, [first])
    with pytest.raises(CheckpointError, match="not 32 bytes"):
        verify_bytes(data, [dataclasses.replace(last, root_hash=b"\x01" * 31)])
    with pytest.raises(CheckpointError, match="origin"):
        verify_bytes(data, [dataclasses.replace(last, origin="harness-verify/v1/run-1/lineage")])


def test_checkpoint_signatures(sealed: tuple) -> None:
    _, _, writer, keys = sealed
    notes = [(p.name, p.read_bytes()) for p in sorted(writer.checkpoint_dir.glob("*.note"))]
    other = make_keys(seed=2).note_signer().verifier_key()
    with pytest.raises(UnverifiedNoteError, match=notes[0][0]):
        open_checkpoints(notes, [other])
    name, note = notes[0]
    tampered = note.replace(b"\n4\n", b"\n5\n")
    with pytest.raises(InvalidSignatureError, match=name):
        open_checkpoints([(name, tampered)], [keys.note_signer().verifier_key()])


def test_overlong_line_is_refused_without_reading_it_all() -> None:
    stream = io.BytesIO(b"x" * (3 << 20))
    with pytest.raises(SchemaError, match="longer than"):
        list(iter_store_lines(stream, "audit.jsonl"))


def test_every_single_byte_flip_is_rejected(sealed: tuple) -> None:
    data, checkpoints, _, _ = sealed
    for position in range(len(data)):
        for mask in (0x01, 0x20, 0x80):
            flipped = bytearray(data)
            flipped[position] ^= mask
            with pytest.raises(VerificationError):
                verify_bytes(bytes(flipped), checkpoints, hmac_master=None)
