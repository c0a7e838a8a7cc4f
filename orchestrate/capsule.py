"""Intent capsules: the approved goal of a run, its digest, and the conformance check.

A capsule (``CapsuleSpec``, the ``[capsule]`` table of a plan) binds what the operator approved:
the goal, the allowed action classes, the file scope, the allowed adapters, the allowed egress
hosts and an expiry time. Conformance is a pure function of (capsule, now, task, actions): the
runtime passes the actions a task's agent took (read from the journal) and records every
violation returned; a non-empty list fails the task (capsule drift).

Digest (``capsule_digest``): the lowercase hex SHA-256 of the RFC 8785 canonical JSON bytes
(docs/spec/canonical-json.md) of the object with exactly these six members, lists in the
order written in the plan::

    {"actions": [...], "adapters": [...], "egress": [...], "expires": "...",
     "goal": "...", "scope": [...]}

Changing any field (including the order of a list) changes the digest; the same capsule always
has the same digest. It contains no floats, so every implementation can reproduce it.

Actions are ``(class, target)`` pairs:

======================  ==================  =============================================
class                   target              allowed when
======================  ==================  =============================================
``edit``, ``delete``    repository path     the class is in ``actions``, the path is a
                                            normalized relative path (no ``..``, not
                                            absolute, not in ``.git``) matching a glob of
                                            the capsule scope *and* of the task scope
``gate``                gate name           the class is in ``actions``
``merge``               branch name         the class is in ``actions``
``egress``              host name           the host (compared lower-case, one trailing dot
                                            ignored) is in ``egress``; ``egress`` is not an
                                            entry of ``actions``
anything else           —                   never (unknown action class)
======================  ==================  =============================================

Glob semantics are those of plan scopes (``harness.orchestrate.plan``): ``src/**`` matches
``src/a/b.py``, ``*.md`` only top-level files.

Each violation is one string starting with its kind: ``expired:``, ``bad-capsule:``,
``adapter:``, ``action:``, ``path:``, ``scope:``, ``task-scope:``, ``egress:``. Violations come in
a fixed order: expiry, adapter, then per action in the given order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from harness.verify.canonical import canonical_bytes

from .model import CapsuleSpec, TaskSpec
from .plan import check_glob, check_rel_path, check_time, in_scope

ACTION_CLASSES: Final = ("edit", "delete", "gate", "merge", "egress")
PATH_ACTIONS: Final = frozenset({"edit", "delete"})


def capsule_document(spec: CapsuleSpec) -> dict[str, object]:
    """The JSON object whose canonical bytes the digest covers."""
    return {
        "goal": spec.goal,
        "actions": list(spec.actions),
        "scope": list(spec.scope),
        "adapters": list(spec.adapters),
        "egress": list(spec.egress),
        "expires": spec.expires,
    }


def capsule_digest(spec: CapsuleSpec) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of the capsule's six fields."""
    return hashlib.sha256(canonical_bytes(capsule_document(spec))).hexdigest()


def _listing(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"


def pre_spawn_violations(capsule: CapsuleSpec, now: str, task: TaskSpec) -> list[str]:
    """Violations known before an agent starts: capsule expired, adapter not allowed.

    ``now`` is the runtime's current time in the record format (``YYYY-MM-DDTHH:MM:SS.ffffffZ``);
    a malformed ``now`` is a programming error (ValueError). Fixed-width UTC times compare
    correctly as strings, so "expired" is ``now > expires`` (the expiry instant itself is
    still valid).
    """
    problem = check_time(now)
    if problem is not None:
        raise ValueError(f"now {now!r}: {problem}")
    out: list[str] = []
    problem = check_time(capsule.expires)
    if problem is not None:
        out.append(f"bad-capsule: expires {capsule.expires!r}: {problem}")
    elif now > capsule.expires:
        out.append(f"expired: capsule expired at {capsule.expires} (now {now})")
    if capsule.adapters and task.adapter not in capsule.adapters:
        out.append(
            f"adapter: task {task.id} uses adapter {task.adapter!r}, not allowed by the "
            f"capsule (allowed: {_listing(capsule.adapters)})"
        )
    return out


def _scope_problem(scope: Sequence[str]) -> str | None:
    for glob in scope:
        problem = check_glob(glob)
        if problem is not None:
            return f"{glob!r}: {problem}"
    return None


def conformance(
    capsule: CapsuleSpec,
    *,
    now: str,
    task: TaskSpec,
    actions: Sequence[tuple[str, str]],
) -> list[str]:
    """Every way ``task``'s ``actions`` at time ``now`` depart from ``capsule`` ([] = conforms)."""
    out = pre_spawn_violations(capsule, now, task)
    capsule_scope_problem = _scope_problem(capsule.scope)
    if capsule_scope_problem is not None:
        out.append(f"bad-capsule: scope glob {capsule_scope_problem}")
    task_scope_problem = _scope_problem(task.scope)
    hosts = {host.lower().removesuffix(".") for host in capsule.egress}
    for kind, target in actions:
        if kind == "egress":
            host = target.lower().removesuffix(".")
            if host not in hosts:
                out.append(
                    f"egress: host {target!r} not allowed by the capsule "
                    f"(allowed: {_listing(capsule.egress)})"
                )
            continue
        if kind not in ACTION_CLASSES:
            out.append(f"action: {kind} {target!r}: unknown action class")
            continue
        if kind not in capsule.actions:
            out.append(
                f"action: {kind} {target!r}: action class {kind!r} not allowed by the capsule "
                f"(allowed: {_listing(capsule.actions)})"
            )
        if kind not in PATH_ACTIONS:
            continue
        problem = check_rel_path(target)
        if problem is not None:
            out.append(f"path: {kind} {target!r}: {problem}")
            continue
        if capsule_scope_problem is None and not in_scope(target, capsule.scope):
            out.append(
                f"scope: {kind} {target!r} is outside the capsule scope ({_listing(capsule.scope)})"
            )
        if task_scope_problem is not None or not in_scope(target, task.scope):
            out.append(
                f"task-scope: {kind} {target!r} is outside the scope of task {task.id} "
                f"({_listing(task.scope)})"
            )
    return out
