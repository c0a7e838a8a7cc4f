"""Captured output streams and the stdin feeder of a supervised process.

Why non-blocking pipes read from a selector: a child that fills one pipe while we wait on the
other would deadlock a sequential reader; and a supervisor stepping many processes from one
thread must never block on any of them. Each stream keeps at most ``max_output`` bytes; the
rest is read and discarded (so the child never blocks on a full pipe), the truncation being
recorded in the result.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import IO, Final

__all__ = ["CHUNK", "Sink", "StdinFeeder"]

CHUNK: Final = 1 << 16


class Sink:
    """One captured stream: keeps the first ``limit`` bytes, notes that there were more."""

    def __init__(self, limit: int) -> None:
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room >= len(chunk):
            self.data += chunk
            return
        if room > 0:
            self.data += chunk[:room]
        self.truncated = True


class StdinFeeder:
    """Writes ``data`` to the child's stdin as the pipe accepts it, then closes it.

    A child that exits or closes its stdin before reading everything is fine (EPIPE).
    """

    def __init__(self, pipe: IO[bytes], data: bytes) -> None:
        self.pipe = pipe
        self.fd = pipe.fileno()
        self.pending = memoryview(data)
        os.set_blocking(self.fd, False)

    def write(self) -> bool:
        """Write what the pipe takes now; True once everything is written (pipe closed)."""
        if self.pending:
            try:
                n = os.write(self.fd, self.pending[:CHUNK])
            except BlockingIOError:
                return False
            except OSError as exc:  # EPIPE: the process closed its stdin, fine
                if exc.errno not in (errno.EPIPE, errno.EINVAL):
                    raise
                self.pending = memoryview(b"")
            else:
                self.pending = self.pending[n:]
        if self.pending:
            return False
        self.close()
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.pipe.close()
