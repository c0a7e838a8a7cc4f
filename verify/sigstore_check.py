"""Verify one Sigstore bundle for one artifact, offline, on the ``sigstore`` package.

Imported only by the commands that verify a Sigstore bundle (the ``sigstore`` extra): it
imports ``sigstore`` at module level, and every caller imports it inside a ``try`` that turns
an ``ImportError`` into the "install the extra" message (exit 2).

Nothing here opens a connection: the trusted root is given (no TUF refresh), and
``sigstore.verify.Verifier`` is built from it directly; its Rekor client object is created but
never used by verification.

The procedure (docs/spec/sigstore.md §2) runs ``sigstore``'s own verification with an identity
policy that accepts every certificate, so that integrity (time, certificate chain, SCT, log
entry, signature, artifact) is decided first and identity separately, as the bundle verifier
separates integrity from trust (decision 0008): a bundle whose every integrity check passes but
whose identity is not pinned is ``verified-untrusted`` (exit 3), not "invalid". ``sigstore``
runs its steps in a fixed order, so the step an error comes from tells which checks passed.
Our own RFC 6962 re-check (``sigstore_merkle``) runs beside it; if the two disagree on the log
entry, that is reported as a failure of ``log-entry`` naming the disagreement.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509 import (
    Certificate,
    ExtensionNotFound,
    ObjectIdentifier,
    OtherName,
    RFC822Name,
    SubjectAlternativeName,
    UniformResourceIdentifier,
)
from sigstore.dsse import Statement
from sigstore.errors import Error as SigstoreError
from sigstore.hashes import Hashed
from sigstore.models import Bundle, TrustedRoot
from sigstore.verify import Verifier
from sigstore_models.common.v1 import HashAlgorithm

from .report import EXIT_CODES, CheckResult, ExitCode, Failure, Outcome, Status
from .sigstore_identity import IdentityPin
from .sigstore_merkle import LogProof, LogProofError, read_log_proof, recheck_log_proof

__all__ = [
    "CHECKS",
    "MAX_BUNDLE_SIZE",
    "SigstoreOutcome",
    "SigstoreUsageError",
    "load_trusted_root",
    "verify_sigstore_bundle",
]

MAX_BUNDLE_SIZE: Final = 1 << 20
"""Sigstore bundles are 5-12 KiB; 1 MiB bounds the parse of a hostile one."""
IN_TOTO_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
_OIDC_ISSUER: Final = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
_OIDC_ISSUER_V2: Final = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
_OTHERNAME: Final = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")
_MEDIA_TYPES: Final = frozenset(str(kind) for kind in Bundle.BundleType)

CHECKS: Final = (
    ("bundle", "the Sigstore bundle parses: a known media type, one log entry, a certificate"),
    ("time", "a verified signing time: the log's inclusion promise or a trusted RFC 3161 TSA"),
    ("certificate", "the signing certificate chains to a CA of the trusted root at that time"),
    ("sct", "the certificate carries an SCT signed by a CT log of the trusted root"),
    (
        "log-entry",
        "the log entry: RFC 6962 inclusion proof (re-checked by our own Merkle code), a "
        "checkpoint and inclusion promise signed by a log of the trusted root",
    ),
    ("signature", "the signature over the artifact (or the DSSE envelope) verifies"),
    ("artifact", "the signed digest and the log entry are the artifact's"),
    ("identity", "the certificate's identity and OIDC issuer are pinned"),
)
CHECK_NAMES: Final = tuple(name for name, _ in CHECKS)
BEFORE_SIGNATURE: Final = frozenset({"signature"})
"""Not run when the artifact's digest is refused: the signature is checked after it."""
HINTS: Final = {
    "bundle": "Give the .sigstore.json bundle that was written for this artifact.",
    "time": "The bundle needs a log entry with an inclusion promise or a trusted timestamp.",
    "certificate": "Verify with the trusted root of the Sigstore instance that signed it "
    "(production, staging or your own), given with --trusted-root.",
    "sct": "Verify with the trusted root of the Sigstore instance that signed it.",
    "log-entry": "The transparency-log proof does not hold: treat the bundle as tampered.",
    "signature": "The signature does not match: the bundle or the artifact was altered.",
    "artifact": "The bundle is for other bytes: check that FILE is the artifact that was "
    "signed, byte for byte.",
    "identity": "Check who signed it out of band; pin that identity and issuer with "
    "--cert-identity/--cert-oidc-issuer or [trust] identities, from outside the change.",
}

