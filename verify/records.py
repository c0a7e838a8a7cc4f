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
from typing import Any, Final, NamedTuple

from .canonical import decode_canonical
from .errors import SchemaError
from .fsm import TaskState
from .recordkinds import (
    BODY_SPECS,
    COMMAND_ID_RE,
    COMMIT_RE,
    GIT_MODES,
    HEX64_RE,
    QUARANTINE_BODY,
    READING_MEMBERS,
    TIME_RE,
    BodySpec,
    Checker,
    _action_list,
    _bool,
    _command_id,
    _commit,
    _commit_list,
    _git_mode,
    _hex64,
    _hex64_list,
    _int,
    _nat,
    _nat_list,
    _object,
    _opt_api,
    _opt_command_id,
    _opt_family,
    _opt_git_mode,
    _opt_hex64,
    _opt_int,
    _opt_nat,
    _opt_object,
    _opt_str,
    _opt_usage,
    _outcome,
    _reading_list,
    _source,
    _str,
    _str_list,
    _task_state,
    _time,
)

__all__ = [
    "BODY_SPECS",
    "COMMAND_ID_RE",
    "COMMIT_RE",
    "ENVELOPE_KEYS",
    "GIT_MODES",
    "HEX64_RE",
    "KIND_RE",
    "MAC_HEX_LEN",
    "MAX_LINE_BYTES",
    "QUARANTINE_BODY",
    "READING_MEMBERS",
    "RECORD_VERSION",
    "RUN_ID_RE",
    "STORES",
    "TIME_RE",
    "BodySpec",
    "CanonicalGrammar",
    "Checker",
    "Record",
    "canonical_grammar",
    "canonical_line_match",
    "canonical_matcher",
    "check_body",
    "check_envelope",
    "mac_input",
    "mac_span",
    "match_facts",
    "parse_record_line",
    "split_mac",
]
"""The kinds, their bodies and the shared patterns live in ``harness.verify.recordkinds``;
they stay importable from here."""

RECORD_VERSION: Final = 2
STORES: Final = ("lineage", "audit", "replay", "control", "events")
MAC_HEX_LEN: Final = 64
MAX_LINE_BYTES: Final = 1 << 20
"""A store line longer than this (1 MiB) is refused: bounded memory per record."""

ENVELOPE_KEYS: Final = frozenset({"body", "kind", "mac", "run", "seq", "store", "time", "v"})
RUN_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
KIND_RE: Final = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
_MAC_MEMBER: Final = b',"mac":"'


class Record(NamedTuple):
    """One decoded, checked store record.

    A named tuple rather than a frozen dataclass: the verifier builds one per record of every
    store, and a tuple is built about four times faster (no ``object.__setattr__`` per member).
    """

    store: str
    run: str
    seq: int
    time: str
    kind: str
    body: Mapping[str, Any]
    mac: str


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
    _reading_list: rb"\[.*?\]",
    _opt_nat: rb"(?:null|0|[1-9][0-9]*)",
    _outcome: rb'"(?:answered|refused|replay-miss|error)"',
    _opt_family: rb'(?:null|"(?:anthropic|openai|google)")',
    _opt_api: rb'(?:null|"(?:anthropic-messages|openai-chat|openai-responses|google-generate'
    rb'|google-stream|other)")',
    _source: rb'"(?:live|journal|live-miss)"',
    _opt_usage: rb"(?:null|\{.*?\})",
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
        + b"),"
        + _envelope_tail(store, run, rb"(?:0|[1-9][0-9]*)", groups=False),
        re.DOTALL,
    )


_TIME_PATTERN: Final = rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z"


def _envelope_tail(store: str, run: str, seq: bytes, *, groups: bool) -> bytes:
    """The members after ``kind``, exactly: mac, run, seq, store, time, v (with ``groups``,
    the MAC's hex, the seq and the time each in a capturing group, in that order)."""

    def group(pattern: bytes) -> bytes:
        return b"(" + pattern + b")" if groups else pattern

    return (
        rb'"mac":"'
        + group(rb"[0-9a-f]{64}")
        + rb'","run":"'
        + re.escape(run.encode())
        + rb'","seq":'
        + group(seq)
        + rb',"store":"'
        + store.encode()
        + rb'","time":"'
        + group(_TIME_PATTERN)
        + rb'","v":'
        + str(RECORD_VERSION).encode()
        + rb"\}"
    )


