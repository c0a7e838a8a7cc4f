"""Store records: the envelope every line of a store carries, and its strict check.

A store line is the RFC 8785 canonical encoding of one JSON object followed by ``\\n``:

    {"body":{...},"kind":"...","mac":"<64 hex>","run":"<run id>","seq":N,"store":"audit",
     "time":"2026-11-30T05:24:23.123456Z","v":1}

Exactly these eight members, no others (docs/spec/records.md, schemas/record.schema.json).
The check here is hand-written rather than a JSON Schema validator because the verifier runs
it on every record of every store (millions); a test keeps it and the JSON Schema in agreement.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .canonical import parse_canonical
from .errors import CanonicalEncodingError, SchemaError

RECORD_VERSION: Final = 1
STORES: Final = ("lineage", "audit", "replay", "control")
MAC_HEX_LEN: Final = 64
MAX_LINE_BYTES: Final = 1 << 20
"""A store line longer than this (1 MiB) is refused: bounded memory per record."""

ENVELOPE_KEYS: Final = frozenset({"body", "kind", "mac", "run", "seq", "store", "time", "v"})
RUN_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
KIND_RE: Final = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
TIME_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
HEX64_RE: Final = re.compile(r"[0-9a-f]{64}")
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
    return None if type(value) is str and 0 < len(value) <= 4096 else "a non-empty string"


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


def _object(value: Any) -> str | None:
    return None if type(value) is dict else "an object"


BodySpec = Mapping[str, tuple[bool, Checker]]

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
            "parents": (True, _hex64_list),
            "actor": (True, _str),
            "task": (True, _str),
            "step": (True, _nat),
            "model": (True, _opt_str),
        },
        "artifact.delete": {
            "path": (True, _str),
            "parents": (True, _hex64_list),
            "actor": (True, _str),
            "task": (True, _str),
            "step": (True, _nat),
            "model": (True, _opt_str),
        },
        "store.recovered": QUARANTINE_BODY,
    },
    "audit": {
        "run.start": {"plan": (True, _str), "producer": (True, _str)},
        "run.end": {"outcome": (True, _str)},
        "event": {"name": (True, _str), "data": (True, _object)},
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
        "command": {"operator": (True, _str), "command": (True, _str), "args": (True, _object)},
        "store.recovered": QUARANTINE_BODY,
    },
}
"""Record kinds each store accepts, and the members of each kind's body. Unknown kinds fail."""


def check_body(store: str, kind: str, body: Any, where: str) -> None:
    """Raise ``SchemaError`` unless ``body`` matches the spec of ``kind`` in ``store``."""
    kinds = BODY_SPECS.get(store)
    if kinds is None:
        raise SchemaError(f"{where}: unknown store {store!r}")
    spec = kinds.get(kind)
    if spec is None:
        raise SchemaError(f"{where}: kind {kind!r} is not allowed in store {store!r}")
    if type(body) is not dict:
        raise SchemaError(f"{where}: body must be an object")
    for name in body:
        if name not in spec:
            raise SchemaError(f"{where}: body of {kind!r} has unknown member {name!r}")
    for name, (required, checker) in spec.items():
        if name not in body:
            if required:
                raise SchemaError(f"{where}: body of {kind!r} lacks member {name!r}")
            continue
        problem = checker(body[name])
        if problem is not None:
            raise SchemaError(f"{where}: body.{name} of {kind!r} must be {problem}")


def check_envelope(obj: Any, where: str) -> Record:
    """Check the eight envelope members and the body; return the typed record."""
    if type(obj) is not dict:
        raise SchemaError(f"{where}: a record must be a JSON object")
    if obj.keys() != ENVELOPE_KEYS:
        missing = sorted(ENVELOPE_KEYS - obj.keys())
        extra = sorted(obj.keys() - ENVELOPE_KEYS)
        detail = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown {', '.join(extra)}" if extra else "",
            )
            if part
        )
        raise SchemaError(f"{where}: record members wrong ({detail})")
    if obj["v"] != RECORD_VERSION or type(obj["v"]) is not int:
        raise SchemaError(f"{where}: unsupported record version {obj['v']!r}")
    store, run, seq, time_, kind, mac = (
        obj["store"],
        obj["run"],
        obj["seq"],
        obj["time"],
        obj["kind"],
        obj["mac"],
    )
    if store not in STORES or type(store) is not str:
        raise SchemaError(f"{where}: unknown store {store!r}")
    if type(run) is not str or not RUN_ID_RE.fullmatch(run):
        raise SchemaError(f"{where}: run id {run!r} is not a valid run id")
    if type(seq) is not int or seq < 0:
        raise SchemaError(f"{where}: seq {seq!r} is not a non-negative integer")
    if type(time_) is not str or not TIME_RE.fullmatch(time_):
        raise SchemaError(f"{where}: time {time_!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    if type(kind) is not str or not KIND_RE.fullmatch(kind) or len(kind) > 64:
        raise SchemaError(f"{where}: kind {kind!r} is not a valid kind")
    if type(mac) is not str or len(mac) != MAC_HEX_LEN or not HEX64_RE.fullmatch(mac):
        raise SchemaError(f"{where}: mac must be 64 lowercase hex digits")
    check_body(store, kind, obj["body"], where)
    return Record(store, run, seq, time_, kind, obj["body"], mac)


def parse_record_line(line: bytes, where: str) -> Record:
    """Decode one store line (without its ``\\n``): canonical JSON, then the envelope check."""
    if len(line) > MAX_LINE_BYTES:
        raise SchemaError(f"{where}: line is {len(line)} bytes, limit {MAX_LINE_BYTES}")
    try:
        obj = parse_canonical(line)
    except CanonicalEncodingError as exc:
        raise CanonicalEncodingError(f"{where}: {exc}") from None
    return check_envelope(obj, where)


def mac_input(line: bytes, record: Record) -> bytes:
    """The bytes the record's MAC covers: its canonical encoding without the ``mac`` member.

    Spec: canonical JSON of the record object minus ``mac``. Because the line is canonical and
    ``mac`` is never the first member (``body`` and ``kind`` sort before it) nor followed by
    anything but envelope scalars whose syntax excludes quotes, removing the bytes
    ``,"mac":"<64 hex>"`` gives exactly that encoding without re-serializing.
    """
    start = line.rfind(_MAC_MEMBER)
    end = start + len(_MAC_MEMBER) + MAC_HEX_LEN + 1
    if start < 0 or line[end - 1 - MAC_HEX_LEN : end - 1] != record.mac.encode("ascii"):
        raise SchemaError("mac member not found where the canonical form puts it")
    return line[:start] + line[end:]
