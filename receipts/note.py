"""Signing C2SP signed notes (c2sp.org/signed-note) with Ed25519.

The counterpart of :mod:`harness.verify.note`: whatever this module writes, ``open_note`` reads
back with the signer's verifier key. Key IDs and signature lines are computed by the verify side
(one implementation of the format, not two).

Signer keys can be read in the golang.org/x/mod/sumdb/note text form
``PRIVATE+KEY+name+hhhhhhhh+base64(0x01 || 32-byte seed)``; that text is a secret and is never
put into an error message or a ``repr``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.verify.note import (
    ALG_ED25519,
    MAX_SIGNATURES,
    Signature,
    VerifierKey,
    is_valid_key_name,
    parse_unverified_note,
    strict_b64decode,
)

__all__ = ["NoteSigner", "parse_signer_key", "sign_note"]

_SIGNER_KEY_PREFIX = "PRIVATE+KEY+"
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")
_FORBIDDEN_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f]")


def _note_text(text: str | bytes) -> bytes:
    """The note text as bytes, refused (``ValueError("malformed note...")``) unless it is valid
    UTF-8 without control characters other than newline and ends in a newline."""
    if isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("malformed note: text is not valid UTF-8") from None
    elif isinstance(text, bytes | bytearray | memoryview):
        data = bytes(text)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("malformed note: text is not valid UTF-8") from None
    else:
        raise TypeError("note text must be str or bytes")
    if not data.endswith(b"\n"):
        raise ValueError("malformed note: text must end in a newline")
    if _FORBIDDEN_CONTROL.search(data) is not None:
        raise ValueError("malformed note: text contains a control character other than newline")
    return data


class NoteSigner:
    """Signs note texts with one Ed25519 key under one key name."""

    def __init__(self, private_key: Ed25519PrivateKey, name: str) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError("private_key must be an Ed25519PrivateKey")
        if not isinstance(name, str) or not is_valid_key_name(name):
            raise ValueError("invalid signer: key name must be non-empty, without spaces or '+'")
        self._private_key = private_key
        self._verifier = VerifierKey.from_ed25519(name, private_key.public_key().public_bytes_raw())

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        """A signer with a fresh random key."""
        return cls(Ed25519PrivateKey.generate(), name)

    @property
    def name(self) -> str:
        return self._verifier.name

    @property
    def key_hash(self) -> int:
        """The key ID, ``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` big-endian."""
        return self._verifier.key_hash

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return self._verifier.public_key

    @property
    def verifier(self) -> VerifierKey:
        return self._verifier

    def verifier_key(self) -> str:
        """The verifier key text ``name+hhhhhhhh+base64(0x01 || public key)``."""
        return self._verifier.text

    def signer_key(self) -> str:
        """The **secret** signer key text ``PRIVATE+KEY+name+hhhhhhhh+base64(0x01 || seed)``."""
        seed = self._private_key.private_bytes_raw()
        key64 = base64.b64encode(bytes([ALG_ED25519]) + seed).decode("ascii")
        return f"{_SIGNER_KEY_PREFIX}{self.name}+{self.key_hash:08x}+{key64}"

    def signature(self, text: str | bytes) -> Signature:
        """This key's signature of the note text (which must end in a newline)."""
        return Signature(self.name, self.key_hash, self._private_key.sign(_note_text(text)))

    def sign(self, text: str | bytes) -> bytes:
        """A complete signed note: ``text``, a blank line and this key's signature line."""
        return sign_note(text, [self])

    def add_signature(self, signed_note: bytes) -> bytes:
        """Add this key's signature to an existing signed note (e.g. a witness cosignature).

        Existing signature lines are kept in order, except one by this same key (name and key
        ID), which the new signature replaces; the new line goes last. **Existing signatures are
        not verified here** — open the note with ``open_note`` first if that matters. Raises
        ``MalformedNoteError`` if ``signed_note`` is not a well-formed note.
        """
        parsed = parse_unverified_note(signed_note)
        return sign_note(parsed.text, [self], existing=parsed.unverified)

    def __repr__(self) -> str:
        return f"NoteSigner(name={self.name!r}, key_hash={self.key_hash:08x})"


def sign_note(
    text: str | bytes,
    signers: Sequence[NoteSigner],
    existing: Sequence[Signature] = (),
) -> bytes:
    """Sign ``text`` with every signer and return the encoded note.

    ``existing`` signatures are written first (skipping any by a key among ``signers``), then
    one new line per distinct signer, in order — the order golang.org/x/mod/sumdb/note's
    ``Sign`` uses. Raises ``ValueError("malformed note...")`` for a bad text, and ``ValueError``
    when there is no signer or the note would exceed the verifier's signature limit.
    """
    data = _note_text(text)
    if not signers:
        raise ValueError("sign_note needs at least one signer")
    new: dict[tuple[str, int], Signature] = {}
    for signer in signers:
        new.setdefault((signer.name, signer.key_hash), signer.signature(data))
    kept = [s for s in dict.fromkeys(existing) if (s.name, s.key_hash) not in new]
    for sig in kept:
        if not is_valid_key_name(sig.name) or not 0 <= sig.key_hash < 2**32 or not sig.signature:
            raise ValueError("malformed note: invalid existing signature")
    lines = [*kept, *new.values()]
    if len(lines) > MAX_SIGNATURES:
        raise ValueError(f"a note may carry at most {MAX_SIGNATURES} signatures")
    return data + b"\n" + "".join(s.to_line() for s in lines).encode("utf-8")


def parse_signer_key(text: str) -> NoteSigner:
    """Read a Go signer key ``PRIVATE+KEY+name+hhhhhhhh+base64(0x01 || 32-byte seed)``.

    Checks the name, the algorithm byte, the seed length and that the key ID matches the
    derived public key. Raises ``ValueError`` (never quoting the secret) on any malformation.
    """
    if not isinstance(text, str) or not text.startswith(_SIGNER_KEY_PREFIX):
        raise ValueError("malformed signer key: expected PRIVATE+KEY+name+hash+key")
    name, sep1, rest = text[len(_SIGNER_KEY_PREFIX) :].partition("+")
    hash16, sep2, key64 = rest.partition("+")
    if not sep1 or not sep2 or not is_valid_key_name(name):
        raise ValueError("malformed signer key: expected PRIVATE+KEY+name+hash+key")
    if _HEX8.fullmatch(hash16) is None:
        raise ValueError("malformed signer key: key ID must be 8 hex digits")
    key = strict_b64decode(key64)
    if not key:
        raise ValueError("malformed signer key: key is not canonical non-empty base64")
    if key[0] != ALG_ED25519:
        raise ValueError("malformed signer key: unknown algorithm")
    if len(key) != 33:
        raise ValueError("malformed signer key: Ed25519 seed must be 32 bytes")
    signer = NoteSigner(Ed25519PrivateKey.from_private_bytes(key[1:]), name)
    if signer.key_hash != int(hash16, 16):
        raise ValueError("malformed signer key: key ID does not match the key")
    return signer