_WALKED: Final = frozenset(
    {_object, _opt_object, _commit_list, _action_list, _reading_list, _opt_usage}
)
"""Checkers whose fast-path pattern is loose: kinds using them also get ``check_body``."""
_FREE_FORM_KINDS: Final = {
    store: frozenset(
        kind for kind, spec in kinds.items() if any(c in _WALKED for _, c in spec.values())
    )
    for store, kinds in BODY_SPECS.items()
}


# ---- faster still: a grammar that proves the canonical form --------------------------------
# The patterns above assume the bytes were proven canonical by decoding and re-encoding them.
# For a kind without free-form members, a stricter grammar proves it without decoding: member
# names and order are fixed by the pattern (sorted, as RFC 8785 sorts ASCII names), there is no
# whitespace, strings may only hold what RFC 8785 writes (every character but ``"``, ``\\``
# and controls as itself; those escaped as ``\\"`` ``\\\\`` ``\\b`` ``\\t`` ``\\n`` ``\\f`` ``\\r``
# or ``\\u00xx`` lowercase), integers have no sign on zero, no leading zero and at most 15
# digits (so they are far inside ±(2^53−1)). A line that matches it and is valid UTF-8 is
# exactly the canonical encoding of the record it spells, and satisfies its schema: what
# ``parse_record_line`` proves, without building the record. Other lines take that path.

_CANON_PLAIN = rb'[^"\\\x00-\x1f]*'
_CANON_ESCAPE = rb'\\(?:["\\bfnrt]|u00(?:0[0-7bef]|1[0-9a-f]))'
# unrolled (runs of plain bytes in one tight loop) after one plain byte or escape, which makes
# it non-empty; no look-ahead, so grammardfa can turn it into an automaton
_CANON_STRING = (
    rb'"(?:[^"\\\x00-\x1f]|'
    + _CANON_ESCAPE
    + rb")"
    + _CANON_PLAIN
    + rb"(?:"
    + _CANON_ESCAPE
    + _CANON_PLAIN
    + rb')*"'
)
_CANON_NAT = rb"(?:0|[1-9][0-9]{0,14})"
_CANON_INT = rb"(?:0|-?[1-9][0-9]{0,14})"
_CANONICAL_PATTERNS: Final[dict[Checker, bytes]] = {
    **_PATTERNS,
    _int: _CANON_INT,
    _opt_int: rb"(?:null|" + _CANON_INT + rb")",
    _nat: _CANON_NAT,
    _opt_nat: rb"(?:null|" + _CANON_NAT + rb")",
    _nat_list: rb"\[(?:" + _CANON_NAT + rb"(?:," + _CANON_NAT + rb")*)?\]",
    _str: _CANON_STRING,
    _opt_str: rb"(?:null|" + _CANON_STRING + rb")",
    _str_list: rb"\[(?:" + _CANON_STRING + rb"(?:," + _CANON_STRING + rb")*)?\]",
}


CAPTURED: Final = {"lineage": {"artifact.write": "w_", "artifact.delete": "d_"}}
"""Kinds whose members the canonical grammar captures, as named groups ``<prefix><member>``:
the lineage writes and deletes, so the final artifacts fold without decoding the records."""


class CanonicalGrammar(NamedTuple):
    """The canonical grammar of one store of one run, and how to read a match of it.

    Each kind's alternative ends with its own copy of the envelope's tail, in a group of its
    own: the group that closes last (``match.lastindex``) names the kind, and the tail's groups
    follow it: ``lastindex + 1`` the MAC's hex, ``+ 2`` the seq, ``+ 3`` the time.
    """

    pattern: re.Pattern[bytes]
    kinds: dict[int, str]
    """``match.lastindex`` -> kind."""
    alternatives: tuple[tuple[str, bytes], ...] = ()
    """Each kind with the pattern of its lines alone (``pattern`` is their union): what
    ``grammardfa`` compiles, one accepting tag per kind."""


