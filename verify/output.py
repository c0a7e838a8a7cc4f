"""Writing reports: never through a link, never into something that is not a regular file.

In CI the working directory is the pull request's checkout, and a pull request can commit a
symbolic link where a report will be written (``harness-gate.sarif -> /home/runner/.bashrc``,
or into the file behind ``$GITHUB_ENV``, which sets the environment of every later step).
Following it would let the change under test write, with our report as content, into a file
of its choice. So ``--output`` and ``--summary`` are opened with ``O_NOFOLLOW`` (an existing
symbolic link as the last component is refused: the kernel does the check, no race), without
blocking (a FIFO with no reader is refused instead of hanging), and the opened file must be a
regular file with no other hard link. ``--output`` then replaces the file's content (created
if missing); ``--summary`` appends (``$GITHUB_STEP_SUMMARY`` holds earlier steps' sections).

Every problem is an ``OutputError`` whose message names the file (in display form) and the
reason; the CLI turns it into exit code 2. Standard output is written as UTF-8 bytes, whatever
the locale: reports are surrogate-free by construction (``textsafe``), and a C locale must not
turn a ``✅`` into a traceback (``backslashreplace`` is only a last resort against a renderer
bug: a report is never lost to an encoding error). A reader that closes the pipe early ends
the output, not the process with a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Final

from . import textsafe

__all__ = ["OutputError", "append_summary", "write_report", "write_stdout"]

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | _NOFOLLOW
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_MODE: Final = 0o644


class OutputError(Exception):
    """A report could not be written safely: the message names the file and the reason."""


_KINDS: Final = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _refuse_early(path: Path, shown: str, what: str) -> None:
    """Refuse a link or a non-regular file before opening it (opening a device can have
    effects); ``O_NOFOLLOW`` and ``fstat`` after the open close the race that remains."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # missing (created below) or unreachable (the open says why)
    if stat.S_ISLNK(mode):
        raise OutputError(
            f"refusing to write the {what} to {shown}: it is a symbolic link "
            "(reports are never written through a link)"
        )
    for test, kind in _KINDS:
        if test(mode):
            raise OutputError(
                f"refusing to write the {what} to {shown}: it is {kind}, not a regular file"
            )


def _open(path: Path, flags: int, what: str) -> int:
    shown = textsafe.text(os.fsdecode(path))
    _refuse_early(path, shown, what)
    try:
        fd = os.open(path, flags, _MODE)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and _is_link(path):
            raise OutputError(
                f"refusing to write the {what} to {shown}: it is a symbolic link "
                "(reports are never written through a link)"
            ) from None
        if exc.errno == errno.ENXIO:
            raise OutputError(
                f"refusing to write the {what} to {shown}: not a regular file (a pipe or socket)"
            ) from None
        raise OutputError(f"cannot write the {what} to {shown}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"refusing to write the {what} to {shown}: not a regular file")
        if info.st_nlink > 1:
            raise OutputError(
                f"refusing to write the {what} to {shown}: it has {info.st_nlink} hard links"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes, path: Path, what: str) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        shown = textsafe.text(os.fsdecode(path))
        raise OutputError(f"cannot write the {what} to {shown}: {exc.strerror}") from None
    finally:
        os.close(fd)


def write_report(path: Path, document: str, what: str = "report") -> None:
    """Replace ``path``'s content with ``document`` (UTF-8), creating it if missing."""
    fd = _open(path, _FLAGS, what)
    try:
        os.ftruncate(fd, 0)  # only now: a refused file is never truncated
    except OSError as exc:
        os.close(fd)
        shown = textsafe.text(os.fsdecode(path))
        raise OutputError(f"cannot write the {what} to {shown}: {exc.strerror}") from None
    _write_all(fd, document.encode("utf-8", "backslashreplace"), path, what)


def append_summary(path: Path, document: str, what: str = "summary") -> None:
    """Append ``document`` (UTF-8) to ``path``, creating it if missing."""
    fd = _open(path, _FLAGS | os.O_APPEND, what)
    _write_all(fd, document.encode("utf-8", "backslashreplace"), path, what)


def write_stdout(document: str) -> None:
    """Write ``document`` to standard output as UTF-8 bytes, with a final newline."""
    data = (document if document.endswith("\n") else document + "\n").encode(
        "utf-8", "backslashreplace"
    )
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # replaced by a text-only stream (tests, embedding)
        sys.stdout.write(data.decode("utf-8"))
        return
    try:
        sys.stdout.flush()
        stream.write(data)
        stream.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more can be said, the exit code still
        # speaks. Point stdout at /dev/null so the interpreter's final flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
