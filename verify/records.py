"""Store records: the envelope every line of a store carries, and its strict check.

A store line is the RFC 8785 canonical encoding of one JSON object followed by ``\\n``:

    {"body":{...},"kind":"...","mac":"<64 hex>","run":"<run id>","seq":N,"store":"audit",
     "time":"2026-11-30T05:24:23.123456Z","v":2}

Exactly these eight members, no others (docs/spec/records.md, schemas/record.schema.json).
The check here is hand-written rather than a JSON Schema validator because the verifier runs
it on every record of every store (millions); a test keeps it and the JSON Schema in agreement.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .canonical import check_json_types, decode_canonical
from .errors import CanonicalEncodingError, SchemaError
from .fsm import TaskState

RECORD_VERSION: Final = 2
STORES: Final = ("lineage", "audit", "replay", "control")
MAC_HEX_LEN: Final = 64
MAX_LINE_BYTES: Final = 1 << 20
"""A store line longer than this (1 MiB) is refused: bounded memory per record."""

ENVELOPE_KEYS: Final = frozenset({"body", "kind", "mac", "run", "seq", "store", "time", "v"})
RUN_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
KIND_RE: Final = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
TIME_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
HEX64_RE: Final = re.compile(r"[0-9a-f]{64}")
COMMIT_RE: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MAC_MEMBER: Final = b',"mac":"'


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded, checked store record."""

    store: str
    run: str
    seq: int
    time: str
    kind: str
    body: Mapping[str, Any]
    mac: str


# ---- body checks -------------------------------------------------------------------------
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
}
"""Record kinds each store accepts, and the members of each kind's body. Unknown kinds fail."""


def check_body(store: str, kind: str, body: Any) -> None:
    """Raise ``SchemaError`` unless ``body`` matches the spec of ``kind`` in ``store``."""
    kinds = BODY_SPECS.get(store)
    if kinds is None:
        raise SchemaError(f"unknown store {store!r}")
    spec = kinds.get(kind)
    if spec is None:
        raise SchemaError(f"kind {kind!r} is not allowed in store {store!r}")
    if type(body) is not dict:
        raise SchemaError("body must be an object")
    for name in body:
        if name not in spec:
            raise SchemaError(f"body of {kind!r} has unknown member {name!r}")
    for name, (required, checker) in spec.items():
        if name not in body:
            if required:
                raise SchemaError(f"body of {kind!r} lacks member {name!r}")
            continue
        problem = checker(body[name])
        if problem is not None:
            raise SchemaError(f"body.{name} of {kind!r} must be {problem}")


def _envelope_problem(obj: dict[str, Any]) -> str:
    missing = sorted(ENVELOPE_KEYS - obj.keys())
    extra = sorted(obj.keys() - ENVELOPE_KEYS)
    parts = [
        f"missing {', '.join(missing)}" if missing else "",
        f"unknown {', '.join(extra)}" if extra else "",
    ]
    return f"record members wrong ({'; '.join(part for part in parts if part)})"


