"""``harness-verify BUNDLE``: every check of DESIGN §6, in one forward pass over the archive.

Checks (CHECK_ORDER): archive safety -> manifest signature -> member list, sizes and digests ->
records (canonical form, schema, seq, time) with Merkle roots against signed checkpoints ->
consistency proofs -> HMAC chains (only with the master key) -> receipts and attestations ->
semantics -> trust (is the signer pinned?).

Cost is bounded before and after authentication (docs/spec/verifier.md §3.11, bundle.md §3):

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

import contextlib
import hashlib
import io
import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Final

from . import receiptprefetch
from .archive import ArchiveError, ArchiveReader, Limits, Member, open_source
from .bundlehead import (
    HashingMember,
    HeadError,
    limit_for,
    open_signed_manifest,
    read_member,
)
from .bundleruns import (
    RunState,
    check_consistency,
    check_quarantine,
    compare_claim,
    small_member,
    store_checkpoints,
)
from .controlcheck import ControlCheck
from .errors import (
    CheckpointError,
    SchemaError,
    VerificationError,
)
from .exchangecheck import ExchangeCheck
from .journalcheck import JournalCheck, read_journal_member
from .layout import (
    ATTESTATIONS,
    ROUND_TEXT_MAX_BYTES,
    ROUND_TEXTS_MAX_BYTES,
    attestation_member,
    checkpoint_member,
    consistency_member,
    journal_digest,
    key_member,
    plan_member,
    quarantine_member,
    receipt_member,
    round_text_digest,
    store_member,
)
from .lineage import FOLD_ORDER
from .manifest import Manifest
from .policy import EMPTY_POLICY, TrustPolicy
from .policycheck import listed_plan_member
from .progress import ProgressSink
from .receiptprefetch import ReceiptPrefetch
from .records import STORES, Record
from .report import (
    CHECK_HINTS,
    CHECK_ORDER,
    CheckResult,
    Failure,
    Outcome,
    Report,
    SandboxSummary,
    Status,
    StoreSummary,
    failed_report,
    unconfined_runs,
)
from .runreceipts import check_run_receipts
from .sealing import unsealed_detail
from .semantics import run_semantics
from .storecheck import StoreResult, verify_store_stream
from .storepool import MIN_PARALLEL_BYTES, ChunkPool, usable_cores
from .version import verifier_version

VERIFY_ORDER: Final = FOLD_ORDER
"""Audit before lineage (which tasks merged decides which writes are final artifacts); the
archive's sorted order (audit, control, events, lineage, replay) satisfies it."""

