"""Open a store file without following links or blocking on special files (docs/spec/control.md §5).

Why: the control store is read by the runtime at every decision point and written by any
``harness <command>``. A path opened by name follows symlinks in every component, and an
``open()`` of a FIFO blocks until a writer appears: whoever could swap ``control.jsonl`` (or a
folder above it) for a link or a FIFO could make the runtime read another file or hang. So:

1. every directory from ``/`` down is opened with ``O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC``
   relative to its parent's descriptor (``dir_fd``), so no component can be a symlink, even
   one swapped in between two checks;
2. the final file is opened the same way with ``O_NOFOLLOW|O_NONBLOCK`` (a FIFO opens at once
   instead of blocking, a socket fails with ``ENXIO``);
3. ``fstat`` of the open descriptor: it must be a regular file with exactly one link (a hard
   link would let the same inode be reached, and changed, through another path);
4. only then is ``O_NONBLOCK`` cleared.

A platform without ``O_NOFOLLOW``, ``O_DIRECTORY`` or ``dir_fd`` support for ``os.open`` fails
closed (``UnsupportedPlatformError``): there is no weaker fallback. An absent file (or folder) is a
distinct answer (``None``), since the control store may not exist yet; every other failure is a
``SafeOpenError`` naming the path and the reason.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Final

_REASONS: Final = {
    errno.ELOOP: "is a symbolic link",
    errno.EMLINK: "is a symbolic link",  # FreeBSD's O_NOFOLLOW answer
    errno.ENOTDIR: "is not a directory",
    errno.ENXIO: "is a socket or a FIFO without a reader",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "is a directory",
}


class SafeOpenError(Exception):
    """The file cannot be opened safely; ``path`` and ``reason`` say which and why."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class UnsupportedPlatformError(SafeOpenError):
    """The platform lacks ``O_NOFOLLOW``/``O_DIRECTORY``/``dir_fd``: refuse rather than guess."""


def _flag(name: str, path: Path | str) -> int:
    value = getattr(os, name, None)
    if not isinstance(value, int) or value == 0:
        raise UnsupportedPlatformError(
            path, f"this platform has no os.{name}; refusing to open unsafely"
        )
    return value


def _components(path: Path | str) -> list[str]:
    text = os.fspath(path)
    if not os.path.isabs(text):
        raise SafeOpenError(path, "not an absolute path")
    parts = [part for part in text.split("/") if part]
    if not parts:
        raise SafeOpenError(path, "names no file")
    for part in parts:
        if part in (".", ".."):
            raise SafeOpenError(path, f"has a {part!r} component")
    return parts


def _describe(path: str, exc: OSError) -> SafeOpenError:
    reason = _REASONS.get(exc.errno or 0, exc.strerror or f"error {exc.errno}")
    return SafeOpenError(path, reason)


def _describe_dir(path: str, name: str, parent: int, exc: OSError) -> SafeOpenError:
    """Linux answers ``ENOTDIR`` for a symlink opened ``O_DIRECTORY|O_NOFOLLOW``: name what it
    is (the refusal itself does not depend on this ``lstat``, only its message)."""
    if exc.errno == errno.ENOTDIR:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return _describe(path, exc)
        return SafeOpenError(path, f"is not a directory ({_kind(info.st_mode)})")
    return _describe(path, exc)


def _open_final(path: Path | str, flags: int, mode: int) -> int | None:
    """The common procedure; ``flags`` are the final file's access flags."""
    nofollow = _flag("O_NOFOLLOW", path)
    directory = _flag("O_DIRECTORY", path)
    nonblock = _flag("O_NONBLOCK", path)
    cloexec = _flag("O_CLOEXEC", path)
    if os.open not in os.supports_dir_fd:
        raise UnsupportedPlatformError(
            path, "os.open has no dir_fd support; refusing to open unsafely"
        )
    parts = _components(path)
    dir_flags = os.O_RDONLY | directory | nofollow | cloexec
    here = "/"
    try:
        parent = os.open("/", dir_flags)
    except OSError as exc:
        raise _describe("/", exc) from None
    try:
        for part in parts[:-1]:
            here = os.path.join(here, part)
            try:
                child = os.open(part, dir_flags, dir_fd=parent)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise _describe_dir(here, part, parent, exc) from None
            os.close(parent)
            parent = child
        here = os.path.join(here, parts[-1])
        try:
            fd = os.open(parts[-1], flags | nofollow | nonblock | cloexec, mode, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _describe(here, exc) from None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SafeOpenError(here, f"is not a regular file ({_kind(info.st_mode)})")
        if info.st_nlink != 1:
            raise SafeOpenError(here, f"has {info.st_nlink} hard links (exactly 1 is required)")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~nonblock)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return f"mode {mode:o}"


def open_read(path: Path | str) -> int | None:
    """A read-only descriptor of the regular, singly linked file at ``path`` (absolute), or
    ``None`` when it (or a folder above it) does not exist. The caller closes it."""
    return _open_final(path, os.O_RDONLY, 0)


def open_append(path: Path | str, *, create: bool = False, mode: int = 0o644) -> int | None:
    """A read-write, append-only descriptor (``O_RDWR|O_APPEND``: store writers re-read what
    is there before appending) of the file at ``path`` with the same checks; with ``create``
    a missing final file is created (its folders must exist), else ``None`` when absent."""
    flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
    return _open_final(path, flags, mode)
