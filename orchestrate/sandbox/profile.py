"""The sandbox profile: what one process could see and reach, as a recordable value.

A profile is built before a process starts and is the single source of both the bubblewrap
command line (``harness.orchestrate.sandbox.bwrap``) and the ``sandbox`` member of the
``agent.spawn`` / ``run.start`` records. Because the command line is derived from the
recorded value, the record cannot drift from what was enforced.

Three booleans summarise a profile for decisions (the trifecta rule lowers risk tags only by
what they guarantee, docs/spec/runtime.md §14):

* ``network``: the process can open network connections (no ``--unshare-net``);
* ``private_mounts``: some mount exposes the operator's home folder, the state folder or a key
  file (a mount whose source is one of them or one of their ancestors, or no sandbox at all);
* ``opt_out``: the operator explicitly chose to run without a sandbox.

``egress`` is the model proxy's allow-list (issue 18): where the process can still reach
through the proxy; the trifecta lowers ``external_comm`` only when ``network`` is false and
``egress`` is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, Final, Literal

__all__ = ["KINDS", "ROLES", "Mount", "Profile", "covers"]

KINDS: Final = ("bwrap", "none")
ROLES: Final = ("agent", "gate", "auditor")
MountHow = Literal["ro-bind", "bind", "tmpfs", "symlink", "proc", "dev"]
Role = Literal["agent", "gate", "auditor"]


@lru_cache(maxsize=8192)
def _lexical(path: str) -> str:
    """``path`` as ``PurePosixPath`` normalises it (repeated and trailing slashes, ``.``)."""
    return str(PurePosixPath(path))


def covers(outer: str, inner: str) -> bool:
    """True when path ``inner`` is ``outer`` or lies below it (lexical, absolute paths).

    Called thousands of times per profile (every mount against every hidden folder), so it
    compares cached normal forms as strings instead of building path objects each time.
    """
    a, b = _lexical(outer), _lexical(inner)
    if a == b:
        return True
    if a.startswith("//") != b.startswith("//"):  # POSIX keeps a leading "//" distinct
        a_root, b_root = PurePosixPath(a), PurePosixPath(b)
        return a_root in b_root.parents
    return b.startswith(a if a.endswith("/") else a + "/")


@dataclass(frozen=True, order=True)
class Mount:
    """One entry of the sandbox's file system, in the order bubblewrap applies it.

    ``how``: ``ro-bind``/``bind`` (a host path, read-only/read-write), ``tmpfs`` (an empty
    private folder), ``symlink`` (``source`` is the link text), ``proc``/``dev`` (fresh
    ``/proc`` of the new PID namespace, minimal ``/dev``). ``purpose`` says why it is there:
    ``system``, ``interpreter``, ``executable``, ``worktree``, ``git``, ``io``, ``journal``,
    ``home``, ``tmp``, ``review`` (the review socket), ``proxy`` (the batch proxy's socket
    in a rounds role's gate-profile sandbox).
    """

    dest: str
    how: MountHow
    source: str | None = None
    purpose: str = "system"

    def to_json(self) -> dict[str, Any]:
        return {"dest": self.dest, "how": self.how, "purpose": self.purpose, "source": self.source}


@dataclass(frozen=True)
class Profile:
    """The effective sandbox of one process (or the run's default, for gates/auditors)."""

    kind: Literal["bwrap", "none"]
    role: Role
    network: bool
    private_mounts: bool
    opt_out: bool
    workdir: str
    home: str
    mounts: tuple[Mount, ...] = ()
    namespaces: tuple[str, ...] = ()
    """Linux namespaces unshared: a subset of cgroup, ipc, net, pid, user, uts."""
    env: tuple[str, ...] = ()
    """Names (never values) of the environment variables the process gets, sorted."""
    interpreters: tuple[str, ...] = ()
    """Host folders mounted so the Python interpreter (and harness) can run, sorted."""
    reason: str | None = None
    """For kind none: why there is no sandbox (opt-out, no bwrap, no namespaces)."""
    options: tuple[str, ...] = field(default=())
    """Further bubblewrap options in force (die-with-parent, new-session)."""
    egress: tuple[dict[str, Any], ...] = ()
    """The model proxy's allow-list for this process (``AllowList.describe()`` items, sorted
    by route; empty when not proxied). ``network`` stays what the process can open itself."""

    def to_json(self) -> dict[str, Any]:
        """The record member: integers, strings, booleans, lists and objects only."""
        return {
            "egress": [dict(item) for item in self.egress],
            "env": list(self.env),
            "home": self.home,
            "interpreters": list(self.interpreters),
            "kind": self.kind,
            "mounts": [m.to_json() for m in self.mounts],
            "namespaces": list(self.namespaces),
            "network": self.network,
            "opt_out": self.opt_out,
            "options": list(self.options),
            "private_mounts": self.private_mounts,
            "reason": self.reason,
            "role": self.role,
            "workdir": self.workdir,
        }
