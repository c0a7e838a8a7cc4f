"""``harness export``: write a deterministic, signed bundle of one or more runs.

What goes in (docs/spec/bundle.md): ``manifest.json`` (canonical JSON listing every member with
size and SHA-256, and what each store holds), ``manifest.sig`` (a signed note over the manifest
digest), the signer's public verifier key, and per run: each store's records up to its newest
signed checkpoint, the quarantined torn tails those records mention, every checkpoint, and a
consistency proof between each pair of consecutive checkpoints.

Never in: any secret. Only the public verifier key is written, and a test scans bundles for the
private key and HMAC key bytes.

Deterministic: the same state gives a byte-identical tar (manifest first, then sorted names;
mtime 0, uid/gid 0, mode 0644, no user names; gzip with mtime 0 and no file name).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from harness import __version__
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.keyids import key_id
from harness.verify.layout import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    MANIFEST,
    MANIFEST_SIG,
    checkpoint_member,
    consistency_member,
    key_member,
    manifest_note_text,
    quarantine_member,
    store_member,
    tar_member_info,
)
from harness.verify.merkle import leaf_hash
from harness.verify.records import STORES, parse_record_line

from .keys import OperatorKeys
from .merkle import MerkleTree
from .run import RunRecorder
from .store import StoreWriter

_RECOVERED: Final = b'"kind":"store.recovered"'


class ExportError(Exception):
    """The state cannot be exported (unknown run, inconsistent store)."""


@dataclass(frozen=True)
class _Source:
    """A member's bytes: in memory, or the first ``length`` bytes of a file."""

    data: bytes | None = None
    path: Path | None = None
    length: int = 0

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.length

    def chunks(self) -> Iterator[bytes]:
        if self.data is not None:
            yield self.data
            return
        assert self.path is not None
        left = self.length
        with self.path.open("rb") as handle:
            while left:
                chunk = handle.read(min(left, 1 << 20))
                if not chunk:
                    raise ExportError(f"{self.path} shrank during export")
                left -= len(chunk)
                yield chunk


@dataclass(frozen=True)
class ExportResult:
    path: Path
    runs: tuple[str, ...]
    members: int
    bytes: int
    key_id: str


def _sha256(source: _Source) -> str:
    sha = hashlib.sha256()
    for chunk in source.chunks():
        sha.update(chunk)
    return sha.hexdigest()


def _store_prefix(path: Path, records: int) -> tuple[int, list[bytes], list[bytes]]:
    """Byte length of the first ``records`` lines, their leaf hashes, and recovery lines."""
    length = 0
    leaves: list[bytes] = []
    recovered: list[bytes] = []
    with path.open("rb") as handle:
        for line in itertools.islice(handle, records):
            if not line.endswith(b"\n"):
                raise ExportError(
                    f"{path}: record {len(leaves)} is torn; open the store to recover"
                )
            body = line[:-1]
            leaves.append(leaf_hash(body))
            if _RECOVERED in body:
                recovered.append(body)
            length += len(line)
    if len(leaves) != records:
        raise ExportError(f"{path}: has {len(leaves)} records, its checkpoint says {records}")
    return length, leaves, recovered


def _quarantine_lines(writer: StoreWriter, recovered: list[bytes]) -> bytes:
    """The quarantine entries matching the recovery records, in order (duplicates skipped)."""
    wanted = []
    for line in recovered:
        record = parse_record_line(line, writer.store, writer.run_id)
        if record.kind == "store.recovered":
            body = record.body
            wanted.append((body["offset"], body["length"], body["sha256"]))
    if not wanted:
        return b""
    if not writer.quarantine_path.exists():
        raise ExportError(f"{writer.quarantine_path}: missing, but the store recorded recoveries")
    chosen: list[bytes] = []
    lines = writer.quarantine_path.read_bytes().splitlines()
    position = 0
    for key in wanted:
        while position < len(lines):
            entry = parse_canonical(lines[position])
            position += 1
            if (entry["offset"], entry["length"], entry["sha256"]) == key:
                chosen.append(lines[position - 1] + b"\n")
                break
        else:
            raise ExportError(f"{writer.quarantine_path}: no entry for recovery at {key[0]}")
    return b"".join(chosen)