# sigstore's messages, by the step of its procedure they come from (sigstore/verify/verifier.py
# and models.py, 4.5); the first pattern that a message contains decides.
_STEPS: Final = (
    ("SCT", "sct"),
    ("signed certificate timestamp", "sct"),
    ("certificate timestamp", "sct"),
    ("invalid log entry", "log-entry"),
    ("sources of verified time", "time"),
    ("signed timestamp", "time"),
    ("Timestamp", "time"),
    ("Integrated time", "time"),
    ("certificate chain", "certificate"),
    ("Key usage", "certificate"),
    ("Extended usage", "certificate"),
    ("invalid signing cert", "certificate"),
    ("message digest mismatch", "artifact"),
    ("inconsistent with other materials", "artifact"),
    ("payload hash does not match", "artifact"),
    ("signatures do not match", "signature"),
    ("no subject for digest", "artifact"),
    ("Expected entry type", "artifact"),
    ("Unsupported DSSE log entry", "artifact"),
    ("Unsupported hashedrekord", "artifact"),
    ("Signature is invalid", "signature"),
    ("DSSE", "signature"),
    ("Missing bundle message signature", "signature"),
)


class SigstoreUsageError(ValueError):
    """The trusted root cannot be used (exit 2: it is a trust input, like a policy file)."""


@dataclass
class SigstoreOutcome:
    """What ``harness-verify sigstore`` found; rendered by ``sigstore_render``."""

    artifact: str
    bundle: str
    status: Status = Status.INVALID
    checks: list[CheckResult] = field(default_factory=list)
    failure: Failure | None = None
    media_type: str | None = None
    log_entry: str | None = None
    """``kind/version`` of the log entry, e.g. ``hashedrekord/0.0.2``."""
    log_index: int | None = None
    identities: tuple[str, ...] = ()
    """The certificate's SANs (once the bundle parsed)."""
    issuer: str | None = None
    trusted_by: str | None = None
    """The pin that matched (only when ``verified``)."""
    sha256: str = ""
    """Hex SHA-256 of the artifact verified."""

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.status]


class _AcceptAnyIdentity:
    """``sigstore``'s policy slot, filled with "accept": identity is decided afterwards,
    against the pins, so that a wrong identity is "untrusted", not "invalid"."""

    def verify(self, cert: Certificate) -> None:
        return None


