"""A digest of a worktree's files, taken before and after the Auditor runs.

The Auditor runs read-only (its sandbox mounts the worktree read-only); the digest is the
second, independent check that works without a sandbox too: any file created, changed,
deleted, re-moded or re-linked under the worktree (``.git`` excluded: a worktree's ``.git`` is
a file pointing at the repository, which the Auditor cannot reach) changes it.

Digest: SHA-256 over, for every entry in sorted path order (bytes of the POSIX relative path),
``<kind> <mode octal> <path> <sha256 of content or link text>\\n`` with kind ``f`` (regular
file), ``l`` (symlink, not followed), ``d`` (directory) or ``o`` (anything else).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def _file_sha256(path: str) -> str:
    sha = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        while chunk := os.read(fd, 1 << 20):
            sha.update(chunk)
    finally:
        os.close(fd)
    return sha.hexdigest()


def _entry(full: str) -> tuple[str, str]:
    """(kind and mode, content digest) of one entry, never following a link."""
    info = os.lstat(full)
    mode = f"{stat.S_IMODE(info.st_mode):o}"
    if stat.S_ISLNK(info.st_mode):
        return f"l {mode}", hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest()
    if stat.S_ISREG(info.st_mode):
        return f"f {mode}", _file_sha256(full)
    return (f"d {mode}" if stat.S_ISDIR(info.st_mode) else f"o {mode}"), ""


def tree_digest(root: Path) -> str:
    """The digest of ``root``'s entries (see the module docstring)."""
    base = os.fspath(root)
    lines: list[tuple[bytes, bytes]] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        rel_folder = os.path.relpath(folder, base)
        names = sorted(dirs) + sorted(files)
        if rel_folder == ".":
            dirs[:] = [d for d in dirs if d != ".git"]
            names = [n for n in names if n != ".git"]
        for name in names:
            full = os.path.join(folder, name)
            rel = os.fsencode(os.path.normpath(os.path.join(rel_folder, name)))
            kind, content = _entry(full)
            lines.append((rel, kind.encode() + b" " + rel + b" " + content.encode() + b"\n"))
    sha = hashlib.sha256()
    for _, line in sorted(lines):
        sha.update(line)
    return sha.hexdigest()
