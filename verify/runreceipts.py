"""Bundle check "receipts": every final artifact's receipt and the run's attestations.

Per run, after the stores verified: the manifest must list exactly the final artifacts' seqs;
each receipt must verify (harness.verify.receipt) under the bundle's signer AND against this
bundle's lineage log (same sealing checkpoint, same size, the artifact's path and digest);
the DSSE envelopes must be canonical JSON, verify, and carry canonical in-toto Statements v1
of the expected predicate type whose subjects are exactly the final artifacts (as a set);
every predicate must be, as canonical bytes, the one ``expected_predicates`` re-derives from
the verified records and the manifest (so the run summary's ``producer`` is the manifest's,
``started``/``finished`` are the first and last record times, and no member may be added);
and the COSE_Sign1 statement must sign the same run-summary statement bytes.

These are MUST rules of docs/spec/receipts.md §7.2 step 5: a second verifier refuses exactly
what this module refuses (verifier.md §2). Every failure names its member (``member=``), except
the receipts-list mismatch, which concerns the manifest's run claim (verifier.md §3.0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .archive import ArchiveError
from .canonical import canonical_bytes, parse_canonical
from .cose import decode_sign1, verify_sign1
from .dsse import verify_envelope
from .errors import VerificationError
from .intoto import (
    BUILD_TYPE_AGENT_RUN,
    BUILDER_ID,
    PAYLOAD_TYPE_IN_TOTO,
    PREDICATE_LINEAGE,
    PREDICATE_RUN_SUMMARY,
    PREDICATE_SLSA_PROVENANCE,
    Statement,
    parse_statement,
)
from .keyids import key_id
from .layout import attestation_member, checkpoint_member, receipt_member
from .lineage import FinalArtifact
from .manifest import RunClaim
from .note import parse_verifier_key
from .receipt import (
    MAX_RECEIPT_BYTES,
    ReceiptError,
    ReceiptMemo,
    VerifiedReceipt,
    verify_receipt,
)
from .storecheck import StoreResult

ENVELOPE_LIMIT: Final = 64 << 20
COSE_CONTENT_TYPE: Final = 3
COSE_KID: Final = 4
STATEMENTS: Final = (
    ("run-summary", PREDICATE_RUN_SUMMARY),
    ("lineage", PREDICATE_LINEAGE),
    ("provenance", PREDICATE_SLSA_PROVENANCE),
)

ReadSmall = Callable[[str, int], bytes]


class AttestationError(VerificationError):
    """A run attestation does not verify or does not match the verified records."""


def expected_predicates(
    run_id: str,
    producer: str,
    signer_id: str,
    stores: Mapping[str, StoreResult],
    finals: list[FinalArtifact],
) -> dict[str, dict[str, Any]]:
    """The exact predicates a run's attestations must carry, re-derived from verified records.

    Comparing whole predicates (as canonical bytes, so ``true`` never passes for ``1``) leaves
    no member of a signed attestation that the records do not back. ``producer`` is the
    manifest's: it is the one free-text member, and binding it to the signed manifest keeps the
    two statements of who wrote the bundle from disagreeing (receipts.md §7.2 step 5).
    """
    firsts = [r.first_time for r in stores.values() if r.first_time]
    lasts = [r.last_time for r in stores.values() if r.last_time]
    times = {"started": min(firsts, default=None), "finished": max(lasts, default=None)}
    present = {k: v for k, v in times.items() if v is not None}
    summary: dict[str, Any] = {
        "producer": producer,
        "run": run_id,
        "signer_key_id": signer_id,
        "stores": {
            name: {
                "checkpoints": list(result.checkpoint_sizes),
                "records": result.size,
                "root": result.root.hex(),
            }
            for name, result in stores.items()
        },
        **present,
    }
    lineage = {
        "artifacts": [
            {
                "actor": a.actor,
                "model": a.model,
                "path": a.path,
                "seq": a.seq,
                "sha256": a.sha256,
                "step": a.step,
                "task": a.task,
            }
            for a in finals
        ],
        "run": run_id,
    }
    metadata: dict[str, Any] = {"invocationId": run_id}
    if "started" in present:
        metadata["startedOn"] = present["started"]
    if "finished" in present:
        metadata["finishedOn"] = present["finished"]
    provenance = {
        "buildDefinition": {
            "buildType": BUILD_TYPE_AGENT_RUN,
            "externalParameters": {"run": run_id},
        },
        "runDetails": {"builder": {"id": BUILDER_ID}, "metadata": metadata},
    }
    return {"run-summary": summary, "lineage": lineage, "provenance": provenance}


def check_run_receipts(
    read: ReadSmall,
    run: RunClaim,
    stores: Mapping[str, StoreResult],
    signer: str,
    producer: str,
    verified: Mapping[str, tuple[bytes, VerifiedReceipt]] | None = None,
) -> int:
    """Verify one run's receipts and attestations; returns how many objects were checked.

    ``verified``: receipts a worker pool already verified on their own as they were read
    (``receiptprefetch``), by member, with the bytes verified: then only their match with the
    lineage log is checked here; any other receipt is verified here. In artifact order either
    way, so the first failure is the one the one-by-one loop meets."""
    lineage = stores["lineage"]
    finals = lineage.artifacts.final()
    seqs = tuple(sorted(artifact.seq for artifact in finals))
    if seqs != run.receipts:
        raise ReceiptError(
            f"run {run.run}: manifest lists receipts for records {list(run.receipts)[:8]}, "
            f"the lineage store's final artifacts are records {list(seqs)[:8]}"
        )
    sealing = read(checkpoint_member(run.run, "lineage", lineage.size), 64 << 10)
    memo = ReceiptMemo()  # the run's receipts share one checkpoint note: opened once
    for artifact in finals:
        _check_receipt(read, run.run, artifact, lineage, sealing, signer, memo, verified)
    if not finals:
        return 0  # no subject, no attestations (see harness.receipts.bundle)
    public = Ed25519PublicKey.from_public_bytes(parse_verifier_key(signer).public_key)
    signer_id = key_id(parse_verifier_key(signer).public_key)
    payloads: dict[str, bytes] = {}
    expected = expected_predicates(run.run, producer, signer_id, stores, finals)
    for name, predicate_type in STATEMENTS:
        member = attestation_member(run.run, f"{name}.dsse.json")
        try:
            envelope = read(member, ENVELOPE_LIMIT)
            parse_canonical(envelope)
            payload_type, payload = verify_envelope(envelope, [public])
            parse_canonical(payload)
            statement = parse_statement(
                payload, allowed_predicate_types=frozenset({predicate_type})
            )
        except ArchiveError:
            raise
        except VerificationError as exc:
            raise AttestationError(f"{member}: {exc}", member=member) from None
        if payload_type != PAYLOAD_TYPE_IN_TOTO:
            raise AttestationError(f"{member}: payload type {payload_type!r}", member=member)
        _check_subjects(member, statement, finals)
        payloads[name] = payload
        if canonical_bytes(statement.predicate) != canonical_bytes(expected[name]):
            raise AttestationError(
                f"{member}: predicate does not state exactly what the verified records hold "
                "(run, stores, times, artifacts, builder)",
                member=member,
            )
    _check_cose_statement(read, run.run, public, signer_id, payloads["run-summary"])
    return len(finals) + len(STATEMENTS) + 1


def _check_receipt(
    read: ReadSmall,
    run_id: str,
    artifact: FinalArtifact,
    lineage: StoreResult,
    sealing: bytes,
    signer: str,
    memo: ReceiptMemo | None = None,
    verified: Mapping[str, tuple[bytes, VerifiedReceipt]] | None = None,
) -> None:
    member = receipt_member(run_id, artifact.seq)
    data = read(member, MAX_RECEIPT_BYTES)
    earlier = verified.get(member) if verified else None
    receipt = earlier[1] if earlier is not None and earlier[0] is data else None
    _check_receipt_bytes(
        data, run_id, artifact, lineage.size, lineage.root, sealing, signer, memo, receipt
    )


def _check_receipt_bytes(
    data: bytes,
    run_id: str,
    artifact: FinalArtifact,
    size: int,
    root: bytes,
    sealing: bytes,
    signer: str,
    memo: ReceiptMemo | None,
    receipt: VerifiedReceipt | None = None,
) -> None:
    """Verify a receipt (unless ``receipt`` is its verification, done elsewhere on these same
    bytes) and match it with this bundle's lineage log."""
    member = receipt_member(run_id, artifact.seq)
    try:
        if receipt is None:
            receipt = verify_receipt(data, signer=signer, memo=memo)
    except ArchiveError:
        raise
    except VerificationError as exc:
        raise ReceiptError(f"{member}: {exc}", member=member) from None
    problems = [
        what
        for what, ok in (
            ("run", receipt.run == run_id),
            ("leaf index", receipt.leaf_index == artifact.seq),
            ("tree size", receipt.tree_size == size),
            ("sealing checkpoint", receipt.checkpoint_note == sealing),
            ("root", receipt.root == root),
            ("path", receipt.path == artifact.path),
            ("sha256", receipt.sha256 == artifact.sha256),
        )
        if not ok
    ]
    if problems:
        raise ReceiptError(
            f"{member}: verifies on its own but does not match this bundle's lineage log "
            f"({', '.join(problems)})",
            member=member,
        )