def load_trusted_root(data: bytes, name: str) -> TrustedRoot:
    """Parse a trusted root; raises :class:`SigstoreUsageError` naming what is wrong."""
    from sigstore_models.trustroot import v1 as trustroot_v1

    try:
        root = TrustedRoot(trustroot_v1.TrustedRoot.from_json(data))
        root.get_fulcio_certs()
        Verifier(trusted_root=root)
    except (SigstoreError, ValueError, TypeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SigstoreUsageError(f"trusted root {name} cannot be used: {first}") from None
    return root


def _sans(cert: Certificate) -> tuple[str, ...]:
    try:
        names = cert.extensions.get_extension_for_class(SubjectAlternativeName).value
    except ExtensionNotFound:
        return ()
    found = [*names.get_values_for_type(RFC822Name)]
    found += names.get_values_for_type(UniformResourceIdentifier)
    for other in names.get_values_for_type(OtherName):
        if other.type_id == _OTHERNAME:
            # Sigstore's otherName is a DER UTF8String (tag 0x0c, short or long length)
            raw = other.value
            if len(raw) >= 2 and raw[0] == 0x0C:
                start = 2 if raw[1] < 0x80 else 2 + (raw[1] & 0x7F)
                found.append(raw[start:].decode("utf-8", "replace"))
    return tuple(found)


def _issuer(cert: Certificate) -> str | None:
    """The OIDC issuer: extension .1.1 (raw UTF-8) or, for newer certificates only carrying
    it, .1.8 (a DER UTF8String)."""
    values: dict[ObjectIdentifier, bytes] = {}
    for extension in cert.extensions:
        if extension.oid in (_OIDC_ISSUER, _OIDC_ISSUER_V2):
            raw = getattr(extension.value, "value", b"")
            values[extension.oid] = raw if isinstance(raw, bytes) else b""
    raw = values.get(_OIDC_ISSUER)
    if raw is not None:
        return raw.decode("utf-8", "replace")
    der = values.get(_OIDC_ISSUER_V2)
    if der is not None and len(der) >= 2 and der[0] == 0x0C and der[1] < 0x80:
        return der[2:].decode("utf-8", "replace")
    return None


def named_log_problem(root: TrustedRoot, proof: LogProof) -> str | None:
    """Why the checkpoint is not signed by the log the entry names, or ``None``.

    sigstore looks the log key up by the entry's ``logId`` but, when no key has that id (the
    Ed25519 logs of Rekor v2, whose ids are not the SHA-256 of their key), tries every log key
    of the trusted root: an entry could name one log and carry a checkpoint of another. Here the
    entry's log id MUST be a transparency log of the trusted root, and that log's own key MUST
    verify the checkpoint line with its key hint (docs/spec/sigstore.md §2.2)."""
    logs = {bytes(tlog.log_id.key_id): tlog for tlog in root._inner.tlogs}
    tlog = logs.get(proof.log_id)
    if tlog is None:
        shown = base64.b64encode(proof.log_id).decode()[:60]
        return f"log id: the entry's log {shown} is not a transparency log of the trusted root"
    try:
        key = serialization.load_der_public_key(bytes(tlog.public_key.raw_bytes or b""))
    except (ValueError, UnsupportedAlgorithm):
        return None  # a root key we cannot load: sigstore's own check decides
    note, _, signatures = proof.checkpoint.partition("\n\n")
    text = (note + "\n").encode()
    for line in signatures.split("\n"):
        _, _, signature = line.removeprefix("\u2014 ").partition(" ")
        try:
            raw = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            continue
        if raw[:4] != proof.log_id[:4]:
            continue
        try:
            if isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(raw[4:], text)
            elif isinstance(key, ec.EllipticCurvePublicKey):
                digest = hashes.SHA384() if key.curve.key_size == 384 else hashes.SHA256()
                key.verify(raw[4:], text, ec.ECDSA(digest))
            else:
                return None  # RSA logs: sigstore's own check decides
        except InvalidSignature:
            return (
                f"checkpoint: not signed by the key of the log the entry names "
                f"({tlog.base_url[:80]})"
            )
        return None
    return f"checkpoint: no signature line of the log the entry names ({tlog.base_url[:80]})"


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(part) for part in exc.args) if exc.args else type(exc).__name__
    return text.strip().splitlines()[0][:400] if text.strip() else type(exc).__name__


def _step_of(message: str) -> str:
    for pattern, step in _STEPS:
        if pattern in message:
            return step
    return "log-entry" if "checkpoint" in message or "inclusion" in message else "signature"


def _explain(step: str, message: str) -> str:
    """sigstore's message, prefixed with what it means in our terms."""
    if step == "log-entry":
        if "SET" in message or "inclusion promise" in message:
            return (
                "inclusion promise (SET) does not verify: the entry's log index, integrated "
                f"time, log id or body is not what the log signed ({message})"
            )
        if "checkpoint" in message:
            return f"checkpoint does not verify with a log key of the trusted root ({message})"
        if "inclusion proof" in message:
            return f"inclusion proof does not verify ({message})"
    if step == "artifact" and "digest mismatch" in message:
        return f"the artifact's SHA-256 is not the digest the bundle signs ({message})"
    if step == "certificate":
        return f"signing certificate: {message}"
    return message


