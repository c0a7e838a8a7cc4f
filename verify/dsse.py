"""DSSE v1 envelopes (secure-systems-lab/dsse ``envelope.md`` and ``protocol.md``), strictly.

An envelope is a JSON object with exactly these members::

    {"payload": "<base64>", "payloadType": "<string>",
     "signatures": [{"keyid": "<optional string>", "sig": "<base64>"}, ...]}

and each signature is over the pre-authentication encoding ``PAE(payloadType, payload)``,
never over the payload alone, so the type is authenticated together with the bytes.

``verify_envelope`` checks, in this order, and raises a ``DsseError`` subclass naming the first
failure (the order matters: nothing about the payload is touched before its type is accepted):

1. size: at most ``MAX_ENVELOPE_BYTES``; strict JSON (``parse_strict_json``: duplicate keys,
   invalid UTF-8, NaN, lone surrogates are refused) -> ``MalformedEnvelopeError``;
2. shape: exactly ``payload``, ``payloadType``, ``signatures``; strings where strings belong;
   ``signatures`` a non-empty list of at most ``MAX_SIGNATURES`` objects, each with a ``sig``
   string and an optional ``keyid`` string and nothing else -> ``MalformedEnvelopeError``;
3. ``payloadType`` is in the caller's allow-list -> ``DisallowedPayloadTypeError`` (even when
   the signatures are bad too: an unexpected type is reported as such);
4. ``payload`` and every ``sig`` are strict base64 (below) -> ``MalformedEnvelopeError``;
5. at least one signature verifies over PAE under at least one given key, else
   ``UnverifiedEnvelopeError``.

Decisions (docs: this docstring; tests: tests/test_dsse.py):

* **Base64.** DSSE allows "standard or URL-safe" base64. We accept both alphabets, *with*
  ``=`` padding, and nothing else: a string holding ``-`` or ``_`` is read as URL-safe, one
  holding ``+`` or ``/`` as standard, one holding both is refused, and the decoded bytes must
  re-encode (same alphabet, padded) to exactly the input, so unpadded text, whitespace, stray
  characters and non-zero trailing bits are refused. Each byte string thus has at most two
  spellings (one per alphabet), and both decode identically (the Go reference reader,
  go-securesystemslib, also accepts padded standard and padded URL-safe). We *write* standard.
* **Signature encodings.** Ed25519: the raw 64-byte signature (RFC 8032). ECDSA P-256 with
  SHA-256: a 64-byte signature is first read as raw ``r || s`` (32 bytes each, big-endian: the
  form of the DSSE spec's own test vector), and any signature is also tried as DER (the form
  Sigstore and securesystemslib write; OpenSSL refuses non-minimal DER). Accepting both gives no
  forgery: each is a complete encoding of one ``(r, s)`` pair that must verify. ECDSA signatures
  are malleable anyway, so nothing here identifies an envelope by its signature bytes.
* **keyid is ignored for the verdict.** It is outside the signature (an unauthenticated hint,
  envelope.md), so anyone who can edit the envelope can change it. Every signature is tried
  against every given key whatever its ``keyid`` says; a ``keyid`` naming a given key (our hex
  key id, a securesystemslib id, any string) neither makes a signature count nor, when the
  signature fails, fails the envelope: that signature is simply not counted. The envelope
  passes when any one signature verifies under any one given key; invalid signatures next to a
  valid one do not matter (DSSE allows multiple signers, and a threshold is the caller's
  policy, which this function does not implement).
* **Limits.** ``MAX_ENVELOPE_BYTES`` (64 MiB) bounds memory before parsing, ``MAX_SIGNATURES``
  (16) bounds the work (signatures x keys verifications).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ec import (
    ECDSA,
    SECP256R1,
    EllipticCurvePublicKey,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from .canonical import parse_strict_json
from .errors import CanonicalEncodingError, VerificationError

PAYLOAD_TYPE_IN_TOTO: Final = "application/vnd.in-toto+json"
DEFAULT_PAYLOAD_TYPES: Final = frozenset({PAYLOAD_TYPE_IN_TOTO})

MAX_ENVELOPE_BYTES: Final = 64 << 20
"""An envelope larger than this (64 MiB) is refused before it is parsed."""

MAX_SIGNATURES: Final = 16
"""An envelope with more signatures than this is refused (bounds signatures x keys work)."""

ENVELOPE_MEMBERS: Final = frozenset({"payload", "payloadType", "signatures"})
SIGNATURE_MEMBERS: Final = frozenset({"keyid", "sig"})

_PAE_PREFIX: Final = b"DSSEv1"
_ED25519_SIG_LEN: Final = 64
_P256_RAW_SIG_LEN: Final = 64
_STD_ONLY: Final = re.compile(r"[+/]")
_URL_ONLY: Final = re.compile(r"[-_]")

PublicKey = Ed25519PublicKey | EllipticCurvePublicKey


class DsseError(VerificationError):
    """A DSSE envelope is malformed, of a disallowed type, or not signed by a given key."""


class MalformedEnvelopeError(DsseError):
    """The envelope is not strict JSON, has the wrong members or types, or bad base64."""


class DisallowedPayloadTypeError(DsseError):
    """The envelope's payloadType is not one the caller accepts."""


