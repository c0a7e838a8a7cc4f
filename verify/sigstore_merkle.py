"""Our own re-check of a Sigstore bundle's transparency-log proof (RFC 6962), independent of
the ``sigstore`` package.

``sigstore`` verifies the inclusion proof and the checkpoint itself; this module recomputes the
same facts with ``harness.verify.merkle`` from the bundle's JSON as written (not from
``sigstore``'s parsed objects), so that a bug in either implementation shows up as a
disagreement, which ``sigstore_check`` reports as an error, never silently:

- the leaf hash is SHA-256(0x00 || canonicalizedBody) and the proof path from it, for leaf
  ``inclusionProof.logIndex`` of a ``treeSize`` tree, yields ``inclusionProof.rootHash``;
- the checkpoint's body (``<origin>\\n<size>\\n<base64 root>\\n...``) names that same size and
  root (``sigstore`` compares only the root);
- a log entry without an inclusion promise (Rekor v2: nothing signs ``tlogEntries[].logIndex``)
  has ``logIndex`` equal to the proof's (a Rekor v2 log is one shard, so the two are one index);
- the checkpoint's signature line made with the log's key (key hint = the first 4 bytes of
  ``logId.keyId``, the line ``sigstore`` verifies) names the log itself: the origin line up to
  `` - `` (Rekor v1: ``<host> - <tree id>``, signer ``<host>``; Rekor v2: the origin). The name is
  outside the signature, so ``sigstore`` ignores it: without this, one checkpoint has as many
  byte forms as there are names (the malleability decision 0016 refuses for our own notes).

Bundle JSON is untrusted input: every field is type- and size-checked, nothing raises but
:class:`LogProofError`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Final

from .errors import ProofError
from .merkle import leaf_hash, root_from_inclusion_proof

__all__ = ["LogProof", "LogProofError", "read_log_proof", "recheck_log_proof"]

MAX_PROOF_HASHES: Final = 64
"""A proof for a tree of fewer than 2^63 leaves has at most 63 hashes (plus slack: none)."""
MAX_BODY_BYTES: Final = 1 << 20


class LogProofError(ValueError):
    """The log proof is malformed or does not verify; the message says which part."""


@dataclass(frozen=True)
class LogProof:
    log_index: int
    """``tlogEntries[0].logIndex`` (global for Rekor v1)."""
    proof_index: int
    """``inclusionProof.logIndex``: the leaf's index in the tree the proof is for."""
    tree_size: int
    root: bytes
    hashes: tuple[bytes, ...]
    body: bytes
    checkpoint: str
    has_promise: bool
    log_id: bytes


def _b64(value: object, what: str, limit: int = 4096) -> bytes:
    if not isinstance(value, str) or len(value) > limit * 4 // 3 + 4:
        raise LogProofError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise LogProofError(f"{what} is not valid base64") from None


def _count(value: object, what: str) -> int:
    # protobuf JSON writes 64-bit integers as strings; accept both, nothing else
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LogProofError(f"{what} is not an integer")
    text = str(value)
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise LogProofError(f"{what} is not a non-negative integer")
    return int(text)


def read_log_proof(document: Any) -> LogProof:
    """The proof of the bundle's single log entry, as written; raises :class:`LogProofError`."""
    try:
        entries = document["verificationMaterial"]["tlogEntries"]
        entry = entries[0]
        proof = entry["inclusionProof"]
        envelope = proof["checkpoint"]["envelope"]
    except (KeyError, IndexError, TypeError):
        raise LogProofError(
            "the bundle has no log entry with an inclusion proof and checkpoint"
        ) from None
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entry, dict):
        raise LogProofError("the bundle must hold exactly one log entry")
    hashes = proof.get("hashes", [])
    if not isinstance(hashes, list) or len(hashes) > MAX_PROOF_HASHES:
        raise LogProofError(f"inclusion proof hashes: a list of at most {MAX_PROOF_HASHES}")
    if not isinstance(envelope, str) or len(envelope) > 1 << 16:
        raise LogProofError("checkpoint envelope is not a string of at most 64 KiB")
    return LogProof(
        log_index=_count(entry.get("logIndex"), "log index"),
        proof_index=_count(proof.get("logIndex"), "inclusion proof log index"),
        tree_size=_count(proof.get("treeSize"), "inclusion proof tree size"),
        root=_b64(proof.get("rootHash"), "inclusion proof root hash"),
        hashes=tuple(_b64(h, f"inclusion proof hash {i}") for i, h in enumerate(hashes)),
        body=_b64(entry.get("canonicalizedBody"), "log entry body", MAX_BODY_BYTES),
        checkpoint=envelope,
        has_promise=isinstance(entry.get("inclusionPromise"), dict),
        log_id=_b64(
            entry.get("logId", {}).get("keyId") if isinstance(entry.get("logId"), dict) else None,
            "log id",
        ),
    )


def _checkpoint_size_and_root(envelope: str, log_id: bytes) -> tuple[int, bytes]:
    """The size and root of a checkpoint note's body (C2SP tlog-checkpoint, its first lines),
    after checking that the log's own signature line names the log (see the module text)."""
    note, separator, signatures = envelope.partition("\n\n")
    lines = note.split("\n")
    if not separator or len(lines) < 3:
        raise LogProofError("checkpoint: not a signed note with origin, size and root lines")
    origin = lines[0].split(" - ", 1)[0]
    for line in signatures.split("\n"):
        name, _, signature = line.removeprefix("\u2014 ").partition(" ")
        try:
            hint = base64.b64decode(signature, validate=True)[:4]
        except (binascii.Error, ValueError):
            continue  # not a signature line sigstore would use either
        if hint == log_id[:4] and name != origin:
            raise LogProofError(
                f"checkpoint: the log's signature line names {name[:80]!r}, not the log "
                f"{origin[:80]!r} of the checkpoint's origin line"
            )
    size_line = lines[1]
    if not size_line.isascii() or not size_line.isdigit() or len(size_line) > 20:
        raise LogProofError(f"checkpoint: size line {size_line[:40]!r} is not a number")
    return int(size_line), _b64(lines[2], "checkpoint root hash")


def recheck_log_proof(proof: LogProof) -> None:
    """Recompute the inclusion proof and compare it with the checkpoint; raises
    :class:`LogProofError` naming the part that does not hold."""
    try:
        computed = root_from_inclusion_proof(
            proof.proof_index, proof.tree_size, leaf_hash(proof.body), list(proof.hashes)
        )
    except ProofError as exc:
        raise LogProofError(f"inclusion proof: {exc}") from None
    if computed != proof.root:
        raise LogProofError(
            f"inclusion proof: the path from the entry's leaf hash gives root "
            f"{computed.hex()[:16]}..., the proof says {proof.root.hex()[:16]}... "
            f"(leaf {proof.proof_index} of {proof.tree_size})"
        )
    size, root = _checkpoint_size_and_root(proof.checkpoint, proof.log_id)
    if root != proof.root:
        raise LogProofError("checkpoint: its root hash is not the inclusion proof's root")
    if size != proof.tree_size:
        raise LogProofError(
            f"checkpoint: its tree size {size} is not the inclusion proof's {proof.tree_size}"
        )
    if not proof.has_promise and proof.log_index != proof.proof_index:
        raise LogProofError(
            f"log index: the entry says {proof.log_index} but its inclusion proof is for leaf "
            f"{proof.proof_index}, and no inclusion promise signs the entry's index"
        )