def _collect_run(
    recorder: RunRecorder, keys: OperatorKeys, members: dict[str, _Source]
) -> dict[str, object]:
    signer = keys.note_signer()
    stores: dict[str, object] = {}
    for store in STORES:
        writer = recorder.store(store)
        sealed = writer.checkpoint(signer)
        size = int(sealed.stem)
        length, leaves, recovered = _store_prefix(writer.path, size)
        members[store_member(recorder.run_id, store)] = _Source(path=writer.path, length=length)
        quarantine = _quarantine_lines(writer, recovered)
        if quarantine:
            members[quarantine_member(recorder.run_id, store)] = _Source(data=quarantine)
        notes = [
            (int(path.stem), path.read_bytes())
            for path in sorted(writer.checkpoint_dir.glob("*.note"))
            if path.stem.isdigit() and int(path.stem) <= size
        ]
        sizes = [cp_size for cp_size, _ in notes]
        for cp_size, note in notes:
            members[checkpoint_member(recorder.run_id, store, cp_size)] = _Source(data=note)
        tree = MerkleTree(leaves)
        for older, newer in itertools.pairwise(sizes):
            proof = {
                "proof": [h.hex() for h in tree.consistency_proof(older, newer)],
                "run": recorder.run_id,
                "size1": older,
                "size2": newer,
                "store": store,
                "v": 1,
            }
            name = consistency_member(recorder.run_id, store, older, newer)
            members[name] = _Source(data=canonical_bytes(proof))
        stores[store] = {
            "checkpoints": sizes,
            "quarantine": bool(quarantine),
            "records": size,
            "root": tree.root().hex(),
        }
    return {"run": recorder.run_id, "stores": stores}


class _ChunkReader(io.RawIOBase):
    """Feeds a member's chunks to tarfile.addfile without loading big stores into memory."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        while size is None or size < 0 or len(self._pending) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._pending += chunk
        if size is None or size < 0:
            out, self._pending = self._pending, b""
        else:
            out, self._pending = self._pending[:size], self._pending[size:]
        return out


def _write_tar(target: BinaryIO, members: Sequence[tuple[str, _Source]]) -> None:
    with tarfile.open(fileobj=target, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name, source in members:
            tar.addfile(tar_member_info(name, source.size), _ChunkReader(source.chunks()))


def export_bundle(
    state_dir: Path,
    out: Path,
    keys: OperatorKeys,
    run_ids: Sequence[str] | None = None,
    *,
    compress: bool | None = None,
) -> ExportResult:
    """Seal and export runs from ``state_dir`` to ``out`` (gzip if it ends in .gz/.tgz)."""
    runs_root = state_dir / "runs"
    available = (
        sorted(p.name for p in runs_root.iterdir() if p.is_dir()) if runs_root.is_dir() else []
    )
    chosen = sorted(set(run_ids)) if run_ids else available
    for run_id in chosen:
        if run_id not in available:
            raise ExportError(f"no run {run_id!r} in {runs_root}")
    members: dict[str, _Source] = {}
    runs = []
    for run_id in chosen:
        with RunRecorder(state_dir, run_id, keys) as recorder:
            runs.append(_collect_run(recorder, keys, members))
    signer = keys.note_signer()
    verifier_key = signer.verifier_key()
    members[key_member(key_id(keys.public_raw))] = _Source(data=verifier_key.encode() + b"\n")
    listing = [
        {"name": name, "sha256": _sha256(members[name]), "size": members[name].size}
        for name in sorted(members)
    ]
    manifest = canonical_bytes(
        {
            "format": BUNDLE_FORMAT,
            "members": listing,
            "producer": f"harness-verify {__version__}",
            "runs": runs,
            "signer": verifier_key,
            "version": BUNDLE_VERSION,
        }
    )
    signature = signer.sign(manifest_note_text(hashlib.sha256(manifest).hexdigest()))
    ordered = [(MANIFEST, _Source(data=manifest)), (MANIFEST_SIG, _Source(data=signature))]
    ordered += [(name, members[name]) for name in sorted(members)]
    if compress is None:
        compress = out.name.endswith((".gz", ".tgz"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tmp.open("wb") as handle:
        if compress:
            with gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0) as zipped:
                _write_tar(zipped, ordered)  # type: ignore[arg-type]
        else:
            _write_tar(handle, ordered)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, out)
    return ExportResult(
        out, tuple(chosen), len(ordered), out.stat().st_size, key_id(keys.public_raw)
    )
