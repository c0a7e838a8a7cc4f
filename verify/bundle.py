"""``harness-verify BUNDLE``: every check of DESIGN §6, in one forward pass over the archive.

Checks (CHECK_ORDER): archive safety -> manifest signature -> member list, sizes and digests ->
records (canonical form, schema, seq, time) with Merkle roots against signed checkpoints ->
consistency proofs -> HMAC chains (only with the master key) -> receipts and attestations ->
semantics -> trust (is the signer pinned?).

Cost is bounded before and after authentication (docs/spec/verifier.md, "Reading budget"):

* the archive is read once, front to back (``ArchiveReader``), so time is linear in its size
  and a ``.tar.gz`` costs one decompression; every check that needs a later member keeps what
  it needs from earlier ones (a run's checkpoints, proofs, receipts and attestations, all small
  and size-capped by kind) until the member arrives, and forgets them when the run ends;
* before ``manifest.json`` is parsed, only ``manifest.sig`` and the key file (a few KB) are:
  the manifest's bytes are hashed as they stream in, the note is checked against the key the
  bundle carries, and only a manifest whose digest that key signed is decoded (and then only
  if it is no denser in JSON values than a manifest can be).

Which failure is reported does not depend on the pass: when a check fails, the content checks
stop, but the archive is still read to its end for the archive and member checks, and the
failure earliest in CHECK_ORDER wins (so a tampered member is "members", as it always was).

The bundle's own key proves nothing about who made it: integrity is checked with the key the
bundle carries (every signature in the bundle must be by that one key), and trust is a separate
last step that asks whether the policy pins that key.
"""

from __future__ import annotations

import hashlib
import io
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, BinaryIO, Final

from .archive import ArchiveError, ArchiveReader, Limits, Member, open_source
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
    plan_member,
    quarantine_member,
    receipt_member,
    store_member,
)
from .lineage import FOLD_ORDER
from .manifest import Manifest, RunClaim, UnsupportedBundleError, parse_manifest
from .merkle import verify_consistency
from .note import open_note_signed_once, parse_verifier_key
from .policy import EMPTY_POLICY, TrustPolicy
from .policycheck import listed_plan_member
from .receipt import MAX_RECEIPT_BYTES
from .records import HEX64_RE, STORES, Record, split_mac
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
from .runreceipts import ENVELOPE_LIMIT, check_run_receipts
from .semantics import RunSemantics, run_semantics
from .storecheck import (
    QUARANTINE_LINE_BYTES,
    StoreResult,
    iter_store_lines,
    parse_quarantine_entry,
    verify_store,
)

MANIFEST_LIMIT: Final = 32 << 20
"""A manifest lists every member in ~150 bytes: 32 MiB holds 10^5 members with room to spare."""
SIGNATURE_LIMIT: Final = 4 << 10
"""manifest.sig and the key file: all that is read (and parsed) before the signature verifies."""
NOTE_LIMIT: Final = 64 << 10
PROOF_LIMIT: Final = 1 << 20
OTHER_LIMIT: Final = 64 << 20
"""Run members with no tighter kind limit (quarantine files, future small members)."""
JSON_DENSITY: Final = 8
"""A bundle JSON document has at most one value per this many bytes (plus a little): a manifest
member entry is ~150 bytes for 7 values. Denser input is refused before it is decoded, so a
"[[],[],...]" cannot make the decoder allocate ~20 times its size."""
VERIFY_ORDER: Final = FOLD_ORDER
"""Audit before lineage (which tasks merged decides which writes are final artifacts); the
archive's sorted order (audit, control, lineage, replay) satisfies it."""

Progress = Callable[[str, int], None]
KeepMember = Callable[[str], bool]


def verifier_version() -> str:
    try:
        return metadata.version("harness-verify")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class VerifiedBundle:
    """A verification's report and, when integrity verified, the bytes of the members kept.

    ``members`` holds exactly the bytes the checks read (one read of the input, no reopening),
    and is empty unless ``report.status`` is VERIFIED or UNTRUSTED.
    """

    report: Report
    members: Mapping[str, bytes]


