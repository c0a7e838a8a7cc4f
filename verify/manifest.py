"""The bundle manifest: what the bundle claims to hold, signed as a whole.

``manifest.json`` is canonical JSON (docs/spec/bundle.md, schemas/manifest.schema.json)::

    {"format": "harness-verify/bundle", "version": 2, "producer": "harness-verify 0.1.0",
     "signer": "<signed-note verifier key>",
     "runs": [{"run": "<id>", "stores": {"<store>": {"records": N, "root": "<hex>",
               "checkpoints": [sizes...], "quarantine": false}, ... all four ...}}],
     "members": [{"name": "...", "size": N, "sha256": "<hex>"}, ...]}

Every value the verifier reports comes from here or from the records, and is checked against
the records: the manifest is signed, so a report never shows an unsigned number.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Final

from .canonical import parse_canonical
from .errors import CanonicalEncodingError, SchemaError
from .layout import BUNDLE_FORMAT, BUNDLE_VERSION
from .records import HEX64_RE, RUN_ID_RE, STORES


class UnsupportedBundleError(SchemaError):
    """The manifest names a format or version this verifier does not know (exit code 4)."""


@dataclass(frozen=True)
class StoreClaim:
    records: int
    root: bytes
    checkpoints: tuple[int, ...]
    quarantine: bool


@dataclass(frozen=True)
class RunClaim:
    run: str
    stores: dict[str, StoreClaim]
    receipts: tuple[int, ...]
    """Lineage seqs of the final artifacts, each with a receipt member."""


@dataclass(frozen=True)
class MemberClaim:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    producer: str
    signer: str
    runs: tuple[RunClaim, ...]
    members: dict[str, MemberClaim]


_TOP: Final = frozenset({"format", "version", "producer", "signer", "runs", "members"})
_STORE: Final = frozenset({"records", "root", "checkpoints", "quarantine"})


def _exact(obj: Any, keys: frozenset[str], what: str) -> dict[str, Any]:
    if type(obj) is not dict:
        raise SchemaError(f"{what} must be an object")
    if obj.keys() != keys:
        missing = sorted(keys - obj.keys())
        extra = sorted(obj.keys() - keys)
        raise SchemaError(f"{what}: missing {missing or 'nothing'}, unknown {extra or 'nothing'}")
    return obj


def _nat(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise SchemaError(f"{what} must be a non-negative integer")
    return value


def _hex(value: Any, what: str) -> str:
    if type(value) is not str or not HEX64_RE.fullmatch(value):
        raise SchemaError(f"{what} must be 64 lowercase hex digits")
    return value


def _store_claim(obj: Any, what: str) -> StoreClaim:
    claim = _exact(obj, _STORE, what)
    checkpoints = claim["checkpoints"]
    if type(checkpoints) is not list or not checkpoints:
        raise SchemaError(f"{what}.checkpoints must be a non-empty list")
    sizes = tuple(_nat(size, f"{what}.checkpoints[]") for size in checkpoints)
    if any(a >= b for a, b in itertools.pairwise(sizes)):
        raise SchemaError(f"{what}.checkpoints must strictly increase")
    records = _nat(claim["records"], f"{what}.records")
    if sizes[-1] != records:
        raise SchemaError(f"{what}: last checkpoint {sizes[-1]} does not cover {records} records")
    if type(claim["quarantine"]) is not bool:
        raise SchemaError(f"{what}.quarantine must be true or false")
    root = bytes.fromhex(_hex(claim["root"], f"{what}.root"))
    return StoreClaim(records, root, sizes, claim["quarantine"])


def parse_manifest(data: bytes) -> Manifest:
    """Parse and check ``manifest.json``; raises SchemaError / CanonicalEncodingError."""
    try:
        obj = parse_canonical(data)
    except CanonicalEncodingError as exc:
        raise CanonicalEncodingError(f"manifest.json: {exc}") from None
    if type(obj) is not dict:
        raise SchemaError("manifest.json must be an object")
    if obj.get("format") != BUNDLE_FORMAT:
        raise UnsupportedBundleError(f"manifest.json: unknown format {obj.get('format')!r}")
    if obj.get("version") != BUNDLE_VERSION or type(obj.get("version")) is not int:
        raise UnsupportedBundleError(
            f"manifest.json: bundle version {obj.get('version')!r} is not supported "
            f"(this verifier reads version {BUNDLE_VERSION})"
        )
    top = _exact(obj, _TOP, "manifest.json")
    if type(top["producer"]) is not str or not top["producer"]:
        raise SchemaError("manifest.json: producer must be a non-empty string")
    if type(top["signer"]) is not str:
        raise SchemaError("manifest.json: signer must be a verifier key string")
    runs_value = top["runs"]
    if type(runs_value) is not list:
        raise SchemaError("manifest.json: runs must be a list")
    runs: list[RunClaim] = []
    for index, raw_run in enumerate(runs_value):
        what = f"manifest.json runs[{index}]"
        run_obj = _exact(raw_run, frozenset({"receipts", "run", "stores"}), what)
        run_id = run_obj["run"]
        if type(run_id) is not str or not RUN_ID_RE.fullmatch(run_id):
            raise SchemaError(f"{what}.run is not a valid run id")
        if runs and run_id <= runs[-1].run:
            raise SchemaError(f"{what}: runs must be sorted by id without duplicates")
        stores_obj = _exact(run_obj["stores"], frozenset(STORES), f"{what}.stores")
        stores = {name: _store_claim(stores_obj[name], f"{what}.stores.{name}") for name in STORES}
        receipts_value = run_obj["receipts"]
        if type(receipts_value) is not list:
            raise SchemaError(f"{what}.receipts must be a list")
        receipts = tuple(_nat(seq, f"{what}.receipts[]") for seq in receipts_value)
        if any(a >= b for a, b in itertools.pairwise(receipts)):
            raise SchemaError(f"{what}.receipts must strictly increase")
        runs.append(RunClaim(run_id, stores, receipts))
    members_value = top["members"]
    if type(members_value) is not list:
        raise SchemaError("manifest.json: members must be a list")
    members: dict[str, MemberClaim] = {}
    previous = ""
    for index, raw_member in enumerate(members_value):
        what = f"manifest.json members[{index}]"
        member_obj = _exact(raw_member, frozenset({"name", "size", "sha256"}), what)
        name = member_obj["name"]
        if type(name) is not str or name <= previous:
            raise SchemaError(f"{what}: names must be strings, sorted, without duplicates")
        previous = name
        members[name] = MemberClaim(
            name, _nat(member_obj["size"], f"{what}.size"), _hex(member_obj["sha256"], what)
        )
    return Manifest(top["producer"], top["signer"], tuple(runs), members)
