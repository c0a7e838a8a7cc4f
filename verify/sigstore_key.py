"""``harness-verify sigstore FILE --bundle B --key KEY.pem --trusted-root R``: a Sigstore
bundle signed with a key instead of a Fulcio certificate (``cosign sign-blob --key``,
``verificationMaterial.publicKey``), offline.

``sigstore`` (4.x) verifies certificate bundles only: its ``Bundle`` refuses a bundle without a
certificate. The key form is assembled here from its parts, the same way: the log entry is
``sigstore``'s own ``TransparencyLogEntry`` verified against the trusted root's Rekor keys
(inclusion proof, checkpoint, inclusion promise), our RFC 6962 re-check runs beside it, the
signature is checked over the artifact's digest with the key the log entry records, and the
entry's body must name exactly that digest, signature and key. Trust is last and separate: the
key the log recorded must be the pinned ``--key`` (else ``verified-untrusted``, exit 3). There
is no certificate, so ``time``, ``certificate`` and ``sct`` are ``skipped``.

ECDSA keys only (P-256, P-384; cosign's and Rekor's usual ones): a hashedrekord signs a
digest, which Ed25519 cannot verify without the message.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from sigstore._internal.trust import KeyringPurpose
from sigstore.models import TransparencyLogEntry, TrustedRoot
from sigstore_models.rekor import v1 as rekor_v1

from .report import CheckResult, Failure, Outcome, Status
from .sigstore_check import (
    BEFORE_SIGNATURE,
    CHECK_NAMES,
    HINTS,
    MAX_BUNDLE_SIZE,
    SigstoreOutcome,
    named_log_problem,
)
from .sigstore_merkle import LogProofError, read_log_proof, recheck_log_proof

__all__ = ["KeyFileError", "load_key", "verify_key_bundle"]

_NO_CERTIFICATE: Final = ("time", "certificate", "sct")
_HASHES: Final = {"secp256r1": hashes.SHA256(), "secp384r1": hashes.SHA384()}


class KeyFileError(ValueError):
    """The ``--key`` file is not an ECDSA public key (exit 2)."""


def load_key(data: bytes, name: str) -> ec.EllipticCurvePublicKey:
    if b"PRIVATE KEY" in data:
        raise KeyFileError(f"{name} holds a private key: give the public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(f"{name} is not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _HASHES:
        raise KeyFileError(f"{name}: only ECDSA P-256 and P-384 public keys are supported")
    return key


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class _StopError(Exception):
    def __init__(
        self,
        check: str,
        reason: str,
        status: Status = Status.INVALID,
        unrun: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(reason)
        self.check, self.reason, self.status, self.unrun = check, reason, status, unrun


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise _StopError("bundle", f"{what} is missing")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _StopError("bundle", f"{what} is not base64") from None


def _body_parts(body: bytes) -> tuple[str, bytes, bytes]:
    """(digest hex, signature, SPKI DER of the key) a hashedrekord body records."""
    try:
        document = json.loads(body)
        kind, version = document["kind"], document["apiVersion"]
        spec = document["spec"]
        if kind != "hashedrekord":
            raise _StopError("artifact", f"the log entry is a {kind!r} entry, not hashedrekord")
        if version == "0.0.1":
            data = spec["data"]["hash"]
            if data["algorithm"] != "sha256":
                raise _StopError("artifact", f"the log entry hashes with {data['algorithm']!r}")
            pem = _b64(spec["signature"]["publicKey"]["content"], "the entry's key")
            key = serialization.load_pem_public_key(pem)
            signature = _b64(spec["signature"]["content"], "the entry's signature")
            digest = str(data["value"])
        elif version == "0.0.2":
            record = spec["hashedRekordV002"]
            digest = base64.b64decode(record["data"]["digest"]).hex()
            signature = base64.b64decode(record["signature"]["content"])
            raw = record["signature"]["verifier"]["publicKey"]["rawBytes"]
            key = serialization.load_der_public_key(base64.b64decode(raw))
        else:
            raise _StopError("bundle", f"hashedrekord version {version!r} is not supported")
    except _StopError:
        raise
    except (KeyError, TypeError, ValueError, UnsupportedAlgorithm) as exc:
        raise _StopError("artifact", f"the log entry's body is not a hashedrekord: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise _StopError("signature", "the log entry records a key that is not ECDSA")
    return digest, signature, _spki(key)


def _check(
    document: Any, digest: bytes, pinned: ec.EllipticCurvePublicKey, root: TrustedRoot
) -> str:
    material = document.get("verificationMaterial")
    if not isinstance(material, dict) or "publicKey" not in material:
        raise _StopError("bundle", "not a key-signed bundle (no verificationMaterial.publicKey)")
    entries = material.get("tlogEntries")
    if not isinstance(entries, list) or len(entries) != 1:
        raise _StopError("bundle", "expected exactly one log entry in bundle")
    try:
        entry = TransparencyLogEntry(rekor_v1.TransparencyLogEntry.from_dict(entries[0]))
    except Exception as exc:  # hostile input: a verdict, never a crash
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _StopError("bundle", f"the log entry does not parse: {first}") from None
    try:
        proof = read_log_proof(document)
        recheck_log_proof(proof)
        ours: str | None = named_log_problem(root, proof)
    except LogProofError as exc:
        ours = str(exc)
    try:
        entry._verify(root.rekor_keyring(KeyringPurpose.VERIFY))
    except Exception as exc:  # sigstore's VerificationError, or anything hostile input causes
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if ours is None and "inclusion proof" in message:
            message = f"disagreement: sigstore refuses an inclusion proof ours accepts: {message}"
        raise _StopError(
            "log-entry", message + (f"; our RFC 6962 re-check agrees: {ours}" if ours else "")
        ) from None
    if ours is not None:
        raise _StopError(
            "log-entry",
            f"our RFC 6962 re-check refuses what sigstore accepted: {ours}"
            if ours.startswith("inclusion proof")
            else ours,
        )
    signature_doc = document.get("messageSignature")
    if not isinstance(signature_doc, dict):
        raise _StopError("bundle", "the bundle has no messageSignature")
    signature = _b64(signature_doc.get("signature"), "messageSignature.signature")
    declared = signature_doc.get("messageDigest")
    if isinstance(declared, dict) and _b64(declared.get("digest"), "the digest") != digest:
        raise _StopError(
            "artifact",
            "the artifact's SHA-256 is not the digest the bundle signs",
            unrun=BEFORE_SIGNATURE,
        )
    logged_digest, logged_signature, logged_key = _body_parts(entry._inner.canonicalized_body)
    key = serialization.load_der_public_key(logged_key)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    if key.curve.name not in _HASHES:
        raise _StopError(
            "signature", f"the log entry's key is on {key.curve.name}, not P-256/P-384"
        )
    try:
        key.verify(signature, digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    except InvalidSignature:
        raise _StopError(
            "signature", "Signature is invalid for input (the key the log records)"
        ) from None
    if logged_digest != digest.hex():
        raise _StopError("artifact", "the log entry is for another artifact digest")
    if logged_signature != signature:
        raise _StopError("signature", "the log entry records another signature")
    if logged_key != _spki(pinned):
        raise _StopError(
            "identity",
            "key: the log entry's signing key is not the pinned --key",
            Status.UNTRUSTED,
        )
    return "signed by the pinned key"


def verify_key_bundle(
    data: bytes,
    bundle_name: str,
    digest: bytes,
    artifact_name: str,
    root: TrustedRoot,
    key: ec.EllipticCurvePublicKey,
) -> SigstoreOutcome:
    """Verify a key-signed Sigstore bundle; never raises for bad input."""
    outcome = SigstoreOutcome(artifact=artifact_name, bundle=bundle_name, sha256=digest.hex())
    try:
        if len(data) > MAX_BUNDLE_SIZE:
            raise _StopError("bundle", f"larger than {MAX_BUNDLE_SIZE} bytes", Status.UNREADABLE)
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise _StopError("bundle", "not a JSON document", Status.UNREADABLE) from None
        if not isinstance(document, dict):
            raise _StopError("bundle", "not a Sigstore bundle", Status.UNREADABLE)
        outcome.media_type = str(document.get("mediaType"))[:200]
        detail = _check(document, digest, key, root)
    except _StopError as stop:
        at = CHECK_NAMES.index(stop.check)
        for name in CHECK_NAMES[:at]:
            skipped = name in _NO_CERTIFICATE
            unrun = name in stop.unrun
            mark = Outcome.SKIPPED if skipped else Outcome.NOT_RUN if unrun else Outcome.PASSED
            outcome.checks.append(CheckResult(name, mark))
        outcome.checks.append(CheckResult(stop.check, Outcome.FAILED, stop.reason))
        outcome.checks += [CheckResult(name, Outcome.NOT_RUN) for name in CHECK_NAMES[at + 1 :]]
        outcome.failure = Failure(stop.check, stop.reason, hint=HINTS.get(stop.check, ""))
        outcome.status = stop.status
        return outcome
    for name in CHECK_NAMES[:-1]:
        skipped = name in _NO_CERTIFICATE
        outcome.checks.append(
            CheckResult(
                name,
                Outcome.SKIPPED if skipped else Outcome.PASSED,
                "no certificate: signed with a key" if skipped else "",
            )
        )
    outcome.checks.append(CheckResult("identity", Outcome.PASSED, detail))
    outcome.trusted_by = "--key"
    outcome.status = Status.VERIFIED
    return outcome
