"""Operator commands: the control store's write side and its strict incremental reader.

Why (docs/spec/control.md): a command is how an operator steers a running run (``harness stop``,
``approve``, ``answer``, ...). It is a ``command`` record in the run's control store with an id
and a revision. Retrying a command must never apply it twice, so the id makes issuing
idempotent: an exact replay returns the record already there, the same id with another payload
is a conflict. The check and the append happen under the control store's exclusive lock, which
is also the lock the runtime holds while it writes its last receipts and ``run.end``: a command
either lands before the run ends (and is answered) or sees the run ended (``RunEnded``).

The reader (``CommandLog``) is shared by ``issue_command`` and the runtime's bus
(orchestrate/bus): complete lines only, each parsed strictly, the MAC chain checked from genesis,
bounded line length, byte offset and chain state kept between reads. Files are opened with
receipts/safeopen.py (no symlinks in any component, no FIFO, no hard link).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.verify.canonical import canonical_bytes
from harness.verify.chain import MacChain, derive_store_key
from harness.verify.errors import ChainError, VerificationError
from harness.verify.records import (
    COMMAND_ID_RE,
    MAX_LINE_BYTES,
    parse_record_line,
    split_mac,
)

from .keys import OperatorKeys
from .run import run_dir
from .safeopen import SafeOpenError, open_append, open_read
from .store import StoreError, StoreWriter, fsync_dir

COMMANDS: Final = (
    "stop",
    "abort",
    "approve",
    "answer",
    "instruct",
    "judge",
    "resume",
    "abandon",
)
"""Command names ``issue_command`` accepts (the runtime answers any other name ``rejected``)."""
AFTER_END: Final = frozenset({"resume", "abandon"})
"""Commands that may still be issued once the run has ended."""
CONTROL_FILE: Final = "control.jsonl"
AUDIT_FILE: Final = "audit.jsonl"
READ_CHUNK: Final = 1 << 20
_STATUS_MARK: Final = b'"kind":"run.status"'


class ControlLogError(Exception):
    """The control (or audit) store cannot be trusted: unsafe file, malformed record, MAC
    mismatch, foreign run, shrunk or replaced file. Whoever reads it must stop."""


class CommandConflict(Exception):  # noqa: N818 (the name the issue-12 API fixes)
    """A command id already names a command with another payload."""


class RunEnded(Exception):  # noqa: N818 (the name the issue-12 API fixes)
    """The run has ended (its audit store ends with ``run.end``) and the command is neither
    ``resume`` nor ``abandon``."""


class UnknownRunError(Exception):
    """No such run: its folder or its audit store does not exist."""


@dataclass(frozen=True)
class Command:
    """One ``command`` record of the control store, as read (MAC checked)."""

    seq: int
    id: str
    command: str
    args: Mapping[str, Any]
    operator: str
    revision: int
    time: str


@dataclass(frozen=True)
class Issued:
    """The answer of ``issue_command``: the record's seq and id; ``replayed`` when the exact
    command was already there (nothing was appended)."""

    seq: int
    id: str
    replayed: bool


class CommandLog:
    """Incremental strict reader of one run's control store.

    ``read(fd)`` parses the complete lines after the last one read (a torn last line waits for
    its ``\\n``), checks each record's seq and MAC against the chain state kept from genesis,
    and returns the new commands (``store.recovered`` lines are chain members, not commands).
    The file must keep its identity (device, inode) and never shrink below what was read. An id
    used twice is refused: a receipt names exactly one command.
    """

    def __init__(self, path: Path, run_id: str, hmac_master: bytes) -> None:
        self.path = path
        self.run_id = run_id
        self._chain = MacChain(derive_store_key(hmac_master, "control", run_id))
        self.offset = 0
        self.seq = 0
        self._identity: tuple[int, int] | None = None
        self._ids: dict[str, int] = {}

    def _fail(self, reason: str) -> ControlLogError:
        return ControlLogError(f"{self.path}: {reason}")

    def read(self, fd: int) -> list[Command]:
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            raise self._fail("the control store was replaced by another file")
        if info.st_size < self.offset:
            raise self._fail(f"shrank from {self.offset} to {info.st_size} bytes")
        found: list[Command] = []
        pending = b""
        position = self.offset
        while position < info.st_size:
            chunk = os.pread(fd, min(READ_CHUNK, info.st_size - position), position)
            if not chunk:
                break
            position += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            for line in data[:cut].split(b"\n")[:-1]:
                command = self._accept(line)
                self.offset += len(line) + 1
                if command is not None:
                    found.append(command)
            pending = data[cut:]
            if len(pending) > MAX_LINE_BYTES:
                raise self._fail(
                    f"record {self.seq}: over {MAX_LINE_BYTES} bytes without a line end"
                )
        return found

    def _accept(self, line: bytes) -> Command | None:
        try:
            record = parse_record_line(line, "control", self.run_id)
            if record.seq != self.seq:
                raise ChainError(f"seq {record.seq} where {self.seq} was expected")
            self._chain.check_next(split_mac(line)[1], record.mac)
        except VerificationError as exc:
            raise self._fail(f"record {self.seq}: {exc}") from None
        self.seq += 1
        if record.kind != "command":
            return None  # store.recovered: the writer's note of a torn tail it moved aside
        body = record.body
        earlier = self._ids.get(body["id"])
        if earlier is not None:
            raise self._fail(
                f"record {record.seq}: command id {body['id']!r} already used by record {earlier}"
            )
        self._ids[body["id"]] = record.seq
        return Command(
            seq=record.seq,
            id=body["id"],
            command=body["command"],
            args=body["args"],
            operator=body["operator"],
            revision=body["revision"],
            time=record.time,
        )


# ---- the audit store: epoch and end, read backwards ------------------------------------------
def _lines_backwards(fd: int, path: Path) -> Iterator[bytes]:
    """Complete lines of the file, last first (a torn tail after the last ``\\n`` is skipped);
    reads from the end in chunks, so finding the last record costs O(its length)."""
    position = os.fstat(fd).st_size
    carry = b""
    torn_dropped = False
    while position > 0:
        start = max(0, position - READ_CHUNK)
        data = os.pread(fd, position - start, start) + carry
        position = start
        if not torn_dropped:
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                if len(carry) > MAX_LINE_BYTES:
                    raise ControlLogError(f"{path}: last line over {MAX_LINE_BYTES} bytes")
                continue
            if len(data) - cut - 1 > MAX_LINE_BYTES:
                raise ControlLogError(f"{path}: last line over {MAX_LINE_BYTES} bytes")
            data = data[:cut]
            torn_dropped = True
        parts = data.split(b"\n")
        carry = parts[0]
        if len(carry) > MAX_LINE_BYTES:
            raise ControlLogError(f"{path}: a line over {MAX_LINE_BYTES} bytes")
        yield from reversed(parts[1:])
    if torn_dropped:
        yield carry


def _audit_fd(run_folder: Path) -> int:
    path = run_folder.absolute() / AUDIT_FILE
    try:
        fd = open_read(path)
    except SafeOpenError as exc:
        raise ControlLogError(str(exc)) from None
    if fd is None:
        raise UnknownRunError(f"{path} does not exist: no such run")
    return fd


def _parse_audit(line: bytes, run_folder: Path, run_id: str) -> tuple[str, Mapping[str, Any]]:
    try:
        record = parse_record_line(line, "audit", run_id)
    except VerificationError as exc:
        raise ControlLogError(f"{run_folder / AUDIT_FILE}: {exc}") from None
    return record.kind, record.body


def current_epoch(run_folder: Path, run_id: str) -> int:
    """The ``epoch`` of the last ``run.status`` record in the run's audit store (0 when none).
    Records are parsed strictly (not MAC-checked: no key is needed to ask)."""
    fd = _audit_fd(run_folder)
    try:
        for line in _lines_backwards(fd, run_folder / AUDIT_FILE):
            if _STATUS_MARK in line:
                kind, body = _parse_audit(line, run_folder, run_id)
                if kind == "run.status":
                    epoch: int = body["epoch"]
                    return epoch
        return 0
    finally:
        os.close(fd)


def run_ended(run_folder: Path, run_id: str) -> bool:
    """Whether the run's audit store's last complete record is ``run.end``."""
    fd = _audit_fd(run_folder)
    try:
        for line in _lines_backwards(fd, run_folder / AUDIT_FILE):
            return _parse_audit(line, run_folder, run_id)[0] == "run.end"
        return False
    finally:
        os.close(fd)


# ---- issuing -----------------------------------------------------------------------------------
def _check_arguments(command: str, command_id: str | None, revision: int | None) -> None:
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; commands are {', '.join(COMMANDS)}")
    if command_id is not None and (
        type(command_id) is not str or not COMMAND_ID_RE.fullmatch(command_id)
    ):
        raise ValueError(
            f"invalid command id {command_id!r} (1-64 of A-Za-z0-9._-, starting alphanumeric)"
        )
    if revision is not None and (type(revision) is not int or revision < 0):
        raise ValueError(f"revision must be a non-negative integer, got {revision!r}")


def issue_command(
    state: Path,
    run_id: str,
    keys: OperatorKeys,
    *,
    operator: str,
    command: str,
    args: Mapping[str, Any],
    command_id: str | None = None,
    revision: int | None = None,
) -> Issued:
    """Append a ``command`` record to the run's control store, idempotently.

    Under the control store's exclusive lock: the store is re-read from genesis (MAC-checked);
    an existing record with ``command_id`` is an exact replay (same command, args, operator, and
    revision, an omitted revision matching the recorded one) -> ``Issued(replayed=True)``, or
    ``CommandConflict``; else ``RunEnded`` if the audit store ends with ``run.end`` (unless the
    command is ``resume``/``abandon``); else the record is appended durably. The default id is
    ``secrets.token_hex(8)``, the default revision the run's current epoch.
    """
    _check_arguments(command, command_id, revision)
    try:
        wanted_args = canonical_bytes(dict(args))
    except VerificationError as exc:
        raise ValueError(f"args are not canonical JSON: {exc}") from None
    folder = run_dir(state.absolute(), run_id)
    os.close(_audit_fd(folder))  # UnknownRunError before the control store is created
    path = folder / CONTROL_FILE
    try:
        fd = open_append(path)
        created = fd is None
        if fd is None:
            fd = open_append(path, create=True)
    except SafeOpenError as exc:
        raise ControlLogError(str(exc)) from None
    if fd is None:
        raise UnknownRunError(f"{folder} does not exist: no such run")
    if created:
        fsync_dir(folder)
    try:
        writer = StoreWriter(
            path, store="control", run_id=run_id, hmac_master=keys.hmac_master, opened=fd
        )
    except StoreError as exc:
        os.close(fd)
        raise ControlLogError(str(exc)) from None
    except BaseException:
        os.close(fd)
        raise
    wanted_id = command_id if command_id is not None else secrets.token_hex(8)
    replayed: list[Command] = []

    def decide() -> tuple[str, Mapping[str, Any]] | None:
        log = CommandLog(path, run_id, keys.hmac_master)
        for existing in log.read(fd):
            if existing.id != wanted_id:
                continue
            same = (
                existing.command == command
                and canonical_bytes(dict(existing.args)) == wanted_args  # True != 1
                and existing.operator == operator
                and (revision is None or existing.revision == revision)
            )
            if not same:
                raise CommandConflict(
                    f"command id {wanted_id!r} already names record {existing.seq} "
                    f"({existing.command} by {existing.operator}, revision {existing.revision}) "
                    "with another payload"
                )
            replayed.append(existing)
            return None
        if command not in AFTER_END and run_ended(folder, run_id):
            raise RunEnded(f"run {run_id} has ended; {command!r} can no longer be applied")
        return "command", {
            "operator": operator,
            "command": command,
            "args": dict(args),
            "id": wanted_id,
            "revision": current_epoch(folder, run_id) if revision is None else revision,
        }

    with writer:
        try:
            appended = writer.append_checked(decide)
        except StoreError as exc:
            raise ControlLogError(str(exc)) from None
    if appended is None:
        return Issued(replayed[0].seq, wanted_id, True)
    return Issued(appended.seq, wanted_id, False)