def _check_subjects(member: str, statement: Statement, finals: list[FinalArtifact]) -> None:
    found = sorted((s.name, tuple(sorted(s.digest.items()))) for s in statement.subjects)
    wanted = sorted((a.path, (("sha256", a.sha256),)) for a in finals)
    if found != wanted:
        raise AttestationError(
            f"{member}: subjects are not exactly the run's final artifacts (name + sha256)",
            member=member,
        )


def _check_cose_statement(
    read: ReadSmall, run_id: str, public: Ed25519PublicKey, signer_id: str, summary: bytes
) -> None:
    member = attestation_member(run_id, "run-summary.cose")
    data = read(member, ENVELOPE_LIMIT)
    try:
        payload = verify_sign1(data, public)
        protected = decode_sign1(data).protected
    except VerificationError as exc:
        raise AttestationError(f"{member}: {exc}", member=member) from None
    if payload != summary:
        raise AttestationError(
            f"{member}: signs other bytes than the run-summary DSSE statement", member=member
        )
    if protected.get(COSE_CONTENT_TYPE) != PAYLOAD_TYPE_IN_TOTO:
        raise AttestationError(
            f"{member}: content type is not {PAYLOAD_TYPE_IN_TOTO}", member=member
        )
    if protected.get(COSE_KID) != bytes.fromhex(signer_id):
        raise AttestationError(f"{member}: kid is not the signer's key id", member=member)
