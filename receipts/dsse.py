"""Signing DSSE v1 envelopes (the verifying side is ``harness.verify.dsse``).

The envelope is written as RFC 8785 canonical JSON with one signature::

    {"payload":"<standard base64>","payloadType":"<type>",
     "signatures":[{"keyid":"<key id>","sig":"<standard base64 Ed25519 signature>"}]}

The signature is Ed25519 over ``PAE(payloadType, payload)`` (the verifier's own ``pae``, so
writer and reader cannot disagree on the signed bytes).
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.verify.canonical import canonical_bytes
from harness.verify.dsse import pae


def sign_envelope(
    payload_type: str, payload: bytes, key: Ed25519PrivateKey, *, keyid: str
) -> bytes:
    """A canonical-JSON DSSE envelope over ``payload`` signed by ``key``.

    ``keyid`` is stored as the signature's (unauthenticated) hint; by convention it is the
    signer's key id (``harness.verify.keyids.key_id``, hex SHA-256 of the raw public key).
    """
    if type(payload_type) is not str or not payload_type:
        raise ValueError("payload_type must be a non-empty string")
    if not isinstance(payload, bytes):
        raise TypeError("payload must be bytes")
    if type(keyid) is not str:
        raise TypeError("keyid must be a string")
    signature = key.sign(pae(payload_type, payload))
    return canonical_bytes(
        {
            "payload": base64.standard_b64encode(payload).decode("ascii"),
            "payloadType": payload_type,
            "signatures": [
                {"keyid": keyid, "sig": base64.standard_b64encode(signature).decode("ascii")}
            ],
        }
    )
