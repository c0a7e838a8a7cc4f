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
import selectors
import time
from collections.abc import Callable
from typing import IO, Final

__all__ = ["CHUNK", "Sink", "StdinFeeder", "Streams"]

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


class Streams:
    """The pipes of one process (and its pidfd, as a wake-up) in one selector."""

    def __init__(
        self,
        stdout: IO[bytes],
        stderr: IO[bytes],
        max_output: int,
        on_output: Callable[[str, bytes], None] | None,
    ) -> None:
        self.sel = selectors.DefaultSelector()
        self.sinks = {"stdout": Sink(max_output), "stderr": Sink(max_output)}
        self.readers: dict[int, str] = {}
        self.stdin: StdinFeeder | None = None
        self.on_output = on_output
        for name, pipe in (("stdout", stdout), ("stderr", stderr)):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, name)
            self.readers[pipe.fileno()] = name

    def feed_stdin(self, pipe: IO[bytes], data: bytes) -> None:
        self.stdin = StdinFeeder(pipe, data)
        self.sel.register(self.stdin.fd, selectors.EVENT_WRITE, "stdin")

    def close_stdin(self) -> None:
        if self.stdin is not None:
            self.sel.unregister(self.stdin.fd)
            self.stdin.close()
            self.stdin = None

    def watch(self) -> list[tuple[int, int]]:
        return [(key.fd, key.events) for key in self.sel.get_map().values()]

    def pump(self, timeout: float, on_data: Callable[[], None]) -> bool:
        """One selector round (waiting up to ``timeout``); True when it read or wrote
        something. ``on_data`` is called for every chunk of output read."""
        sel = self.sel
        if not sel.get_map():
            if timeout > 0:
                time.sleep(timeout)
            return False
        moved = False
        for key, _ in sel.select(timeout):
            if key.data == "exit":
                continue
            if key.data == "stdin":
                assert self.stdin is not None
                if self.stdin.write():
                    sel.unregister(key.fd)
                    self.stdin = None
                moved = True
                continue
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(key.fd)
                del self.readers[key.fd]
                continue
            moved = True
            on_data()
            self.sinks[key.data].feed(chunk)
            if self.on_output is not None:
                self.on_output(key.data, chunk)
        return moved
