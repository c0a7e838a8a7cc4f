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
import bisect
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn, Protocol, TypeVar

import orjson

from .canonical import parse_canonical
from .chain import GENESIS_MAC, MAC_MISMATCH, derive_store_key
from .checkpoint import Checkpoint
from .chunkrun import ChunkRunner, runner_for
from .errors import ChainError, CheckpointError, MacMismatchError, SchemaError, VerificationError
from .lineage import FinalArtifacts, MergeFacts
from .merkle import CompactRange
from .records import HEX64_RE, MAX_LINE_BYTES, TIME_RE, Record, parse_record_line, split_mac
from .storechunk import (
    MAX_CHUNK_BYTES,
    ChunkTask,
    ChunkVerdict,
    chunk_capacity,
)

ORIGIN_PREFIX: Final = "harness-verify/v1/"


def checkpoint_origin(run_id: str, store: str) -> str:
    """The checkpoint origin line naming one store of one run: binds a checkpoint to its log."""
    return f"{ORIGIN_PREFIX}{run_id}/{store}"


class LineSource(Protocol):
    """Anything with ``readline(limit)``: a file, a BytesIO, a bundle member stream."""

    def readline(self, size: int = -1, /) -> bytes: ...


class BlockSource(Protocol):
    """Anything with ``read(size)``: a file, a BytesIO, a bundle member stream."""

    def read(self, size: int = -1, /) -> bytes: ...


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
    macs: int = 0
    """Records whose MAC chains (with the HMAC key), up to the first that does not."""
    mac_error: MacMismatchError | None = None
    """With ``defer_mac``: the first record whose MAC does not chain."""


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
    defer_mac: bool = False,
    pool: ChunkRunner | None = None,
) -> StoreResult:
    """Verify one store's lines against already signature-checked checkpoints of that store.

    Raises a ``VerificationError`` subclass naming ``member``, the record (line and seq) and the
    reason at the first failure. ``on_record(record, line)`` sees every record that passed its
    own checks, in order: the bundle verifier folds later checks (semantics) into the same
    single read of the store. With ``hmac_master`` the keyed chain is checked too: a record
    whose MAC does not chain fails like any other record, or, with ``defer_mac``, is noted in
    ``StoreResult.mac_error`` (the first one) while the records are checked to the end.

    The records are checked in chunks (``storechunk``), by ``pool``'s worker processes when one
    is given, else here; the result and the first failure are the same either way.
    """
    return verify_store_chunks(
        chunks_from_lines(lines),
        member=member,
        store=store,
        run_id=run_id,
        checkpoints=checkpoints,
        hmac_master=hmac_master,
        progress=progress,
        merged_tasks=merged_tasks,
        on_record=on_record,
        defer_mac=defer_mac,
        pool=pool,
    )


def verify_store_stream(
    stream: BlockSource,
    *,
    member: str,
    limit: int = MAX_LINE_BYTES,
    **options: Any,
) -> StoreResult:
    """``verify_store`` over a readable stream of the store's bytes (read in 1 MiB blocks)."""
    return verify_store_chunks(
        chunks_from_stream(stream, member, limit=limit), member=member, **options
    )


def chunks_from_lines(lines: Iterable[bytes]) -> Iterator[list[bytes] | VerificationError]:
    """Group lines into chunks of ``chunk_capacity`` records (fewer when bytes run over)."""
    pending: list[bytes] = []
    size = 0
    start = 0
    iterator = iter(lines)
    while True:
        try:
            line = next(iterator)
        except StopIteration:
            break
        except VerificationError as exc:
            yield from _flush(pending, start, final=True)
            yield exc
            return
        pending.append(line)
        size += len(line) + 1
        if len(pending) >= chunk_capacity(start) or size >= MAX_CHUNK_BYTES:
            for chunk in _flush(pending, start, final=False):
                start += len(chunk)
                yield chunk
            size = _byte_size(pending)
    yield from _flush(pending, start, final=True)


