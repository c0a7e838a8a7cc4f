"""issue_command: idempotent ids, conflicts, revisions, RunEnded, the lock (real processes)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.orchestrate.bus import ControlBus
from harness.receipts import commands
from harness.receipts.commands import (
    COMMANDS,
    CommandConflict,
    ControlLogError,
    RunEnded,
    UnknownRunError,
    current_epoch,
    issue_command,
    run_ended,
)
from harness.receipts.run import run_dir
from harness.receipts.store import StoreWriter
from tests.evidence_helpers import MASTER, make_keys

ROOT = Path(__file__).resolve().parents[1]
RUN = "run-1"


def audit(state: Path, kind: str, body: dict[str, Any], run_id: str = RUN) -> None:
    folder = run_dir(state, run_id)
    with StoreWriter(folder / "audit.jsonl", store="audit", run_id=run_id, hmac_master=MASTER) as w:
        w.append(kind, body)


def status(state: Path, epoch: int, value: str = "running", run_id: str = RUN) -> None:
    body = {"status": value, "epoch": epoch, "reason": "r", "command": None}
    audit(state, "run.status", body, run_id)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    status(tmp_path, 0)
    return tmp_path


def control_lines(state: Path) -> list[dict[str, Any]]:
    path = run_dir(state, RUN) / "control.jsonl"
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def issue(state: Path, command: str = "stop", **kw: Any) -> Any:
    kw.setdefault("args", {})
    kw.setdefault("operator", "op")
    return issue_command(state, RUN, make_keys(), command=command, **kw)


def test_issue_appends_a_command_record_with_defaults(state: Path) -> None:
    issued = issue(state, "instruct", args={"text": "ab" * 32})
    assert (issued.seq, issued.replayed) == (0, False)
    assert len(issued.id) == 16 and int(issued.id, 16) >= 0
    (line,) = control_lines(state)
    assert line["kind"] == "command"
    assert line["body"] == {
        "operator": "op",
        "command": "instruct",
        "args": {"text": "ab" * 32},
        "id": issued.id,
        "revision": 0,
    }
    (command,) = ControlBus(run_dir(state, RUN), RUN, MASTER).poll()
    assert (command.seq, command.id, command.command, command.revision) == (
        0,
        issued.id,
        "instruct",
        0,
    )


def test_default_revision_is_the_current_epoch(state: Path) -> None:
    status(state, 3, "running")
    audit(state, "event", {"name": "x", "data": {"kind": "run.status", "epoch": 9}})
    assert current_epoch(run_dir(state, RUN), RUN) == 3
    issue(state, command_id="a1")
    assert control_lines(state)[0]["body"]["revision"] == 3
    issue(state, command_id="a2", revision=7)
    assert control_lines(state)[1]["body"]["revision"] == 7


def test_epoch_is_zero_without_status_and_a_torn_audit_tail_is_ignored(tmp_path: Path) -> None:
    audit(tmp_path, "event", {"name": "x", "data": {}})
    folder = run_dir(tmp_path, RUN)
    assert current_epoch(folder, RUN) == 0
    status(tmp_path, 2)
    with (folder / "audit.jsonl").open("ab") as fh:
        fh.write(b'{"body":{"epoch":5')
    assert current_epoch(folder, RUN) == 2
    assert not run_ended(folder, RUN)


def test_exact_replay_returns_the_existing_record(state: Path) -> None:
    first = issue(state, "answer", args={"text": "cd" * 32}, command_id="ans-1")
    issue(state, command_id="other")
    again = issue(state, "answer", args={"text": "cd" * 32}, command_id="ans-1")
    assert again.replayed and again.seq == first.seq == 0 and again.id == "ans-1"
    explicit = issue(state, "answer", args={"text": "cd" * 32}, command_id="ans-1", revision=0)
    assert explicit.replayed and explicit.seq == 0
    assert len(control_lines(state)) == 2


def test_omitted_revision_replays_after_the_epoch_moved(state: Path) -> None:
    issue(state, "resume", command_id="res-1")
    status(state, 1)
    assert issue(state, "resume", command_id="res-1").replayed
    with pytest.raises(CommandConflict):
        issue(state, "resume", command_id="res-1", revision=1)


@pytest.mark.parametrize(
    "change",
    [
        {"command": "abort"},
        {"args": {"why": 1}},
        {"args": {"why": True}},  # True == 1 in Python: compared as canonical JSON
        {"operator": "someone-else"},
        {"revision": 4},
    ],
)
def test_same_id_other_payload_is_a_conflict(state: Path, change: dict[str, Any]) -> None:
    issue(state, "stop", args={"why": 1}, command_id="c-1", revision=0)
    payload: dict[str, Any] = {
        "command": "stop",
        "args": {"why": 1},
        "operator": "op",
        "revision": 0,
    }
    payload.update(change)
    if change == {"args": {"why": True}}:
        payload["args"] = {"why": True}
    with pytest.raises(CommandConflict, match="c-1"):
        issue_command(state, RUN, make_keys(), command_id="c-1", **payload)
    assert len(control_lines(state)) == 1


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"command": "delete"}, "unknown command"),
        ({"command": "stop", "command_id": "-bad"}, "invalid command id"),
        ({"command": "stop", "command_id": "x" * 65}, "invalid command id"),
        ({"command": "stop", "revision": -1}, "revision"),
        ({"command": "stop", "revision": True}, "revision"),
        ({"command": "stop", "args": {"f": 0.5}}, "canonical"),
    ],
)
def test_bad_arguments_are_value_errors(state: Path, kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        issue(state, **kw)
    assert not (run_dir(state, RUN) / "control.jsonl").exists()


def test_every_named_command_is_accepted(state: Path) -> None:
    assert COMMANDS == (
        "stop",
        "abort",
        "approve",
        "answer",
        "instruct",
        "judge",
        "resume",
        "abandon",
    )
    for n, name in enumerate(COMMANDS):
        assert issue(state, name, command_id=f"id{n}").seq == n


def test_unknown_run_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(UnknownRunError):
        issue(tmp_path)
    assert not (tmp_path / "runs").exists()
    (run_dir(tmp_path, RUN)).mkdir(parents=True)
    with pytest.raises(UnknownRunError):
        issue(tmp_path)
    assert not (run_dir(tmp_path, RUN) / "control.jsonl").exists()


def test_run_ended_refuses_all_but_resume_and_abandon(state: Path) -> None:
    issue(state, "stop", command_id="before")
    audit(state, "run.end", {"outcome": "cancelled"})
    assert run_ended(run_dir(state, RUN), RUN)
    for name in ("stop", "abort", "approve", "answer", "instruct"):
        with pytest.raises(RunEnded):
            issue(state, name, command_id=f"late-{name}")
    assert issue(state, "stop", command_id="before").replayed  # a replay is still answered
    assert not issue(state, "resume", command_id="r").replayed
    assert not issue(state, "abandon", args={"batch": "b0001"}, command_id="ab").replayed
    assert [line["body"]["id"] for line in control_lines(state)] == ["before", "r", "ab"]


def test_a_tampered_control_store_is_refused(state: Path) -> None:
    issue(state, command_id="one")
    path = run_dir(state, RUN) / "control.jsonl"
    data = path.read_bytes()
    at = data.index(b'"mac":"') + 7
    flipped = b"0" if data[at : at + 1] != b"0" else b"1"
    path.write_bytes(data[:at] + flipped + data[at + 1 :])
    with pytest.raises(ControlLogError, match="does not verify"):
        issue(state, command_id="two")
    assert path.read_bytes().count(b"\n") == 1


def test_a_symlinked_control_store_is_refused(state: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(b"")
    (run_dir(state, RUN) / "control.jsonl").symlink_to(target)
    with pytest.raises(ControlLogError, match="symbolic link"):
        issue(state)
    assert target.read_bytes() == b""


def _issue_in_child(state: str, command_id: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    issued = issue_command(
        Path(state), RUN, make_keys(), operator="op", command="stop", args={}, command_id=command_id
    )
    out.put((issued.seq, issued.replayed))


def test_two_processes_issuing_the_same_id_append_one_record(state: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for n in range(3):
        barrier = ctx.Barrier(2)
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_issue_in_child, args=(str(state), f"same-{n}", barrier, out))
            for _ in "ab"
        ]
        for proc in procs:
            proc.start()
        results = sorted(out.get(timeout=30) for _ in procs)
        for proc in procs:
            proc.join(30)
            assert proc.exitcode == 0
        assert results == [(n, False), (n, True)]
        assert len(control_lines(state)) == n + 1


CHILD = """
import sys
from pathlib import Path
from harness.receipts.commands import RunEnded, issue_command
from tests.evidence_helpers import make_keys
try:
    issued = issue_command(Path(sys.argv[1]), "run-1", make_keys(), operator="op",
                           command="stop", args={}, command_id=sys.argv[2])
