"""``harness export``: write a deterministic, signed bundle of one or more runs.

What goes in (docs/spec/bundle.md): ``manifest.json`` (canonical JSON listing every member with
size and SHA-256, and what each store holds), ``manifest.sig`` (a signed note over the manifest
digest), the signer's public verifier key, and per run: each store's records up to its newest
signed checkpoint, the quarantined torn tails those records mention, every checkpoint, a
consistency proof between each pair of consecutive checkpoints, and (runs made by the runtime)
the plan document ``runs/<run>/plan.json`` whose digest ``run.start`` records. The checkpoints
include those a progressively sealed run signed while it ran (docs/spec/checkpoints.md §6.1).

Never in: any secret. Only the public verifier key is written, and a test scans bundles for the
private key and HMAC key bytes.

Runs with journaled model exchanges also carry the journal blobs those exchanges name,
``journal/<sha256>``, last in the tar.

Deterministic: the same state gives a byte-identical tar (manifest first, then sorted names,
journal blobs last; mtime 0, uid/gid 0, mode 0644, no user names; gzip with mtime 0 and no
file name).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

from harness import __version__
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.errors import VerificationError
from harness.verify.keyids import key_id
from harness.verify.layout import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    MANIFEST,
    MANIFEST_SIG,
    attestation_member,
    canonical_member_order,
    checkpoint_member,
    consistency_member,
    journal_digest,
    journal_member,
    key_member,
    manifest_note_text,
    plan_member,
    quarantine_member,
    receipt_member,
    round_text_digest,
    round_text_member,
    store_member,
    tar_member_info,
)
from harness.verify.lineage import FOLD_ORDER, FinalArtifacts, MergeFacts
from harness.verify.merkle import leaf_hash
from harness.verify.note import open_note_signed_once
from harness.verify.records import parse_record_line
from harness.verify.storecheck import checkpoint_origin

from .checkpoint import format_checkpoint_body
from .keys import OperatorKeys
from .merkle import MerkleTree
from .receipt import StoreFacts, artifact_receipt, run_attestations, run_statements
from .run import RunRecorder
from .store import StoreWriter, fsync_dir

_RECOVERED: Final = b'"kind":"store.recovered"'
_ARTIFACT: Final = b'"kind":"artifact.'
_PLANNED: Final = b'"kind":"task.planned"'
_MERGE: Final = b'"kind":"merge.result"'
_JOURNALED: Final = b'"journaled":true'
JOURNALS_DIR: Final = "journals"
BLOBS_DIR: Final = "blobs"
"""``<state>/journals/<run>/blobs/<sha256>``: the replay journal's blobs (orchestrate/replay.py)."""


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


@dataclass
class _Prefix:
    """What export needs from the sealed prefix of one store."""

    length: int = 0
    leaves: list[bytes] = field(default_factory=list)
    recovered: list[bytes] = field(default_factory=list)
    first_time: str | None = None
    last_time: str | None = None
    artifacts: FinalArtifacts = field(default_factory=FinalArtifacts)
    artifact_lines: dict[int, bytes] = field(default_factory=dict)
    merges: MergeFacts = field(default_factory=MergeFacts)
    journal: dict[str, str] = field(default_factory=dict)
    """Replay store: digest -> the first journaled ``model.exchange`` naming it (request and
    response blobs)."""


