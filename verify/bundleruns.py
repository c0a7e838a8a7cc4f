"""Per-run state of the single pass, and the run checks that read what it kept.

In the archive a run's members come together, in sorted order: attestations, checkpoints, the
plan, proofs, receipts, then the stores (audit, control, lineage, replay, each followed by its
quarantine file). What a later check needs from an earlier member (checkpoints for the stores,
receipts and attestations for the receipts check) is kept here until the run's last member,
then forgotten, so memory is bounded by one run's small members (each capped by its kind).
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass, field

from .archive import ArchiveError
from .bundlehead import bounded_cbor, bounded_envelope, bounded_json, read_proof
from .checkpoint import Checkpoint
from .errors import (
    CheckpointError,
    ConsistencyProofError,
    NoteError,
    SchemaError,
    VerificationError,
)
from .layout import checkpoint_member, consistency_member, store_member
from .manifest import RunClaim
from .merkle import verify_consistency
from .receiptprefetch import ReceiptPrefetch
from .records import STORES
from .runcheck import open_checkpoints
from .semantics import RunSemantics
from .storecheck import (
    QUARANTINE_LINE_BYTES,
    StoreResult,
    iter_store_lines,
    parse_quarantine_entry,
)


@dataclass
class RunState:
    """What one run's checks need from its earlier members, until the run's last member."""

    claim: RunClaim
    small: dict[str, bytes] = field(default_factory=dict)
    """Every intact member of the run but its stores, by name."""
    results: dict[str, StoreResult] = field(default_factory=dict)
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    semantics: RunSemantics | None = None
    receipts: ReceiptPrefetch | None = None
    """The run's receipts sent to the workers as they were read, when it has many."""


def store_checkpoints(run: RunState, store: str, signer: str) -> list[Checkpoint] | None:
    """The store's signed checkpoints, opened; None if one is missing (the members check
    reports it). Raises CheckpointError."""
    claim = run.claim.stores[store]
    names = [checkpoint_member(run.claim.run, store, size) for size in claim.checkpoints]
    if any(name not in run.small for name in names):
        return None
    notes = [(name, run.small[name]) for name in names]
    try:
        checkpoints = open_checkpoints(notes, [signer])
    except NoteError as exc:
        raise CheckpointError(str(exc), member=exc.member) from None
    for name, size, checkpoint in zip(names, claim.checkpoints, checkpoints, strict=True):
        if checkpoint.size != size:
            raise CheckpointError(
                f"{name}: checkpoint size {checkpoint.size} does not match its name",
                member=name,
            )
    run.checkpoints[store] = checkpoints
    return checkpoints


def compare_claim(run: RunState, store: str, result: StoreResult) -> None:
    """The manifest's record count and root for the store against what the store holds."""
    claim = run.claim.stores[store]
    member = store_member(run.claim.run, store)
    if claim.records != result.size or claim.root != result.root:
        raise CheckpointError(
            f"{member}: manifest.json claims {claim.records} records with root "
            f"{claim.root.hex()[:16]}…, the store has {result.size} with root "
            f"{result.root.hex()[:16]}…",
            member=member,
        )


def check_quarantine(run: RunState | None, member: str, data: bytes) -> VerificationError | None:
    """A quarantine file against its (already verified) store's store.recovered records."""
    store = member.rsplit("/", 1)[1].split(".", 1)[0]
    result = run.results.get(store) if run is not None else None
    if result is None:
        return None  # the store itself failed (or this is no store's): reported there
    entries = []
    lines = iter_store_lines(io.BytesIO(data), member, limit=QUARANTINE_LINE_BYTES)
    try:
        for number, line in enumerate(lines, 1):
            try:
                entries.append(parse_quarantine_entry(line, store))
            except VerificationError as exc:
                return SchemaError(f"{member} line {number}: {exc}", member=member, line=number)
    except VerificationError as exc:
        return exc
    if entries != result.recovered:
        return SchemaError(
            f"{member}: quarantined tails do not match the store.recovered records",
            member=member,
        )
    return None


def check_consistency(run: RunState) -> tuple[int, VerificationError | None]:
    """Every consistency proof between consecutive checkpoints: (proofs verified, first error)."""
    count = 0
    for store in STORES:
        for older, newer in itertools.pairwise(run.checkpoints[store]):
            name = consistency_member(run.claim.run, store, older.size, newer.size)
            data = run.small.get(name)
            if data is None:
                return count, None  # missing: the members check says so
            try:
                proof = read_proof(data, run.claim.run, store, older.size, newer.size)
                verify_consistency(older.size, newer.size, proof, older.root_hash, newer.root_hash)
            except VerificationError as exc:
                return count, ConsistencyProofError(f"{name}: {exc}", member=name)
            count += 1
    return count, None


def small_member(run: RunState, name: str, limit: int) -> bytes:
    """A kept member for the receipts check (``ReadSmall``), density-checked before any
    decoder sees it (receipts, DSSE envelopes and their statements, the COSE statement)."""
    data = run.small.get(name)
    if data is None:
        raise ArchiveError(f"{name}: missing", member=name)
    if len(data) > limit:
        raise ArchiveError(f"{name}: {len(data)} bytes, limit {limit} for this kind of member")
    if name.endswith(".dsse.json"):
        bounded_envelope(data, name)
    elif name.endswith(".json"):
        bounded_json(data, name)
    elif name.endswith(".cose"):
        bounded_cbor(data, name)
    return data
