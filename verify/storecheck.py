"""Streaming verification of one store against its signed checkpoints.

Memory stays bounded whatever the store size: records are read one line at a time, the Merkle
root is kept as a compact range (O(log n) hashes), and only the roots at checkpoint sizes are
remembered. What is checked, per record and in order: line length and termination, canonical
encoding, envelope and body schema, ``store``/``run`` binding, ``seq`` contiguity, time order,
the keyed chain (when the HMAC key is given); then every checkpoint root against the tree at its
size, and that the last checkpoint covers the whole store (a cut tail or an unsealed tail fails).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from .canonical import parse_canonical
from .chain import MacChain, derive_store_key
from .checkpoint import Checkpoint
from .errors import ChainError, CheckpointError, SchemaError, VerificationError
from .lineage import FinalArtifacts, MergeFacts
from .merkle import CompactRange
from .records import HEX64_RE, MAX_LINE_BYTES, TIME_RE, Record, parse_record_line, split_mac

ORIGIN_PREFIX: Final = "harness-verify/v1/"
_LEAF_PREFIX: Final = b"\x00"  # merkle.leaf_hash, inlined in the per-record loop below


def checkpoint_origin(run_id: str, store: str) -> str:
    """The checkpoint origin line naming one store of one run: binds a checkpoint to its log."""
    return f"{ORIGIN_PREFIX}{run_id}/{store}"


class LineSource(Protocol):
    """Anything with ``readline(limit)``: a file, a BytesIO, a bundle member stream."""

    def readline(self, size: int = -1, /) -> bytes: ...


def iter_store_lines(
    stream: LineSource, member: str, *, limit: int = MAX_LINE_BYTES
) -> Iterator[bytes]:
    """Yield each line of a store without its ``\\n``; refuse over-long or unterminated lines."""
    number = 0
    while True:
        line = stream.readline(limit + 2)
        if not line:
            return
        number += 1
        if not line.endswith(b"\n"):
            if len(line) > limit:
                raise SchemaError(
                    f"{member} line {number}: longer than {limit} bytes",
                    member=member,
                    line=number,
                )
            raise SchemaError(
                f"{member} line {number}: not terminated by a newline (torn or truncated write)",
                member=member,
                line=number,
            )
        yield line[:-1]


@dataclass(slots=True)
class StoreResult:
    """What a verified store contains: enough for reports, without keeping the records."""

    store: str
    run: str
    size: int = 0
    root: bytes = b""
    first_time: str | None = None
    last_time: str | None = None
    kinds: Counter[str] = field(default_factory=Counter)
    keyed: bool = False
    checkpoint_sizes: list[int] = field(default_factory=list)
    recovered: list[tuple[int, int, str]] = field(default_factory=list)
    """(offset, length, sha256) of every ``store.recovered`` record, in order."""
    artifacts: FinalArtifacts = field(default_factory=FinalArtifacts)
    """For the lineage store: the final artifact per path."""
    merges: MergeFacts = field(default_factory=MergeFacts)
    """For the audit store: which tasks were merged (verify audit before lineage)."""


def verify_store(
    lines: Iterable[bytes],
    *,
    member: str,
    store: str,
    run_id: str,
    checkpoints: Sequence[Checkpoint],
    hmac_master: bytes | None = None,
    progress: Callable[[int], None] | None = None,
    merged_tasks: frozenset[str] | None = None,
    on_record: Callable[[Record, bytes], None] | None = None,
) -> StoreResult:
    """Verify one store's lines against already signature-checked checkpoints of that store.

    Raises a ``VerificationError`` subclass naming ``member``, the record (line and seq) and the
    reason at the first failure. ``on_record(record, line)`` sees every record that passed its
    own checks, in order: the bundle verifier folds later checks (HMAC chain, semantics) into
    the same single read of the store.
    """
    expected_origin = checkpoint_origin(run_id, store)
    sizes: list[int] = []
    wanted: dict[int, bytes] = {}
    for checkpoint in checkpoints:
        if checkpoint.origin != expected_origin:
            raise CheckpointError(
                member=member,
                message=f"{member}: checkpoint origin {checkpoint.origin!r} is not "
                f"{expected_origin!r}",
            )
        if len(checkpoint.root_hash) != 32:
            raise CheckpointError(f"{member}: checkpoint root is not 32 bytes")
        if sizes and checkpoint.size <= sizes[-1]:
            raise CheckpointError(
                member=member,
                message=f"{member}: checkpoint sizes must strictly increase ({sizes[-1]} then "
                f"{checkpoint.size})",
            )
        sizes.append(checkpoint.size)
        wanted[checkpoint.size] = checkpoint.root_hash
    if not sizes:
        raise CheckpointError(f"{member}: no signed checkpoint covers this store")

    result = StoreResult(
        store=store,
        run=run_id,
        keyed=hmac_master is not None,
        artifacts=FinalArtifacts(merged_tasks),
    )
    chain = MacChain(derive_store_key(hmac_master, store, run_id)) if hmac_master else None
    tree = CompactRange()
    append_leaf = tree.append
    kinds = result.kinds
    lineage = store == "lineage"
    audit = store == "audit"
    artifacts = result.artifacts
    merges = result.merges
    sha256 = hashlib.sha256
    last_time = ""
    if 0 in wanted:
        _check_root(0, tree.root(), wanted[0])
    for index, line in enumerate(lines):
        seq = -1
        try:
            record = parse_record_line(line, store, run_id)
            seq = record.seq
            if seq != index:
                raise ChainError(
                    f"seq {seq} where {index} was expected (record deleted, duplicated or "
                    "reordered)"
                )
            if record.time < last_time:
                raise ChainError(f"time {record.time} is earlier than the previous record")
            last_time = record.time
            if chain is not None:
                chain.check_next(split_mac(line)[1], record.mac)
            append_leaf(sha256(_LEAF_PREFIX + line).digest())
            kinds[record.kind] += 1
            if lineage:
                artifacts.apply(record.kind, seq, record.body)
            elif audit:
                merges.apply(record.kind, record.body)
            if record.kind == "store.recovered":
                body = record.body
                result.recovered.append((body["offset"], body["length"], body["sha256"]))
            if on_record is not None:
                on_record(record, line)
            if index + 1 in wanted:
                _check_root(index + 1, tree.root(), wanted[index + 1])
        except VerificationError as exc:
            where = f"{member} line {index + 1}" + (f" (seq {seq})" if seq >= 0 else "")
            raise type(exc)(
                f"{where}: {exc}", member=member, line=index + 1, seq=seq if seq >= 0 else None
            ) from None
        if progress is not None and not (index + 1) & 0xFFF:
            progress(index + 1)
        if index == 0:
            result.first_time = record.time
    result.size = tree.size
    result.root = tree.root()
    result.last_time = last_time or None
    result.checkpoint_sizes = sizes
    if sizes[-1] > result.size:
        raise CheckpointError(
            member=member,
            message=f"{member}: signed checkpoint covers {sizes[-1]} records but the store has "
            f"{result.size} (records removed from the tail)",
        )
    if sizes[-1] < result.size:
        raise CheckpointError(
            member=member,
            message=f"{member}: records {sizes[-1]}..{result.size - 1} are not covered by any "
            "signed checkpoint (unsealed tail)",
        )
    return result


def _check_root(size: int, actual: bytes, expected: bytes) -> None:
    if actual != expected:
        raise CheckpointError(
            f"Merkle root of the first {size} records is {actual.hex()[:16]}… but the signed "
            f"checkpoint says {expected.hex()[:16]}… (records edited, inserted or removed)"
        )


QUARANTINE_LINE_BYTES: Final = 2 * MAX_LINE_BYTES
"""A quarantine entry holds a torn tail (< one record line) in base64, plus a few members."""
QUARANTINE_KEYS: Final = frozenset({"data_b64", "found", "length", "offset", "sha256", "store"})


def parse_quarantine_entry(line: bytes, store: str) -> tuple[int, int, str]:
    """Check one ``<store>.quarantine.jsonl`` line; return its (offset, length, sha256).

    The kept bytes must decode, have the stated length and digest: the entry is evidence of
    what a crash left behind, so every member of it is checked, not only the ones the
    ``store.recovered`` record repeats.
    """
    entry = parse_canonical(line)
    if type(entry) is not dict or entry.keys() != QUARANTINE_KEYS:
        raise SchemaError(f"a quarantine entry has exactly the members {sorted(QUARANTINE_KEYS)}")
    offset, length, digest = entry["offset"], entry["length"], entry["sha256"]
    if type(offset) is not int or offset < 0 or type(length) is not int or length < 1:
        raise SchemaError("offset must be >= 0 and length >= 1")
    if entry["store"] != store:
        raise SchemaError(f"entry is for store {entry['store']!r}, not {store!r}")
    found = entry["found"]
    if type(found) is not str or not TIME_RE.fullmatch(found):
        raise SchemaError("found must be a record time (YYYY-MM-DDTHH:MM:SS.ffffffZ)")
    if type(digest) is not str or not HEX64_RE.fullmatch(digest):
        raise SchemaError("sha256 must be 64 lowercase hex digits")
    data_b64 = entry["data_b64"]
    try:
        data = base64.b64decode(data_b64, validate=True) if type(data_b64) is str else None
    except binascii.Error:
        data = None
    if data is None or base64.b64encode(data).decode("ascii") != data_b64:
        raise SchemaError("data_b64 is not canonical standard base64")
    if len(data) != length or hashlib.sha256(data).hexdigest() != digest:
        raise SchemaError("the kept bytes do not have the stated length and SHA-256")
    return offset, length, digest