class UnverifiedEnvelopeError(DsseError):
    """No signature of the envelope verifies under any of the given public keys."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: the exact bytes that are signed.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, where LEN is the ASCII decimal
    byte length (of the UTF-8 encoding, for the type) with no leading zeros.
    """
    type_bytes = payload_type.encode("utf-8")
    return b" ".join(
        (
            _PAE_PREFIX,
            str(len(type_bytes)).encode("ascii"),
            type_bytes,
            str(len(payload)).encode("ascii"),
            payload,
        )
    )


def decode_base64(text: str, what: str) -> bytes:
    """Strict DSSE base64: padded standard or padded URL-safe, one spelling per alphabet.

    Raises ``MalformedEnvelopeError`` naming ``what`` (e.g. ``"payload"``).
    """
    if not text.isascii():
        raise MalformedEnvelopeError(f"{what} is not base64 (non-ASCII character)")
    url = _URL_ONLY.search(text) is not None
    if url and _STD_ONLY.search(text) is not None:
        raise MalformedEnvelopeError(f"{what} mixes the standard and URL-safe base64 alphabets")
    try:
        raw = base64.b64decode(text, altchars=b"-_" if url else None, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedEnvelopeError(f"{what} is not valid padded base64 ({exc})") from None
    again = base64.urlsafe_b64encode(raw) if url else base64.standard_b64encode(raw)
    if again.decode("ascii") != text:
        raise MalformedEnvelopeError(
            f"{what} is not canonical base64 (padding or non-zero trailing bits)"
        )
    return raw


def _check_keys(public_keys: Sequence[PublicKey]) -> None:
    for key in public_keys:
        if isinstance(key, Ed25519PublicKey):
            continue
        if isinstance(key, EllipticCurvePublicKey) and isinstance(key.curve, SECP256R1):
            continue
        raise TypeError(
            f"unsupported DSSE verification key {type(key).__name__}: "
            "only Ed25519 and ECDSA P-256 keys are accepted"
        )


def _signature_verifies(key: PublicKey, sig: bytes, message: bytes) -> bool:
    if isinstance(key, Ed25519PublicKey):
        if len(sig) != _ED25519_SIG_LEN:
            return False
        try:
            key.verify(sig, message)
        except InvalidSignature:
            return False
        return True
    candidates = [sig]  # DER
    if len(sig) == _P256_RAW_SIG_LEN:
        half = _P256_RAW_SIG_LEN // 2
        raw_as_der = encode_dss_signature(
            int.from_bytes(sig[:half], "big"), int.from_bytes(sig[half:], "big")
        )
        candidates.insert(0, raw_as_der)
    for candidate in candidates:
        try:
            key.verify(candidate, message, ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        return True
    return False


def _parse_shape(envelope: bytes) -> tuple[str, str, list[tuple[str | None, str]]]:
    """Steps 1-2: strict JSON and exact members; returns (payload b64, type, [(keyid, sig)])."""
    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise MalformedEnvelopeError(
            f"envelope is {len(envelope)} bytes, limit {MAX_ENVELOPE_BYTES}"
        )
    try:
        obj: Any = parse_strict_json(envelope)
    except CanonicalEncodingError as exc:
        raise MalformedEnvelopeError(f"envelope is not strict JSON: {exc}") from None
    if type(obj) is not dict:
        raise MalformedEnvelopeError("envelope must be a JSON object")
    if obj.keys() != ENVELOPE_MEMBERS:
        missing = sorted(ENVELOPE_MEMBERS - obj.keys())
        extra = sorted(obj.keys() - ENVELOPE_MEMBERS)
        parts = [f"missing {', '.join(missing)}" if missing else "",
                 f"unknown {', '.join(extra)}" if extra else ""]  # fmt: skip
        raise MalformedEnvelopeError(f"envelope members wrong ({'; '.join(p for p in parts if p)})")
    payload_b64, payload_type, signatures = obj["payload"], obj["payloadType"], obj["signatures"]
    if type(payload_type) is not str:
        raise MalformedEnvelopeError("payloadType must be a string")
    if type(payload_b64) is not str:
        raise MalformedEnvelopeError("payload must be a base64 string")
    if type(signatures) is not list:
        raise MalformedEnvelopeError("signatures must be a list")
    if not signatures:
        raise MalformedEnvelopeError("signatures is empty: an unsigned envelope proves nothing")
    if len(signatures) > MAX_SIGNATURES:
        raise MalformedEnvelopeError(
            f"envelope has {len(signatures)} signatures, limit {MAX_SIGNATURES}"
        )
    parsed: list[tuple[str | None, str]] = []
    for index, item in enumerate(signatures):
        if type(item) is not dict:
            raise MalformedEnvelopeError(f"signatures[{index}] must be an object")
        extra = sorted(item.keys() - SIGNATURE_MEMBERS)
        if extra:
            raise MalformedEnvelopeError(
                f"signatures[{index}] has unknown member(s) {', '.join(extra)}"
            )
        if "sig" not in item:
            raise MalformedEnvelopeError(f"signatures[{index}] lacks sig")
        sig, keyid = item["sig"], item.get("keyid")
        if type(sig) is not str:
            raise MalformedEnvelopeError(f"signatures[{index}].sig must be a base64 string")
        if "keyid" in item and type(keyid) is not str:
            raise MalformedEnvelopeError(f"signatures[{index}].keyid must be a string")
        parsed.append((keyid, sig))
    return payload_b64, payload_type, parsed


def verify_envelope(
    envelope: bytes,
    public_keys: Sequence[Ed25519PublicKey | EllipticCurvePublicKey],
    *,
    allowed_payload_types: frozenset[str] = DEFAULT_PAYLOAD_TYPES,
) -> tuple[str, bytes]:
    """Verify a DSSE envelope; return ``(payloadType, payload)`` only if a given key signed it.

    See the module docstring for the order of checks and the decisions. Raises
    ``MalformedEnvelopeError``, ``DisallowedPayloadTypeError`` or ``UnverifiedEnvelopeError``
    (all ``DsseError``); raises ``TypeError`` for a key that is neither Ed25519 nor ECDSA P-256
    (a usage error, not bad evidence). The payload is returned unparsed: its meaning (e.g. an
    in-toto Statement, ``harness.verify.intoto.parse_statement``) is the caller's next check.
    """
    _check_keys(public_keys)
    payload_b64, payload_type, signatures = _parse_shape(envelope)
    if payload_type not in allowed_payload_types:
        raise DisallowedPayloadTypeError(
            f"payloadType {payload_type[:200]!r} is not allowed "
            f"(allowed: {', '.join(sorted(allowed_payload_types)) or 'none'})"
        )
    payload = decode_base64(payload_b64, "payload")
    sigs = [
        decode_base64(sig, f"signatures[{index}].sig")
        for index, (_keyid, sig) in enumerate(signatures)
    ]
    if not public_keys:
        raise UnverifiedEnvelopeError("no public key given: nothing can verify the envelope")
    message = pae(payload_type, payload)
    for sig in sigs:
        for key in public_keys:
            if _signature_verifies(key, sig, message):
                return payload_type, payload
    raise UnverifiedEnvelopeError(
        f"none of the {len(sigs)} signature(s) verifies under any of the "
        f"{len(public_keys)} given key(s)"
    )
