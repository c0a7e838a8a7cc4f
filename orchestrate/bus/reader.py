"""The runtime's side of the control bus: poll new commands, and hold the store's lock to end.

Why a lock on reading (docs/spec/control.md §4): ``issue_command`` checks "has the run ended?"
and appends under the control store's exclusive ``flock``. The runtime writes its last receipts
and ``run.end`` while it holds the same lock (``exclusive``), so a concurrent command either
lands before (it is among the commands ``exclusive`` yields, and gets its receipt) or after (it
sees ``run.end`` and is refused with ``RunEnded``): no command is ever left without an answer.

``poll`` takes the shared lock without waiting: while a writer holds the exclusive lock (a few
milliseconds for one append) it returns nothing new, and the next poll reads the record. So the
runtime's loop never blocks on the bus; only ``exclusive`` waits for the lock.

Every open goes through receipts/safeopen.py (no symlink in any component, regular file, one
link, never blocking on a FIFO); every line is parsed strictly and MAC-chained from genesis.
Any failure is a ``BusError``: the run must stop, since its operator's channel is not trusted.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.receipts.commands import CONTROL_FILE, Command, CommandLog, ControlLogError
from harness.receipts.safeopen import SafeOpenError, open_append, open_read


class BusError(Exception):
    """The control store is unsafe (link, FIFO, hard link, replaced, shrunk), malformed, or its
    MAC chain does not verify: the run must stop."""


class ControlBus:
    """Incremental reader of one run's control store (byte offset and chain state kept)."""

    def __init__(self, folder: Path, run_id: str, hmac_master: bytes) -> None:
        self.path = folder.absolute() / CONTROL_FILE
        self._log = CommandLog(self.path, run_id, hmac_master)

    @property
    def offset(self) -> int:
        """Bytes of the store read so far (complete lines only)."""
        return self._log.offset

    def _open(self) -> int | None:
        try:
            return open_read(self.path)
        except SafeOpenError as exc:
            raise BusError(f"control store: {exc}") from None

    def _read(self, fd: int) -> list[Command]:
        try:
            return self._log.read(fd)
        except ControlLogError as exc:
            raise BusError(str(exc)) from None

    def poll(self) -> list[Command]:
        """The commands of the complete lines written since the last poll (none while the
        store is absent or a writer holds its exclusive lock)."""
        fd = self._open()
        if fd is None:
            if self._log.offset:
                raise BusError(f"{self.path}: the control store disappeared")
            return []
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return []
                raise BusError(f"{self.path}: cannot lock: {exc.strerror}") from None
            return self._read(fd)
        finally:
            os.close(fd)  # closing drops the lock

    @contextmanager
    def exclusive(self) -> Iterator[list[Command]]:
        """Hold the control store's exclusive lock; yields the commands not yet returned by
        ``poll``. Write the receipts (and ``run.end``) inside: no command can be issued
        meanwhile. Do not open a StoreWriter on the control store inside (it would wait for
        this lock forever). An absent store is created (empty) first: a lock needs a file,
        and without one a command could be created and appended meanwhile."""
        try:
            fd = open_append(self.path, create=True)  # an absent store is created to be locked
        except SafeOpenError as exc:
            raise BusError(f"control store: {exc}") from None
        if fd is None:
            raise BusError(f"{self.path}: the run folder does not exist")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._read(fd)
        finally:
            os.close(fd)
