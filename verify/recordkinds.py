"""The record kinds of each store and the members of each kind's body (format 2).

``BODY_SPECS`` maps each store to its kinds and each kind to its body members: (required,
checker). Checkers return an error string or None. Keeping them declarative lets the docs, the
JSON Schemas (``python -m tests.schemagen``) and the tests enumerate them, and
``harness.verify.records`` derive its one-regex fast path from them. Split from
``records.py`` (the envelope, its strict check and the fast path) to keep both small.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from .canonical import check_json_types
from .errors import CanonicalEncodingError
from .fsm import TaskState
from .modelkey import APIS, FAMILIES

TIME_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
HEX64_RE: Final = re.compile(r"[0-9a-f]{64}")
COMMIT_RE: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

# A body spec maps each member name to (required, checker). Checkers return an error string
# or None. Keeping them declarative lets docs, JSON Schemas and tests enumerate them.

Checker = Callable[[Any], "str | None"]


def _str(value: Any) -> str | None:
    return None if type(value) is str and value else "a non-empty string"


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _hex64(value: Any) -> str | None:
    ok = type(value) is str and HEX64_RE.fullmatch(value)
    return None if ok else "64 lowercase hex digits"


def _nat(value: Any) -> str | None:
    return None if type(value) is int and value >= 0 else "a non-negative integer"


def _hex64_list(value: Any) -> str | None:
    if type(value) is not list or any(_hex64(item) for item in value):
        return "a list of 64-hex-digit digests"
    return None


def _int(value: Any) -> str | None:
    return None if type(value) is int else "an integer"


def _opt_int(value: Any) -> str | None:
    return None if value is None or type(value) is int else "an integer or null"


def _bool(value: Any) -> str | None:
    return None if type(value) is bool else "true or false"


def _str_list(value: Any) -> str | None:
    if type(value) is not list or any(type(item) is not str or not item for item in value):
        return "a list of non-empty strings"
    return None


def _nat_list(value: Any) -> str | None:
    if type(value) is not list or any(type(item) is not int or item < 0 for item in value):
        return "a list of non-negative integers"
    return None


COMMAND_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A control command's id: 1-64 letters, digits, '.', '_' or '-', starting alphanumeric."""


def _command_id(value: Any) -> str | None:
    ok = type(value) is str and COMMAND_ID_RE.fullmatch(value)
    return None if ok else "a command id (1-64 of A-Za-z0-9._-, starting alphanumeric)"


def _opt_command_id(value: Any) -> str | None:
    return None if value is None else _command_id(value)


def _opt_hex64(value: Any) -> str | None:
    return None if value is None else _hex64(value)


def _task_state(value: Any) -> str | None:
    return None if type(value) is str and value in _TASK_STATES else "a task state"


def _object(value: Any) -> str | None:
    # Free-form members are the only place a float could hide from the typed checks, and
    # records carry integers only (decode_canonical leaves the float policy to this schema).
    if type(value) is not dict:
        return "an object"
    try:
        check_json_types(value, depth=3)  # record (1) -> body (2) -> this member (3)
    except CanonicalEncodingError as exc:
        return f"integer-only JSON ({exc})"
    return None


def _opt_object(value: Any) -> str | None:
    return None if value is None else _object(value)


def _time(value: Any) -> str | None:
    ok = type(value) is str and TIME_RE.fullmatch(value)
    return None if ok else "a time YYYY-MM-DDTHH:MM:SS.ffffffZ"


def _commit(value: Any) -> str | None:
    ok = type(value) is str and COMMIT_RE.fullmatch(value)
    return None if ok else "a git object id (40 or 64 lowercase hex digits)"


def _commit_list(value: Any) -> str | None:
    if type(value) is not list or not value or any(_commit(item) for item in value):
        return "a non-empty list of git object ids"
    if value != sorted(set(value)):
        return "a sorted list of distinct git object ids"
    return None


def _action_list(value: Any) -> str | None:
    if type(value) is not list or any(
        type(item) is not list or len(item) != 2 or any(_str(part) for part in item)
        for item in value
    ):
        return "a list of [class, target] pairs of non-empty strings"
    return None


GIT_MODES: Final = ("100644", "100755", "120000", "160000")
"""Git file modes a lineage record may carry: regular, executable, symlink, gitlink."""


def _git_mode(value: Any) -> str | None:
    return None if type(value) is str and value in GIT_MODES else "a git file mode"


def _opt_git_mode(value: Any) -> str | None:
    return None if value is None else _git_mode(value)


READING_MEMBERS: Final = frozenset({"sensor", "tier", "value", "anomaly", "trigger"})
"""The members of one sensor reading (``control.sensor.readings``), exactly."""


