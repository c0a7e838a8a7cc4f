"""in-toto Statement v1 (in-toto/attestation ``spec/v1/statement.md``), checked strictly.

``parse_statement`` reads the payload of a DSSE envelope *after* ``verify_envelope`` accepted
its signature and payloadType; it never stands in for that check. A statement is::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<path>", "digest": {"sha256": "<64 hex>"}}, ...],
     "predicateType": "<URI>", "predicate": {...}}

Checks, in order (each failure raises a ``StatementError`` subclass naming it): strict JSON
(no duplicate keys, integers only); an object; ``_type`` exactly ``STATEMENT_TYPE``; exactly the
four members above; ``predicateType`` in the caller's allow-list (before the subjects and the
predicate are interpreted); ``subject`` a non-empty list of subjects; ``predicate`` a non-empty
object.

Decisions, stricter than the reference validators (in-toto/attestation Go ``Validate()`` and
the Python bindings), each tested in tests/test_intoto.py and tests/test_dsse_vectors.py:

* **Legacy ``https://in-toto.io/Statement/v0.1`` is refused** (the Go validator accepts it,
  the Python one does not). Our producer writes only v1, and v0.1 had a different subject
  and predicate model; accepting two types would give one claim two spellings.
* **Subjects carry ``name`` and ``digest`` only.** ``name`` is a non-empty string, unique
  within the statement (a caller binds artifacts by name; two entries for one name would make
  that binding ambiguous). Other ResourceDescriptor members (``uri``, ``downloadLocation``,
  ``annotations``, ...) are refused rather than silently carried as unverified claims.
* **Digests are lowercase hex.** ``digest`` is a non-empty object; every value is non-empty,
  even-length, lowercase hex (the in-toto DigestSet encoding; uppercase is refused: one
  spelling per value). Unknown algorithm names are accepted (so the reference vector's toy
  ``{"alg1": "abc123"}`` passes, as in Go), but algorithms with a known size must have it
  (``sha256``: 64 hex digits, see ``DIGEST_HEX_LENGTHS``). Algorithms whose values are not hex
  (e.g. ``goModuleH1``) are therefore refused.
* **The predicate must be a non-empty object** (the Python bindings also refuse an empty one;
  a statement with no claim attests nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from .canonical import parse_strict_json
from .dsse import PAYLOAD_TYPE_IN_TOTO as _DSSE_PAYLOAD_TYPE_IN_TOTO
from .errors import CanonicalEncodingError, VerificationError

PAYLOAD_TYPE_IN_TOTO: Final = _DSSE_PAYLOAD_TYPE_IN_TOTO
"""DSSE payloadType of an in-toto statement (the default allow-list of ``verify_envelope``)."""
BUILD_TYPE_AGENT_RUN: Final = "urn:harness-verify:build-type:agent-run:v1"
"""SLSA buildType of a harness run (the run is the build, its final artifacts the outputs)."""
BUILDER_ID: Final = "urn:harness-verify:builder:harness"

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
LEGACY_STATEMENT_TYPES: Final = frozenset({"https://in-toto.io/Statement/v0.1"})

PREDICATE_RUN_SUMMARY: Final = "urn:harness-verify:predicate:run-summary:v1"
PREDICATE_LINEAGE: Final = "urn:harness-verify:predicate:lineage:v1"
PREDICATE_SLSA_PROVENANCE: Final = "https://slsa.dev/provenance/v1"

STATEMENT_MEMBERS: Final = frozenset({"_type", "subject", "predicateType", "predicate"})
SUBJECT_MEMBERS: Final = frozenset({"name", "digest"})

DIGEST_HEX_LENGTHS: Final = {
    "md5": 32,
    "sha1": 40,
    "sha224": 56,
    "sha512_224": 56,
    "sha256": 64,
    "sha512_256": 64,
    "sha384": 96,
    "sha512": 128,
    "sha3_224": 56,
    "sha3_256": 64,
    "sha3_384": 96,
    "sha3_512": 128,
}
"""Hex lengths of the fixed-size algorithms named in the in-toto DigestSet spec."""

_LOWER_HEX: Final = re.compile(r"(?:[0-9a-f]{2})+")


class StatementError(VerificationError):
    """An in-toto statement is malformed or not one the caller accepts."""


class StatementTypeError(StatementError):
    """``_type`` is not in-toto Statement v1 (legacy v0.1 included)."""


class DisallowedPredicateTypeError(StatementError):
    """``predicateType`` is not one the caller accepts."""


@dataclass(frozen=True)
class Subject:
    """One attested artifact: its name and its digests (algorithm -> lowercase hex)."""

    name: str
    digest: dict[str, str]


@dataclass(frozen=True)
class Statement:
    """A checked in-toto Statement v1."""

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: dict[str, Any]


def _subject(index: int, item: Any) -> Subject:
    where = f"subject[{index}]"
    if type(item) is not dict:
        raise StatementError(f"{where} must be an object")
    if "digest" not in item:
        raise StatementError(f"{where}: at least one digest required (no digest member)")
    extra = sorted(item.keys() - SUBJECT_MEMBERS)
    if extra:
        raise StatementError(f"{where} has unsupported member(s) {', '.join(extra)}")
    name, digest = item.get("name"), item["digest"]
    if type(name) is not str or not name:
        raise StatementError(f"{where} needs a non-empty string name")
    if type(digest) is not dict:
        raise StatementError(f"{where}.digest must be an object")
    if not digest:
        raise StatementError(f"{where}: at least one digest required (digest is empty)")
    for alg, value in digest.items():
        if not alg:
            raise StatementError(f"{where}.digest has an empty algorithm name")
        if type(value) is not str or not _LOWER_HEX.fullmatch(value):
            raise StatementError(
                f"{where}.digest.{alg} must be non-empty, even-length lowercase hex"
            )
        expected = DIGEST_HEX_LENGTHS.get(alg)
        if expected is not None and len(value) != expected:
            raise StatementError(
                f"{where}.digest.{alg} has {len(value)} hex digits, expected {expected}"
            )
    return Subject(name, dict(digest))


def parse_statement(payload: bytes, *, allowed_predicate_types: frozenset[str]) -> Statement:
    """Parse and check an in-toto Statement v1 (see the module docstring for every rule).

    Raises ``StatementError`` (or its subclasses ``StatementTypeError``,
    ``DisallowedPredicateTypeError``). Binding the subjects to actual artifacts (name and
    digest equal to the files at hand) is the caller's separate check.
    """
    try:
        obj: Any = parse_strict_json(payload)
    except CanonicalEncodingError as exc:
        raise StatementError(f"statement is not strict JSON: {exc}") from None
    if type(obj) is not dict:
        raise StatementError("statement must be a JSON object")
    kind = obj.get("_type")
    if kind != STATEMENT_TYPE:
        if type(kind) is str and kind in LEGACY_STATEMENT_TYPES:
            raise StatementTypeError(
                f"legacy statement type {kind!r} is not accepted; only {STATEMENT_TYPE}"
            )
        shown = repr(kind[:200]) if type(kind) is str else "missing or not a string"
        raise StatementTypeError(f"wrong statement type {shown}; expected {STATEMENT_TYPE}")
    if obj.keys() != STATEMENT_MEMBERS:
        missing = sorted(STATEMENT_MEMBERS - obj.keys())
        extra = sorted(obj.keys() - STATEMENT_MEMBERS)
        parts = [f"missing {', '.join(missing)}" if missing else "",
                 f"unknown {', '.join(extra)}" if extra else ""]  # fmt: skip
        raise StatementError(f"statement members wrong ({'; '.join(p for p in parts if p)})")
    predicate_type = obj["predicateType"]
    if type(predicate_type) is not str or not predicate_type:
        raise StatementError("predicateType must be a non-empty string")
    if predicate_type not in allowed_predicate_types:
        raise DisallowedPredicateTypeError(
            f"predicateType {predicate_type[:200]!r} is not allowed "
            f"(allowed: {', '.join(sorted(allowed_predicate_types)) or 'none'})"
        )
    subjects_raw = obj["subject"]
    if type(subjects_raw) is not list:
        raise StatementError("subject must be a list")
    if not subjects_raw:
        raise StatementError("at least one subject required (subject is empty)")
    subjects = tuple(_subject(index, item) for index, item in enumerate(subjects_raw))
    seen: set[str] = set()
    for subject in subjects:
        if subject.name in seen:
            raise StatementError(f"subject name {subject.name[:200]!r} appears twice")
        seen.add(subject.name)
    predicate = obj["predicate"]
    if type(predicate) is not dict:
        raise StatementError("predicate must be an object")
    if not predicate:
        raise StatementError("predicate is empty: a statement with no claim attests nothing")
    return Statement(subjects, predicate_type, predicate)