Progress = ProgressSink
"""What a verification reports its progress to (``verify.progress``; the CLI draws it)."""
KeepMember = Callable[[str], bool]


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
    jobs: int | None = None,
) -> Report:
    """Run every check on a bundle (a path, a readable stream or its bytes); never raises for
    bad input, returns the Report. ``jobs``: processes checking store records (None: one per
    usable core when the input is large, 1: this process; see ``verify_bundle_contents``)."""
    return verify_bundle_contents(
        source,
        pins=pins,
        hmac_master=hmac_master,
        limits=limits,
        progress=progress,
        display_name=display_name,
        jobs=jobs,
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
    jobs: int | None = None,
) -> VerifiedBundle:
    """``verify_bundle``, also returning the bytes of every member ``keep(name)`` selects.

    For callers that act on a bundle's content (the merge gate): they read the input once and
    use exactly the bytes that were verified.

    ``jobs`` > 1 checks store records in that many worker processes (``storepool``), ``None``
    in one per usable core when the input is at least ``MIN_PARALLEL_BYTES`` (or of unknown
    size); 1 checks them here. The report is the same either way.
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
        size = _input_size(stream)
        with _chunk_pool(jobs, size) as run.pool:  # forked before the progress thread starts
            if progress is not None:
                progress.begin(size, stream.tell)
            try:
                run.read_all(stream)
            except ArchiveError as exc:
                run.fail("archive", exc, Status.UNREADABLE)
            finally:
                if owned:
                    stream.close()
    if progress is not None:
        progress.step("trust")
    run.conclude(pins)
    intact = report.status in (Status.VERIFIED, Status.UNTRUSTED)
    return VerifiedBundle(report, run.kept if intact else {})


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
        self.run: RunState | None = None
        self.results: list[StoreResult] = []
        self.counts = dict.fromkeys(("consistency", "hmac", "receipts", "tasks", "checkpoints"), 0)
        self.round_bytes: dict[str, int] = {}
        """Bytes of each run's round text members so far (capped: ROUND_TEXTS_MAX_BYTES)."""
        self.journal = JournalCheck()
        """Journal blobs the runs' journaled exchanges name (the members come after them)."""
        self.pool: ChunkPool | None = None
        """Worker processes checking store records (None: checked in this process)."""

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
        if self.checking:
            try:
                self.journal.finish()
            except VerificationError as exc:
                self.fail("semantics", exc)

    def _open_manifest(self, reader: ArchiveReader, first: Member) -> Member | None:
        """manifest.json, manifest.sig and the key file; returns the next member to handle."""
        try:
            head = open_signed_manifest(reader, first, self._keep)
        except HeadError as exc:
            self.fail("manifest-signature", exc.error, exc.status)
            return exc.next_member
        self.manifest, self.signer = head.manifest, head.signer
        self.report.signer_key_id = head.signer_id
        self._check_listing(head.manifest)
        self._account(head.key, head.key_data)
        return reader.next()

    def _keep(self, name: str, data: bytes) -> None:
        if self.keep(name):
            self.kept[name] = data

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
            # Round texts are named by their digest; which ones the records cite is known
            # only from the audit store: the rounds check refuses the ones no record names.
            names.update(n for n in manifest.members if round_text_digest(run.run, n))
            if run.receipts:  # attestations need at least one subject (final artifact)
                names.update(attestation_member(run.run, name) for name in ATTESTATIONS)
        # Journal blobs likewise: the replay stores say which must be there (journalcheck).
        names.update(n for n in manifest.members if journal_digest(n))
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
        if self.progress is not None:
            self.progress.step("members", name)
        parts = name.split("/")
        run_id = parts[1] if len(parts) > 2 and parts[0] == "runs" else None
        if self.run is not None and run_id != self.run.claim.run:
            self._end_run()
        if self.run is None and run_id is not None and self.checking and self.manifest:
            claim = next((r for r in self.manifest.runs if r.run == run_id), None)
            if claim is not None:
                self.run = RunState(claim)
        store = _store_name(parts)
        if store is not None and self.checking and self.run is not None:
            self._store(reader, member, store)
            return
        if journal_digest(name) is not None:
            streamed = read_journal_member(
                self.journal if self.checking else None, reader, member, keep=self.keep(name)
            )
            if streamed.kept is not None:
                self.kept[name] = streamed.kept
            if self._account(member, None, streamed.sha256) and streamed.problem is not None:
                self.fail("semantics", streamed.problem)
            return
        if run_id is not None and round_text_digest(run_id, name) is not None:
            total = self.round_bytes.get(run_id, 0) + member.size
            self.round_bytes[run_id] = total
            if total > ROUND_TEXTS_MAX_BYTES:
                raise ArchiveError(
                    f"{name}: the round texts of run {run_id!r} exceed {ROUND_TEXTS_MAX_BYTES} "
                    "bytes in all",
                    member=name,
                )
        if run_id is not None and store is None:
            limit = limit_for(name)  # held whole in memory: refused over its kind's limit
            if round_text_digest(run_id, name) is not None:
                limit = ROUND_TEXT_MAX_BYTES
            if member.size > limit:
                raise ArchiveError(
                    f"{name}: {member.size} bytes, limit {limit} for this kind of member",
                    member=name,
                )
        if not (self.checking and self.run is not None):
            # No check will read it: hash it as it passes, for the members check.
            raw = HashingMember(reader, member.size, keep=False)
            raw.drain()
            self._account(member, None, raw.sha.hexdigest())
            return
        data = read_member(reader, member)
        self._keep(name, data)
        if self._account(member, data) and self.checking and self.run is not None:
            self.run.small[name] = data
            if len(parts) > 3 and parts[2] == "receipts":
                self._prefetch(self.run, name, data)
            if name.endswith(".quarantine.jsonl") and (
                error := check_quarantine(self.run, name, data)
            ):
                self.fail("records", error)

    def _prefetch(self, run: RunState, name: str, data: bytes) -> None:
        """Send a run's receipts to the workers as they are read, when it has many
        (``receiptprefetch``): they are verified while the stores are."""
        if run.receipts is None:
            minimum = receiptprefetch.PARALLEL_MIN_RECEIPTS
            if self.pool is None or len(run.claim.receipts) < minimum:
                return
            run.receipts = ReceiptPrefetch(self.pool, self.signer)
        run.receipts.add(name, data)

    # ---- records + merkle-roots (+ hmac-chain and semantics, folded in) ----------------------
    def _store(self, reader: ArchiveReader, member: Member, store: str) -> None:
        run = self.run
        assert run is not None and self.manifest is not None
        raw = HashingMember(reader, member.size, keep=self.keep(member.name))
        stream = io.BufferedReader(raw, 1 << 20)
        name = member.name
        problem: _Problem | None = None
        result: StoreResult | None = None
        try:
            checkpoints = store_checkpoints(run, store, self.signer)
            if checkpoints is None:  # a checkpoint member is missing: the members check says so
                self.checking = False
                raw.drain()
                self._account(member, None, raw.sha.hexdigest())
                return
            if store == "lineage" and "audit" not in run.results:
                raise SchemaError(f"{name}: the audit store must be verified first")
            merged = run.results["audit"].merges.merged_tasks() if store == "lineage" else None
            result = verify_store_stream(
                stream,
                member=name,
                store=store,
                run_id=run.claim.run,
                checkpoints=checkpoints,
                hmac_master=self.hmac_master,
                defer_mac=True,
                progress=self._records_progress(name, run.claim.stores[store].records),
                merged_tasks=merged,
                on_record=self._folder(run, store, name),
                pool=self.pool,
            )
            compare_claim(run, store, result)
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
        if result.mac_error is not None:
            self.fail("hmac-chain", result.mac_error)
        self.counts["hmac"] += result.macs
        run.results[store] = result
        self.results.append(result)
        self.counts["checkpoints"] += len(run.checkpoints[store])
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

    def _records_progress(self, member: str, total: int) -> Callable[[int], None] | None:
        sink = self.progress
        if sink is None:
            return None
        sink.step("records", member, 0, total)
        return lambda done: sink.step("records", member, done, total)

    def _folder(
        self, run: RunState, store: str, member: str
    ) -> Callable[[Record, bytes], None] | None:
        """Per record: the semantics fold (None when it has nothing to check in this store),
        its error deferred to its own check (later in CHECK_ORDER than the records check
        running now). The HMAC chain is checked with the records (``defer_mac``)."""
        if store == "audit":
            run.semantics = run_semantics(
                run.claim.run, run.small.get(plan_member(run.claim.run)), run.small
            )
        semantics = run.semantics if store in STORES else None
        if semantics is None or (store == "lineage" and not semantics.declared):
            return None  # as check_run_semantics: no tasks, no lineage pass

        def fold(record: Record, line: bytes) -> None:
            nonlocal semantics
            if semantics is None:
                return
            seq = record.seq
            where = f"{member} line {seq + 1} (seq {seq})"
            try:
                if store == "audit":
                    semantics.audit(record, where)
                elif store == "control":
                    semantics.control(record, where)
                elif store == "events":
                    semantics.events(record, where)
                elif store == "replay":
                    semantics.replay(record, where)
                else:
                    semantics.lineage(record, where)
            except VerificationError as exc:
                semantics = run.semantics = None
                self.fail("semantics", exc)

        return fold

    # ---- the end of a run: consistency-proofs, receipts, semantics -----------------------------
    def _end_run(self) -> None:
        run, self.run = self.run, None
        if run is None or not self.checking or len(run.results) != len(STORES):
            return
        if self.progress is not None:
            self.progress.step("consistency proofs and receipts", f"run {run.claim.run}")
        proofs, error = check_consistency(run)
        self.counts["consistency"] += proofs
        if error is not None:
            self.fail("consistency-proofs", error)
        if not self.failed("receipts"):
            try:
                self.counts["receipts"] += check_run_receipts(
                    lambda name, limit: small_member(run, name, limit),
                    run.claim,
                    run.results,
                    self.signer,
                    self.manifest.producer if self.manifest else "",
                    run.receipts.verified() if run.receipts is not None else None,
                )
            except VerificationError as exc:
                self.fail("receipts", exc)
        if run.semantics is not None:
            if self.progress is not None:
                self.progress.step("semantics", f"run {run.claim.run}")
            try:
                run.semantics.finish()
                self.counts["tasks"] += len(run.semantics.tasks)
            except VerificationError as exc:
                self.fail("semantics", exc)
            else:
                policy = run.semantics.policy
                if policy is not None and policy.started:
                    self.report.sandboxes.append(
                        SandboxSummary(
                            run.claim.run,
                            policy.sandbox_kind(),
                            policy.sandbox_opt_out(),
                            tuple(policy.unsandboxed),
                            policy.spawns,
                        )
                    )
                for check in run.semantics.checks:
                    control = check.summary() if isinstance(check, ControlCheck) else None
                    if control is not None:
                        self.report.controls.append(control)
                    if isinstance(check, ExchangeCheck):
                        self.journal.add(check.journal_refs)

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
        failing = CHECK_ORDER.index(first.check) if first is not None else len(CHECK_ORDER)
        if failing > CHECK_ORDER.index("merkle-roots"):
            self._summaries()  # only stores whose records and roots all verified are shown
        if failing == CHECK_ORDER.index("archive"):
            report.signer_key_id = None  # nothing about an unreadable input is asserted
        for name in CHECK_ORDER[: min(failing, CHECK_ORDER.index("trust"))]:
            if name == "records" and first is not None and first.check == "merkle-roots":
                continue  # the two are one pass over the stores: neither has passed
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
        unconfined = [summary for summary in report.sandboxes if summary.unsandboxed]
        if pins.pins(signer_id) and pins.require_sandbox and unconfined:
            reason = (
                f"signer {signer_id} is pinned ({pins.source}), but the policy requires a "
                f"sandbox and agents ran without one: {unconfined_runs(unconfined)}"
            )
            hint = CHECK_HINTS.get("trust", "")
            failed_report(report, Failure("trust", reason, hint=hint), Status.UNTRUSTED)
            return
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
            "merkle-roots": f"{counts['checkpoints']} signed checkpoints match their trees; "
            f"{unsealed_detail(self.results)}",
            "consistency-proofs": f"{counts['consistency']} consistency proofs verify",
            "hmac-chain": f"{counts['hmac']} records chain under the given HMAC key",
            "receipts": f"{counts['receipts']} receipts and attestations verify and match",
            "semantics": f"{counts['tasks']} task histories are lawful"
            + (
                f"; {self.journal.blobs} journal blobs match, {self.journal.keys} keys recompute"
                if self.journal.blobs
                else ""
            ),
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


@contextlib.contextmanager
def _chunk_pool(jobs: int | None, size: int | None) -> Iterator[ChunkPool | None]:
    """The worker pool for this verification, or None (records checked in-process)."""
    if jobs is None:
        jobs = usable_cores() if size is None or size >= MIN_PARALLEL_BYTES else 1
    pool = ChunkPool.start(jobs)
    if pool is None:
        yield None
        return
    with pool:
        yield pool


def _input_size(stream: IO[bytes]) -> int | None:
    """The input's size in bytes, for the progress percentage (None when it cannot be told)."""
    if isinstance(stream, io.BytesIO):
        return len(stream.getbuffer())
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _store_name(parts: list[str]) -> str | None:
    """``runs/<run>/stores/<store>.jsonl`` -> the store (streamed, not held in memory)."""
    if len(parts) == 4 and parts[2] == "stores" and parts[3].endswith(".jsonl"):
        store = parts[3][: -len(".jsonl")]
        return store if store in STORES else None
    return None
