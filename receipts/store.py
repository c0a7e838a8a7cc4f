"""Append-only evidence stores: one canonical JSON record per line, two chains, durable appends.

Why it is built this way (DESIGN §3):
* every record carries an HMAC that chains it to the previous one (keyed chain) and is a leaf of
  an RFC 6962 tree whose signed checkpoints anyone can check (public chain);
* an append is acknowledged only after ``fdatasync``; ``append_many`` is the group commit;
* writers take an exclusive ``flock`` and first catch up with anything another process appended,
  so concurrent writers never interleave or fork the chain;
* a torn last line (crash mid-write) is moved to ``<store>.quarantine.jsonl`` and a chained
  ``store.recovered`` record says so; nothing acknowledged is ever dropped;
* appends cost O(1): the running Merkle root is a compact range (leaves joined in batches),
  the chain state one MAC;
* an optional ``after_append`` hook runs after each acknowledged append, outside the lock, so
  a run recorder can seal (sign a checkpoint) progressively without re-reading the store.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple

import orjson

from harness.verify.canonical import canonical_bytes, encode_checked
from harness.verify.chain import MacChain, derive_store_key
from harness.verify.errors import ChainError, SchemaError, VerificationError
from harness.verify.merkle import CompactRange, leaf_hash, subtree_levels
from harness.verify.records import (
    MAX_LINE_BYTES,
    RECORD_VERSION,
    RUN_ID_RE,
    STORES,
    TIME_RE,
    parse_record_line,
    split_mac,
)
from harness.verify.storecheck import checkpoint_origin

from .bodycheck import BodyChecker
from .checkpoint import format_checkpoint_body
from .note import NoteSigner

READ_CHUNK: Final = 1 << 20
FOLD_LEAVES: Final = 256
"""Leaf hashes a writer holds before joining them to its tree (``StoreWriter._fold``)."""


class StoreError(Exception):
    """The store cannot be appended to safely (corrupt, foreign, or an I/O failure)."""


class Appended(NamedTuple):
    """Acknowledgement of a durable append.

    A named tuple rather than a frozen dataclass: one is built per appended record, and a
    tuple is built several times faster (no ``object.__setattr__`` per member).
    """

    seq: int
    mac: str
    leaf_hash: bytes
    line: bytes
    time: str = ""
    """The record's ``time`` (one value for the whole batch)."""