class _Run:
    def __init__(self, outcome: SigstoreOutcome) -> None:
        self.outcome = outcome

    def stop(
        self,
        check: str,
        reason: str,
        status: Status = Status.INVALID,
        unrun: frozenset[str] = frozenset(),
    ) -> SigstoreOutcome:
        """``check`` failed: every earlier check passed (but ``unrun``: earlier in the table,
        later in sigstore's procedure), every later one did not run."""
        outcome = self.outcome
        at = CHECK_NAMES.index(check)
        done = {result.name for result in outcome.checks}
        outcome.checks += [
            CheckResult(name, Outcome.NOT_RUN if name in unrun else Outcome.PASSED)
            for name in CHECK_NAMES[:at]
            if name not in done
        ]
        outcome.checks.append(CheckResult(check, Outcome.FAILED, reason))
        outcome.checks += [CheckResult(name, Outcome.NOT_RUN) for name in CHECK_NAMES[at + 1 :]]
        outcome.failure = Failure(check, reason, hint=HINTS.get(check, ""))
        outcome.status = status
        return outcome


def _parse(data: bytes, run: _Run) -> tuple[Bundle, Any] | SigstoreOutcome:
    if len(data) > MAX_BUNDLE_SIZE:
        return run.stop("bundle", f"larger than {MAX_BUNDLE_SIZE} bytes", Status.UNREADABLE)
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return run.stop("bundle", "not a JSON document", Status.UNREADABLE)
    media = document.get("mediaType") if isinstance(document, dict) else None
    if not isinstance(media, str) or media not in _MEDIA_TYPES:
        shown = media if isinstance(media, str) else type(media).__name__
        return run.stop(
            "bundle",
            f"unsupported bundle format: mediaType {shown[:100]!r} (known: Sigstore bundle "
            "v0.1, v0.2, v0.3)",
            Status.UNREADABLE,
        )
    run.outcome.media_type = media
    try:
        bundle = Bundle.from_json(data)
    except Exception as exc:  # hostile input: any failure is a verdict, never a crash
        message = _first_line(exc)
        # schema-level errors (pydantic's) are an unreadable input; a well-formed bundle that
        # lacks what verification needs (certificate, log entry, checkpoint) is invalid
        status = Status.UNREADABLE if "failed to load bundle" in message else Status.INVALID
        return run.stop("bundle", message, status)
    kind = bundle.log_entry._inner.kind_version
    run.outcome.log_entry = f"{kind.kind}/{kind.version}"
    run.outcome.log_index = int(bundle.log_entry._inner.log_index)
    try:  # the certificate's extensions are parsed lazily, and may be malformed
        run.outcome.identities = _sans(bundle.signing_certificate)
        run.outcome.issuer = _issuer(bundle.signing_certificate)
    except Exception as exc:  # hostile input: a verdict, never a crash
        return run.stop("certificate", f"signing certificate: {_first_line(exc)}")
    return bundle, document


def _verify_with_sigstore(
    verifier: Verifier, bundle: Bundle, digest: bytes
) -> tuple[str, str] | None:
    """Run sigstore; ``(step, message)`` of the first failure, or ``None``."""
    hashed = Hashed(algorithm=HashAlgorithm.SHA2_256, digest=digest)
    try:
        if bundle._dsse_envelope is not None:
            payload_type, payload = verifier.verify_dsse(bundle, _AcceptAnyIdentity())
            if payload_type != IN_TOTO_PAYLOAD_TYPE:
                return "artifact", f"the DSSE payload is {payload_type!r}, not an in-toto statement"
            if not Statement(payload)._matches_digest(hashed):
                return "artifact", (
                    f"the in-toto statement has no subject with the artifact's SHA-256 "
                    f"{digest.hex()}"
                )
        else:
            verifier.verify_artifact(hashed, bundle, _AcceptAnyIdentity())
    except Exception as exc:  # hostile input: any failure is a verdict, never a crash
        message = _first_line(exc)
        return _step_of(message), message
    return None


