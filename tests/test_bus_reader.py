"""orchestrate/bus ControlBus: incremental, strict, MAC-checked, never blocking, fail closed."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.bus import BusError, ControlBus
from harness.receipts import commands
from harness.receipts.commands import CommandLog, ControlLogError, issue_command
from harness.receipts.run import run_dir
from harness.receipts.store import StoreWriter
from harness.verify.records import MAX_LINE_BYTES
from tests.evidence_helpers import MASTER, make_keys

RUN = "run-1"


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A regression that blocks (on a FIFO, on a lock) fails the test instead of hanging it."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError("the bus blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    run = run_dir(tmp_path, RUN)
    with StoreWriter(run / "audit.jsonl", store="audit", run_id=RUN, hmac_master=MASTER) as w:
        w.append("run.status", {"status": "running", "epoch": 0, "reason": "r", "command": None})
    return run


def issue(folder: Path, command_id: str, command: str = "stop", **args: Any) -> int:
    state = folder.parent.parent
    return issue_command(
        state, RUN, make_keys(), operator="op", command=command, args=args, command_id=command_id
    ).seq


def bus(folder: Path, master: bytes = MASTER) -> ControlBus:
    return ControlBus(folder, RUN, master)


def control(folder: Path) -> Path:
    return folder / "control.jsonl"


def test_absent_store_polls_empty(folder: Path) -> None:
    assert bus(folder).poll() == []
    assert not control(folder).exists()


def test_poll_is_incremental(folder: Path) -> None:
    reader = bus(folder)
    issue(folder, "a", "instruct", text="ab" * 32)
    (first,) = reader.poll()
    assert (first.seq, first.id, first.command, first.operator) == (0, "a", "instruct", "op")
    assert first.args == {"text": "ab" * 32} and first.revision == 0 and first.time
    assert reader.poll() == []
    issue(folder, "b")
    issue(folder, "c")
    assert [c.id for c in reader.poll()] == ["b", "c"]
    assert reader.offset == control(folder).stat().st_size


def test_a_torn_last_line_waits_for_its_end(folder: Path) -> None:
    issue(folder, "a")
    issue(folder, "b")
    data = control(folder).read_bytes()
    second = data.index(b"\n") + 1
    control(folder).write_bytes(data[: second + 40])
    reader = bus(folder)
    assert [c.id for c in reader.poll()] == ["a"]
    assert reader.poll() == []
    assert reader.offset == second
    with control(folder).open("ab") as fh:
        fh.write(data[second + 40 :])
    assert [c.id for c in reader.poll()] == ["b"]


def test_store_recovered_lines_are_skipped_and_chained(folder: Path) -> None:
    issue(folder, "a")
    with control(folder).open("ab") as fh:
        fh.write(b'{"body":{"torn')  # a writer crashed mid-line
    reader = bus(folder)
    assert [c.id for c in reader.poll()] == ["a"]
    assert issue(folder, "b") == 2  # the next writer quarantined the tail: seq 1 recovered
    (b,) = reader.poll()
    assert (b.id, b.seq) == ("b", 2)
    assert b"store.recovered" in control(folder).read_bytes()


def flip_mac_digit(path: Path, record: int) -> None:
    lines = path.read_bytes().split(b"\n")
    line = lines[record]
    at = line.index(b'"mac":"') + 7
    lines[record] = line[:at] + (b"1" if line[at : at + 1] == b"0" else b"0") + line[at + 1 :]
    path.write_bytes(b"\n".join(lines))


def test_a_flipped_mac_digit_is_refused(folder: Path, tmp_path: Path) -> None:
    issue(folder, "a")
    issue(folder, "b")
    copy = tmp_path / "copy" / "runs" / RUN
    shutil.copytree(folder, copy)
    flip_mac_digit(control(copy), 1)
    reader = bus(copy)
    with pytest.raises(BusError, match="record 1: MAC does not chain"):
        reader.poll()
    assert [c.id for c in bus(folder).poll()] == ["a", "b"]  # the original still reads


def test_a_flipped_mac_is_refused_even_after_the_earlier_lines_were_read(folder: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    issue(folder, "b")
    data = control(folder).read_bytes()
    at = data.rindex(b'"mac":"') + 7
    digit = b"1" if data[at : at + 1] == b"0" else b"0"
    control(folder).write_bytes(data[:at] + digit + data[at + 1 :])  # same inode
    with pytest.raises(BusError, match="record 1"):
        reader.poll()


def test_the_wrong_key_is_refused(folder: Path) -> None:
    issue(folder, "a")
    with pytest.raises(BusError, match="MAC"):
        bus(folder, bytes(32)).poll()


def test_a_record_of_another_run_is_refused(folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "runs" / "run-2" / "control.jsonl"
    with StoreWriter(other, store="control", run_id="run-2", hmac_master=MASTER) as w:
        w.append(
            "command",
            {"operator": "op", "command": "stop", "args": {}, "id": "x", "revision": 0},
        )
    shutil.copyfile(other, control(folder))
    with pytest.raises(BusError, match="record 0"):
        bus(folder).poll()


def test_an_id_used_twice_is_refused(folder: Path) -> None:
    body = {"operator": "op", "command": "stop", "args": {}, "id": "dup", "revision": 0}
    with StoreWriter(control(folder), store="control", run_id=RUN, hmac_master=MASTER) as w:
        w.append("command", body)
        w.append("command", {**body, "command": "abort"})
    with pytest.raises(BusError, match="'dup' already used by record 0"):
        bus(folder).poll()


def test_an_unknown_command_name_is_passed_on_for_a_rejected_receipt(folder: Path) -> None:
    body = {"operator": "op", "command": "frobnicate", "args": {}, "id": "f", "revision": 0}
    with StoreWriter(control(folder), store="control", run_id=RUN, hmac_master=MASTER) as w:
        w.append("command", body)
    assert [c.command for c in bus(folder).poll()] == ["frobnicate"]


def test_garbage_line_is_refused(folder: Path) -> None:
    control(folder).write_bytes(b"not json\n")
    with pytest.raises(BusError, match=r"control.jsonl: record 0"):
        bus(folder).poll()


def test_an_endless_line_is_bounded(folder: Path) -> None:
    control(folder).write_bytes(b"x" * (MAX_LINE_BYTES + 2))
    with pytest.raises(BusError, match="without a line end"):
        bus(folder).poll()


def test_a_store_swapped_for_a_symlink_is_refused(folder: Path, tmp_path: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    saved = tmp_path / "saved.jsonl"
    os.rename(control(folder), saved)
    control(folder).symlink_to(saved)
    with pytest.raises(BusError, match="symbolic link"):
        reader.poll()
    with pytest.raises(BusError, match="symbolic link"), reader.exclusive():
        pass


def test_a_store_swapped_for_a_fifo_is_refused_without_hanging(folder: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    control(folder).unlink()
    os.mkfifo(control(folder))
    with pytest.raises(BusError, match="FIFO"):
        reader.poll()
    with pytest.raises(BusError, match="FIFO"), reader.exclusive():
        pass


def test_a_hard_linked_store_is_refused(folder: Path, tmp_path: Path) -> None:
    issue(folder, "a")
    os.link(control(folder), tmp_path / "alias")
    with pytest.raises(BusError, match="hard links"):
        bus(folder).poll()


def test_a_symlinked_run_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    issue(folder, "a")
    alias = tmp_path / "alias-run"
    alias.symlink_to(folder)
    with pytest.raises(BusError, match="symbolic link"):
        ControlBus(alias, RUN, MASTER).poll()


def test_a_store_replaced_by_another_file_is_refused(folder: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    replacement = folder / "replacement"
    shutil.copyfile(control(folder), replacement)
    os.replace(replacement, control(folder))
    with pytest.raises(BusError, match="replaced"):
        reader.poll()


def test_a_shrunk_or_vanished_store_is_refused(folder: Path) -> None:
    issue(folder, "a")
    issue(folder, "b")
    reader = bus(folder)
    reader.poll()
    with control(folder).open("r+b") as fh:
        fh.truncate(10)
    with pytest.raises(BusError, match="shrank"):
        reader.poll()
    control(folder).unlink()
    with pytest.raises(BusError, match="disappeared"):
        reader.poll()


def test_poll_does_not_wait_for_a_writer_holding_the_lock(folder: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    fd = os.open(control(folder), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert reader.poll() == []  # returns at once; nothing is consumed
    finally:
        os.close(fd)
    assert [c.id for c in reader.poll()] == ["a"]


def test_exclusive_yields_what_poll_has_not_returned(folder: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    issue(folder, "b")
    with reader.exclusive() as pending:
        assert [c.id for c in pending] == ["b"]
        probe = os.open(control(folder), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    assert reader.poll() == []


def test_exclusive_creates_an_absent_store_to_lock_it(folder: Path) -> None:
    with bus(folder).exclusive() as pending:
        assert pending == []
        assert control(folder).stat().st_size == 0
    gone = ControlBus(folder / "gone", RUN, MASTER)
    with pytest.raises(BusError, match="run folder"), gone.exclusive():
        pass


def test_command_log_reports_the_path(folder: Path) -> None:
    control(folder).write_bytes(b"{}\n")
    log = CommandLog(control(folder), RUN, MASTER)
    fd = os.open(control(folder), os.O_RDONLY)
    try:
        with pytest.raises(ControlLogError, match=str(control(folder))):
            log.read(fd)
    finally:
        os.close(fd)


def test_reading_in_small_chunks_gives_the_same_commands(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        issue(folder, f"c{n}")
    with control(folder).open("ab") as fh:
        fh.write(b'{"body":')  # torn tail
    monkeypatch.setattr(commands, "READ_CHUNK", 33)
    reader = bus(folder)
    assert [c.id for c in reader.poll()] == [f"c{n}" for n in range(5)]
    assert reader.offset == control(folder).stat().st_size - len(b'{"body":')


def test_a_torn_tail_of_exactly_the_limit_waits(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "MAX_LINE_BYTES", 50)
    control(folder).write_bytes(b"x" * 50)
    assert bus(folder).poll() == []
    control(folder).write_bytes(b"x" * 51)
    with pytest.raises(BusError) as info:
        bus(folder).poll()
    assert str(info.value) == f"{control(folder)}: record 0: over 50 bytes without a line end"


def test_refusal_messages_name_file_record_and_reason(folder: Path, tmp_path: Path) -> None:
    issue(folder, "a")
    reader = bus(folder)
    reader.poll()
    data = control(folder).read_bytes()
    replacement = folder / "replacement"
    replacement.write_bytes(data)
    os.replace(replacement, control(folder))
    with pytest.raises(BusError) as info:
        reader.poll()
    assert str(info.value) == f"{control(folder)}: the control store was replaced by another file"
    control(folder).write_bytes(data + data)  # record 0 again where 1 is due
    with pytest.raises(BusError) as info:
        bus(folder).poll()
    assert str(info.value) == f"{control(folder)}: record 1: seq 0 where 1 was expected"
    other = tmp_path / "runs" / "run-2" / "control.jsonl"
    with StoreWriter(other, store="control", run_id="run-2", hmac_master=MASTER) as w:
        w.append(
            "command", {"operator": "o", "command": "stop", "args": {}, "id": "x", "revision": 0}
        )
    shutil.copyfile(other, control(folder))
    with pytest.raises(BusError) as info:
        bus(folder).poll()
    assert str(info.value) == f"{control(folder)}: record 0: run id 'run-2' is not 'run-1'"
    audit_line = (folder / "audit.jsonl").read_bytes()
    control(folder).write_bytes(audit_line)
    with pytest.raises(BusError, match="store 'audit' is not 'control'"):
        bus(folder).poll()