def verify_bundle(
    source: Path | BinaryIO | bytes,
    *,
    pins: TrustPolicy = EMPTY_POLICY,
    hmac_master: bytes | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    display_name: str | None = None,
) -> Report:
    """Run every check on a bundle (a path, a readable stream or its bytes); never raises for
    bad input, returns the Report."""
    return verify_bundle_contents(
        source,
        pins=pins,
        hmac_master=hmac_master,
        limits=limits,
        progress=progress,
        display_name=display_name,
    ).report


def verify_bundle_contents(
    source: Path | BinaryIO | bytes,
    *,
    keep: KeepMember = lambda name: False,
    pins: TrustPolicy = EMPTY_POLICY,
    hmac_master: bytes | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    display_name: str | None = None,
) -> VerifiedBundle:
    """``verify_bundle``, also returning the bytes of every member ``keep(name)`` selects.

    For callers that act on a bundle's content (the merge gate): they read the input once and
    use exactly the bytes that were verified.
    """
    if display_name is None:
        display_name = str(source) if isinstance(source, Path) else "<stream>"
    report = Report(bundle=display_name, verifier_version=verifier_version())
    run = _Pass(report, limits or Limits(), hmac_master, progress, keep)
    try:
        stream, owned = open_source(source)
    except ArchiveError as exc:
        run.fail("archive", exc, Status.UNREADABLE)
    else:
        try:
            run.read_all(stream)
        except ArchiveError as exc:
            run.fail("archive", exc, Status.UNREADABLE)
        finally:
            if owned:
                stream.close()
    run.conclude(pins)
    intact = report.status in (Status.VERIFIED, Status.UNTRUSTED)
    return VerifiedBundle(report, run.kept if intact else {})


@dataclass
class _RunState:
    """What one run's checks need from its earlier members, until the run's last member."""

    claim: RunClaim
    small: dict[str, bytes] = field(default_factory=dict)
    results: dict[str, StoreResult] = field(default_factory=dict)
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    semantics: RunSemantics | None = None


@dataclass(frozen=True)
class _Problem:
    check: str
    error: VerificationError | str
    status: Status


_MEMBER_RANK: Final = {"listed": 0, "missing": 1, "uncalled": 2, "absent": 3, "content": 4}
"""Within "members", which problem is reported first (as the verifier always did)."""