def _store_prefix(
    writer: StoreWriter, records: int, merged: frozenset[str] | None = None
) -> _Prefix:
    """Scan the first ``records`` lines: byte length, leaf hashes, recoveries, times, artifacts
    (lineage, counting only ``merged`` tasks' writes when given) and merged tasks (audit)."""
    prefix = _Prefix(artifacts=FinalArtifacts(merged))
    lineage = writer.store == "lineage"
    audit = writer.store == "audit"
    replay = writer.store == "replay"
    latest_line: dict[str, bytes] = {}
    with writer.path.open("rb") as handle:
        for seq, line in enumerate(itertools.islice(handle, records)):
            if not line.endswith(b"\n"):
                raise ExportError(f"{writer.path}: record {seq} is torn; open the store to recover")
            body = line[:-1]
            prefix.leaves.append(leaf_hash(body))
            if _RECOVERED in body:
                prefix.recovered.append(body)
            interesting = (
                (lineage and _ARTIFACT in body)
                or (audit and (_PLANNED in body or _MERGE in body))
                or (replay and _JOURNALED in body)
            )
            if seq in (0, records - 1) or interesting:
                record = parse_record_line(body, writer.store, writer.run_id)
                if replay and record.kind == "model.exchange" and record.body["journaled"]:
                    named = f"{writer.path} record {seq} (batch {record.body['batch']!r})"
                    for member in ("request_sha256", "response_sha256"):
                        digest = record.body[member]
                        if type(digest) is not str:
                            raise ExportError(f"{named}: journaled without a {member}")
                        prefix.journal.setdefault(digest, named)
                if audit:
                    prefix.merges.apply(record.kind, record.body)
                if seq == 0:
                    prefix.first_time = record.time
                prefix.last_time = record.time
                if lineage:
                    prefix.artifacts.apply(record.kind, seq, record.body)
                    now = prefix.artifacts.current(str(record.body["path"]))
                    if now is not None and now.seq == seq:  # this write counts (merged task)
                        latest_line[now.path] = body
            prefix.length += len(line)
    if len(prefix.leaves) != records:
        raise ExportError(
            f"{writer.path}: has {len(prefix.leaves)} records, its checkpoint says {records}"
        )
    for artifact in prefix.artifacts.final():
        prefix.artifact_lines[artifact.seq] = latest_line[artifact.path]
    return prefix


def _own_checkpoints(writer: StoreWriter, size: int, keys: OperatorKeys) -> list[tuple[int, bytes]]:
    """Checkpoints up to ``size`` signed by the exporting key (a bundle has one signer: notes
    left by a rotated-out key are not exported, the sealing one is always ours)."""
    vkey = [keys.note_signer().verifier_key()]
    notes = []
    for path in sorted(writer.checkpoint_dir.glob("*.note")):
        if not (path.stem.isdigit() and int(path.stem) <= size):
            continue
        data = path.read_bytes()
        try:
            open_note_signed_once(data, vkey)
        except VerificationError:
            continue
        notes.append((int(path.stem), data))
    return notes


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


def _sealed_so_far(writer: StoreWriter, keys: OperatorKeys) -> list[tuple[int, bytes]]:
    """Checkpoints as they are on disk, for an export that signs nothing new (``seal=False``).

    A store never checkpointed gets a size-0 checkpoint signed in memory (the empty tree is a
    prefix of every store, so that note is true whatever the store holds) and not written."""
    notes = _own_checkpoints(writer, writer.size, keys)
    if notes:
        return notes
    empty = format_checkpoint_body(
        checkpoint_origin(writer.run_id, writer.store), 0, hashlib.sha256(b"").digest()
    )
    return [(0, keys.note_signer().sign(empty))]


def _round_texts(folder: Path, run_id: str) -> dict[str, _Source]:
    """Every round text of a run (``<run folder>/rounds/<sha256>.txt``, written by the rounds
    runtime), as bundle members. A file whose name is not the SHA-256 of its bytes, or that is
    not a regular file, stops the export: the verifier would refuse the bundle anyway."""
    if not folder.is_dir():
        return {}
    texts: dict[str, _Source] = {}
    for path in sorted(folder.iterdir()):
        digest = round_text_digest(run_id, round_text_member(run_id, path.stem))
        if digest is None or path.suffix != ".txt" or path.is_symlink() or not path.is_file():
            raise ExportError(f"{path}: not a round text (<sha256>.txt, a regular file)")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ExportError(f"{path}: its bytes do not hash to its name")
        texts[round_text_member(run_id, digest)] = _Source(data=data)
    return texts


