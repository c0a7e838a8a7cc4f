"""Key identifiers shared by signer and verifier.

A key id is the lowercase hex SHA-256 of the raw 32-byte Ed25519 public key: it names a key
independently of file formats. The signed-note key name embeds its first 16 hex digits so a
human can tell keys apart in a checkpoint.
"""

from __future__ import annotations

import hashlib
from typing import Final

NOTE_KEY_NAME_PREFIX: Final = "harness-"


def key_id(public_raw: bytes) -> str:
    """Hex SHA-256 of the raw Ed25519 public key."""
    return hashlib.sha256(public_raw).hexdigest()


def note_key_name(key_id_hex: str) -> str:
    """Signed-note key name for an operator key."""
    return f"{NOTE_KEY_NAME_PREFIX}{key_id_hex[:16]}"
