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
import re
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import parse_canonical
from .checkpoint import Checkpoint, parse_checkpoint
from .cose import KnownRoot, verify_inclusion_receipt
from .errors import VerificationError
from .keyids import key_id
from .merkle import leaf_hash, root_from_inclusion_proof, verify_inclusion
from .note import (
    ED25519_SIGNATURE_SIZE,
    Signature,
    VerifierKey,
    open_note_signed_once,
    parse_verifier_key,
    strict_b64decode,
)
from .records import RUN_ID_RE, Record, parse_record_line
from .storecheck import checkpoint_origin

RECEIPT_FORMAT: Final = "harness-verify/artifact-receipt"
RECEIPT_VERSION: Final = 2
RECEIPT_MEMBERS: Final = frozenset(
    {"format", "v", "run", "leaf_index", "tree_size", "audit_path", "record", "checkpoint",
     "signer", "cose", "final"}
)  # fmt: skip
FINAL_ORIGIN_SUFFIX: Final = "final-artifact"
_HEX_RUN: Final = re.compile(r"[0-9a-f]*")


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


class ReceiptMemo:
    """What the receipts of one run share, verified once: the signer's key and the checkpoint.

    Every receipt of a bundle run carries the same sealing checkpoint note and the same signer
    text, so opening the note (form, one Ed25519 signature) and parsing its checkpoint body
    again for each receipt repeats identical work. An entry is keyed by the **exact** signer
    text and the **exact** note bytes, and is stored only after the note opened and parsed
    without error, so a note that differs in any byte (another signature, root, size or origin)
    is opened from scratch and fails exactly as it would without the memo; failures are never
    remembered. What ``verify_receipt`` checks *about* the checkpoint (origin, size, root
    length) is still checked for every receipt. Create one per run (``check_run_receipts``
    does); at most :data:`MAX_ENTRIES` notes are kept, so memory stays small whatever the input.
    """

    MAX_ENTRIES: Final = 16

    def __init__(self) -> None:
        self._checkpoints: dict[tuple[str, bytes], Checkpoint] = {}
        self._keys: dict[str, tuple[Ed25519PublicKey, str]] = {}

    def checkpoint(self, note_bytes: bytes, signer: str) -> Checkpoint:
        """The checkpoint of a note signed exactly once by ``signer`` (see ``_open_checkpoint``)."""
        slot = (signer, note_bytes)
        found = self._checkpoints.get(slot)
        if found is None:
            found = _open_checkpoint(note_bytes, signer)
            if len(self._checkpoints) < self.MAX_ENTRIES:
                self._checkpoints[slot] = found
        return found

    def key(self, vkey: VerifierKey) -> tuple[Ed25519PublicKey, str]:
        """The signer's public key object and key id (pure functions of the key bytes)."""
        found = self._keys.get(vkey.text)
        if found is None:
            found = _key(vkey)
            if len(self._keys) < self.MAX_ENTRIES:
                self._keys[vkey.text] = found
        return found


def _open_checkpoint(note_bytes: bytes, signer: str) -> Checkpoint:
    """Open the note with ``signer`` as the only key, exactly one signature; parse its body."""
    note = open_note_signed_once(note_bytes, [signer])
    return parse_checkpoint(note.text.encode("utf-8"))


def _key(vkey: VerifierKey) -> tuple[Ed25519PublicKey, str]:
    return Ed25519PublicKey.from_public_bytes(vkey.public_key), key_id(vkey.public_key)


