"""File progress: has anything changed under an agent's worktree since the last look?

Why: an agent that works silently (writing files, running a build whose output goes to a log
file) is not hung, and an agent that prints nothing and changes nothing for a long time is. The
supervisor therefore counts as progress any byte of output *or* a change under the progress
paths. A change is seen by comparing a cheap fingerprint of the tree, taken every ``probe_s``:
(entry count, largest ``st_mtime_ns``, sum of sizes). Writing a file moves its mtime (and its
directory's when an entry is added or removed), so any write, creation, deletion or rename
changes the fingerprint, unless a process deliberately sets mtimes back, which only delays
the verdict (it cannot make a hung process look alive forever without writing something).

The walk is bounded: ``os.scandir`` without following symlinks, ``.git`` skipped (files and
folders: in a worktree ``.git`` is a file), at most :data:`MAX_ENTRIES` entries. A tree larger
than that is fingerprinted on its first entries in directory order only (``truncated``); the
cost of every probe is measured (:class:`ProbeStats`), so that the supervisor can space
probes out (at most one :data:`PROBE_SHARE`-th of the time spent probing) and it can be
reported.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "MAX_ENTRIES",
    "PROBE_SHARE",
    "Fingerprint",
    "ProbeStats",
    "ProgressProbe",
    "fingerprint",
]

MAX_ENTRIES: Final = 20_000
PROBE_SHARE: Final = 20
"""Probes are spaced at least this many times their own cost apart (<= 5 % of a core each:
a stat costs ~10 us here, so a 20,000-entry tree may take 0.2 s to walk)."""


@dataclass(frozen=True)
class Fingerprint:
    """A tree's state as far as progress is concerned."""

    entries: int
    max_mtime_ns: int
    total_size: int
    truncated: bool
    """The walk stopped at the entry limit."""

    def key(self) -> tuple[int, int, int]:
        return (self.entries, self.max_mtime_ns, self.total_size)


def fingerprint(paths: Sequence[Path], limit: int = MAX_ENTRIES) -> Fingerprint:
    """Walk ``paths`` (bounded by ``limit`` entries in all) and fingerprint what is there.

    A root that is missing counts as no entries (a worktree may be created after the
    supervisor); entries that vanish or cannot be read during the walk are skipped.
    """
    entries = 0
    max_mtime = 0
    total = 0
    todo: list[str] = []
    for root in paths:
        try:
            st = os.stat(root, follow_symlinks=False)
        except OSError:
            continue
        entries += 1
        max_mtime = max(max_mtime, st.st_mtime_ns)
        if stat.S_ISDIR(st.st_mode):
            todo.append(os.fspath(root))
        else:
            total += st.st_size
    while todo:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                if entry.name == ".git":
                    continue
                if entries >= limit:
                    return Fingerprint(entries, max_mtime, total, truncated=True)
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                entries += 1
                max_mtime = max(max_mtime, st.st_mtime_ns)
                if stat.S_ISDIR(st.st_mode):
                    todo.append(entry.path)
                else:
                    total += st.st_size
    return Fingerprint(entries, max_mtime, total, truncated=False)


@dataclass
class ProbeStats:
    """What probing has cost so far (integers: nanoseconds and counts)."""

    probes: int = 0
    total_ns: int = 0
    max_ns: int = 0
    last_ns: int = 0
    entries: int = 0
    """Entries walked by the last probe."""
    truncated: bool = False
    """The last probe hit the entry limit."""


class ProgressProbe:
    """Fingerprints ``paths`` on demand and says whether they changed since the last time."""

    def __init__(self, paths: Sequence[Path], limit: int = MAX_ENTRIES) -> None:
        self.paths = tuple(paths)
        self.limit = limit
        self.stats = ProbeStats()
        self._last = self._take().key()

    def _take(self) -> Fingerprint:
        t0 = time.perf_counter_ns()
        fp = fingerprint(self.paths, self.limit)
        cost = time.perf_counter_ns() - t0
        s = self.stats
        s.probes += 1
        s.total_ns += cost
        s.max_ns = max(s.max_ns, cost)
        s.last_ns = cost
        s.entries = fp.entries
        s.truncated = fp.truncated
        return fp

    def changed(self) -> bool:
        """Probe now; True when the fingerprint differs from the previous probe's."""
        key = self._take().key()
        moved = key != self._last
        self._last = key
        return moved