def check_envelope(obj: Any, store: str | None = None, run: str | None = None) -> Record:
    """Check the eight envelope members and the body; return the typed record.

    With ``store``/``run`` given (the verifier knows which log it reads), those members must
    equal them, which also spares a regex per record on the hot path.
    """
    if type(obj) is not dict:
        raise SchemaError("a record must be a JSON object")
    if obj.keys() != ENVELOPE_KEYS:
        raise SchemaError(_envelope_problem(obj))
    version = obj["v"]
    if version != RECORD_VERSION or type(version) is not int:
        raise SchemaError(f"unsupported record version {version!r}")
    rec_store, rec_run, seq, time_, kind, mac = (
        obj["store"], obj["run"], obj["seq"], obj["time"], obj["kind"], obj["mac"],
    )  # fmt: skip
    if rec_store != store and (store is not None or rec_store not in STORES):
        raise SchemaError(f"store {rec_store!r} is not {store or 'a known store'!r}")
    if rec_run != run and (
        run is not None or type(rec_run) is not str or not RUN_ID_RE.fullmatch(rec_run)
    ):
        raise SchemaError(f"run id {rec_run!r} is not {run or 'a valid run id'!r}")
    if type(seq) is not int or seq < 0:
        raise SchemaError(f"seq {seq!r} is not a non-negative integer")
    if type(time_) is not str or not TIME_RE.fullmatch(time_):
        raise SchemaError(f"time {time_!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    if type(kind) is not str or not KIND_RE.fullmatch(kind):
        raise SchemaError(f"kind {kind!r} is not a valid kind")
    if type(mac) is not str or len(mac) != MAC_HEX_LEN or not HEX64_RE.fullmatch(mac):
        raise SchemaError("mac must be 64 lowercase hex digits")
    check_body(rec_store, kind, obj["body"])
    return Record(rec_store, rec_run, seq, time_, kind, obj["body"], mac)


# ---- fast path: the schema as one regular expression over the canonical bytes -------------
# Once a line is proven canonical, its layout is fixed (members sorted, no whitespace, one
# spelling per value), so the whole envelope-and-body schema of a store is one regular
# expression: one C-level match instead of dozens of Python checks per record. It is derived
# from BODY_SPECS, and tests hold it to the same verdicts as ``check_envelope`` and the JSON
# Schema. Free-form members (``_object``) match ``{...}`` here and are then walked by
# ``check_body``. Any line the expression rejects goes through ``check_envelope``, which names
# the precise problem.

# Non-empty string, unrolled so runs of plain bytes match in one tight loop.
_STRING = rb'"(?:[^"\\]|\\.)[^"\\]*(?:\\.[^"\\]*)*"'
_HEX64 = rb'"[0-9a-f]{64}"'
_INT = rb"-?(?:0|[1-9][0-9]*)"
_STATES = rb"(?:" + b"|".join(re.escape(state.value.encode()) for state in TaskState) + rb")"
_PATTERNS: Final[dict[Checker, bytes]] = {
    _int: _INT,
    _opt_int: rb"(?:null|" + _INT + rb")",
    _bool: rb"(?:true|false)",
    _nat_list: rb"\[(?:(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)?\]",
    _command_id: rb'"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"',
    _opt_command_id: rb'(?:null|"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")',
    _opt_hex64: rb"(?:null|" + _HEX64 + rb")",
    _str_list: rb"\[(?:" + _STRING + rb"(?:," + _STRING + rb")*)?\]",
    _task_state: rb'"' + _STATES + rb'"',
    _str: _STRING,
    _opt_str: rb"(?:null|" + _STRING + rb")",
    _hex64: _HEX64,
    _nat: rb"(?:0|[1-9][0-9]*)",
    _hex64_list: rb"\[(?:" + _HEX64 + rb"(?:," + _HEX64 + rb")*)?\]",
    _object: rb"\{.*\}",
    _git_mode: rb'"(?:100644|100755|120000|160000)"',
    _opt_git_mode: rb'(?:null|"(?:100644|100755|120000|160000)")',
    _opt_object: rb"(?:null|\{.*\})",
    _time: rb'"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z"',
    _commit: rb'"(?:[0-9a-f]{40}|[0-9a-f]{64})"',
    _commit_list: rb"\[.*?\]",
    _action_list: rb"\[.*?\]",
}


def _body_pattern(spec: BodySpec) -> bytes | None:
    if not all(required for required, _ in spec.values()):
        return None  # optional members: leave the kind to the dict checks
    members = [
        b'"' + name.encode() + b'":' + _PATTERNS[checker]
        for name, (_, checker) in sorted(spec.items())
    ]
    return rb"\{" + b",".join(members) + rb"\}"


@functools.lru_cache(maxsize=64)
def _line_pattern(store: str, run: str) -> re.Pattern[bytes]:
    alternatives = []
    for kind, spec in BODY_SPECS[store].items():
        body = _body_pattern(spec)
        if body is not None:
            alternatives.append(body + rb',"kind":"' + re.escape(kind.encode()) + rb'"')
    return re.compile(
        rb'\{"body":(?:'
        + b"|".join(alternatives)
        + rb'),"mac":"[0-9a-f]{64}","run":"'
        + re.escape(run.encode())
        + rb'","seq":(?:0|[1-9][0-9]*),"store":"'
        + store.encode()
        + rb'","time":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z","v":'
        + str(RECORD_VERSION).encode()
        + rb"\}",
        re.DOTALL,
    )


_WALKED: Final = frozenset({_object, _opt_object, _commit_list, _action_list})
"""Checkers whose fast-path pattern is loose: kinds using them also get ``check_body``."""
_FREE_FORM_KINDS: Final = {
    store: frozenset(
        kind for kind, spec in kinds.items() if any(c in _WALKED for _, c in spec.values())
    )
    for store, kinds in BODY_SPECS.items()
}


def parse_record_line(line: bytes, store: str | None = None, run: str | None = None) -> Record:
    """Decode one store line (without its ``\\n``): canonical JSON, then the schema check.

    Errors carry no location; callers prefix the member, line and seq they know.
    """
    if len(line) > MAX_LINE_BYTES:
        raise SchemaError(f"line is {len(line)} bytes, limit {MAX_LINE_BYTES}")
    obj = decode_canonical(line)
    if (
        store is not None
        and run is not None
        and store in BODY_SPECS
        and _line_pattern(store, run).fullmatch(line) is not None
        and obj.keys() == ENVELOPE_KEYS  # a free-form ``{.*}`` could swallow extra members
    ):
        kind, body = obj["kind"], obj["body"]
        if kind in _FREE_FORM_KINDS[store]:
            check_body(store, kind, body)
        return Record(store, run, obj["seq"], obj["time"], kind, body, obj["mac"])
    return check_envelope(obj, store, run)


def split_mac(line: bytes) -> tuple[str, bytes]:
    """Return the record's MAC (hex) and the bytes it covers, without re-serializing.

    Spec: the MAC covers the canonical JSON of the record object minus ``mac``. The line is
    canonical (checked before this is called) and ``mac`` is never the first member (``body``
    and ``kind`` sort before it) nor followed by anything but envelope scalars whose syntax
    excludes quotes, so removing the bytes ``,"mac":"<64 hex>"`` gives exactly that encoding.
    """
    start = line.rfind(_MAC_MEMBER)
    hex_start = start + len(_MAC_MEMBER)
    end = hex_start + MAC_HEX_LEN + 1
    if start < 0 or line[end - 1 : end] != b'"':
        raise SchemaError("mac member not found where the canonical form puts it")
    return line[hex_start : end - 1].decode("ascii", "replace"), line[:start] + line[end:]
