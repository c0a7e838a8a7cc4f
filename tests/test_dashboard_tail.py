"""The incremental store tail under the dashboard: only complete lines, only new bytes, and
a restart (``reset``) on anything an append-only store cannot do — shrink, replacement by
another file, or a changed prefix — so the fold is never continued across a gap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.orchestrate.dashboard.tail import StoreTail, TailError


def test_reads_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"a\nb\n")
    tail = StoreTail(path)
    assert tail.refresh().lines == [b"a", b"b"]
    assert tail.refresh().lines == []
    with path.open("ab") as out:
        out.write(b"c\nd-torn")
    chunk = tail.refresh()
    assert chunk.lines == [b"c"] and not chunk.reset
    assert tail.count == 3 and tail.size > tail.offset  # the torn tail waits
    with path.open("ab") as out:
        out.write(b"\n")
    assert tail.refresh().lines == [b"d-torn"]
    assert tail.count == 4


def test_shrink_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"a\nb\nc\n")
    tail = StoreTail(path)
    tail.refresh()
    path.write_bytes(b"a\n")  # truncate in place (same inode)
    chunk = tail.refresh()
    assert chunk.reset and chunk.lines == [b"a"] and tail.count == 1


def test_changed_prefix_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"aa\nbb\n")
    tail = StoreTail(path)
    tail.refresh()
    with path.open("r+b") as out:  # same inode, same length, the last line read changed
        out.seek(3)
        out.write(b"XX\ncc\n")
    chunk = tail.refresh()
    assert chunk.reset and chunk.lines == [b"aa", b"XX", b"cc"]


def test_replaced_file_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"a\n")
    tail = StoreTail(path)
    tail.refresh()
    other = tmp_path / "other"
    other.write_bytes(b"a\nb\n")
    os.replace(other, path)  # same prefix, but another file
    chunk = tail.refresh()
    assert chunk.reset and chunk.lines == [b"a", b"b"]


def test_a_vanished_store_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"a\n")
    tail = StoreTail(path)
    tail.refresh()
    path.unlink()
    assert tail.refresh().reset
    assert not tail.refresh().reset  # still absent: nothing new to say


def test_budget_bounds_one_refresh(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join(b"%04d\n" % i for i in range(100)))
    tail = StoreTail(path, budget=50)
    first = tail.refresh().lines
    assert len(first) == 10
    rest: list[bytes] = []
    while tail.offset < tail.size:
        rest += tail.refresh().lines
    assert first + rest == [b"%04d" % i for i in range(100)]


def test_links_and_fifos_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"a\n")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(real)
    with pytest.raises(TailError):
        StoreTail(link).refresh()
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TailError):
        StoreTail(fifo).refresh()  # never blocks waiting for a writer


def test_count_only_tail_detects_the_same_gaps(tmp_path: Path) -> None:
    path = tmp_path / "lineage.jsonl"
    path.write_bytes(b"aa\nbb\ncc-torn")
    tail = StoreTail(path, keep=False)
    chunk = tail.refresh()
    assert chunk.lines == [] and tail.count == 2 and tail.offset == 6
    with path.open("r+b") as out:  # the last counted line changed in place
        out.seek(3)
        out.write(b"XX")
    assert tail.refresh().reset and tail.count == 2
    path.write_bytes(b"aa\n")
    assert tail.refresh().reset and tail.count == 1


def test_a_cursor_older_than_the_kept_events_is_lost() -> None:
    """The event ring is bounded; a cursor from before what it still holds gets a resync
    (``app._lost``), one within it does not."""
    from harness.orchestrate.dashboard import fold as fold_module
    from harness.orchestrate.dashboard.app import _lost
    from harness.verify.canonical import canonical_bytes

    run = fold_module.RunFold("r1")
    total = fold_module.RING + 5
    for seq in range(total):
        body = {"task": f"t{seq}", "role": "coder", "priority": 1, "depends": [],
                "adapter": "scripted", "tools": []}  # fmt: skip
        record = {"body": body, "kind": "task.planned", "mac": "0" * 64, "run": "r1",
                  "seq": seq, "store": "audit", "time": "2026-01-01T00:00:00.000000Z",
                  "v": 2}  # fmt: skip
        run.audit_line(canonical_bytes(record))
    assert run.problem_count == 0 and len(run.events) == fold_module.RING
    assert run.dropped_upto == 5

    class Index:
        fold = run

    assert _lost(Index(), 4)  # type: ignore[arg-type]
    assert not _lost(Index(), 5)  # type: ignore[arg-type]
    assert run.events[0][0] == 6


def test_the_kind_is_the_records_own_not_one_inside_its_body() -> None:
    from harness.orchestrate.dashboard.fold import _kind_of
    from harness.verify.canonical import canonical_bytes

    record = {"body": {"note": {"kind": "task.transition"}, "text": '","kind":"x'},
              "kind": "lock.acquire", "mac": "0" * 64, "run": "r1", "seq": 0,
              "store": "audit", "time": "2026-01-01T00:00:00.000000Z", "v": 2}  # fmt: skip
    assert _kind_of(canonical_bytes(record)) == b"lock.acquire"
    assert _kind_of(b"not json") == b""