def verify_sigstore_bundle(
    bundle_data: bytes,
    bundle_name: str,
    digest: bytes,
    artifact_name: str,
    root: TrustedRoot,
    pins: Sequence[IdentityPin],
) -> SigstoreOutcome:
    """Verify a Sigstore bundle for the artifact whose SHA-256 is ``digest``; never raises
    for bad input. With no ``pins``, a bundle whose integrity verifies is ``verified-untrusted``.
    """
    outcome = SigstoreOutcome(artifact=artifact_name, bundle=bundle_name, sha256=digest.hex())
    run = _Run(outcome)
    parsed = _parse(bundle_data, run)
    if isinstance(parsed, SigstoreOutcome):
        return parsed
    bundle, document = parsed
    try:
        proof = read_log_proof(document)
        recheck_log_proof(proof)
        ours: str | None = named_log_problem(root, proof)
    except LogProofError as exc:
        ours = str(exc)
    failed = _verify_with_sigstore(Verifier(trusted_root=root), bundle, digest)
    theirs_failed_log = failed is not None and failed[0] == "log-entry"
    log_step = CHECK_NAMES.index("log-entry")
    reached_log = failed is None or CHECK_NAMES.index(failed[0]) >= log_step
    if reached_log and ours is not None and not theirs_failed_log:
        return run.stop(
            "log-entry",
            f"our RFC 6962 re-check refuses what sigstore accepted: {ours}"
            if ours.startswith("inclusion proof")
            else ours,
        )
    if theirs_failed_log and ours is None:
        assert failed is not None
        message = _explain(*failed)
        if "inclusion proof" in message and "SET" not in failed[1]:
            return run.stop(
                "log-entry",
                f"disagreement: sigstore refuses an inclusion proof our RFC 6962 code accepts: "
                f"{message}",
            )
        return run.stop("log-entry", message)
    if failed is not None:
        step, message = failed
        text = _explain(step, message)
        if step == "artifact" and "digest mismatch" in message:
            # sigstore compares messageDigest with the file before it checks the signature
            return run.stop(step, text, unrun=BEFORE_SIGNATURE)
        if step == "log-entry" and ours is not None:
            text += f"; our RFC 6962 re-check agrees: {ours}"
        return run.stop(step, text)
    return _judge_identity(run, pins)


def _judge_identity(run: _Run, pins: Sequence[IdentityPin]) -> SigstoreOutcome:
    outcome = run.outcome
    sans, issuer = outcome.identities, outcome.issuer
    shown = ", ".join(sans) or "none"
    if not pins:
        return run.stop(
            "identity",
            f"integrity verified but no identity is pinned (certificate identity {shown}, "
            f"issuer {issuer})",
            Status.UNTRUSTED,
        )
    for pin in pins:
        if pin.issuer == issuer and pin.matches_identity(sans):
            outcome.checks += [CheckResult(name, Outcome.PASSED) for name in CHECK_NAMES[:-1]]
            outcome.checks.append(
                CheckResult("identity", Outcome.PASSED, f"{shown} pinned as {pin.describe()}")
            )
            outcome.trusted_by = pin.describe()
            outcome.status = Status.VERIFIED
            return outcome
    wanted = "; ".join(pin.describe() for pin in pins)
    issuers = {pin.issuer for pin in pins}
    if issuer not in issuers:
        reason = f"issuer: the certificate's OIDC issuer is {issuer}, not the pinned {wanted}"
    else:
        reason = f"identity: the certificate's identity is {shown}, not the pinned {wanted}"
    return run.stop("identity", reason, Status.UNTRUSTED)


def sha256_file(handle: Any, limit: int) -> bytes:
    """SHA-256 of a readable binary stream of at most ``limit`` bytes (ValueError beyond)."""
    digest = hashlib.sha256()
    total = 0
    while chunk := handle.read(1 << 20):
        total += len(chunk)
        if total > limit:
            raise ValueError(f"larger than {limit} bytes")
        digest.update(chunk)
    return digest.digest()