def _journal_blobs(state_dir: Path, run_id: str, wanted: dict[str, str]) -> dict[str, _Source]:
    """The journal blobs the run's journaled exchanges name, as ``journal/<sha256>`` members.

    Looked up in the run's own journal (``<state>/journals/<run>/blobs/``), then in the other
    journals of the state folder (a replay run may read the journal of the run it replays;
    blobs are content-addressed, so any copy whose bytes hash to the name is the blob). A
    blob that is missing, not a regular file, or whose bytes do not hash to its name stops
    the export, naming it and the record that references it: the verifier would refuse it.
    """
    root = state_dir / JOURNALS_DIR
    own = root / run_id / BLOBS_DIR
    others = (
        sorted(p / BLOBS_DIR for p in root.iterdir() if p.name != run_id) if root.is_dir() else []
    )
    out: dict[str, _Source] = {}
    for digest, named in sorted(wanted.items()):
        if journal_digest(journal_member(digest)) is None:
            raise ExportError(f"{named}: {digest!r} is not a blob digest")
        found: Path | None = None
        for folder in (own, *others):
            candidate = folder / digest
            if candidate.is_symlink() or not candidate.exists():
                continue
            if not candidate.is_file():
                raise ExportError(f"{candidate}: journal blob is not a regular file")
            found = candidate
            break
        if found is None:
            raise ExportError(f"{named}: journal blob {digest} is missing from {own}")
        source = _Source(path=found, length=found.stat().st_size)
        if _sha256(source) != digest:
            raise ExportError(f"{found}: journal blob was altered (its bytes do not hash to it)")
        out[journal_member(digest)] = source
    return out


def _collect_run(
    recorder: RunRecorder, keys: OperatorKeys, members: dict[str, _Source], *, seal: bool = True
) -> dict[str, object]:
    signer = keys.note_signer()
    run_id = recorder.run_id
    stores: dict[str, object] = {}
    facts: dict[str, StoreFacts] = {}
    times: list[str] = []
    receipts: list[int] = []
    merged: frozenset[str] | None = None
    if recorder.plan_path.exists():  # runtime runs: the plan run.start binds
        plan = recorder.plan_path.read_bytes()
        members[plan_member(run_id)] = _Source(data=plan)
    members.update(_round_texts(recorder.folder / "rounds", run_id))
    for store in FOLD_ORDER:
        writer = recorder.store(store)
        if seal:
            size = int(writer.checkpoint(signer).stem)
            notes = _own_checkpoints(writer, size, keys)
        else:
            notes = _sealed_so_far(writer, keys)
            size = notes[-1][0]
        prefix = _store_prefix(writer, size, merged)
        if store == "audit":
            merged = prefix.merges.merged_tasks()
        if store == "replay" and prefix.journal:
            members.update(_journal_blobs(recorder.folder.parents[1], run_id, prefix.journal))
        times.extend(t for t in (prefix.first_time, prefix.last_time) if t)
        members[store_member(run_id, store)] = _Source(path=writer.path, length=prefix.length)
        quarantine = _quarantine_lines(writer, prefix.recovered)
        if quarantine:
            members[quarantine_member(run_id, store)] = _Source(data=quarantine)
        sizes = [cp_size for cp_size, _ in notes]
        for cp_size, note in notes:
            members[checkpoint_member(run_id, store, cp_size)] = _Source(data=note)
        tree = MerkleTree(prefix.leaves)
        for older, newer in itertools.pairwise(sizes):
            proof = {
                "proof": [h.hex() for h in tree.consistency_proof(older, newer)],
                "run": run_id,
                "size1": older,
                "size2": newer,
                "store": store,
                "v": 1,
            }
            name = consistency_member(run_id, store, older, newer)
            members[name] = _Source(data=canonical_bytes(proof))
        if store == "lineage":
            artifacts = prefix.artifacts.final()
            for artifact in artifacts:
                members[receipt_member(run_id, artifact.seq)] = _Source(
                    data=artifact_receipt(
                        run_id=run_id,
                        artifact=artifact,
                        record_line=prefix.artifact_lines[artifact.seq],
                        tree=tree,
                        checkpoint_note=notes[-1][1],
                        keys=keys,
                    )
                )
                receipts.append(artifact.seq)
        facts[store] = StoreFacts(size, tree.root(), tuple(sizes))
        stores[store] = {
            "checkpoints": sizes,
            "quarantine": bool(quarantine),
            "records": size,
            "root": tree.root().hex(),
        }
    if not receipts:
        # in-toto statements need at least one subject: a run that leaves no artifact
        # carries no attestations (the verifier expects none; docs/spec/receipts.md).
        return {"receipts": [], "run": run_id, "stores": stores}
    statements = run_statements(
        run_id=run_id,
        artifacts=artifacts,
        stores=facts,
        started=min(times, default=None),
        finished=max(times, default=None),
        keys=keys,
    )
    for name, data in run_attestations(statements, keys).items():
        members[attestation_member(run_id, name)] = _Source(data=data)
    return {"receipts": sorted(receipts), "run": run_id, "stores": stores}


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


