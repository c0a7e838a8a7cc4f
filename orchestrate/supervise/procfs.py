"""What ``/proc`` says about processes and process groups, and signals that tolerate races.

Why a module of its own: the blocking runner (``harness.orchestrate.proc``), the supervised
process and the orphan reaper all need the same facts (a process's state, parent, group and
start time) and the same care with them. ``/proc/<pid>/stat`` is parsed after the *last* ``)``
because the command name in parentheses may contain anything, spaces and parentheses included.

Everything here is best effort where ``/proc`` cannot be read (not Linux): the readers return
None or empty lists, and callers say what that means for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass

__all__ = [
    "GROUP_DEATH_S",
    "Stat",
    "descendants",
    "killpg",
    "leader_exited",
    "live_members",
    "open_pidfd",
    "read_stat",
    "signal_name",
    "terminate_tree",
    "wait_group_dead",
]

GROUP_DEATH_S = 2.0
"""Bound on the wait for SIGKILLed group members to die (one stuck in the kernel may lag)."""

_DEAD_STATES = (b"Z", b"X", b"x")


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` this package uses (see proc(5))."""

    pid: int
    state: bytes
    ppid: int
    pgrp: int
    session: int
    start_ticks: int
    """Field 22, ``starttime``: clock ticks after boot at which the process started."""

    @property
    def alive(self) -> bool:
        """Not a zombie (a dead process awaiting its reaper counts as dead)."""
        return self.state not in _DEAD_STATES


def _parse(pid: int, raw: bytes) -> Stat | None:
    # "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    #  utime stime cutime cstime priority nice num_threads itrealvalue starttime ..."
    head, sep, rest = raw.rpartition(b")")
    if not sep or b"(" not in head:
        return None
    fields = rest.split()
    if len(fields) < 20:
        return None
    try:
        return Stat(
            pid=pid,
            state=fields[0],
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            start_ticks=int(fields[19]),
        )
    except ValueError:
        return None


def read_stat(pid: int) -> Stat | None:
    """The stat of ``pid`` (zombies included), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return _parse(pid, raw)


def _all_stats() -> list[Stat] | None:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    out = []
    for entry in entries:
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:  # None: gone meanwhile
                out.append(stat)
    return out


def live_members(pgid: int, since_ticks: int | None = None) -> list[int] | None:
    """Pids in group ``pgid`` that are not zombies (None when /proc cannot be read).

    ``since_ticks``: only processes started at or after that start time (an orphan reaper's
    guard: members of a group it owns were all started after the group's leader).
    """
    stats = _all_stats()
    if stats is None:
        return None
    return [
        s.pid
        for s in stats
        if s.pgrp == pgid and s.alive and (since_ticks is None or s.start_ticks >= since_ticks)
    ]


def descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (empty when /proc cannot be read)."""
    children: dict[int, list[int]] = {}
    for s in _all_stats() or []:
        if s.alive:
            children.setdefault(s.ppid, []).append(s.pid)
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def killpg(pgid: int, sig: int) -> None:
    """``os.killpg`` that ignores an empty group and members it may not signal.

    ProcessLookupError: the group is already empty. PermissionError: a member changed its
    credentials (setuid); there is nothing more we are allowed to do about it.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def terminate_tree(root: int) -> None:
    """SIGTERM to every live descendant of ``root`` (not to ``root`` itself).

    Used for bubblewrap: the sandboxed program runs in another session below the leader, so a
    group signal misses it, and SIGTERM to bubblewrap would end it without its grace period.
    """
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def wait_group_dead(pgid: int, bound_s: float = GROUP_DEATH_S) -> None:
    """After SIGKILL to the group: wait (bounded) until none of its members still runs.

    SIGKILL is delivered asynchronously; a member can take a moment to die. Waiting here
    means that when the caller goes on, nothing of the group still executes (and so nothing
    still writes into the worktree). Zombies count as dead. Without /proc this is best effort:
    nothing is waited for. Blocking; the supervised process does the same in steps.
    """
    end = time.monotonic() + bound_s
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        live = live_members(pgid)
        if not live or time.monotonic() >= end:
            return
        killpg(pgid, signal.SIGKILL)  # a member forked after the previous signal
        time.sleep(0.005)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for numbers without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the leader has exited; does NOT reap it (the zombie keeps the group id held).

    Where ``os.waitid`` is missing (not Linux) it falls back to ``poll``, which reaps.
    """
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


def open_pidfd(pid: int) -> int | None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd
