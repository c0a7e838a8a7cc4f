"""``harness-verify BUNDLE``: every check of DESIGN §6, in order, stopping at the first failure.

Order: archive safety -> manifest signature -> member list, sizes and digests -> records
(canonical form, schema, seq, time) with Merkle roots against signed checkpoints -> consistency
proofs -> HMAC chains (only with the master key) -> trust (is the signer pinned?).

The bundle's own key proves nothing about who made it: integrity is checked with the key the
manifest declares (every signature in the bundle must be by that one key), and trust is a
separate last step that asks whether the policy pins that key.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import BinaryIO, Final

from .archive import ArchiveError, BundleArchive, Limits, open_bundle_archive
from .canonical import parse_canonical
from .chain import MacChain, derive_store_key
from .checkpoint import Checkpoint
from .errors import (
    CheckpointError,
    ConsistencyProofError,
    MacMismatchError,
    NoteError,
    SchemaError,
    VerificationError,
)
from .keyids import key_id
from .layout import (
    ATTESTATIONS,
    MANIFEST,
    MANIFEST_SIG,
    attestation_member,
    checkpoint_member,
    consistency_member,
    key_member,
    manifest_note_text,
    quarantine_member,
    receipt_member,
    store_member,
)
from .lineage import FOLD_ORDER
from .manifest import Manifest, StoreClaim, UnsupportedBundleError, parse_manifest
from .merkle import verify_consistency
from .note import open_note_signed_once, parse_verifier_key
from .policy import EMPTY_POLICY, TrustPolicy
from .records import HEX64_RE, STORES, Record, parse_record_line, split_mac
from .report import (
    CHECK_HINTS,
    CHECK_ORDER,
    CheckResult,
    Failure,
    Outcome,
    Report,
    Status,
    StoreSummary,
    failed_report,
)
from .runcheck import open_checkpoints
from .runreceipts import check_run_receipts
from .semantics import check_run_semantics
from .storecheck import (
    QUARANTINE_LINE_BYTES,
    StoreResult,
    iter_store_lines,
    parse_quarantine_entry,
    verify_store,
)

MANIFEST_LIMIT: Final = 64 << 20
VERIFY_ORDER: Final = FOLD_ORDER
"""Audit first: which tasks merged decides which lineage writes are final artifacts."""
NOTE_LIMIT: Final = 64 << 10
PROOF_LIMIT: Final = 1 << 20


Progress = Callable[[str, int], None]


def verifier_version() -> str:
    try:
        return metadata.version("harness-verify")
    except metadata.PackageNotFoundError:
        return "unknown"


class _StoppedError(Exception):
    """Internal: a check failed; carries the finished report."""

    def __init__(self, report: Report) -> None:
        super().__init__(report.status)
        self.report = report


class _Run:
    """State of one verification; each method is one check of CHECK_ORDER."""

    def __init__(
        self,
        archive: BundleArchive,
        report: Report,
        *,
        hmac_master: bytes | None,
        progress: Progress | None,
    ) -> None:
        self.archive = archive
        self.report = report
        self.hmac_master = hmac_master
        self.progress = progress
        self.manifest: Manifest | None = None
        self.signer = ""
        self.checkpoints: dict[tuple[str, str], list[Checkpoint]] = {}

    def fail(
        self, check: str, error: VerificationError | str, status: Status = Status.INVALID
    ) -> _StoppedError:
        if isinstance(error, ArchiveError):
            status = Status.UNREADABLE  # the input itself cannot be read safely, at any step
        if isinstance(error, VerificationError):
            failure = Failure(
                check, str(error), error.member, error.line, error.seq, CHECK_HINTS.get(check, "")
            )
        else:
            failure = Failure(check, error, hint=CHECK_HINTS.get(check, ""))
        return _StoppedError(failed_report(self.report, failure, status))

    def passed(self, check: str, detail: str) -> None:
        self.report.checks.append(CheckResult(check, Outcome.PASSED, detail))

    # ---- manifest-signature ----------------------------------------------------------------
    def check_manifest(self) -> Manifest:
        names = self.archive.members
        for required in (MANIFEST, MANIFEST_SIG):
            if required not in names:
                raise self.fail("manifest-signature", f"bundle has no {required}")
        data = self.archive.read_small(MANIFEST, MANIFEST_LIMIT)
        try:
            manifest = parse_manifest(data)
        except UnsupportedBundleError as exc:
            raise self.fail("manifest-signature", exc, Status.UNREADABLE) from None
        except VerificationError as exc:
            raise self.fail("manifest-signature", exc) from None
        try:
            signer = parse_verifier_key(manifest.signer)
            note = open_note_signed_once(
                self.archive.read_small(MANIFEST_SIG, NOTE_LIMIT), [manifest.signer]
            )
        except NoteError as exc:
            raise self.fail("manifest-signature", f"{MANIFEST_SIG}: {exc}") from None
        expected = manifest_note_text(hashlib.sha256(data).hexdigest())
        if note.text != expected:
            raise self.fail(
                "manifest-signature",
                f"{MANIFEST_SIG} signs a different manifest digest than manifest.json has",
            )
        signer_id = key_id(signer.public_key)
        self.report.signer_key_id = signer_id
        self.manifest, self.signer = manifest, manifest.signer
        self.passed("manifest-signature", f"signed by key {signer_id}")
        return manifest

    # ---- members -----------------------------------------------------------------------------
    def expected_members(self, manifest: Manifest) -> set[str]:
        signer_id = self.report.signer_key_id or ""
        names = {key_member(signer_id)}
        for run in manifest.runs:
            for store, claim in run.stores.items():
                names.add(store_member(run.run, store))
                if claim.quarantine:
                    names.add(quarantine_member(run.run, store))
                names.update(checkpoint_member(run.run, store, s) for s in claim.checkpoints)
                names.update(
                    consistency_member(run.run, store, a, b)
                    for a, b in itertools.pairwise(claim.checkpoints)
                )
            names.update(receipt_member(run.run, seq) for seq in run.receipts)
            if run.receipts:  # attestations need at least one subject (final artifact)
                names.update(attestation_member(run.run, name) for name in ATTESTATIONS)
        return names

    def check_members(self, manifest: Manifest) -> None:
        listed = set(manifest.members)
        present = set(self.archive.members) - {MANIFEST, MANIFEST_SIG}
        for name in sorted(present - listed):
            raise self.fail(
                "members", VerificationError(f"{name}: not listed in manifest.json", member=name)
            )
        for name in sorted(listed - present):
            raise self.fail(
                "members",
                VerificationError(f"{name}: listed in manifest.json but missing", member=name),
            )
        wanted = self.expected_members(manifest)
        for name in sorted(listed - wanted):
            raise self.fail(
                "members",
                VerificationError(f"{name}: not a member this bundle's runs call for", member=name),
            )
        for name in sorted(wanted - listed):
            raise self.fail(
                "members",
                VerificationError(f"{name}: required by the runs but absent", member=name),
            )
        by_offset = sorted(present, key=lambda n: self.archive.members[n].info.offset)
        total = 0
        for name in by_offset:
            claim = manifest.members[name]
            size, digest = self._digest(name)
            if size != claim.size or size != self.archive.members[name].size:
                raise self.fail(
                    "members",
                    VerificationError(
                        f"{name}: {size} bytes, manifest says {claim.size}", member=name
                    ),
                )
            if not hmac.compare_digest(digest, claim.sha256):
                raise self.fail(
                    "members",
                    VerificationError(f"{name}: SHA-256 differs from manifest.json", member=name),
                )
            total += size
        key_text = self.archive.read_small(key_member(self.report.signer_key_id or ""), NOTE_LIMIT)
        if key_text != self.signer.encode() + b"\n":
            raise self.fail(
                "members", f"{key_member(self.report.signer_key_id or '')}: is not the signer's key"
            )
        self.passed("members", f"{len(present)} members, {total} bytes, all listed and intact")

    def _digest(self, name: str) -> tuple[int, str]:
        sha = hashlib.sha256()
        size = 0
        with self.archive.open(name) as stream:
            while chunk := stream.read(1 << 20):
                sha.update(chunk)
                size += len(chunk)
        return size, sha.hexdigest()

    # ---- records + merkle-roots --------------------------------------------------------------
    def check_stores(self, manifest: Manifest) -> list[StoreResult]:
        results: list[StoreResult] = []
        current = "records"
        try:
            for run in manifest.runs:
                merged: frozenset[str] | None = None
                for store in VERIFY_ORDER:
                    claim = run.stores[store]
                    current = "merkle-roots"
                    checkpoints = self._checkpoints(run.run, store, claim)
                    current = "records"
                    result = self._verify_store(run.run, store, checkpoints, merged)
                    if store == "audit":
                        merged = result.merges.merged_tasks()
                    current = "merkle-roots"
                    self._compare_claim(run.run, store, claim, result)
                    current = "records"
                    self._check_quarantine(run.run, store, claim, result)
                    results.append(result)
        except CheckpointError as exc:
            raise self.fail("merkle-roots", exc) from None
        except VerificationError as exc:
            raise self.fail(current, exc) from None
        records = sum(result.size for result in results)
        if records == 0:
            raise self.fail(
                "records",
                "every store is empty: the bundle holds signed seals but no evidence",
                Status.SEAL_ONLY,
            )
        self.passed("records", f"{records} records in {len(results)} stores")
        sealed = sum(len(result.checkpoint_sizes) for result in results)
        self.passed("merkle-roots", f"{sealed} signed checkpoints match their trees")
        return results

    def _checkpoints(self, run_id: str, store: str, claim: StoreClaim) -> list[Checkpoint]:
        names = [checkpoint_member(run_id, store, size) for size in claim.checkpoints]
        notes = [(name, self.archive.read_small(name, NOTE_LIMIT)) for name in names]
        try:
            checkpoints = open_checkpoints(notes, [self.signer])
        except NoteError as exc:
            raise CheckpointError(str(exc), member=exc.member) from None
        for name, size, checkpoint in zip(names, claim.checkpoints, checkpoints, strict=True):
            if checkpoint.size != size:
                raise CheckpointError(
                    f"{name}: checkpoint size {checkpoint.size} does not match its name",
                    member=name,
                )
        self.checkpoints[(run_id, store)] = checkpoints
        return checkpoints

    def _verify_store(
        self,
        run_id: str,
        store: str,
        checkpoints: list[Checkpoint],
        merged: frozenset[str] | None,
    ) -> StoreResult:
        member = store_member(run_id, store)
        progress = self.progress
        with self.archive.open(member) as stream:
            return verify_store(
                iter_store_lines(stream, member),
                member=member,
                store=store,
                run_id=run_id,
                checkpoints=checkpoints,
                progress=(lambda n: progress(member, n)) if progress else None,
                merged_tasks=merged,
            )

    @staticmethod
    def _compare_claim(run_id: str, store: str, claim: StoreClaim, result: StoreResult) -> None:
        member = store_member(run_id, store)
        if claim.records != result.size or claim.root != result.root:
            raise CheckpointError(
                f"{member}: manifest.json claims {claim.records} records with root "
                f"{claim.root.hex()[:16]}…, the store has {result.size} with root "
                f"{result.root.hex()[:16]}…",
                member=member,
            )

    def _check_quarantine(
        self, run_id: str, store: str, claim: StoreClaim, result: StoreResult
    ) -> None:
        member = quarantine_member(run_id, store)
        if bool(result.recovered) != claim.quarantine:
            raise SchemaError(
                f"{member}: the store has {len(result.recovered)} store.recovered records but "
                f"the manifest says quarantine={str(claim.quarantine).lower()}",
                member=member,
            )
        if not claim.quarantine:
            return
        entries = []
        with self.archive.open(member) as stream:
            lines = iter_store_lines(stream, member, limit=QUARANTINE_LINE_BYTES)
            for number, line in enumerate(lines, 1):
                try:
                    entries.append(parse_quarantine_entry(line, store))
                except VerificationError as exc:
                    raise SchemaError(
                        f"{member} line {number}: {exc}", member=member, line=number
                    ) from None
        if entries != result.recovered:
            raise SchemaError(
                f"{member}: quarantined tails do not match the store.recovered records",
                member=member,
            )

    # ---- consistency-proofs -------------------------------------------------------------------
    def check_consistency(self, manifest: Manifest) -> None:
        count = 0
        for run in manifest.runs:
            for store in STORES:
                checkpoints = self.checkpoints[(run.run, store)]
                for older, newer in itertools.pairwise(checkpoints):
                    name = consistency_member(run.run, store, older.size, newer.size)
                    try:
                        proof = self._read_proof(name, run.run, store, older.size, newer.size)
                        verify_consistency(
                            older.size, newer.size, proof, older.root_hash, newer.root_hash
                        )
                    except ArchiveError as exc:
                        raise self.fail("consistency-proofs", exc) from None
                    except VerificationError as exc:
                        raise self.fail(
                            "consistency-proofs",
                            ConsistencyProofError(f"{name}: {exc}", member=name),
                        ) from None
                    count += 1
        self.passed("consistency-proofs", f"{count} consistency proofs verify")

    def _read_proof(
        self, name: str, run_id: str, store: str, size1: int, size2: int
    ) -> list[bytes]:
        obj = parse_canonical(self.archive.read_small(name, PROOF_LIMIT))
        expected = {"proof", "run", "size1", "size2", "store", "v"}
        if type(obj) is not dict or obj.keys() != expected:
            raise SchemaError(f"members must be exactly {sorted(expected)}")
        claimed = (obj["v"], obj["run"], obj["store"], obj["size1"], obj["size2"])
        if [type(value) for value in claimed] != [int, str, str, int, int] or claimed != (
            1,
            run_id,
            store,
            size1,
            size2,
        ):
            raise SchemaError("proof is for another log or other sizes than its name says")
        hashes = obj["proof"]
        if type(hashes) is not list or any(
            type(h) is not str or not HEX64_RE.fullmatch(h) for h in hashes
        ):
            raise SchemaError("proof must be a list of 64-lowercase-hex-digit hashes")
        return [bytes.fromhex(h) for h in hashes]

    # ---- receipts ------------------------------------------------------------------------------
    def check_receipts(self, manifest: Manifest, results: list[StoreResult]) -> None:
        by_run: dict[str, dict[str, StoreResult]] = {}
        for result in results:
            by_run.setdefault(result.run, {})[result.store] = result
        checked = 0
        try:
            for run in manifest.runs:
                checked += check_run_receipts(
                    self.archive.read_small, run, by_run[run.run], self.signer, manifest.producer
                )
        except VerificationError as exc:
            raise self.fail("receipts", exc) from None
        self.passed("receipts", f"{checked} receipts and attestations verify and match")

    # ---- semantics -----------------------------------------------------------------------------
    def check_semantics(self, manifest: Manifest) -> None:
        tasks = 0
        try:
            for run in manifest.runs:
                result = check_run_semantics(
                    run.run,
                    self._records(run.run, "audit"),
                    self._records(run.run, "lineage"),
                )
                tasks += len(result.tasks)
        except VerificationError as exc:
            raise self.fail("semantics", exc) from None
        self.passed("semantics", f"{tasks} task histories are lawful")

    def _records(self, run_id: str, store: str) -> Iterator[tuple[Record, str]]:
        member = store_member(run_id, store)
        with self.archive.open(member) as stream:
            for index, line in enumerate(iter_store_lines(stream, member)):
                where = f"{member} line {index + 1} (seq {index})"
                yield parse_record_line(line, store, run_id), where

    # ---- hmac-chain ----------------------------------------------------------------------------
    def check_hmac(self, manifest: Manifest) -> None:
        if self.hmac_master is None:
            self.report.checks.append(
                CheckResult("hmac-chain", Outcome.SKIPPED, "no --hmac-key given")
            )
            return
        count = 0
        for run in manifest.runs:
            for store in STORES:
                member = store_member(run.run, store)
                try:
                    chain = MacChain(derive_store_key(self.hmac_master, store, run.run))
                except VerificationError as exc:
                    raise self.fail("hmac-chain", exc) from None
                with self.archive.open(member) as stream:
                    for index, line in enumerate(iter_store_lines(stream, member)):
                        mac, covered = split_mac(line)
                        try:
                            chain.check_next(covered, mac)
                        except MacMismatchError as exc:
                            raise self.fail(
                                "hmac-chain",
                                MacMismatchError(
                                    f"{member} line {index + 1} (seq {index}): {exc}",
                                    member=member,
                                    line=index + 1,
                                    seq=index,
                                ),
                            ) from None
                        count += 1
        self.report.hmac_checked = True
        self.passed("hmac-chain", f"{count} records chain under the given HMAC key")


def verify_bundle(
    source: Path | BinaryIO,
    *,
    pins: TrustPolicy = EMPTY_POLICY,
    hmac_master: bytes | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    display_name: str | None = None,
) -> Report:
    """Run every check on a bundle; never raises for bad input, returns the Report."""
    report = Report(
        bundle=display_name or (str(source) if isinstance(source, Path) else "<stream>"),
        verifier_version=verifier_version(),
    )
    try:
        with open_bundle_archive(source, limits or Limits()) as archive:
            _verify_opened(archive, report, pins, hmac_master, progress)
    except _StoppedError as stop:
        return stop.report
    except ArchiveError as exc:
        failing = _first_unfinished(report)
        return failed_report(
            report,
            Failure(failing, str(exc), exc.member, exc.line, exc.seq, CHECK_HINTS["archive"]),
            Status.UNREADABLE,
        )
    return report


def _first_unfinished(report: Report) -> str:
    done = {result.name for result in report.checks}
    return next((name for name in CHECK_ORDER if name not in done), "archive")


def _verify_opened(
    archive: BundleArchive,
    report: Report,
    pins: TrustPolicy,
    hmac_master: bytes | None,
    progress: Progress | None,
) -> None:
    run = _Run(archive, report, hmac_master=hmac_master, progress=progress)
    if not archive.members:
        raise run.fail("archive", "the archive holds no members", Status.EMPTY)
    run.passed(
        "archive",
        f"{len(archive.members)} regular members{' (gzip)' if archive.compressed else ''}",
    )
    manifest = run.check_manifest()
    run.check_members(manifest)
    if not manifest.runs:
        raise run.fail("records", "the bundle holds no runs", Status.EMPTY)
    results = run.check_stores(manifest)
    report.stores = [
        StoreSummary(
            r.run,
            r.store,
            r.size,
            r.root.hex(),
            tuple(r.checkpoint_sizes),
            r.first_time,
            r.last_time,
            dict(sorted(r.kinds.items())),
        )
        for r in results
    ]
    run.check_consistency(manifest)
    run.check_hmac(manifest)
    run.check_receipts(manifest, results)
    run.check_semantics(manifest)
    signer_id = report.signer_key_id or ""
    if pins.pins(signer_id):
        report.trusted_by = pins.source
        run.passed("trust", f"signer {signer_id} pinned by {pins.source}")
        report.status = Status.VERIFIED
        return
    reason = (
        "integrity verified but signer not pinned: no --trusted-key and no policy"
        if not pins.key_ids
        else f"integrity verified but signer {signer_id} is not among the pinned keys "
        f"({pins.source})"
    )
    raise run.fail("trust", reason, Status.UNTRUSTED)