def _reading_list(value: Any) -> str | None:
    what = (
        "a list of readings {sensor, tier (1 or 2), value (integer), anomaly (bool), "
        "trigger (string or null)}"
    )
    if type(value) is not list:
        return what
    for item in value:
        if type(item) is not dict or set(item) != READING_MEMBERS:
            return what
        if (
            _str(item["sensor"])
            or type(item["tier"]) is not int
            or item["tier"] not in (1, 2)
            or type(item["value"]) is not int
            or _bool(item["anomaly"])
            or _opt_str(item["trigger"])
        ):
            return what
    return None


def _opt_nat(value: Any) -> str | None:
    return None if value is None else _nat(value)


EXCHANGE_OUTCOMES: Final = ("answered", "refused", "replay-miss", "error")
"""``model.exchange.outcome``: what the proxy did with one request (docs/spec/proxy.md §7)."""
MODEL_FAMILIES: Final = FAMILIES
MODEL_APIS: Final = APIS
MODEL_SOURCES: Final = ("live", "journal", "live-miss")
"""``model.source.source``: where an answered exchange's answer came from."""
USAGE_MEMBERS: Final = ("cache_read", "cache_write", "input_tokens", "output_tokens")
"""The members of ``model.exchange.usage``, exactly (each a count or null)."""


def _outcome(value: Any) -> str | None:
    ok = type(value) is str and value in EXCHANGE_OUTCOMES
    return None if ok else "one of " + ", ".join(EXCHANGE_OUTCOMES)


def _opt_family(value: Any) -> str | None:
    ok = value is None or (type(value) is str and value in MODEL_FAMILIES)
    return None if ok else "null or one of " + ", ".join(MODEL_FAMILIES)


def _opt_api(value: Any) -> str | None:
    ok = value is None or (type(value) is str and value in MODEL_APIS)
    return None if ok else "null or one of " + ", ".join(MODEL_APIS)


def _source(value: Any) -> str | None:
    ok = type(value) is str and value in MODEL_SOURCES
    return None if ok else "one of " + ", ".join(MODEL_SOURCES)


def _opt_usage(value: Any) -> str | None:
    if value is None:
        return None
    if (
        type(value) is not dict
        or sorted(value) != list(USAGE_MEMBERS)
        or any(_opt_nat(value[name]) for name in USAGE_MEMBERS)
    ):
        return "null or {input_tokens, output_tokens, cache_read, cache_write}: counts or null"
    return None


BodySpec = Mapping[str, tuple[bool, Checker]]
_TASK_STATES: Final = frozenset(state.value for state in TaskState)

QUARANTINE_BODY: Final[BodySpec] = {
    "offset": (True, _nat),
    "length": (True, _nat),
    "sha256": (True, _hex64),
}
"""``store.recovered``: a torn tail of this many bytes at this offset was moved aside."""

