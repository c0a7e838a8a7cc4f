"""Receipts for a run: per-artifact receipts and run-level attestations (DESIGN §4).

Per final artifact (latest write of each path, see ``harness.verify.lineage``): a JSON receipt
with the RFC 6962 inclusion proof of its lineage record in the lineage checkpoint, the record,
the signed checkpoint, and the same proof as an RFC 9942 COSE receipt.

Per run: DSSE envelopes over in-toto Statement v1 (subjects = the final artifacts) with the run
summary, lineage and SLSA Provenance v1 predicates, and a COSE_Sign1 signed statement whose
payload is the run-summary statement itself.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness import __version__
from harness.verify.canonical import canonical_bytes
from harness.verify.intoto import (
    BUILDER_ID,
    PAYLOAD_TYPE_IN_TOTO,
    PREDICATE_LINEAGE,
    PREDICATE_RUN_SUMMARY,
    PREDICATE_SLSA_PROVENANCE,
)
from harness.verify.lineage import FinalArtifact
from harness.verify.receipt import RECEIPT_FORMAT, RECEIPT_VERSION, final_note_text

from .cose import inclusion_receipt, sign1
from .dsse import sign_envelope
from .intoto import (
    lineage_predicate,
    run_summary_predicate,
    slsa_provenance_predicate,
    statement,
)
from .keys import OperatorKeys
from .merkle import MerkleTree


@dataclass(frozen=True)
class StoreFacts:
    """What a sealed store holds, as attested in the run summary."""

    records: int
    root: bytes
    checkpoints: tuple[int, ...]


def artifact_receipt(
    *,
    run_id: str,
    artifact: FinalArtifact,
    record_line: bytes,
    tree: MerkleTree,
    checkpoint_note: bytes,
    keys: OperatorKeys,
) -> bytes:
    """The canonical JSON receipt of one artifact write (see harness.verify.receipt)."""
    size = len(tree)
    path = tree.inclusion_proof(artifact.seq, size)
    root = tree.root(size)
    kid = bytes.fromhex(keys.key_id)
    cose = inclusion_receipt(
        keys.signing_key, kid=kid, tree_size=size, leaf_index=artifact.seq, path=path, root=root
    )
    return canonical_bytes(
        {
            "audit_path": [h.hex() for h in path],
            "checkpoint": checkpoint_note.decode("utf-8"),
            "cose": base64.b64encode(cose).decode("ascii"),
            # Signed only here, for final artifacts: what makes the receipt a receipt.
            "final": keys.note_signer()
            .sign(final_note_text(run_id, artifact.seq, record_line))
            .decode("utf-8"),
            "format": RECEIPT_FORMAT,
            "leaf_index": artifact.seq,
            "record": record_line.decode("utf-8"),
            "run": run_id,
            "signer": keys.note_signer().verifier_key(),
            "tree_size": size,
            "v": RECEIPT_VERSION,
        }
    )


def run_statements(
    *,
    run_id: str,
    artifacts: Sequence[FinalArtifact],
    stores: Mapping[str, StoreFacts],
    started: str | None,
    finished: str | None,
    keys: OperatorKeys,
) -> dict[str, bytes]:
    """The three in-toto statements of a run, canonical JSON, keyed by attestation name."""
    subjects = [(artifact.path, artifact.sha256) for artifact in artifacts]
    summary = run_summary_predicate(
        run_id=run_id,
        producer=f"harness-verify {__version__}",
        signer_key_id=keys.key_id,
        started=started,
        finished=finished,
        stores={
            name: {
                "records": facts.records,
                "root": facts.root.hex(),
                "checkpoints": list(facts.checkpoints),
            }
            for name, facts in stores.items()
        },
    )
    lineage = lineage_predicate(
        run_id=run_id,
        artifacts=[
            {
                "path": a.path,
                "sha256": a.sha256,
                "seq": a.seq,
                "actor": a.actor,
                "task": a.task,
                "step": a.step,
                "model": a.model,
            }
            for a in artifacts
        ],
    )
    provenance = slsa_provenance_predicate(
        run_id=run_id,
        builder_id=BUILDER_ID,
        external_parameters={"run": run_id},
        started=started,
        finished=finished,
    )
    return {
        "run-summary": statement(subjects, PREDICATE_RUN_SUMMARY, summary),
        "lineage": statement(subjects, PREDICATE_LINEAGE, lineage),
        "provenance": statement(subjects, PREDICATE_SLSA_PROVENANCE, provenance),
    }


def run_attestations(statements: Mapping[str, bytes], keys: OperatorKeys) -> dict[str, bytes]:
    """DSSE envelopes for each statement and a COSE_Sign1 over the run summary."""
    out = {
        f"{name}.dsse.json": sign_envelope(
            PAYLOAD_TYPE_IN_TOTO, payload, keys.signing_key, keyid=keys.key_id
        )
        for name, payload in statements.items()
    }
    out["run-summary.cose"] = sign1(
        statements["run-summary"],
        keys.signing_key,
        kid=bytes.fromhex(keys.key_id),
        content_type=PAYLOAD_TYPE_IN_TOTO,
    )
    return out
