"""Incremental, read-only tail of one append-only store file.

Why a tail and not a re-read: a long run's audit store holds 10^5 records and grows while the
page is open; each refresh reads only the bytes appended since the last one. Only complete
lines are taken (a writer mid-append leaves a line without its ``\\n``; it is read next time),
and a refresh reads at most ``budget`` bytes, so one request never stalls on a huge store.

A store is append-only, so anything else is a gap the reader cannot continue across: the
file shrank, was replaced (another inode), or the last line read is no longer the same bytes
at the same place. Then ``refresh`` returns ``reset=True`` with the lines from the start: the
caller drops what it folded and folds again (and live clients are told to resync).

Files are opened through receipts/safeopen.py: no symlink in any component, a regular file,
one link, never blocking on a FIFO. Nothing is ever written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.receipts.safeopen import SafeOpenError, open_read
from harness.verify.records import MAX_LINE_BYTES

BUDGET: Final = 8 << 20
"""Bytes read per refresh at most (the rest is read by the next refresh)."""
CHUNK: Final = 1 << 20


class TailError(Exception):
    """The store cannot be read safely (link, FIFO, hard link, over-long line)."""


@dataclass
class Chunk:
    """What one refresh found: complete new lines, and whether the tail restarted."""

    lines: list[bytes] = field(default_factory=list)
    reset: bool = False


class StoreTail:
    """Remembers how far one store file was read (byte offset, line count, identity)."""

    def __init__(self, path: Path, budget: int = BUDGET, *, keep: bool = True) -> None:
        """``keep=False``: count lines only (``Chunk.lines`` stays empty)."""
        self.path = path.absolute()
        self.budget = budget
        self.keep = keep
        self.offset = 0
        self.count = 0
        self.size = 0
        """The file's size at the last refresh (may include a torn, unread tail)."""
        self._identity: tuple[int, int] | None = None
        self._last: bytes = b""
        """The last complete line read, with its ``\\n`` (compared in place on refresh)."""

    def _restart(self) -> None:
        self.offset = 0
        self.count = 0
        self._identity = None
        self._last = b""

    def refresh(self) -> Chunk:
        """Read the complete lines appended since the last refresh (at most ``budget`` bytes)."""
        try:
            fd = open_read(self.path)
        except SafeOpenError as exc:
            raise TailError(f"{self.path}: {exc}") from None
        if fd is None:
            reset = self.offset > 0
            self._restart()
            self.size = 0
            return Chunk(reset=reset)
        try:
            info = os.fstat(fd)
            self.size = info.st_size
            identity = (info.st_dev, info.st_ino)
            reset = False
            if self._identity is not None and (
                identity != self._identity or info.st_size < self.offset or not self._same(fd)
            ):
                self._restart()
                reset = True
            self._identity = identity
            return Chunk(self._read(fd, info.st_size), reset)
        finally:
            os.close(fd)

    def _same(self, fd: int) -> bool:
        if not self._last:
            return True
        start = self.offset - len(self._last)
        return os.pread(fd, len(self._last), start) == self._last

    def _read(self, fd: int, size: int) -> list[bytes]:
        lines: list[bytes] = []
        position = self.offset
        end = min(size, self.offset + self.budget)
        pending = b""
        while position < end:
            chunk = os.pread(fd, min(CHUNK, end - position), position)
            if not chunk:
                break
            position += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            if cut and self.keep:
                for line in data[:cut].split(b"\n")[:-1]:
                    lines.append(line)
                    self.offset += len(line) + 1
                    self._last = line + b"\n"
                self.count += data[:cut].count(b"\n")
            elif cut:
                self.offset += cut
                self.count += data.count(b"\n", 0, cut)
                self._last = data[data.rfind(b"\n", 0, cut - 1) + 1 : cut]
            pending = data[cut:]
            if len(pending) > MAX_LINE_BYTES:
                raise TailError(f"{self.path}: a line over {MAX_LINE_BYTES} bytes")
        return lines