def _run_ids(runs_root: Path) -> list[str]:
    return sorted(p.name for p in runs_root.iterdir() if p.is_dir()) if runs_root.is_dir() else []


def export_bundle(
    state_dir: Path,
    out: Path,
    keys: OperatorKeys,
    run_ids: Sequence[str] | None = None,
    *,
    compress: bool | None = None,
    seal: bool = True,
) -> ExportResult:
    """Seal and export runs from ``state_dir`` to ``out`` (gzip if it ends in .gz/.tgz).

    ``seal=False`` signs nothing new: each store is exported up to its newest checkpoint
    already on disk (what a crash leaves verifiable), records after it left out.
    """
    runs_root = state_dir / "runs"
    available = _run_ids(runs_root)
    chosen = sorted(set(run_ids)) if run_ids else available
    for run_id in chosen:
        if run_id not in available:
            raise ExportError(f"no run {run_id!r} in {runs_root}")
    members: dict[str, _Source] = {}
    runs = []
    for run_id in chosen:
        with RunRecorder(state_dir, run_id, keys) as recorder:
            runs.append(_collect_run(recorder, keys, members, seal=seal))
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
    ordered += [(name, members[name]) for name in canonical_member_order(list(members))]
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
    fsync_dir(out.parent)
    return ExportResult(
        out, tuple(chosen), len(ordered), out.stat().st_size, key_id(keys.public_raw)
    )


def receipt_for_path(
    state_dir: Path, keys: OperatorKeys, path: str, run_ids: Sequence[str] | None = None
) -> tuple[str, bytes]:
    """Seal the lineage store and build the receipt of ``path``'s final artifact.

    Looks in the given runs (default: all), and takes the run whose final write of ``path``
    is the most recent. Raises ExportError when no run has ``path`` as a final artifact.
    """
    runs_root = state_dir / "runs"
    available = _run_ids(runs_root)
    best: tuple[str, str, bytes] | None = None
    for run_id in sorted(set(run_ids)) if run_ids else available:
        if run_id not in available:
            raise ExportError(f"no run {run_id!r} in {runs_root}")
        with RunRecorder(state_dir, run_id, keys) as recorder:
            audit = recorder.store("audit")
            audit_prefix = _store_prefix(audit, int(audit.checkpoint(keys.note_signer()).stem))
            writer = recorder.store("lineage")
            sealed = writer.checkpoint(keys.note_signer())
            prefix = _store_prefix(writer, int(sealed.stem), audit_prefix.merges.merged_tasks())
            match = [a for a in prefix.artifacts.final() if a.path == path]
            if not match:
                continue
            line = prefix.artifact_lines[match[0].seq]
            time = parse_record_line(line, "lineage", run_id).time
            if best is not None and time <= best[1]:
                continue
            receipt = artifact_receipt(
                run_id=run_id,
                artifact=match[0],
                record_line=line,
                tree=MerkleTree(prefix.leaves),
                checkpoint_note=sealed.read_bytes(),
                keys=keys,
            )
            best = (run_id, time, receipt)
    if best is None:
        raise ExportError(f"no run records {path!r} as a final artifact")
    return best[0], best[2]