def chunks_from_stream(
    stream: BlockSource, member: str, *, limit: int = MAX_LINE_BYTES
) -> Iterator[list[bytes] | VerificationError]:
    """Split a store's bytes into chunks of lines, as ``iter_store_lines`` splits them.

    A line of ``limit + 2`` bytes or more without a newline, or an unterminated last line,
    ends the chunks with the error ``iter_store_lines`` raises for it, at its line number.
    """
    pending: list[bytes] = []
    tail = b""
    start = 0
    count = 0
    while True:
        block = stream.read(1 << 20)
        if not block:
            break
        data = tail + block if tail else block
        cut = data.rfind(b"\n")
        if cut < 0:
            tail = data
        else:
            lines = data[:cut].split(b"\n")
            tail = data[cut + 1 :]
            for line in lines:
                if len(line) > limit + 1:  # iter_store_lines' readline(limit + 2) stops short
                    yield from _flush(pending, start, final=True)
                    yield _too_long(member, count + 1, limit)
                    return
                pending.append(line)
                count += 1
            for chunk in _flush(pending, start, final=False):
                start += len(chunk)
                yield chunk
        if len(tail) >= limit + 2:
            yield from _flush(pending, start, final=True)
            yield _too_long(member, count + 1, limit)
            return
    yield from _flush(pending, start, final=True)
    if tail:
        number = count + 1
        yield (
            _too_long(member, number, limit)
            if len(tail) > limit
            else SchemaError(
                f"{member} line {number}: not terminated by a newline (torn or truncated write)",
                member=member,
                line=number,
            )
        )


def _too_long(member: str, number: int, limit: int) -> SchemaError:
    return SchemaError(
        f"{member} line {number}: longer than {limit} bytes", member=member, line=number
    )


def _byte_size(lines: list[bytes]) -> int:
    """Bytes of ``lines`` with their newlines (C-speed: no Python frame per line)."""
    return sum(map(len, lines)) + len(lines)


def _flush(pending: list[bytes], start: int, *, final: bool) -> Iterator[list[bytes]]:
    """Take whole chunks off the front of ``pending`` (all of it when ``final``).

    A chunk starting at ``start`` holds at most ``chunk_capacity(start)`` records, a power of
    two dividing ``start``; one over ``MAX_CHUNK_BYTES`` is halved until it fits (one record
    at least). Except for the very last chunk, counts are powers of two, so every chunk starts
    where a perfect subtree of its size may start.
    """
    while pending:
        capacity = chunk_capacity(start)
        if len(pending) < capacity and not final:
            size = _byte_size(pending)
            if size < MAX_CHUNK_BYTES:
                return
        count = min(capacity, len(pending))
        if count < capacity and not final:
            count = 1 << (count.bit_length() - 1)
        while count > 1 and _byte_size(pending[:count]) > MAX_CHUNK_BYTES:
            count = 1 << ((count - 1).bit_length() - 1)
        chunk = pending[:count]
        del pending[:count]
        start += count
        yield chunk


def verify_store_chunks(
    chunks: Iterable[list[bytes] | VerificationError],
    *,
    member: str,
    store: str,
    run_id: str,
    checkpoints: Sequence[Checkpoint],
    hmac_master: bytes | None = None,
    progress: Callable[[int], None] | None = None,
    merged_tasks: frozenset[str] | None = None,
    on_record: Callable[[Record, bytes], None] | None = None,
    defer_mac: bool = False,
    pool: ChunkRunner | None = None,
) -> StoreResult:
    """The in-order join of chunk verdicts: ``verify_store`` over chunks of lines."""
    wanted = _wanted_roots(checkpoints, member, checkpoint_origin(run_id, store))
    result = StoreResult(
        store=store,
        run=run_id,
        keyed=hmac_master is not None,
        artifacts=FinalArtifacts(merged_tasks),
    )
    mac_key = derive_store_key(hmac_master, store, run_id) if hmac_master else None
    join = _Join(result, member, wanted, on_record, defer_mac, mac_key is not None)
    if 0 in wanted:
        _check_root(0, join.tree.root(), wanted[0])
    # With no fold of its own over lineage records, the final artifacts are folded with the
    # chunks (in the workers), and the records need not be decoded here at all.
    artifacts = (result.artifacts.merged_tasks,) if join.lineage and on_record is None else None
    tasks = _tasks(chunks, store, run_id, mac_key, sorted(wanted), artifacts)
    verdicts = runner_for(pool)(tasks)
    try:
        for item in verdicts:
            if isinstance(item, VerificationError):
                raise item
            task, verdict = item
            join.chunk(task, verdict)
            if progress is not None:
                progress(join.tree.size)
    finally:
        close = getattr(verdicts, "close", None)
        if close is not None:
            close()
    return join.finish(sorted(wanted))


