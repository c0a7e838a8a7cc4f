"""Ed25519 signature checks, with the repeated ones remembered.

A bundle's receipts repeat the same signatures: every receipt of a run carries the same sealing
checkpoint note, and the COSE receipts of one tree size sign the same root under the same
protected header (RFC 9942 keeps the proof in the unprotected header), so a bundle of *n*
receipts asked OpenSSL 3n times for about n + 2 distinct answers. Verification is a pure
function of (public key, signature, message): a remembered ``True`` for the same three byte
strings is the same answer, and a ``False`` is remembered as well. Only small messages
(notes, COSE ``Sig_structure`` blocks) are remembered, in a bounded cache, so memory stays
small whatever the input.
"""

from __future__ import annotations

import functools
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

CACHED_MESSAGE_BYTES: Final = 4096
"""Messages up to this size are remembered (a checkpoint note, a COSE Sig_structure)."""
CACHE_ENTRIES: Final = 512

__all__ = ["verify_ed25519"]


def _verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


_verify_remembered = functools.lru_cache(maxsize=CACHE_ENTRIES)(_verify)


def verify_ed25519(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is a valid Ed25519 signature of ``message`` by the raw 32-byte
    ``public_key``; never raises for bad bytes (a malformed key or signature is ``False``)."""
    public_key, signature, message = bytes(public_key), bytes(signature), bytes(message)
    if len(message) > CACHED_MESSAGE_BYTES:
        return _verify(public_key, signature, message)
    return _verify_remembered(public_key, signature, message)