except RunEnded:
    print("ended")
else:
    print(issued.seq, issued.replayed)
"""


def _child(state: Path, command_id: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state), command_id],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _wait_blocked(proc: subprocess.Popen[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "issue_command finished while the bus lock was held"
        time.sleep(0.05)


def test_exclusive_blocks_a_concurrent_issue_until_released(state: Path) -> None:
    bus = ControlBus(run_dir(state, RUN), RUN, MASTER)
    issue(state, command_id="first")
    with bus.exclusive() as pending:
        assert [c.id for c in pending] == ["first"]
        proc = _child(state, "second")
        _wait_blocked(proc, 1.5)  # the child imports, then waits on the lock
        assert len(control_lines(state)) == 1
    out, _ = proc.communicate(timeout=30)
    assert out.split() == ["1", "False"]
    assert [c.id for c in bus.poll()] == ["second"]
    assert bus.poll() == []


def test_a_command_waiting_for_the_end_lock_sees_the_run_ended(state: Path) -> None:
    bus = ControlBus(run_dir(state, RUN), RUN, MASTER)
    with bus.exclusive() as pending:
        assert pending == []  # the store is created to be locked
        proc = _child(state, "late")
        _wait_blocked(proc, 1.5)
        audit(state, "run.end", {"outcome": "completed"})
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "ended"
    assert control_lines(state) == []


def test_a_later_record_replays_too(state: Path) -> None:
    issue(state, command_id="first")
    issue(state, "abort", command_id="second")
    again = issue(state, "abort", command_id="second")
    assert again.replayed and again.seq == 1
    with pytest.raises(CommandConflict) as info:
        issue(state, "stop", command_id="second")
    assert str(info.value) == (
        "command id 'second' already names record 1 (abort by op, revision 0) with another payload"
    )


def test_refusals_name_what_and_why(state: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as value_error:
        issue(state, "delete")
    assert str(value_error.value) == (
        "unknown command 'delete'; commands are stop, abort, approve, answer, instruct, judge, "
        "resume, "
        "abandon"
    )
    with pytest.raises(UnknownRunError) as unknown:
        issue_command(tmp_path / "none", RUN, make_keys(), operator="o", command="stop", args={})
    assert str(unknown.value) == (
        f"{run_dir(tmp_path / 'none', RUN) / 'audit.jsonl'} does not exist: no such run"
    )
    audit(state, "run.end", {"outcome": "completed"})
    with pytest.raises(RunEnded) as ended:
        issue(state, "approve")
    assert str(ended.value) == "run run-1 has ended; 'approve' can no longer be applied"


def test_an_unsafe_audit_store_is_refused_with_its_path(state: Path, tmp_path: Path) -> None:
    path = run_dir(state, RUN) / "audit.jsonl"
    os.link(path, tmp_path / "alias")
    with pytest.raises(ControlLogError) as info:
        issue(state)
    assert str(info.value) == f"{path}: has 2 hard links (exactly 1 is required)"
    with pytest.raises(ControlLogError, match="hard links"):
        current_epoch(run_dir(state, RUN), RUN)


def test_a_duplicate_id_in_the_store_is_refused_with_its_path(state: Path) -> None:
    path = run_dir(state, RUN) / "control.jsonl"
    body = {"operator": "op", "command": "stop", "args": {}, "id": "dup", "revision": 0}
    with StoreWriter(path, store="control", run_id=RUN, hmac_master=MASTER) as w:
        w.append_many([("command", body), ("command", body)])
    with pytest.raises(ControlLogError) as info:
        issue(state, command_id="new")
    assert str(info.value) == f"{path}: record 1: command id 'dup' already used by record 0"


def test_a_short_master_key_fails_and_leaks_no_descriptor(state: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from harness.receipts.keys import OperatorKeys
    from harness.verify.errors import ChainError

    weak = OperatorKeys(Ed25519PrivateKey.from_private_bytes(bytes(32)), bytes(16))
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ChainError, match="need at least 32"):
        issue_command(state, RUN, weak, operator="o", command="stop", args={})
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_tampered_store_leaks_no_descriptor(state: Path) -> None:
    issue(state, command_id="one")
    path = run_dir(state, RUN) / "control.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"one"', b'"two"'))
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ControlLogError, match="does not verify"):
        issue(state)
    assert len(os.listdir("/proc/self/fd")) == before


def test_audit_records_of_another_run_or_store_are_refused(tmp_path: Path) -> None:
    status(tmp_path, 1, run_id="run-2")
    other = run_dir(tmp_path, "run-2") / "audit.jsonl"
    folder = run_dir(tmp_path, RUN)
    folder.mkdir(parents=True)
    shutil.copyfile(other, folder / "audit.jsonl")
    for ask in (current_epoch, run_ended):
        with pytest.raises(ControlLogError) as info:
            ask(folder, RUN)
        assert str(info.value) == f"{folder / 'audit.jsonl'}: run id 'run-2' is not 'run-1'"
    control = run_dir(tmp_path, "run-3") / "control.jsonl"
    with StoreWriter(control, store="control", run_id=RUN, hmac_master=MASTER) as w:
        w.append(
            "command", {"operator": "o", "command": "stop", "args": {}, "id": "x", "revision": 0}
        )
    shutil.copyfile(control, folder / "audit.jsonl")
    with pytest.raises(ControlLogError, match="store 'control' is not 'audit'"):
        run_ended(folder, RUN)


def test_an_empty_audit_store_has_not_ended(tmp_path: Path) -> None:
    folder = run_dir(tmp_path, RUN)
    folder.mkdir(parents=True)
    (folder / "audit.jsonl").write_bytes(b"")
    assert not run_ended(folder, RUN)
    assert current_epoch(folder, RUN) == 0
    (folder / "audit.jsonl").write_bytes(b'{"torn')
    assert not run_ended(folder, RUN)


def _reference_backwards(data: bytes) -> list[bytes]:
    cut = data.rfind(b"\n")
    return [] if cut < 0 else data[:cut].split(b"\n")[::-1]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    torn=st.binary(max_size=9).map(lambda b: b.replace(b"\n", b"")),
    chunk=st.integers(1, 20),
)
def test_lines_backwards_matches_a_plain_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[bytes], torn: bytes, chunk: int
) -> None:
    monkeypatch.setattr(commands, "READ_CHUNK", chunk)
    data = b"".join(line + b"\n" for line in lines) + torn
    path = tmp_path / "lines"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(commands._lines_backwards(fd, path)) == _reference_backwards(data)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"a\n" + b"x" * 9, None),  # a torn tail of exactly the limit is skipped
        (b"a\n" + b"x" * 10, "last line over 9 bytes"),
        (b"a\n" + b"x" * 20, "last line over 9 bytes"),  # over before its start is read
        (b"x" * 9, None),  # no line end at all, exactly the limit: nothing yet
        (b"x" * 10, "last line over 9 bytes"),
        (b"x" * 9 + b"\nb\n", None),
        (b"x" * 10 + b"\nb\n", "a line over 9 bytes"),
    ],
)
def test_lines_backwards_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, message: str | None
) -> None:
    monkeypatch.setattr(commands, "READ_CHUNK", 4)
    monkeypatch.setattr(commands, "MAX_LINE_BYTES", 9)
    path = tmp_path / "lines"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        if message is None:
            assert list(commands._lines_backwards(fd, path)) == _reference_backwards(data)
        else:
            with pytest.raises(ControlLogError) as info:
                list(commands._lines_backwards(fd, path))
            assert str(info.value) == f"{path}: {message}"
    finally:
        os.close(fd)


def test_epoch_is_found_across_chunks(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for epoch in range(1, 4):
        status(state, epoch)
        audit(state, "event", {"name": "x", "data": {}})
    monkeypatch.setattr(commands, "READ_CHUNK", 37)
    assert current_epoch(run_dir(state, RUN), RUN) == 3
