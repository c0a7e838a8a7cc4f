"""Role tool policies: which tool classes each round role is denied (issue 12 §3).

A task run in rounds has three roles per round, each a separate agent process with its own
context: the Manager plans (it must not act on the workspace, reach outside through MCP or
hand its job to a sub-agent whose output it would relay unseen), the Executor does one step
(it must not fan out to sub-agents, whose work would escape the round's single claim), and
the Auditor checks (it must not change what it audits, nor delegate the audit). Plain tasks
keep the role ``agent``: nothing is denied, today's behaviour.

The classes are coarse on purpose, one per way an agent CLI acts beyond reading files and
answering: ``mcp`` (tools of Model Context Protocol servers), ``shell`` (running commands),
``subagents`` (spawning further agents), ``write`` (tools that create, edit or delete files).
Each adapter maps a class onto its CLI's real flags; a class no flag can deny is enforced by
the sandbox (the Auditor's read-only mount covers ``write``) or the role is refused.

Pure: the runtime records ``denied(role)`` in ``round.roles`` and the verifier recomputes it
from the recorded role and demands the same tuple.
"""

from __future__ import annotations

ROLES: tuple[str, ...] = ("agent", "manager", "executor", "auditor")
"""Every role an agent process can run as; ``agent`` is a plain (non-round) task."""

CLASSES: tuple[str, ...] = ("mcp", "shell", "subagents", "write")
"""The tool classes a role policy can deny, sorted."""

_DENIED: dict[str, tuple[str, ...]] = {
    "agent": (),
    "manager": ("mcp", "shell", "subagents", "write"),
    "executor": ("subagents",),
    "auditor": ("subagents", "write"),
}


def denied(role: str) -> tuple[str, ...]:
    """The tool classes ``role`` must not use, sorted; ``ValueError`` for an unknown role.

    >>> denied("auditor")
    ('subagents', 'write')
    """
    if not isinstance(role, str) or role not in _DENIED:
        known = ", ".join(ROLES)
        raise ValueError(f"unknown role {role!r}; known roles: {known}")
    return _DENIED[role]


def check_classes(classes: object) -> tuple[str, ...]:
    """``classes`` as a sorted tuple of known class names without duplicates, or ValueError.

    The verifier reads recorded class lists (``denied``, ``enforced_by_flags``) with this:
    anything but a sorted, duplicate-free list of names from ``CLASSES`` is malformed.
    """
    if not isinstance(classes, (list, tuple)):
        raise ValueError(f"tool classes must be a list, not {type(classes).__name__}")
    names = tuple(classes)
    for name in names:
        if not isinstance(name, str) or name not in CLASSES:
            raise ValueError(f"unknown tool class {name!r}; known: {', '.join(CLASSES)}")
    if list(names) != sorted(set(names)):
        raise ValueError(f"tool classes must be sorted and unique: {list(names)}")
    return names


__all__ = ["CLASSES", "ROLES", "check_classes", "denied"]