@functools.lru_cache(maxsize=64)
def canonical_grammar(store: str, run: str) -> CanonicalGrammar:
    """The grammar of every canonical, schema-valid line of ``store`` in run ``run`` whose kind
    has no free-form member; the members of the ``CAPTURED`` kinds have their own named groups
    (their JSON text, quotes included)."""
    tail = _envelope_tail(store, run, _CANON_NAT, groups=True)
    alternatives = []
    names: dict[str, str] = {}
    per_kind: list[tuple[str, bytes]] = []
    captured = CAPTURED.get(store, {})
    for kind, spec in BODY_SPECS[store].items():
        if not all(required for required, _ in spec.values()):
            continue
        if any(checker in _WALKED for _, checker in spec.values()):
            continue
        prefix = captured.get(kind)
        members = [
            b'"' + name.encode() + b'":' + _captured(_CANONICAL_PATTERNS[checker], prefix, name)
            for name, (_, checker) in sorted(spec.items())
        ]
        name = f"k{len(names)}"
        names[name] = kind
        alternatives.append(
            rb"\{"
            + b",".join(members)
            + rb'\},"kind":"'
            + re.escape(kind.encode())
            + rb'",(?P<'
            + name.encode()
            + b">"
            + tail
            + b")"
        )
        per_kind.append((kind, rb'\{"body":' + alternatives[-1]))
    pattern = re.compile(rb'\{"body":(?:' + b"|".join(alternatives) + b")")
    kinds = {pattern.groupindex[n]: k for n, k in names.items()}
    return CanonicalGrammar(pattern, kinds, tuple(per_kind))


def _captured(pattern: bytes, prefix: str | None, name: str) -> bytes:
    if prefix is None:
        return pattern
    return b"(?P<" + (prefix + name).encode() + b">" + pattern + b")"


def canonical_matcher(store: str, run: str) -> Callable[[bytes], re.Match[bytes] | None]:
    """The canonical grammar of ``store`` in run ``run`` as a predicate on lines: the match of
    a line it proves canonical and valid (within the line limit, valid UTF-8), else None: then
    ``parse_record_line`` decides, and names the problem."""
    fullmatch = canonical_grammar(store, run).pattern.fullmatch

    def match(line: bytes) -> re.Match[bytes] | None:
        if len(line) > MAX_LINE_BYTES or not (line.isascii() or _utf8(line)):
            return None
        return fullmatch(line)

    return match


def canonical_line_match(line: bytes, store: str, run: str) -> re.Match[bytes] | None:
    """``canonical_matcher(store, run)(line)``."""
    return canonical_matcher(store, run)(line)


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def match_facts(
    grammar: CanonicalGrammar, match: re.Match[bytes]
) -> tuple[int, str, str, tuple[int, int]]:
    """``(seq, time, kind, MAC span)`` of a line the grammar matched (the span of its MAC's
    hex in the line, as ``mac_span`` finds it)."""
    group = match.lastindex or 0
    seq, time = match.group(group + 2, group + 3)
    return int(seq), time.decode("ascii"), grammar.kinds[group], match.span(group + 1)


def parse_record_line(
    line: bytes, store: str | None = None, run: str | None = None, *, fast: bool = True
) -> Record:
    """Decode one store line (without its ``\\n``): canonical JSON, then the schema check.

    ``fast=False`` checks the schema member by member without the store's one-regex schema:
    the same verdicts (tests hold them equal), cheaper for a few lines than compiling it.
    Errors carry no location; callers prefix the member, line and seq they know.
    """
    if len(line) > MAX_LINE_BYTES:
        raise SchemaError(f"line is {len(line)} bytes, limit {MAX_LINE_BYTES}")
    obj = decode_canonical(line)
    if (
        fast
        and store is not None
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


def mac_span(line: bytes) -> tuple[int, int]:
    """Where the record's MAC hex sits in a canonical line: ``line[start:end]``.

    Spec: the MAC covers the canonical JSON of the record object minus ``mac``. The line is
    canonical (checked before this is called) and ``mac`` is never the first member (``body``
    and ``kind`` sort before it) nor followed by anything but envelope scalars whose syntax
    excludes quotes, so the last ``,"mac":"`` starts it, and removing ``,"mac":"<64 hex>"``
    (``mac_input``) gives exactly the covered encoding.
    """
    start = line.rfind(_MAC_MEMBER)
    hex_start = start + len(_MAC_MEMBER)
    end = hex_start + MAC_HEX_LEN
    if start < 0 or line[end : end + 1] != b'"':
        raise SchemaError("mac member not found where the canonical form puts it")
    return hex_start, end


def mac_input(line: bytes, span: tuple[int, int]) -> bytes:
    """The bytes a line's MAC covers: the line without ``,"mac":"<hex>"`` at ``span``."""
    return line[: span[0] - len(_MAC_MEMBER)] + line[span[1] + 1 :]


def split_mac(line: bytes) -> tuple[str, bytes]:
    """Return the record's MAC (hex) and the bytes it covers, without re-serializing."""
    span = mac_span(line)
    return line[span[0] : span[1]].decode("ascii", "replace"), mac_input(line, span)
