"""Append-only stores: durability, recovery of torn tails, concurrent writers, crash safety."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from harness.receipts.store import StoreError, StoreWriter
from harness.verify.canonical import parse_canonical
from harness.verify.errors import SchemaError
from harness.verify.records import parse_record_line

from .evidence_helpers import checkpoints_of, event, make_keys, open_writer, verify_bytes


def test_append_checkpoint_verify_roundtrip(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        acks = [writer.append(*event(i)) for i in range(5)]
        assert [ack.seq for ack in acks] == list(range(5))
        writer.checkpoint(keys.note_signer())
        writer.append_many([event(i) for i in range(5, 9)])
        writer.checkpoint(keys.note_signer())
        root = writer.root()
    result = verify_bytes(path.read_bytes(), checkpoints_of(writer, keys))
    assert result.size == 9
    assert result.root == root
    assert result.checkpoint_sizes == [5, 9]
    assert result.kinds["event"] == 9


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        writer.append(*event(0))
    with open_writer(path) as writer:
        assert writer.size == 1
        assert writer.append(*event(1)).seq == 1
        writer.checkpoint(keys.note_signer())
    assert verify_bytes(path.read_bytes(), checkpoints_of(writer, keys)).size == 2


def test_checkpoint_is_idempotent(tmp_path: Path) -> None:
    keys = make_keys()
    with open_writer(tmp_path / "audit.jsonl") as writer:
        writer.append(*event(0))
        first = writer.checkpoint(keys.note_signer())
        assert writer.checkpoint(keys.note_signer()) == first
    assert len(list(writer.checkpoint_dir.iterdir())) == 1


def test_invalid_bodies_are_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        with pytest.raises(SchemaError, match="unknown member"):
            writer.append("event", {"name": "x", "data": {}, "extra": 1})
        with pytest.raises(SchemaError, match="not allowed"):
            writer.append("artifact.write", {})
        with pytest.raises(SchemaError, match="not an integer"):
            writer.append("event", {"name": "x", "data": {"f": 1.5}})
    assert path.read_bytes() == b""


def test_unknown_store_and_bad_run_id(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown store"):
        StoreWriter(tmp_path / "x.jsonl", store="x", run_id="r", hmac_master=bytes(32))
    with pytest.raises(StoreError, match="invalid run id"):
        StoreWriter(tmp_path / "a.jsonl", store="audit", run_id="../r", hmac_master=bytes(32))


def test_torn_tail_is_quarantined_and_recorded(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        for i in range(3):
            writer.append(*event(i))
    intact = path.read_bytes()
    torn = b'{"body":{"data":{"n":3},"name":"e3"},"kind":"ev'
    with path.open("ab") as handle:
        handle.write(torn)
    with open_writer(path) as writer:
        assert writer.size == 4  # 3 records + the store.recovered record
        writer.append(*event(4))
        writer.checkpoint(keys.note_signer())
    data = path.read_bytes()
    assert data.startswith(intact)
    lines = data.splitlines()
    recovered = parse_record_line(lines[3])
    assert recovered.kind == "store.recovered"
    assert recovered.body["offset"] == len(intact)
    assert recovered.body["length"] == len(torn)
    quarantine = [
        parse_canonical(line) for line in writer.quarantine_path.read_bytes().splitlines()
    ]
    assert len(quarantine) == 1
    assert base64.b64decode(quarantine[0]["data_b64"]) == torn
    assert quarantine[0]["offset"] == len(intact)
    assert verify_bytes(data, checkpoints_of(writer, keys)).size == 5


def test_corrupt_complete_line_refuses_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        writer.append(*event(0))
        writer.append(*event(1))
    data = path.read_bytes().replace(b'"e1"', b'"eX"')
    path.write_bytes(data)
    with pytest.raises(StoreError, match="does not verify"):
        open_writer(path)
    assert path.read_bytes() == data  # nothing changed or dropped


def test_foreign_run_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with open_writer(path, run_id="run-1") as writer:
        writer.append(*event(0))
    with pytest.raises(StoreError):
        open_writer(path, run_id="run-2")


def _writer_process(path: Path, label: str, count: int, ack_fd: int | None, seed: int) -> None:
    """Body of a forked writer: appends batches and reports each durable ack."""
    rng = random.Random(seed)
    writer = open_writer(path)
    done = 0
    while done < count:
        size = min(rng.randint(1, 5), count - done)
        acks = writer.append_many(
            [("event", {"name": label, "data": {"i": done + k}}) for k in range(size)]
        )
        if ack_fd is not None:
            report = "".join(f"{ack.seq} {label} {done + k}\n" for k, ack in enumerate(acks))
            os.write(ack_fd, report.encode())
        done += size


def _fork(target: object, *args: object) -> int:
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            target(*args)  # type: ignore[operator]
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def test_two_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    open_writer(path).close()
    pids = [_fork(_writer_process, path, label, 150, None, n) for n, label in enumerate("AB")]
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    with open_writer(path) as writer:
        writer.checkpoint(keys.note_signer())
    data = path.read_bytes()
    result = verify_bytes(data, checkpoints_of(writer, keys))
    assert result.size == 300
    seen: dict[str, list[int]] = {"A": [], "B": []}
    for line in data.splitlines():
        body = parse_record_line(line).body
        seen[body["name"]].append(body["data"]["i"])
    assert seen == {"A": list(range(150)), "B": list(range(150))}


def _read_acks(fd: int) -> list[tuple[int, int]]:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    acks = []
    for line in b"".join(chunks).decode().splitlines():
        seq, _, n = line.split()
        acks.append((int(seq), int(n)))
    return acks


def crash_and_recover(path: Path, rounds: int, seed: int) -> int:
    """SIGKILL a writer at random moments ``rounds`` times; check every acked record survives."""
    rng = random.Random(seed)
    acked: dict[int, int] = {}
    for round_ in range(rounds):
        read_fd, write_fd = os.pipe()
        pid = _fork(_writer_process, path, f"r{round_}", 10_000, write_fd, seed + round_)
        os.close(write_fd)
        time.sleep(rng.uniform(0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for seq, n in _read_acks(read_fd):
            acked[seq] = n
        os.close(read_fd)
        with open_writer(path) as writer:  # recovery happens here
            assert writer.size >= len(acked)
    lines = path.read_bytes().splitlines()
    for seq, n in acked.items():
        record = parse_record_line(lines[seq])
        assert record.seq == seq
        assert record.body["data"]["i"] == n
    return len(acked)


def test_sigkill_crashes_lose_no_acknowledged_record(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    acked = crash_and_recover(path, rounds=200, seed=7)
    assert acked > 0
    with open_writer(path) as writer:
        writer.checkpoint(keys.note_signer())
    result = verify_bytes(path.read_bytes(), checkpoints_of(writer, keys))
    assert result.size >= acked
    quarantine = writer.quarantine_path
    if quarantine.exists():
        entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
        assert result.kinds["store.recovered"] == len(entries)


def test_failed_batch_leaves_the_chain_intact(tmp_path: Path) -> None:
    keys = make_keys()
    path = tmp_path / "audit.jsonl"
    with open_writer(path) as writer:
        writer.append(*event(0))
        with pytest.raises(SchemaError, match=r"record 2: .*unknown member"):
            writer.append_many([event(1), ("event", {"name": "x", "data": {}, "bad": 1})])
        assert writer.size == 1
        writer.append(*event(1))
        writer.checkpoint(keys.note_signer())
    result = verify_bytes(path.read_bytes(), checkpoints_of(writer, keys))
    assert result.size == 2 and result.keyed


def test_writer_refuses_what_readers_refuse(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    deep: object = {}
    for _ in range(62):  # record (1) > body (2) > data (3) > ... > level 65
        deep = {"d": deep}
    with open_writer(path) as writer:
        with pytest.raises(SchemaError, match="line limit"):
            writer.append("event", {"name": "x" * (1 << 20), "data": {}})
        with pytest.raises(SchemaError, match="nesting deeper than 64"):
            writer.append("event", {"name": "x", "data": deep})
        assert writer.size == 0
    assert path.read_bytes() == b""


def test_checkpoint_by_another_key_is_not_overwritten(tmp_path: Path) -> None:
    with open_writer(tmp_path / "audit.jsonl") as writer:
        writer.append(*event(0))
        first = writer.checkpoint(make_keys(1).note_signer())
        kept = first.read_bytes()
        with pytest.raises(StoreError, match="signed by another key"):
            writer.checkpoint(make_keys(2).note_signer())
    assert first.read_bytes() == kept