def _is_signed_note_of(note: bytes, text: str, vkey: VerifierKey) -> bool:
    """Whether ``note`` is exactly ``text`` with one signature line by ``vkey`` that verifies,
    in the one form a signer writes (``Signature.to_line``).

    The fast path for the final-artifact note, whose text the verifier knows in advance: such
    a note is one ``open_note_signed_once`` opens, with ``vkey`` as its one verified signature
    and ``text`` as its text (``text`` is ASCII without blank lines or control characters, and
    a valid key name holds no space or newline). Anything else returns False and the caller
    opens the note the general way, which decides and words every failure as before.
    """
    text_bytes = text.encode("utf-8")
    if not note.startswith(text_bytes) or note[len(text_bytes) : len(text_bytes) + 1] != b"\n":
        return False
    line = note[len(text_bytes) + 1 :]
    b64 = line.rpartition(b" ")[2]
    if not b64.endswith(b"\n") or not b64.isascii():
        return False
    blob = strict_b64decode(b64[:-1].decode("ascii"))
    if blob is None or len(blob) != 4 + ED25519_SIGNATURE_SIZE:
        return False
    signature = Signature(vkey.name, vkey.key_hash, blob[4:])
    if signature.to_line().encode("utf-8") != line:
        return False
    return vkey.verify(text_bytes, signature.signature)


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
    # Each a 64-character string, and all of them together lowercase hex: the same test as
    # HEX64_RE.fullmatch on each (records.py), in one regular expression call.
    if not all(type(h) is str and len(h) == 64 for h in path) or not _HEX_RUN.fullmatch(
        "".join(path)
    ):
        raise ReceiptError("audit_path must hold 64-hex-digit hashes")
    return obj


def verify_receipt(
    data: bytes, *, signer: str | None = None, memo: ReceiptMemo | None = None
) -> VerifiedReceipt:
    """Verify a receipt's internal bindings and signatures (not the artifact bytes, not trust).

    ``signer``: if given, the receipt must declare exactly this verifier key (bundle check);
    otherwise the receipt's own ``signer`` is used and the caller decides trust by key id.
    ``memo``: shared by the receipts of one run, so their common checkpoint note is opened
    once (:class:`ReceiptMemo`); the outcome and every error message are the same without it.
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
        if memo is None:
            checkpoint = _open_checkpoint(note_bytes, obj["signer"])
        else:
            checkpoint = memo.checkpoint(note_bytes, obj["signer"])
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
        # verify_inclusion is this and a comparison; the root is kept for the COSE receipt,
        # which must recompute it from the same proof (known_root below).
        root = root_from_inclusion_proof(obj["leaf_index"], obj["tree_size"], leaf, path)
        if root != checkpoint.root_hash:
            verify_inclusion(obj["leaf_index"], obj["tree_size"], leaf, path, checkpoint.root_hash)
            raise ReceiptError("inclusion proof: root mismatch")  # unreachable: it raised
    except ReceiptError:
        raise
    except VerificationError as exc:
        raise ReceiptError(f"inclusion proof: {exc}") from None
    try:
        cose = base64.b64decode(obj["cose"], validate=True)
    except binascii.Error:
        raise ReceiptError("cose is not standard base64") from None
    if base64.b64encode(cose).decode("ascii") != obj["cose"]:
        raise ReceiptError("cose base64 is not in canonical form")
    public, signer_id = _key(vkey) if memo is None else memo.key(vkey)
    known: KnownRoot = (obj["leaf_index"], obj["tree_size"], leaf, tuple(path), root)
    try:
        cose_receipt = verify_inclusion_receipt(cose, public, leaf, known_root=known)
    except VerificationError as exc:
        raise ReceiptError(f"COSE receipt: {exc}") from None
    if (
        cose_receipt.tree_size != obj["tree_size"]
        or cose_receipt.leaf_index != obj["leaf_index"]
        or list(cose_receipt.path) != path
        or not hmac.compare_digest(cose_receipt.root, checkpoint.root_hash)
    ):
        raise ReceiptError("COSE receipt proves something else than the JSON proof")
    if cose_receipt.kid != bytes.fromhex(signer_id):
        raise ReceiptError("COSE receipt kid is not the signer's key id")
    final_bytes = obj["final"].encode("utf-8")
    final_text = final_note_text(run_id, record.seq, line)
    if not _is_signed_note_of(final_bytes, final_text, vkey):
        try:
            final = open_note_signed_once(final_bytes, [obj["signer"]])
        except VerificationError as exc:
            raise ReceiptError(
                f"receipt is not signed as a final artifact (a write of a merged task): {exc}"
            ) from None
        if final.text != final_text:
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
