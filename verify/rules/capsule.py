"""Intent-capsule conformance: does what a task did stay within what the operator approved?

A capsule binds the goal, the allowed action classes, the file scope, the allowed adapters,
the allowed egress hosts and an expiry time. Conformance is a pure function of
(capsule, now, task, actions); ``now`` is a record time string (compared as a string).

Actions are ``(class, target)`` pairs:

======================  ==================  =============================================
class                   target              allowed when
======================  ==================  =============================================
``edit``, ``delete``    repository path     the class is in ``actions``, the path is a
                                            normalized relative path matching a glob of
                                            the capsule scope *and* of the task scope
``gate``                gate name           the class is in ``actions``
``merge``               branch name         the class is in ``actions``
``egress``              host name           the host (lower-case, one trailing dot
                                            ignored) is in ``egress``; ``egress`` is not
                                            an entry of ``actions``
anything else           —                   never (unknown action class)
======================  ==================  =============================================

Each violation is one string starting with its kind: ``expired:``, ``bad-capsule:``,
``adapter:``, ``action:``, ``path:``, ``scope:``, ``task-scope:``, ``egress:``, in a fixed
order: expiry, adapter, capsule scope, then per action in the given order. The same inputs
always give the same list, so a recorded ``capsule.check`` can be recomputed exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from .scope import check_glob, check_rel_path, check_time, in_scope
from .trifecta import RuleInputError

ACTION_CLASSES: Final = ("edit", "delete", "gate", "merge", "egress")
PATH_ACTIONS: Final = frozenset({"edit", "delete"})
DOCUMENT_KEYS: Final = ("actions", "adapters", "egress", "expires", "goal", "scope")


class CapsuleLike(Protocol):
    @property
    def goal(self) -> str: ...
    @property
    def actions(self) -> Sequence[str]: ...
    @property
    def scope(self) -> Sequence[str]: ...
    @property
    def adapters(self) -> Sequence[str]: ...
    @property
    def egress(self) -> Sequence[str]: ...
    @property
    def expires(self) -> str: ...


class TaskLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def adapter(self) -> str: ...
    @property
    def scope(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Capsule:
    goal: str
    actions: tuple[str, ...]
    scope: tuple[str, ...]
    adapters: tuple[str, ...]
    egress: tuple[str, ...]
    expires: str


@dataclass(frozen=True)
class TaskFacts:
    id: str
    adapter: str
    scope: tuple[str, ...]


def capsule_document(capsule: CapsuleLike) -> dict[str, object]:
    """The JSON object recorded in ``run.start.capsule`` (its canonical bytes are digested)."""
    return {
        "goal": capsule.goal,
        "actions": list(capsule.actions),
        "scope": list(capsule.scope),
        "adapters": list(capsule.adapters),
        "egress": list(capsule.egress),
        "expires": capsule.expires,
    }


def _strings(obj: Any, key: str) -> tuple[str, ...]:
    value = obj[key]
    if type(value) is not list or any(type(item) is not str for item in value):
        raise RuleInputError(f"capsule.{key} must be a list of strings")
    return tuple(value)


def capsule_from_document(obj: Any) -> Capsule:
    """Read a recorded capsule document (exactly the six members)."""
    if type(obj) is not dict or sorted(obj) != list(DOCUMENT_KEYS):
        raise RuleInputError(f"capsule must be an object with exactly {list(DOCUMENT_KEYS)}")
    for key in ("goal", "expires"):
        if type(obj[key]) is not str:
            raise RuleInputError(f"capsule.{key} must be a string")
    return Capsule(
        goal=obj["goal"],
        actions=_strings(obj, "actions"),
        scope=_strings(obj, "scope"),
        adapters=_strings(obj, "adapters"),
        egress=_strings(obj, "egress"),
        expires=obj["expires"],
    )


def _listing(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"


def _scope_problem(scope: Sequence[str]) -> str | None:
    for glob in scope:
        problem = check_glob(glob)
        if problem is not None:
            return f"{glob!r}: {problem}"
    return None


def pre_spawn_violations(capsule: CapsuleLike, now: str, task: TaskLike) -> list[str]:
    """Violations known before an agent starts: capsule expired, adapter not allowed.

    "Expired" is ``now > expires`` (the expiry instant itself is still valid). A malformed
    ``now`` is a caller's error (ValueError): the runtime's clock and the record times are
    always well-formed.
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


def conformance(
    capsule: CapsuleLike,
    *,
    now: str,
    task: TaskLike,
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
            if target.lower().removesuffix(".") not in hosts:
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