def _tasks(
    chunks: Iterable[list[bytes] | VerificationError],
    store: str,
    run_id: str,
    mac_key: bytes | None,
    cuts: list[int],
    artifacts: tuple[frozenset[str] | None] | None,
) -> Iterator[ChunkTask | VerificationError]:
    start = 0
    prev_mac: bytes | None = GENESIS_MAC
    for chunk in chunks:
        if isinstance(chunk, VerificationError):
            yield chunk
            return
        end = start + len(chunk)
        yield ChunkTask(
            store,
            run_id,
            start,
            chunk,
            mac_key,
            prev_mac,
            tuple(cuts[bisect.bisect_right(cuts, start) : bisect.bisect_right(cuts, end)]),
            artifacts,
        )
        prev_mac = _stated_mac(chunk[-1])
        start = end


def _stated_mac(line: bytes) -> bytes | None:
    """The MAC a line states, or None when it states none readable (that record fails)."""
    try:
        return bytes.fromhex(split_mac(line)[0])
    except (SchemaError, ValueError):
        return None


def _wanted_roots(
    checkpoints: Sequence[Checkpoint], member: str, expected_origin: str
) -> dict[int, bytes]:
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
    return wanted


_E = TypeVar("_E", bound=VerificationError)


class _Join:
    """Joins chunk verdicts in order into one store's result, as one pass would reach it."""

    def __init__(
        self,
        result: StoreResult,
        member: str,
        wanted: dict[int, bytes],
        on_record: Callable[[Record, bytes], None] | None,
        defer_mac: bool,
        keyed: bool,
    ) -> None:
        self.result = result
        self.member = member
        self.wanted = wanted
        self.on_record = on_record
        self.defer_mac = defer_mac
        self.keyed = keyed
        self.tree = CompactRange()
        self.last_time = ""
        self.mac_ok = True
        store = result.store
        self.lineage = store == "lineage"
        self.audit = store == "audit"

    def _fail(
        self,
        exc: VerificationError | type[VerificationError],
        message: str,
        index: int,
        seq: int | None,
    ) -> NoReturn:
        kind = exc if isinstance(exc, type) else type(exc)
        raise self._located(kind, message, index, seq) from None

    def _located(self, kind: type[_E], message: str, index: int, seq: int | None) -> _E:
        """The error of the record at ``index``, located as one pass locates it."""
        where = f"{self.member} line {index + 1}" + (f" (seq {seq})" if seq is not None else "")
        return kind(f"{where}: {message}", member=self.member, line=index + 1, seq=seq)

    def chunk(self, task: ChunkTask, verdict: ChunkVerdict) -> None:
        start, checked = task.start, verdict.checked
        result = self.result
        if checked:
            if verdict.first_time < self.last_time:
                self._fail(
                    ChainError,
                    f"time {verdict.first_time} is earlier than the previous record",
                    start,
                    start,
                )
            if not start:
                result.first_time = verdict.first_time
            self.last_time = verdict.last_time
            chaining = self.keyed and self.mac_ok
            mismatch = verdict.mac_mismatch if chaining else None
            if chaining:
                result.macs += checked if mismatch is None else mismatch
            records = self._records(task, verdict) if self._folds(verdict) else None
            cuts = verdict.cut_subtrees
            stop = checked if mismatch is None else mismatch
            self._fold(task, records, 0, stop, cuts)
            if mismatch is not None:
                self.mac_ok = False
                seq = start + mismatch
                error = self._located(MacMismatchError, MAC_MISMATCH, seq, seq)
                if not self.defer_mac:
                    raise error
                result.mac_error = error
                self._fold(task, records, mismatch, checked, cuts)
            for height, root in verdict.subtrees:
                self.tree.append_subtree(height, root)
            result.kinds.update(verdict.kinds)
            if verdict.artifacts is not None:
                result.artifacts.join(verdict.artifacts)
        if verdict.error is not None:
            kind, message, read_seq = verdict.error
            self._fail(kind, message, start + checked, read_seq)

    def _folds(self, verdict: ChunkVerdict) -> bool:
        return (
            (self.lineage and verdict.artifacts is None)
            or self.audit
            or self.on_record is not None
            or "store.recovered" in verdict.kinds
        )

    def _records(self, task: ChunkTask, verdict: ChunkVerdict) -> list[Record]:
        """The checked records decoded at once: each line is one canonical JSON object (the
        chunk check proved it), so the lines joined by commas are a JSON array of them."""
        lines = task.lines[: verdict.checked]
        store, run = task.store, task.run_id
        try:
            objects = orjson.loads(b"[" + b",".join(lines) + b"]")
        except orjson.JSONDecodeError:
            objects = None
        if type(objects) is not list or len(objects) != len(lines):
            return [parse_record_line(line, store, run) for line in lines]
        return [
            Record(store, run, obj["seq"], obj["time"], obj["kind"], obj["body"], obj["mac"])
            for obj in objects
        ]

    def _fold(
        self,
        task: ChunkTask,
        records: list[Record] | None,
        first: int,
        stop: int,
        cuts: dict[int, list[tuple[int, bytes]]],
    ) -> None:
        """Records ``first .. stop - 1`` of the chunk into the later checks, in order, with
        each checkpoint root checked right after the record that completes its size."""
        start = task.start
        if records is None:
            for cut, subtrees in cuts.items():
                if start + first < cut <= start + stop:
                    try:
                        self._cut_root(cut, subtrees)
                    except VerificationError as exc:
                        self._fail(exc, str(exc), cut - 1, cut - 1)
            return
        result = self.result
        artifacts, merges, on_record = result.artifacts, result.merges, self.on_record
        lineage, audit = self.lineage, self.audit
        fold_here = task.artifacts is None
        lines = task.lines
        for offset in range(first, stop):
            record = records[offset]
            seq = record.seq
            try:
                kind = record.kind
                if lineage:
                    if fold_here:
                        artifacts.apply(kind, seq, record.body)
                elif audit:
                    merges.apply(kind, record.body)
                if kind == "store.recovered":
                    body = record.body
                    result.recovered.append((body["offset"], body["length"], body["sha256"]))
                if on_record is not None:
                    on_record(record, lines[offset])
                if seq + 1 in cuts:
                    self._cut_root(seq + 1, cuts[seq + 1])
            except VerificationError as exc:
                self._fail(exc, str(exc), seq, seq)

    def _cut_root(self, size: int, subtrees: list[tuple[int, bytes]]) -> None:
        tree = self.tree.copy()
        for height, root in subtrees:
            tree.append_subtree(height, root)
        _check_root(size, tree.root(), self.wanted[size])

    def finish(self, sizes: list[int]) -> StoreResult:
        result = self.result
        tree = self.tree
        result.size = tree.size
        result.root = tree.root()
        result.last_time = self.last_time or None
        result.checkpoint_sizes = sizes
        if sizes[-1] > result.size:
            raise CheckpointError(
                member=self.member,
                message=f"{self.member}: signed checkpoint covers {sizes[-1]} records but the "
                f"store has {result.size} (records removed from the tail)",
            )
        if sizes[-1] < result.size:
            raise CheckpointError(
                member=self.member,
                message=f"{self.member}: records {sizes[-1]}..{result.size - 1} are not covered "
                "by any signed checkpoint (unsealed tail)",
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
