"""Artifact receipts: one JSON document proving one artifact write, checkable on its own.

A receipt (docs/spec/receipts.md, schemas/artifact-receipt.schema.json) is canonical JSON::

    {"format": "harness-verify/artifact-receipt", "v": 1,
     "run": "<run id>", "leaf_index": N, "tree_size": M, "audit_path": ["<hex>", ...],
     "record": "<the lineage record line>", "checkpoint": "<signed checkpoint note>",
     "signer": "<verifier key>", "cose": "<base64 RFC 9942 COSE receipt>",
     "final": "<signed note: this record is a final artifact of the run>"}

Verification binds every link: artifact bytes -> SHA-256 in the record's body -> the record is
leaf ``leaf_index`` (its seq) -> the RFC 6962 audit path leads to the root of the checkpoint ->
the checkpoint is signed by the signer and names this run's lineage log with ``tree_size``
records -> the COSE receipt carries the same proof, under the same key, over the same root ->
the ``final`` note, signed by the same key, names this run, this seq and the SHA-256 of this
record line.

Inclusion alone proves only that the write was *recorded*, and anyone can mint such a receipt
from a bundle's public data for any leaf, including the write of a task that failed its gates.
What a receipt certifies is finality: the operator's harness signs the ``final`` note only for
the latest write of a path by a task whose change was merged (``lineage.FinalArtifacts``), at
export time. A verifier accepts a receipt only with that signature (issue 9 §2).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import parse_canonical
from .checkpoint import parse_checkpoint
from .cose import verify_inclusion_receipt
from .errors import VerificationError
from .keyids import key_id
from .merkle import leaf_hash, verify_inclusion
from .note import open_note_signed_once, parse_verifier_key
from .records import HEX64_RE, RUN_ID_RE, Record, parse_record_line
from .storecheck import checkpoint_origin

RECEIPT_FORMAT: Final = "harness-verify/artifact-receipt"
RECEIPT_VERSION: Final = 2
RECEIPT_MEMBERS: Final = frozenset(
    {"format", "v", "run", "leaf_index", "tree_size", "audit_path", "record", "checkpoint",
     "signer", "cose", "final"}
)  # fmt: skip
FINAL_ORIGIN_SUFFIX: Final = "final-artifact"


def final_note_text(run_id: str, seq: int, record_line: bytes) -> str:
    """The text of the note that declares lineage record ``seq`` of ``run_id`` a final
    artifact: origin ``harness-verify/v1/<run>/final-artifact``, the seq, the record line's
    SHA-256 (hex). Writer and verifier share this one definition."""
    digest = hashlib.sha256(record_line).hexdigest()
    return f"harness-verify/v1/{run_id}/{FINAL_ORIGIN_SUFFIX}\n{seq}\n{digest}\n"


MAX_RECEIPT_BYTES: Final = 4 << 20


class ReceiptError(VerificationError):
    """An artifact receipt is malformed or does not bind artifact, record, proof and signature."""


@dataclass(frozen=True)
class VerifiedReceipt:
    run: str
    path: str
    sha256: str
    mode: str
    """Git file mode the record attests ("100644", "100755", "120000" symlink, "160000")."""
    leaf_index: int
    tree_size: int
    root: bytes
    signer_key_id: str
    record: Record
    record_line: bytes
    checkpoint_note: bytes


def _field(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj[name]
    if type(value) is not kind:
        raise ReceiptError(f"receipt member {name!r} must be a {kind.__name__}")
    return value


def parse_receipt(data: bytes) -> dict[str, Any]:
    """Canonical JSON with exactly the receipt members, of the right types."""
    if len(data) > MAX_RECEIPT_BYTES:
        raise ReceiptError(f"receipt is {len(data)} bytes, limit {MAX_RECEIPT_BYTES}")
    obj = parse_canonical(data)
    if type(obj) is not dict or obj.keys() != RECEIPT_MEMBERS:
        found = sorted(obj) if type(obj) is dict else type(obj).__name__
        raise ReceiptError(f"receipt members must be {sorted(RECEIPT_MEMBERS)}, found {found}")
    if obj["format"] != RECEIPT_FORMAT or obj["v"] != RECEIPT_VERSION:
        raise ReceiptError(f"unsupported receipt format {obj['format']!r} version {obj['v']!r}")
    for name in ("run", "record", "checkpoint", "signer", "cose", "final"):
        _field(obj, name, str)
    for name in ("leaf_index", "tree_size"):
        if _field(obj, name, int) < 0:
            raise ReceiptError(f"receipt member {name!r} must be non-negative")
    if not RUN_ID_RE.fullmatch(obj["run"]):
        raise ReceiptError("receipt run id is not a valid run id")
    path = _field(obj, "audit_path", list)
    if any(type(h) is not str or not HEX64_RE.fullmatch(h) for h in path):
        raise ReceiptError("audit_path must hold 64-hex-digit hashes")
    return obj


def verify_receipt(data: bytes, *, signer: str | None = None) -> VerifiedReceipt:
    """Verify a receipt's internal bindings and signatures (not the artifact bytes, not trust).

    ``signer``: if given, the receipt must declare exactly this verifier key (bundle check);
    otherwise the receipt's own ``signer`` is used and the caller decides trust by key id.
    """
    obj = parse_receipt(data)
    if signer is not None and obj["signer"] != signer:
        raise ReceiptError("receipt is signed by another key than the bundle")
    run_id = obj["run"]
    try:
        vkey = parse_verifier_key(obj["signer"])
    except VerificationError as exc:
        raise ReceiptError(f"receipt signer: {exc}") from None
    note_bytes = obj["checkpoint"].encode("utf-8")
    try:
        note = open_note_signed_once(note_bytes, [obj["signer"]])
        checkpoint = parse_checkpoint(note.text.encode("utf-8"))
    except VerificationError as exc:
        raise ReceiptError(f"receipt checkpoint: {exc}") from None
    if checkpoint.origin != checkpoint_origin(run_id, "lineage"):
        raise ReceiptError(f"checkpoint is for log {checkpoint.origin!r}, not this run's lineage")
    if checkpoint.size != obj["tree_size"] or len(checkpoint.root_hash) != 32:
        raise ReceiptError(
            f"checkpoint seals {checkpoint.size} records, the proof claims {obj['tree_size']}"
        )
    line = obj["record"].encode("utf-8")
    try:
        record = parse_record_line(line, "lineage", run_id)
    except VerificationError as exc:
        raise ReceiptError(f"receipt record: {exc}") from None
    if record.kind != "artifact.write":
        raise ReceiptError(f"receipt record is a {record.kind!r}, not an artifact.write")
    if record.seq != obj["leaf_index"]:
        raise ReceiptError(f"record seq {record.seq} is not leaf index {obj['leaf_index']}")
    leaf = leaf_hash(line)
    path = [bytes.fromhex(h) for h in obj["audit_path"]]
    try:
        verify_inclusion(obj["leaf_index"], obj["tree_size"], leaf, path, checkpoint.root_hash)
    except VerificationError as exc:
        raise ReceiptError(f"inclusion proof: {exc}") from None
    try:
        cose = base64.b64decode(obj["cose"], validate=True)
    except binascii.Error:
        raise ReceiptError("cose is not standard base64") from None
    if base64.b64encode(cose).decode("ascii") != obj["cose"]:
        raise ReceiptError("cose base64 is not in canonical form")
    public = Ed25519PublicKey.from_public_bytes(vkey.public_key)
    try:
        cose_receipt = verify_inclusion_receipt(cose, public, leaf)
    except VerificationError as exc:
        raise ReceiptError(f"COSE receipt: {exc}") from None
    signer_id = key_id(vkey.public_key)
    if (
        cose_receipt.tree_size != obj["tree_size"]
        or cose_receipt.leaf_index != obj["leaf_index"]
        or list(cose_receipt.path) != path
        or not hmac.compare_digest(cose_receipt.root, checkpoint.root_hash)
    ):
        raise ReceiptError("COSE receipt proves something else than the JSON proof")
    if cose_receipt.kid != bytes.fromhex(signer_id):
        raise ReceiptError("COSE receipt kid is not the signer's key id")
    try:
        final = open_note_signed_once(obj["final"].encode("utf-8"), [obj["signer"]])
    except VerificationError as exc:
        raise ReceiptError(
            f"receipt is not signed as a final artifact (a write of a merged task): {exc}"
        ) from None
    if final.text != final_note_text(run_id, record.seq, line):
        raise ReceiptError(
            "the signed final-artifact note names another record than this receipt's"
        )
    return VerifiedReceipt(
        run=run_id,
        path=str(record.body["path"]),
        sha256=str(record.body["sha256"]),
        mode=str(record.body["mode"]),
        leaf_index=obj["leaf_index"],
        tree_size=obj["tree_size"],
        root=checkpoint.root_hash,
        signer_key_id=signer_id,
        record=record,
        record_line=line,
        checkpoint_note=note_bytes,
    )


def check_artifact(
    receipt: VerifiedReceipt, content: bytes, name: str, mode: str | None = None
) -> None:
    """The artifact's bytes, git mode (when known) and name must be the ones the receipt's
    record attests."""
    digest = hashlib.sha256(content).hexdigest()
    if not hmac.compare_digest(digest, receipt.sha256):
        raise ReceiptError(
            f"artifact {name!r} has SHA-256 {digest[:16]}…, the receipt attests "
            f"{receipt.sha256[:16]}… (file changed after the agent wrote it)"
        )
    if mode is not None and mode != receipt.mode:
        raise ReceiptError(
            f"artifact {name!r} has git mode {mode}, the receipt attests {receipt.mode}"
        )
    if name != receipt.path:
        raise ReceiptError(f"receipt is for {receipt.path!r}, not {name!r}")