def utc_now() -> str:
    """Record time: RFC 3339 UTC with microseconds (an integer nanosecond epoch exceeds 2^53)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _make_dirs(folder: Path) -> None:
    """Create ``folder`` and missing parents, syncing each new entry into its parent."""
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_dir(new.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StoreWriter:
    """The single writer API for one store file of one run."""

    def __init__(
        self,
        path: Path,
        *,
        store: str,
        run_id: str,
        hmac_master: bytes,
        clock: Callable[[], str] = utc_now,
        after_append: Callable[[StoreWriter], None] | None = None,
        opened: int | None = None,
    ) -> None:
        """``opened``: a descriptor of ``path`` the caller already opened read-write and
        append-only with its own safety checks (receipts/safeopen.py); the writer closes it
        from then on, unless this constructor raises (then it is still the caller's)."""
        if store not in STORES:
            raise StoreError(f"unknown store {store!r}; stores are {', '.join(STORES)}")
        if not RUN_ID_RE.fullmatch(run_id):
            raise StoreError(f"invalid run id {run_id!r}")
        self.path = path
        self.store = store
        self.run_id = run_id
        self._clock = clock
        _make_dirs(path.parent)
        existed = opened is not None or path.exists()
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(path, flags, 0o644) if opened is None else opened
        if not existed:
            fsync_dir(path.parent)
        self._chain = MacChain(derive_store_key(hmac_master, store, run_id))
        self._bodies = BodyChecker(store)
        self._kind_members: dict[str, bytes] = {}
        self._run_member = b',"run":' + orjson.dumps(run_id) + b',"seq":'
        self._tree = CompactRange()
        self._leaves: list[bytes] = []
        """Leaf hashes of records appended after those in ``_tree``, joined to it in batches
        of at least FOLD_LEAVES or when the root is read: the runtime commits a dozen records
        at a time, and joining them one commit at a time costs twice as much per leaf."""
        self._end = 0
        self._last_time = ""
        self._after_append = after_append
        with self._locked():
            self._catch_up()
        self.sealed_size = self._newest_checkpoint_size()
        """Tree size of the newest checkpoint this writer knows of (0 when there is none):
        the records after it are the store's unsealed tail."""

    # ---- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def size(self) -> int:
        """Number of records known to this writer (call under lock for the latest)."""
        return self._tree.size + len(self._leaves)

    def root(self) -> bytes:
        return self._fold().root()

    def _fold(self) -> CompactRange:
        """The tree with every known leaf joined (``extend_tree``: aligned subtrees)."""
        if self._leaves:
            extend_tree(self._tree, self._leaves)
            self._leaves = []
        return self._tree

    @property
    def unsealed(self) -> int:
        """Records appended since the newest checkpoint this writer knows of."""
        return self.size - self.sealed_size

    def _newest_checkpoint_size(self) -> int:
        """The largest ``<size>.note`` name not beyond the store (one listing, at open only)."""
        folder = self.checkpoint_dir
        if not folder.is_dir():
            return 0
        sizes = [
            int(path.stem)
            for path in folder.glob("*.note")
            if path.stem.isdigit() and int(path.stem) <= self.size
        ]
        return max(sizes, default=0)

    @property
    def quarantine_path(self) -> Path:
        return self.path.with_name(f"{self.store}.quarantine.jsonl")

    @property
    def checkpoint_dir(self) -> Path:
        return self.path.parent / "checkpoints" / self.store

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self._fd < 0:
            raise StoreError(f"{self.path}: store is closed")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    # ---- reading what is already there (ours or another writer's) ------------------------
    def _catch_up(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == self._end:  # nobody appended since our last look: the common case
            return
        if size < self._end:
            raise StoreError(f"{self.path}: store shrank from {self._end} to {size} bytes")
        offset = self._end
        pending = b""
        while offset < size:
            chunk = os.pread(self._fd, min(READ_CHUNK, size - offset), offset)
            if not chunk:
                break
            offset += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            for line in data[:cut].split(b"\n")[:-1]:
                self._accept_existing(line)
            pending = data[cut:]
        if pending:
            self._quarantine(self._end, pending)

    def _accept_existing(self, line: bytes) -> None:
        try:
            record = parse_record_line(line, self.store, self.run_id)
            if record.seq != self.size:
                raise ChainError(f"seq {record.seq} where {self.size} was expected")
            self._chain.check_next(split_mac(line)[1], record.mac)
        except VerificationError as exc:
            raise StoreError(
                f"refusing to append to {self.path}: record {self.size} does not verify: {exc}"
            ) from None
        self._leaves.append(leaf_hash(line))
        if len(self._leaves) >= FOLD_LEAVES:
            self._fold()
        self._last_time = record.time
        self._end += len(line) + 1

    def _quarantine(self, offset: int, torn: bytes) -> None:
        """Move a torn tail aside (kept verbatim), cut it, and record the recovery in-chain."""
        digest = hashlib.sha256(torn).hexdigest()
        entry = canonical_bytes(
            {
                "data_b64": base64.b64encode(torn).decode("ascii"),
                "found": self._clock(),
                "length": len(torn),
                "offset": offset,
                "sha256": digest,
                "store": self.store,
            }
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        created = not self.quarantine_path.exists()
        qfd = os.open(self.quarantine_path, flags, 0o644)
        try:
            _write_all(qfd, entry + b"\n")
            os.fsync(qfd)
        finally:
            os.close(qfd)
        if created:
            fsync_dir(self.path.parent)
        os.ftruncate(self._fd, offset)
        os.fsync(self._fd)
        self._write(
            [("store.recovered", {"length": len(torn), "offset": offset, "sha256": digest})]
        )

    # ---- appending -----------------------------------------------------------------------
    def append(self, kind: str, body: Mapping[str, Any]) -> Appended:
        """Append one record; returns once it is durable."""
        return self.append_many([(kind, body)])[0]

    def append_many(
        self, items: Iterable[tuple[str, Mapping[str, Any]]], *, not_before: str | None = None
    ) -> list[Appended]:
        """Group commit: append records with one write and one fsync; all or none.
        ``not_before``: a time the batch's ``time`` must not precede (the event bus's
        expiries are never recorded before their deadline, whatever the clock says)."""
        if not_before is not None and not TIME_RE.fullmatch(not_before):
            raise ValueError(f"not_before {not_before!r} is not a record time")
        batch = items if type(items) is list else list(items)
        if not batch:
            return []
        # ``_locked`` without its generator: a group commit of the runtime holds a dozen
        # records, and every microsecond spent per commit is spent per tick (issue 14).
        fd = self._fd
        if fd < 0:
            raise StoreError(f"{self.path}: store is closed")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            self._catch_up()
            results = self._write(batch, not_before)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if self._after_append is not None:
            self._after_append(self)  # outside the lock: it may sign a checkpoint
        return results

    def append_checked(
        self, decide: Callable[[], tuple[str, Mapping[str, Any]] | None]
    ) -> Appended | None:
        """Check-then-append atomically: ``decide`` runs under the exclusive lock, after the
        catch-up, and returns the record to append or None (append nothing); it may raise to
        refuse. It must not lock this store itself (flock would deadlock on the second open
        file description); it may read it, e.g. with ``os.pread`` on the same file."""
        with self._locked():
            self._catch_up()
            item = decide()
            results = None if item is None else self._write([item])
        if results is None:
            return None
        if self._after_append is not None:
            self._after_append(self)
        return results[0]

    def _encode(
        self, batch: list[tuple[str, Mapping[str, Any]]], now: str
    ) -> tuple[list[Appended], bytes]:
        """Build the lines of a batch (and the MAC of its last one); the chain state is
        untouched, so nothing changes unless all of them encode.

        A record's canonical bytes are composed from canonical parts rather than encoded as one
        object: RFC 8785 writes an object as its members in key order, each ``"key":value``
        with the value's own canonical form, and the envelope's keys are fixed (``body``,
        ``kind``, ``mac``, ``run``, ``seq``, ``store``, ``time``, ``v``; ASCII, so code-unit
        order is plain byte order). So the line is ``{"body":`` + canonical(body) + the kind
        member, then the ``mac`` member, then the run/seq/store/time/v members; without the
        ``mac`` member the same parts are the MAC's input. Only the body is serialized per
        record; the other parts are JSON strings and integers (tests/test_store_encoding.py
        compares every line with the ``rfc8785`` serialization of the whole record)."""
        seq = self.size
        chain = MacChain.resume(self._chain, self._chain.prev)
        next_mac = chain.next_mac
        check, fast_checks = self._bodies.check, self._bodies.compiled
        kind_members = self._kind_members
        run_member = self._run_member
        tail = b',"store":%s,"time":%s,"v":%d}' % (
            orjson.dumps(self.store),
            orjson.dumps(now),
            RECORD_VERSION,
        )
        hexlify, leaf_of = binascii.hexlify, leaf_hash
        results: list[Appended] = []
        for kind, mapping in batch:
            # The checks and the encoding read one plain dict; a caller's dict is used as it
            # is (nothing runs between the check and the encoding that could change it).
            body = mapping if type(mapping) is dict else dict(mapping)
            try:
                fast = fast_checks.get(kind)
                if fast is None or not fast(body):
                    check(kind, body)  # compiles the kind's check, or raises the precise error
                # the check typed every member (free-form objects walked): encode directly.
                body_bytes = encode_checked(body)
            except VerificationError as exc:
                raise type(exc)(f"{self.store} record {seq}: {exc}") from None
            kind_member = kind_members.get(kind)
            if kind_member is None:
                kind_member = kind_members[kind] = b',"kind":' + orjson.dumps(kind)
            head = b'{"body":%s%s' % (body_bytes, kind_member)
            rest = b"%s%d%s" % (run_member, seq, tail)
            mac = next_mac(head + rest)
            chain.prev = mac  # MacChain.advance, without the call
            mac_hex = hexlify(mac)
            line = b'%s,"mac":"%s"%s' % (head, mac_hex, rest)
            if len(line) > MAX_LINE_BYTES:
                raise SchemaError(
                    f"{self.store} record {seq}: {len(line)} bytes, over the {MAX_LINE_BYTES}-byte "
                    "line limit readers enforce"
                )
            results.append(Appended(seq, mac_hex.decode(), leaf_of(line), line, now))
            seq += 1
        return results, chain.prev

    def _write(
        self, batch: list[tuple[str, Mapping[str, Any]]], not_before: str | None = None
    ) -> list[Appended]:
        now = max(self._clock(), self._last_time, not_before or "")
        results, last_mac = self._encode(batch, now)
        data = b"\n".join([appended.line for appended in results]) + b"\n"
        try:
            _write_all(self._fd, data)
            os.fdatasync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, self._end)
            raise
        self._end += len(data)
        self._last_time = now
        self._chain.advance(last_mac)
        self._leaves += [appended.leaf_hash for appended in results]
        if len(self._leaves) >= FOLD_LEAVES:
            self._fold()
        return results

    # ---- checkpoints ---------------------------------------------------------------------
    def checkpoint(self, signer: NoteSigner) -> Path:
        """Sign the current tree head as a C2SP checkpoint; idempotent for an unchanged store."""
        with self._locked():
            self._catch_up()
            tree = self._fold()
            body = format_checkpoint_body(
                checkpoint_origin(self.run_id, self.store), tree.size, tree.root()
            )
            folder = self.checkpoint_dir
            _make_dirs(folder)
            target = folder / f"{tree.size:020d}.note"
            note = signer.sign(body)  # Ed25519 is deterministic: same key, same bytes
            if target.exists():
                if target.read_bytes() == note:
                    self.sealed_size = max(self.sealed_size, tree.size)
                    return target
                raise StoreError(
                    f"{target} exists with other bytes (signed by another key, or the store was "
                    "rewritten); refusing to replace a signed checkpoint"
                )
            tmp = target.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                _write_all(fd, note)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
            fsync_dir(folder)
            self.sealed_size = max(self.sealed_size, tree.size)
            return target


def extend_tree(tree: CompactRange, leaves: list[bytes]) -> None:
    """Append ``leaves`` to ``tree``: the state ``tree.append`` would reach leaf by leaf, with
    the same hashes, but a batch is cut into aligned perfect subtrees, each hashed level by
    level (``subtree_levels``) and joined whole (``append_subtree``): no method call per leaf
    or per node. A subtree starts at the tree's size, so it may be at most as large as the
    lowest 1-bit of that size (RFC 6962 subtrees start at multiples of their own size)."""
    start, count = 0, len(leaves)
    while start < count:
        size = tree.size
        height = (count - start).bit_length() - 1
        if size:
            height = min(height, (size & -size).bit_length() - 1)
        end = start + (1 << height)
        root = subtree_levels(leaves[start:end])[height][0]
        tree.append_subtree(height, root)
        start = end


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_checkpoints(folder: Path) -> list[bytes]:
    """Signed checkpoint notes of one store, oldest first."""
    if not folder.is_dir():
        return []
    return [path.read_bytes() for path in sorted(folder.glob("*.note"))]
