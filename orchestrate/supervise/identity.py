"""Who a process is, across a crash of the runtime that started it; and reaping its orphans.

A pid alone names a process only while its parent holds it. Once the runtime that spawned an
agent has crashed, the agent is re-parented (to init or a subreaper), and when it dies its pid
may be handed to an unrelated process. A resumed runtime that signals the recorded pid (or
group) blindly could kill a stranger. So ``agent.started`` records an identity that the kernel
never repeats within one boot: the pid, its process group, the process's start time in clock
ticks after boot (``/proc/<pid>/stat`` field 22) and the boot id
(``/proc/sys/kernel/random/boot_id``). A live process with the same pid and start time in the
same boot is the same process.

Why the group is safe to signal when the leader matches: Linux never hands out a pid number
that is still in use as a process-group or session id, so while the leader (alive or a zombie)
holds its pid, the group with that id is the leader's own group. And when the recorded pid now
belongs to a *different* process, the number was free when it was handed out, so the recorded
group was empty then: nothing of ours can be left in it, and nothing is signalled ("reused").

When the leader has gone (exited and reaped) but members of its group still run, the group id
is still held by them, and only processes started at or after the leader's start time are
signalled, each by pid (the group is not signalled without a matching leader). The residual
risk, stated honestly: the group emptied, the pid number wrapped around onto a new session
leader whose own leader then exited; its children would pass this check. This needs a pid
wrap-around onto exactly that number between the crash and the resume.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Final

from .procfs import GROUP_DEATH_S, killpg, live_members, read_stat

__all__ = ["PID_MAX", "ProcIdentity", "boot_id", "identity_of", "reap_orphan"]

PID_MAX: Final = 1 << 22
"""Linux's PID_MAX_LIMIT: no pid or group id is larger."""
_TICKS_MAX: Final = (1 << 53) - 1
"""Records carry integers an IEEE double holds exactly (the record schema's bound)."""
_BOOT_ID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_KEYS: Final = frozenset({"pid", "pgid", "start_ticks", "boot_id"})
_POLL_S: Final = 0.01
_boot_id_cache: list[str] = []


def boot_id() -> str | None:
    """This boot's id (a lowercase UUID), None when the kernel does not say (not Linux)."""
    if not _boot_id_cache:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
                text = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not _BOOT_ID.fullmatch(text):
            return None
        _boot_id_cache.append(text)
    return _boot_id_cache[0]


def _int_in(obj: object, name: str, low: int, high: int) -> int:
    # bool is an int subclass; True is not a pid
    if type(obj) is not int:
        raise ValueError(f"process identity: {name} must be an integer, not {type(obj).__name__}")
    if not low <= obj <= high:
        raise ValueError(f"process identity: {name} {obj} outside [{low}, {high}]")
    return obj


@dataclass(frozen=True)
class ProcIdentity:
    """What ``agent.started`` records: enough to recognise the process after a crash."""

    pid: int
    pgid: int
    start_ticks: int
    boot_id: str

    def __post_init__(self) -> None:
        # pid/pgid 0 and 1 are refused: os.killpg(0, ...) would signal our own group, and 1 is
        # init; no process this runtime starts can be either.
        _int_in(self.pid, "pid", 2, PID_MAX)
        _int_in(self.pgid, "pgid", 2, PID_MAX)
        _int_in(self.start_ticks, "start_ticks", 0, _TICKS_MAX)
        if type(self.boot_id) is not str or not _BOOT_ID.fullmatch(self.boot_id):
            raise ValueError(f"process identity: boot_id {self.boot_id!r} is not a lowercase UUID")

    def to_json(self) -> dict[str, int | str]:
        """The record fields (integers and one string)."""
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "start_ticks": self.start_ticks,
            "boot_id": self.boot_id,
        }

    @classmethod
    def from_json(cls, obj: object) -> ProcIdentity:
        """Strict inverse of :meth:`to_json`: exactly the four keys, integers that are not
        booleans or floats, in range; ValueError naming the first problem otherwise."""
        if not isinstance(obj, dict):
            raise ValueError(f"process identity: expected an object, not {type(obj).__name__}")
        keys = set(obj)
        if keys != _KEYS:
            missing = sorted(_KEYS - keys)
            extra = sorted(str(k) for k in keys - _KEYS)
            raise ValueError(f"process identity: missing keys {missing}, unexpected keys {extra}")
        return cls(
            pid=obj["pid"], pgid=obj["pgid"], start_ticks=obj["start_ticks"], boot_id=obj["boot_id"]
        )