BODY_SPECS: Final[Mapping[str, Mapping[str, BodySpec]]] = {
    "lineage": {
        "artifact.write": {
            "path": (True, _str),
            "sha256": (True, _hex64),
            "mode": (True, _git_mode),
            "parents": (True, _hex64_list),
            "parent_mode": (True, _opt_git_mode),
            "actor": (True, _str),
            "task": (True, _str),
            "step": (True, _nat),
            "model": (True, _opt_str),
        },
        "artifact.delete": {
            "path": (True, _str),
            "parents": (True, _hex64_list),
            "parent_mode": (True, _opt_git_mode),
            "actor": (True, _str),
            "task": (True, _str),
            "step": (True, _nat),
            "model": (True, _opt_str),
        },
        "store.recovered": QUARANTINE_BODY,
    },
    "audit": {
        "run.start": {
            "plan": (True, _str),
            "plan_sha256": (True, _hex64),
            "producer": (True, _str),
            "harness_version": (True, _str),
            "base_commit": (True, _commit),
            "repository_roots": (True, _commit_list),
            "capabilities": (True, _object),
            "capsule": (True, _opt_object),
            "sandbox": (True, _object),
        },
        "run.end": {"outcome": (True, _str)},
        "event": {"name": (True, _str), "data": (True, _object)},
        "task.planned": {
            "task": (True, _str),
            "role": (True, _str),
            "priority": (True, _int),
            "depends": (True, _str_list),
            "adapter": (True, _str),
            "tools": (True, _str_list),
        },
        "task.transition": {
            "task": (True, _str),
            "from": (True, _task_state),
            "to": (True, _task_state),
            "reason": (True, _str),
        },
        "task.refused": {
            "task": (True, _str),
            "from": (True, _task_state),
            "to": (True, _task_state),
            "reason": (True, _str),
        },
        "agent.spawn": {
            "batch": (True, _str),
            "tasks": (True, _str_list),
            "adapter": (True, _str),
            "branch": (True, _str),
            "worktree": (True, _str),
            "timeout_ms": (True, _nat),
            "sandbox": (True, _object),
            "env": (True, _str_list),
            "supervisor": (True, _str),
            "attempt": (True, _nat),
            "idle_ms": (True, _opt_int),
            "lifetime_ms": (True, _nat),
            "grace_ms": (True, _nat),
            "lock": (True, _str_list),
            "budget": (True, _object),
            "config": (True, _nat),
        },
        "agent.started": {
            "batch": (True, _str),
            "pid": (True, _nat),
            "pgid": (True, _nat),
            "start_ticks": (True, _nat),
            "boot_id": (True, _str),
        },
        "agent.exit": {
            "batch": (True, _str),
            "exit_code": (True, _opt_int),
            "signal": (True, _opt_str),
            "timed_out": (True, _bool),
            "duration_ms": (True, _nat),
            "anomaly": (True, _opt_str),
            "usage": (True, _opt_object),
        },
        "model.source": {
            "batch": (True, _str),
            "seq": (True, _nat),
            "source": (True, _source),
        },
        "orphan.reaped": {
            "batch": (True, _str),
            "pid": (True, _nat),
            "pgid": (True, _nat),
            "start_ticks": (True, _nat),
            "boot_id": (True, _str),
            "outcome": (True, _str),
        },
        "budget.exceeded": {
            "batch": (True, _str),
            "scope": (True, _str),
            "name": (True, _str),
            "resource": (True, _str),
            "limit": (True, _nat),
            "used": (True, _nat),
            "decision": (True, _str),
        },
        "lock.acquire": {"batch": (True, _str), "globs": (True, _str_list)},
        "lock.release": {"batch": (True, _str), "reason": (True, _str)},
        "attempt.failed": {
            "task": (True, _str),
            "batch": (True, _str),
            "attempt": (True, _nat),
            "anomaly": (True, _str),
            "reason": (True, _str),
            "retry": (True, _bool),
            "checkpoint": (True, _commit),
            "feedback_sha256": (True, _opt_str),
        },
        "merge.fork": {
            "task": (True, _str),
            "batch": (True, _str),
            "base": (True, _commit),
            "ours": (True, _commit),
            "theirs": (True, _commit),
            "paths": (True, _str_list),
        },
        "gate.result": {
            "task": (True, _str),
            "gate": (True, _str),
            "passed": (True, _bool),
            "exit_code": (True, _opt_int),
            "duration_ms": (True, _nat),
        },
        "merge.result": {
            "task": (True, _str),
            "branch": (True, _str),
            "merged": (True, _bool),
            "commit": (True, _opt_str),
            "reason": (True, _str),
        },
        "capability.denied": {
            "task": (True, _str),
            "tools": (True, _str_list),
            "tags": (True, _str_list),
            "reason": (True, _str),
            "sandbox": (True, _opt_object),
        },
        "capsule.approved": {
            "capsule": (True, _hex64),
            "goal": (True, _str),
            "expires": (True, _str),
        },
        "capsule.check": {
            "task": (True, _str),
            "capsule": (True, _hex64),
            "now": (True, _time),
            "actions": (True, _action_list),
            "conforms": (True, _bool),
            "violations": (True, _str_list),
        },
        "gate.integrity": {
            "batch": (True, _str),
            "tasks": (True, _str_list),
            "commit": (True, _commit),
            "tree": (True, _commit),
            "head": (True, _commit),
            "head_tree": (True, _commit),
            "clean_before": (True, _bool),
            "clean_after": (True, _bool),
            "intact": (True, _bool),
            "reason": (True, _str),
        },
        "run.status": {
            "status": (True, _str),
            "epoch": (True, _nat),
            "reason": (True, _str),
            "command": (True, _opt_command_id),
        },
        "command.receipt": {
            "id": (True, _command_id),
            "command": (True, _str),
            "control_seq": (True, _nat),
            "outcome": (True, _str),
            "reason": (True, _str),
        },
        "round.roles": {
            "task": (True, _str),
            "epoch": (True, _nat),
            "max_rounds": (True, _nat),
            "roles": (True, _object),
        },
        "round.plan": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "text": (True, _hex64),
            "next": (True, _opt_str),
            "valid": (True, _bool),
            "reason": (True, _str),
            "cites": (True, _nat_list),
            "exit_code": (True, _opt_int),
        },
        "round.step": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "text": (True, _hex64),
            "exit_code": (True, _opt_int),
            "claims_success": (True, _bool),
            "commit_before": (True, _commit),
            "commit_after": (True, _commit),
            "changed": (True, _bool),
            "paths": (True, _str_list),
        },
        "round.audit": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "text": (True, _hex64),
            "repair": (True, _opt_hex64),
            "exit_code": (True, _opt_int),
            "tree_before": (True, _hex64),
            "tree_after": (True, _hex64),
            "header_valid": (True, _bool),
            "status": (True, _str),
            "integrity": (True, _str),
            "contract": (True, _str),
            "ghost": (True, _bool),
            "effective": (True, _str),
        },
        "round.end": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "outcome": (True, _str),
            "failing": (True, _nat),
            "checkpoint": (True, _commit),
        },
        "round.gate": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "reason": (True, _str),
            "question": (True, _opt_hex64),
        },
        "round.input": {
            "task": (True, _str),
            "round": (True, _nat),
            "epoch": (True, _nat),
            "command": (True, _command_id),
            "kind": (True, _str),
            "text": (True, _hex64),
        },
        "control.phase": {
            "phase": (True, _str),
            "progress_pm": (True, _nat),
            "step": (True, _nat),
            "reason": (True, _str),
        },
        "control.sensor": {
            "step": (True, _nat),
            "task": (True, _str),
            "agent": (True, _str),
            "subtree": (True, _str),
            "attempt": (True, _nat),
            "phase": (True, _str),
            "class": (True, _opt_str),
            "readings": (True, _reading_list),
        },
        "control.decision": {
            "step": (True, _nat),
            "layer": (True, _str),
            "rule": (True, _str),
            "key": (True, _str),
            "level": (True, _int),
            "threshold": (True, _int),
            "class": (True, _opt_str),
            "action": (True, _str),
            "config": (True, _opt_nat),
        },
        "config.version": {
            "version": (True, _nat),
            "parent": (True, _opt_hex64),
            "sha256": (True, _hex64),
            "document": (True, _object),
            "change": (True, _str),
            "channel": (True, _str),
            "step": (True, _opt_nat),
            "impact": (True, _str_list),
            "snapshot": (True, _commit),
        },
        "control.verdict": {
            "alert": (True, _str),
            "verdict": (True, _str),
            "command": (True, _command_id),
        },
        "control.review": {
            "step": (True, _nat),
            "point": (True, _nat),
            "progress_pm": (True, _nat),
            "elapsed_s": (True, _nat),
            "heightened": (True, _bool),
            "failed": (True, _nat),
            "refused": (True, _nat),
            "fit_pm": (True, _nat),
            "fit_alert": (True, _bool),
            "judged": (True, _nat),
            "followed": (True, _nat),
            "controllability_pm": (True, _nat),
            "controllability_alert": (True, _bool),
        },
        "action.review": {
            "task": (True, _str),
            "batch": (True, _str),
            "review": (True, _nat),
            "tool": (True, _str),
            "input_sha256": (True, _hex64),
            "target": (True, _str),
            "class": (True, _str),
            "phase": (True, _str),
            "decision": (True, _str),
            "reason": (True, _str),
            "approval": (True, _opt_command_id),
        },
        "store.recovered": QUARANTINE_BODY,
    },
    "replay": {
        "model.call": {
            "key": (True, _hex64),
            "adapter": (True, _str),
            "model": (True, _str),
            "request_sha256": (True, _hex64),
            "response_sha256": (True, _hex64),
        },
        "model.exchange": {
            "batch": (True, _str),
            "seq": (True, _nat),
            "route": (True, _str),
            "method": (True, _str),
            "path": (True, _str),
            "outcome": (True, _outcome),
            "status": (True, _nat),
            "family": (True, _opt_family),
            "api": (True, _opt_api),
            "upstream": (True, _opt_str),
            "key": (True, _opt_hex64),
            "model": (True, _opt_str),
            "stream": (True, _bool),
            "parameters": (True, _opt_object),
            "request_sha256": (True, _opt_hex64),
            "response_sha256": (True, _opt_hex64),
            "journaled": (True, _bool),
            "usage": (True, _opt_usage),
            "dropped_credentials": (True, _str_list),
            "reason": (True, _opt_str),
            "response_bytes": (True, _nat),
        },
        "store.recovered": QUARANTINE_BODY,
    },
    "control": {
        "command": {
            "operator": (True, _str),
            "command": (True, _str),
            "args": (True, _object),
            "id": (True, _command_id),
            "revision": (True, _nat),
        },
        "store.recovered": QUARANTINE_BODY,
    },
    "events": {  # the event bus (docs/spec/events.md); ids are events seqs, causes audit seqs
        "event.message": {
            "partition": (True, _str),
            "source": (True, _str),
            "to": (True, _str),
            "tier": (True, _str),
            "ttl_ms": (True, _nat),
            "topic": (True, _str),
            "cause": (True, _nat),
            "text": (True, _str),
            "escalates": (True, _opt_nat),
        },
        "event.handled": {
            "message": (True, _nat),
            "by": (True, _str),
            "cause": (True, _nat),
        },
        "event.expired": {
            "message": (True, _nat),
        },
        "store.recovered": QUARANTINE_BODY,
    },
}
"""Record kinds each store accepts, and the members of each kind's body. Unknown kinds fail."""