class _Pass:
    """State of one verification: the single pass over the archive, then the verdict."""

    def __init__(
        self,
        report: Report,
        limits: Limits,
        hmac_master: bytes | None,
        progress: Progress | None,
        keep: KeepMember,
    ) -> None:
        self.report = report
        self.limits = limits
        self.hmac_master = hmac_master
        self.progress = progress
        self.keep = keep
        self.kept: dict[str, bytes] = {}
        self.problems: list[_Problem] = []
        self.member_problems: list[tuple[int, VerificationError]] = []
        self.checking = True
        """False once a content check failed: the rest is only read for archive and members."""
        self.manifest: Manifest | None = None
        self.signer = ""
        self.present: set[str] = set()
        self.member_bytes = 0
        self.members_seen = 0
        self.compressed = False
        self.run: _RunState | None = None
        self.results: list[StoreResult] = []
        self.counts = dict.fromkeys(("consistency", "hmac", "receipts", "tasks", "checkpoints"), 0)

    # ---- failures -----------------------------------------------------------------------------
    def fail(
        self, check: str, error: VerificationError | str, status: Status = Status.INVALID
    ) -> None:
        if isinstance(error, ArchiveError):
            status = Status.UNREADABLE
        self.problems.append(_Problem(check, error, status))
        if check in ("archive", "manifest-signature", "members", "records", "merkle-roots"):
            self.checking = False

    def failed(self, check: str) -> bool:
        return any(problem.check == check for problem in self.problems)

    def member_problem(self, rank: str, error: VerificationError) -> None:
        self.member_problems.append((_MEMBER_RANK[rank], error))
        self.checking = False

    # ---- the pass ------------------------------------------------------------------------------
    def read_all(self, stream: IO[bytes]) -> None:
        reader = ArchiveReader(stream, self.limits)
        self.compressed = reader.compressed
        first = reader.next()
        if first is None:
            self.fail("archive", "the archive holds no members", Status.EMPTY)
            return
        member: Member | None = self._open_manifest(reader, first)
        while member is not None:
            self._member(reader, member)
            member = reader.next()
        self.members_seen = reader.count
        self._end_run()

    def _open_manifest(self, reader: ArchiveReader, first: Member) -> Member | None:
        """manifest.json, manifest.sig and the key file; returns the next member to handle."""
        check = "manifest-signature"
        if first.name != MANIFEST:
            self.fail(check, f"bundle has no {MANIFEST}")
            return first
        if first.size > MANIFEST_LIMIT:
            self.fail(
                check,
                ArchiveError(f"{MANIFEST}: {first.size} bytes, limit {MANIFEST_LIMIT}"),
            )
            return reader.next()
        data = _read_member(reader, first)  # hashed below; not decoded yet
        self._keep(MANIFEST, data)
        sig = reader.next()
        if sig is None or sig.name != MANIFEST_SIG:
            self.fail(check, f"bundle has no {MANIFEST_SIG}")
            return sig
        if sig.size > SIGNATURE_LIMIT:
            self.fail(check, f"{MANIFEST_SIG}: {sig.size} bytes, a signed note has < 4 KiB")
            return reader.next()
        note = _read_member(reader, sig)
        self._keep(MANIFEST_SIG, note)
        key = reader.next()
        if key is None or not key.name.startswith("keys/") or key.size > SIGNATURE_LIMIT:
            self.fail(
                check, f"bundle has no signer key file (keys/<key id>.vkey) after {MANIFEST_SIG}"
            )
            return key
        key_data = _read_member(reader, key)
        self._keep(key.name, key_data)
        try:
            signer = self._signer_key(key.name, key_data)
        except VerificationError as exc:
            self.fail(check, exc)
            return reader.next()
        try:
            opened = open_note_signed_once(note, [signer])
        except NoteError as exc:
            self.fail(check, f"{MANIFEST_SIG}: {exc}")
            return reader.next()
        if opened.text != manifest_note_text(hashlib.sha256(data).hexdigest()):
            self.fail(
                check, f"{MANIFEST_SIG} signs a different manifest digest than manifest.json has"
            )
            return reader.next()
        # Signed by the bundle's key: now, and only now, decode it.
        try:
            _bounded_json(data, MANIFEST)
            manifest = parse_manifest(data)
        except UnsupportedBundleError as exc:
            self.fail(check, exc, Status.UNREADABLE)
            return reader.next()
        except VerificationError as exc:
            self.fail(check, exc)
            return reader.next()
        if manifest.signer != signer:
            self.fail(check, f"{key.name}: is not the signer's key (manifest.json names another)")
            return reader.next()
        self.manifest, self.signer = manifest, signer
        self.report.signer_key_id = key_id(parse_verifier_key(signer).public_key)
        self._check_listing(manifest)
        self._account(key, key_data)
        return reader.next()

    def _keep(self, name: str, data: bytes) -> None:
        if self.keep(name):
            self.kept[name] = data

    @staticmethod
    def _signer_key(name: str, data: bytes) -> str:
        """The verifier key in the key file, which must be named after its key id."""
        if not data.endswith(b"\n") or data.count(b"\n") != 1 or not data.isascii():
            raise SchemaError(f"{name}: not one line of verifier key text", member=name)
        text = data[:-1].decode("ascii")
        try:
            parsed = parse_verifier_key(text)
        except NoteError as exc:
            raise SchemaError(f"{name}: {exc}", member=name) from None
        if key_member(key_id(parsed.public_key)) != name:
            raise SchemaError(
                f"{name}: is not the signer's key (it holds key {key_id(parsed.public_key)})",
                member=name,
            )
        return text

    def _check_listing(self, manifest: Manifest) -> None:
        """The manifest's member list against what its runs call for (known before any data)."""
        if not manifest.runs:
            self.fail("records", "the bundle holds no runs", Status.EMPTY)
        listed = set(manifest.members)
        wanted = self.expected_members(manifest)
        for name in sorted(listed - wanted):
            self.member_problem(
                "uncalled",
                VerificationError(f"{name}: not a member this bundle's runs call for", member=name),
            )
        for name in sorted(wanted - listed):
            self.member_problem(
                "absent",
                VerificationError(f"{name}: required by the runs but absent", member=name),
            )

    def expected_members(self, manifest: Manifest) -> set[str]:
        names = {key_member(self.report.signer_key_id or "")}
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
            names.update(listed_plan_member(run.run, manifest.members))
            if run.receipts:  # attestations need at least one subject (final artifact)
                names.update(attestation_member(run.run, name) for name in ATTESTATIONS)
        return names

    def _account(self, member: Member, data: bytes | None, digest: str | None = None) -> bool:
        """Members check for one member: listed, same size, same SHA-256. True if intact."""
        name = member.name
        self.present.add(name)
        self.member_bytes += member.size
        if self.manifest is None:
            return False
        claim = self.manifest.members.get(name)
        if claim is None:
            self.member_problem(
                "listed", VerificationError(f"{name}: not listed in manifest.json", member=name)
            )
            return False
        if member.size != claim.size:
            self.member_problem(
                "content",
                VerificationError(
                    f"{name}: {member.size} bytes, manifest says {claim.size}", member=name
                ),
            )
            return False
        if digest is None:
            digest = hashlib.sha256(data or b"").hexdigest()
        if digest != claim.sha256:
            self.member_problem(
                "content",
                VerificationError(f"{name}: SHA-256 differs from manifest.json", member=name),
            )
            return False
        return True

    def _member(self, reader: ArchiveReader, member: Member) -> None:
        name = member.name
        parts = name.split("/")
        run_id = parts[1] if len(parts) > 2 and parts[0] == "runs" else None
        if self.run is not None and run_id != self.run.claim.run:
            self._end_run()
        if self.run is None and run_id is not None and self.checking and self.manifest:
            claim = next((r for r in self.manifest.runs if r.run == run_id), None)
            if claim is not None:
                self.run = _RunState(claim)
        if (
            self.checking
            and self.run is not None
            and len(parts) == 4
            and parts[2] == "stores"
            and parts[3].endswith(".jsonl")
            and parts[3][: -len(".jsonl")] in STORES
            and name in (self.manifest.members if self.manifest else {})
        ):
            self._store(reader, member, parts[3][: -len(".jsonl")])
            return
        if not (self.checking and self.run is not None):
            # No check will read it: hash it as it passes, for the members check.
            raw = _HashingMember(reader, member.size, keep=False)
            raw.drain()
            self._account(member, None, raw.sha.hexdigest())
            return
        limit = _limit_for(name)
        if member.size > limit:
            raise ArchiveError(
                f"{name}: {member.size} bytes, limit {limit} for this kind of member", member=name
            )
        data = _read_member(reader, member)
        self._keep(name, data)
        if self._account(member, data) and self.checking and self.run is not None:
            self.run.small[name] = data
            if name.endswith(".quarantine.jsonl"):
                self._quarantine(name, data)

    # ---- records + merkle-roots (+ hmac-chain and semantics, folded in) ----------------------
    def _store(self, reader: ArchiveReader, member: Member, store: str) -> None:
        run = self.run
        assert run is not None and self.manifest is not None
        raw = _HashingMember(reader, member.size, keep=self.keep(member.name))
        stream = io.BufferedReader(raw, 1 << 20)
        name = member.name
        problem: _Problem | None = None
        result: StoreResult | None = None
        try:
            checkpoints = self._checkpoints(run, store)
            if checkpoints is None:  # a checkpoint member is missing: the members check says so
                self.checking = False
                raw.drain()
                self._account(member, None, raw.sha.hexdigest())
                return
            if store == "lineage" and "audit" not in run.results:
                raise SchemaError(f"{name}: the audit store must be verified first")
            merged = run.results["audit"].merges.merged_tasks() if store == "lineage" else None
            result = verify_store(
                iter_store_lines(stream, name),
                member=name,
                store=store,
                run_id=run.claim.run,
                checkpoints=checkpoints,
                progress=(lambda n: self.progress(name, n)) if self.progress else None,  # type: ignore[misc]
                merged_tasks=merged,
                on_record=self._folder(run, store, name),
            )
            self._compare_claim(run, store, result)
        except ArchiveError:
            raise
        except CheckpointError as exc:
            problem = _Problem("merkle-roots", exc, Status.INVALID)
        except VerificationError as exc:
            problem = _Problem("records", exc, Status.INVALID)
        raw.drain()  # the digest covers the whole member, whatever the records said
        if raw.kept is not None:
            self.kept[name] = raw.kept
        if not self._account(member, None, raw.sha.hexdigest()):
            return  # a changed member is "members", however its records read
        if problem is not None:
            self.fail(problem.check, problem.error, problem.status)
            return
        assert result is not None
        run.results[store] = result
        self.results.append(result)
        claim = run.claim.stores[store]
        if bool(result.recovered) != claim.quarantine:
            self.fail(
                "records",
                SchemaError(
                    f"{quarantine_member(run.claim.run, store)}: the store has "
                    f"{len(result.recovered)} store.recovered records but the manifest says "
                    f"quarantine={str(claim.quarantine).lower()}",
                    member=quarantine_member(run.claim.run, store),
                ),
            )

    def _checkpoints(self, run: _RunState, store: str) -> list[Checkpoint] | None:
        claim = run.claim.stores[store]
        names = [checkpoint_member(run.claim.run, store, size) for size in claim.checkpoints]
        if any(name not in run.small for name in names):
            return None
        notes = [(name, run.small[name]) for name in names]
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
        run.checkpoints[store] = checkpoints
        self.counts["checkpoints"] += len(checkpoints)
        return checkpoints

    def _folder(self, run: _RunState, store: str, member: str) -> Callable[[Record, bytes], None]:
        """Per record: the HMAC chain (with the key) and the semantics fold, errors deferred
        to their own checks (later in CHECK_ORDER than the records check running now)."""
        chain = (
            MacChain(derive_store_key(self.hmac_master, store, run.claim.run))
            if self.hmac_master is not None
            else None
        )
        if store == "audit":
            run.semantics = run_semantics(run.claim.run, run.small.get(plan_member(run.claim.run)))
        semantics = run.semantics if store in ("audit", "lineage") else None
        counts = self.counts

        def fold(record: Record, line: bytes) -> None:
            nonlocal chain, semantics
            seq = record.seq
            if chain is not None:
                mac, covered = split_mac(line)
                try:
                    chain.check_next(covered, mac)
                    counts["hmac"] += 1
                except MacMismatchError as exc:
                    chain = None
                    self.fail(
                        "hmac-chain",
                        MacMismatchError(
                            f"{member} line {seq + 1} (seq {seq}): {exc}",
                            member=member,
                            line=seq + 1,
                            seq=seq,
                        ),
                    )
            if semantics is not None:
                where = f"{member} line {seq + 1} (seq {seq})"
                try:
                    if store == "audit":
                        semantics.audit(record, where)
                    elif semantics.declared:  # as check_run_semantics: no tasks, no lineage pass
                        semantics.lineage(record, where)
                except VerificationError as exc:
                    semantics = run.semantics = None
                    self.fail("semantics", exc)

        return fold

    @staticmethod
    def _compare_claim(run: _RunState, store: str, result: StoreResult) -> None:
        claim = run.claim.stores[store]
        member = store_member(run.claim.run, store)
        if claim.records != result.size or claim.root != result.root:
            raise CheckpointError(
                f"{member}: manifest.json claims {claim.records} records with root "
                f"{claim.root.hex()[:16]}…, the store has {result.size} with root "
                f"{result.root.hex()[:16]}…",
                member=member,
            )

    def _quarantine(self, member: str, data: bytes) -> None:
        run = self.run
        assert run is not None
        store = member.rsplit("/", 1)[1].split(".", 1)[0]
        result = run.results.get(store)
        if result is None:
            return  # the store itself failed (or is not a store): reported there
        entries = []
        try:
            lines = iter_store_lines(io.BytesIO(data), member, limit=QUARANTINE_LINE_BYTES)
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
        except VerificationError as exc:
            self.fail("records", exc)

    # ---- the end of a run: consistency-proofs, receipts, semantics -----------------------------
    def _end_run(self) -> None:
        run, self.run = self.run, None
        if run is None or not self.checking or len(run.results) != len(STORES):
            return
        self._consistency(run)
        if not self.failed("receipts"):
            try:
                self.counts["receipts"] += check_run_receipts(
                    lambda name, limit: _small(run, name, limit),
                    run.claim,
                    run.results,
                    self.signer,
                    self.manifest.producer if self.manifest else "",
                )
            except VerificationError as exc:
                self.fail("receipts", exc)
        if run.semantics is not None:
            try:
                run.semantics.finish()
                self.counts["tasks"] += len(run.semantics.tasks)
            except VerificationError as exc:
                self.fail("semantics", exc)

    def _consistency(self, run: _RunState) -> None:
        for store in STORES:
            for older, newer in itertools.pairwise(run.checkpoints[store]):
                name = consistency_member(run.claim.run, store, older.size, newer.size)
                data = run.small.get(name)
                if data is None:
                    return  # missing: the members check says so
                try:
                    proof = _read_proof(data, run.claim.run, store, older.size, newer.size)
                    verify_consistency(
                        older.size, newer.size, proof, older.root_hash, newer.root_hash
                    )
                except VerificationError as exc:
                    self.fail(
                        "consistency-proofs", ConsistencyProofError(f"{name}: {exc}", member=name)
                    )
                    return
                self.counts["consistency"] += 1

    # ---- the verdict ----------------------------------------------------------------------------
    def conclude(self, pins: TrustPolicy) -> None:
        if self.manifest is not None:
            for name in sorted(set(self.manifest.members) - self.present):
                self.member_problem(
                    "missing",
                    VerificationError(f"{name}: listed in manifest.json but missing", member=name),
                )
        if self.member_problems:
            _, member_error = min(self.member_problems, key=lambda item: item[0])
            self.problems.append(_Problem("members", member_error, Status.INVALID))
        stores_done = self.manifest is not None and len(self.results) == len(STORES) * len(
            self.manifest.runs
        )
        early = {"archive", "manifest-signature", "members", "records", "merkle-roots"}
        seal_only = stores_done and sum(result.size for result in self.results) == 0
        if seal_only and not any(p.check in early for p in self.problems):
            self.fail(
                "records",
                "every store is empty: the bundle holds signed seals but no evidence",
                Status.SEAL_ONLY,
            )
        first = min(
            self.problems, key=lambda p: CHECK_ORDER.index(p.check), default=None
        )  # stable: the first found of the earliest check
        report = self.report
        self._summaries()
        for name in CHECK_ORDER:
            if first is not None and name == first.check:
                break
            if name == "trust":
                break
            self._passed(name)
        if first is not None:
            error = first.error
            failure = (
                Failure(
                    first.check,
                    str(error),
                    error.member,
                    error.line,
                    error.seq,
                    CHECK_HINTS.get(first.check, ""),
                )
                if isinstance(error, VerificationError)
                else Failure(first.check, error, hint=CHECK_HINTS.get(first.check, ""))
            )
            failed_report(report, failure, first.status)
            return
        signer_id = report.signer_key_id or ""
        if pins.pins(signer_id):
            report.trusted_by = pins.source
            report.checks.append(
                CheckResult("trust", Outcome.PASSED, f"signer {signer_id} pinned by {pins.source}")
            )
            report.status = Status.VERIFIED
            return
        reason = (
            "integrity verified but signer not pinned: no --trusted-key and no policy"
            if not pins.key_ids
            else f"integrity verified but signer {signer_id} is not among the pinned keys "
            f"({pins.source})"
        )
        failed_report(
            report, Failure("trust", reason, hint=CHECK_HINTS.get("trust", "")), Status.UNTRUSTED
        )

    def _passed(self, name: str) -> None:
        counts = self.counts
        listed = len(self.present)
        details = {
            "archive": f"{self.members_seen} regular members{' (gzip)' if self.compressed else ''}",
            "manifest-signature": f"signed by key {self.report.signer_key_id}",
            "members": f"{listed} members, {self.member_bytes} bytes, all listed and intact",
            "records": f"{sum(r.size for r in self.results)} records in {len(self.results)} stores",
            "merkle-roots": f"{counts['checkpoints']} signed checkpoints match their trees",
            "consistency-proofs": f"{counts['consistency']} consistency proofs verify",
            "hmac-chain": f"{counts['hmac']} records chain under the given HMAC key",
            "receipts": f"{counts['receipts']} receipts and attestations verify and match",
            "semantics": f"{counts['tasks']} task histories are lawful",
        }
        if name == "hmac-chain" and self.hmac_master is None:
            self.report.checks.append(
                CheckResult("hmac-chain", Outcome.SKIPPED, "no --hmac-key given")
            )
            return
        if name == "hmac-chain":
            self.report.hmac_checked = True
        self.report.checks.append(CheckResult(name, Outcome.PASSED, details[name]))

    def _summaries(self) -> None:
        order = {store: index for index, store in enumerate(VERIFY_ORDER)}
        ordered = sorted(self.results, key=lambda r: (r.run, order[r.store]))
        self.report.stores = [
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
            for r in ordered
        ]