def identity_of(pid: int) -> ProcIdentity | None:
    """The identity of ``pid`` now (a zombie still has one), None if there is no such
    process or ``/proc`` cannot tell."""
    stat = read_stat(pid)
    boot = boot_id()
    if stat is None or boot is None:
        return None
    try:
        return ProcIdentity(pid=pid, pgid=stat.pgrp, start_ticks=stat.start_ticks, boot_id=boot)
    except ValueError:
        return None


def _signal(identity: ProcIdentity, sig: int) -> bool:
    """Send ``sig`` to what is left of ``identity``'s group; True if anything live was sent it.

    The group is signalled as a whole (atomic against forks) only while its leader is the
    recorded process; without a leader, each member started since the leader is signalled.
    """
    stat = read_stat(identity.pid)
    if stat is not None and stat.start_ticks != identity.start_ticks:
        return False  # the pid was reused: the recorded group was empty when that happened
    sent = False
    if stat is not None and stat.alive and stat.pgrp == identity.pgid:
        killpg(identity.pgid, sig)
        sent = True
    for member in live_members(identity.pgid, since_ticks=identity.start_ticks) or []:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)
            sent = True
    return sent


def _anything_live(identity: ProcIdentity) -> bool:
    stat = read_stat(identity.pid)
    if stat is not None and stat.start_ticks == identity.start_ticks and stat.alive:
        return True
    if stat is not None and stat.start_ticks != identity.start_ticks:
        return False
    return bool(live_members(identity.pgid, since_ticks=identity.start_ticks))


def _wait_dead(identity: ProcIdentity, bound_s: float, sig: int | None) -> bool:
    """Poll until nothing of the group runs (True) or ``bound_s`` passed (False); re-send
    ``sig`` each round when given (a member may have forked after the previous one)."""
    end = time.monotonic() + bound_s
    while _anything_live(identity):
        if time.monotonic() >= end:
            return False
        if sig is not None:
            _signal(identity, sig)
        time.sleep(_POLL_S)
    return True


def reap_orphan(identity: ProcIdentity, grace_s: float = 2.0) -> str:
    """End what is left of a process group started by a runtime that crashed.

    Returns ``"killed"`` when the recorded process (same boot, pid and start time) or members
    of its group were still running: SIGTERM, up to ``grace_s`` for them to exit, SIGKILL,
    then a bounded wait (:data:`GROUP_DEATH_S`) until none runs; ``"gone"`` when nothing runs
    under that identity any more; ``"reused"`` when the pid now belongs to another process
    (or the identity is from another boot and the pid is in use): nothing is signalled.

    Only groups the recorded process leads can be reaped (``pgid == pid``, as for every
    process this runtime starts, each in its own session); anything else, or this process's
    own group, is a ValueError. Without ``/proc`` nothing can be established: OSError.
    """
    if not (math.isfinite(grace_s) and grace_s >= 0):
        raise ValueError(f"reap_orphan: grace_s must be finite and >= 0, not {grace_s!r}")
    if identity.pgid != identity.pid:
        raise ValueError(
            f"reap_orphan: pid {identity.pid} does not lead group {identity.pgid}; refusing"
        )
    if identity.pid == os.getpid() or identity.pgid == os.getpgrp():
        raise ValueError(f"reap_orphan: group {identity.pgid} is this process's own")
    current = boot_id()
    if current is None:
        raise OSError("reap_orphan: /proc/sys/kernel/random/boot_id unreadable")
    stat = read_stat(identity.pid)
    if identity.boot_id != current:
        # pids and start times of another boot say nothing about this one
        return "reused" if stat is not None else "gone"
    if stat is not None and stat.start_ticks != identity.start_ticks:
        return "reused"
    if not _anything_live(identity):
        return "gone"
    _signal(identity, signal.SIGTERM)
    if not _wait_dead(identity, grace_s, None):
        _signal(identity, signal.SIGKILL)
        _wait_dead(identity, GROUP_DEATH_S, signal.SIGKILL)
    return "killed"
