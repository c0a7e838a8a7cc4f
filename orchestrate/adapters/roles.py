"""The role policy the runtime records per role in ``round.roles`` (docs/spec/runtime.md §22).

``role_policy(adapter, request)`` is the JSON object recorded for one role::

    {"adapter": "claude", "model": "opus" | null,
     "denied": ["mcp", "shell", "subagents", "write"],        # rules.roles.denied(role)
     "enforced_by_flags": ["mcp", "shell", "subagents", "write"],
     "flags": ["--disallowedTools", "Agent,Bash,...", ...]}    # the policy flags on argv

``denied`` is the rule's answer for the role, ``enforced_by_flags`` the part of it the
adapter's flags (or the program's construction) really deny, ``flags`` exactly the role
flags the command line carries (the prompt and host paths are never among them). A class
in ``denied`` but not in ``enforced_by_flags`` must be covered by the sandbox (the Auditor's
read-only mount covers ``write``), else the runtime refuses the role: ``uncovered`` says which
classes are left.
"""

from __future__ import annotations

from typing import Any

from .base import Adapter, AdapterConfigError, AgentRequest, enforces, policy_flags, role_denied

SANDBOX_COVERS: tuple[str, ...] = ("write",)
"""Classes a read-only sandbox mount enforces whatever the agent's tools are."""


def role_policy(adapter: Adapter, request: AgentRequest) -> dict[str, Any]:
    """The recorded policy of ``request.role`` run through ``adapter``.

    ``flags`` are checked to be on the command line (``argv(request)``) in order: a record
    must never name a flag the process did not get. ``AdapterConfigError`` for an unknown
    role.
    """
    denied = role_denied(request.role)
    flags = policy_flags(adapter, request)
    if flags and not _contains(adapter.argv(request), flags):
        raise AdapterConfigError(
            f"adapter {adapter.name}: policy flags {flags} are not on its command line"
        )
    return {
        "adapter": adapter.name,
        "model": request.model,
        "denied": list(denied),
        "enforced_by_flags": list(enforces(adapter, request.role)),
        "flags": flags,
    }


def uncovered(adapter: Adapter, role: str, *, read_only_mount: bool) -> tuple[str, ...]:
    """The classes ``role`` is denied that neither ``adapter``'s flags nor the sandbox enforce.

    Empty means the role may run through this adapter; otherwise the runtime refuses it,
    naming these classes (fail closed: an Executor that could spawn sub-agents is not run).
    """
    enforced = set(enforces(adapter, role))
    if read_only_mount:
        enforced.update(SANDBOX_COVERS)
    return tuple(name for name in role_denied(role) if name not in enforced)


def _contains(argv: list[str], flags: list[str]) -> bool:
    """``flags`` appear in ``argv`` as one contiguous run."""
    width = len(flags)
    return any(argv[start : start + width] == flags for start in range(len(argv) - width + 1))


__all__ = ["SANDBOX_COVERS", "role_policy", "uncovered"]