class _HashingMember(io.RawIOBase):
    """One member's data from the archive, hashed as it is read (and kept on request)."""

    def __init__(self, reader: ArchiveReader, size: int, *, keep: bool) -> None:
        self._reader = reader
        self.sha = hashlib.sha256()
        self._parts: list[bytes] | None = [] if keep else None
        self.kept: bytes | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._reader.read(len(buffer))
        self.sha.update(data)
        if self._parts is not None:
            self._parts.append(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while data := self._reader.read(1 << 20):
            self.sha.update(data)
            if self._parts is not None:
                self._parts.append(data)
        if self._parts is not None:
            self.kept = b"".join(self._parts)


def _read_member(reader: ArchiveReader, member: Member) -> bytes:
    return reader.read(member.size)


def _limit_for(name: str) -> int:
    """How large a member other than a store may be; it is held in memory until its run ends."""
    if name.startswith("keys/"):
        return SIGNATURE_LIMIT
    if "/checkpoints/" in name:
        return NOTE_LIMIT
    if "/proofs/" in name:
        return PROOF_LIMIT
    if "/receipts/" in name:
        return MAX_RECEIPT_BYTES
    if "/attestations/" in name:
        return ENVELOPE_LIMIT
    return OTHER_LIMIT


def _small(run: _RunState, name: str, limit: int) -> bytes:
    data = run.small.get(name)
    if data is None:
        raise ArchiveError(f"{name}: missing", member=name)
    if len(data) > limit:
        raise ArchiveError(f"{name}: {len(data)} bytes, limit {limit} for this kind of member")
    if name.endswith(".json"):
        _bounded_json(data, name)
    return data


def _bounded_json(data: bytes, name: str) -> None:
    """Refuse JSON denser in values than our documents are, before any decoder allocates."""
    values = data.count(b",") + data.count(b"[") + data.count(b"{") + data.count(b":")
    if values > 256 + len(data) // JSON_DENSITY:
        raise SchemaError(
            f"{name}: {values} JSON values in {len(data)} bytes, denser than any document of "
            "its kind: refused before decoding",
            member=name,
        )


def _read_proof(data: bytes, run_id: str, store: str, size1: int, size2: int) -> list[bytes]:
    _bounded_json(data, "proof")
    obj = parse_canonical(data)
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
