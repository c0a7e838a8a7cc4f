"""C2SP signed notes (c2sp.org/signed-note), Ed25519 only: opening and verifying.

A signed note is UTF-8 text ending in a newline, a blank line, then one or more signature lines
``"— " name " " base64(key ID || signature) "\\n"`` (U+2014 EM DASH, space). The signed message
is the note text *including* its final newline and *excluding* the separating blank line.

Why the rules are strict here: the verifier must accept exactly one byte string per note, so

* the whole note must be valid UTF-8 with no ASCII control characters other than newline
  (spec MUST);
* base64 is decoded strictly *and* must re-encode to the same text, so padding variants and
  non-zero trailing bits are refused (stricter than Go's ``StdEncoding``, which accepts
  non-zero trailing bits; the spec names RFC 4648 §4 but not the canonical form);
* at most :data:`MAX_SIGNATURES` signature lines are read (as golang.org/x/mod/sumdb/note).

Verification policy (signed-note §Signatures, with the Go reference behaviour noted):

* a note carries at most one signature line per (key name, key ID): a second line for the
  same key, identical or not, is :class:`MalformedNoteError` (stricter than Go, which keeps
  identical lines once and checks only the first by a known key: two byte forms for one note);
* a signature whose (key name, key ID) pair matches no known key is kept as *unverified*;
* every signature whose pair matches a known key is verified — the spec says verifiers MUST —
  and one that fails makes the whole note fail with :class:`InvalidSignatureError`;
* if no known key verified, :class:`UnverifiedNoteError`.

Only signature type ``0x01`` (Ed25519) is supported. Verifier keys use the Go text form
``name+hhhhhhhh+base64(0x01 || 32-byte public key)`` with the key ID
``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` read as a big-endian ``uint32``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .ed25519 import verify_ed25519
from .errors import InvalidSignatureError, MalformedNoteError, UnverifiedNoteError

__all__ = [
    "ALG_ED25519",
    "ED25519_PUBLIC_KEY_SIZE",
    "ED25519_SIGNATURE_SIZE",
    "MAX_SIGNATURES",
    "Note",
    "Signature",
    "VerifierKey",
    "is_valid_key_name",
    "key_hash",
    "open_note",
    "parse_unverified_note",
    "parse_verifier_key",
    "strict_b64decode",
]

ALG_ED25519 = 0x01
"""Signature type identifier byte of Ed25519 (signed-note §Signature types)."""

ED25519_PUBLIC_KEY_SIZE = 32
ED25519_SIGNATURE_SIZE = 64

MAX_SIGNATURES = 100
"""Most signature lines a note may carry (the spec requires at least 16; Go uses 100)."""

SIGNATURE_PREFIX = "— "
"""U+2014 EM DASH and a space: how every signature line starts."""

_SIG_PREFIX_BYTES = SIGNATURE_PREFIX.encode("utf-8")

# ASCII control characters other than newline. UTF-8 multi-byte sequences never contain bytes
# below 0x80, so a byte-level search is exact.
_FORBIDDEN_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f]")

_HEX8 = re.compile(r"[0-9a-fA-F]{8}")

# Unicode White_Space (PropList.txt), the set Go's unicode.IsSpace tests. Spelled out rather
# than using str.isspace(), whose set depends on the Python build's Unicode database and which
# also includes U+001C..U+001F.
_UNICODE_SPACES = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def strict_b64decode(text: str) -> bytes | None:
    """Decode standard padded base64 (RFC 4648 §4), accepting only the canonical encoding.

    Returns ``None`` when ``text`` is not exactly ``base64(decoded)``: characters outside the
    alphabet, missing or extra padding, whitespace, or non-zero trailing bits.
    """
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(raw).decode("ascii") != text:
        return None
    return raw


def is_valid_key_name(name: str) -> bool:
    """Whether ``name`` is a valid key name: non-empty, valid UTF-8, no Unicode spaces, no ``+``.

    ASCII control characters are refused too: a note may not contain them, so a key name
    holding one could never appear in a signature line.
    """
    if not name or "+" in name:
        return False
    return not any(ch in _UNICODE_SPACES or ch < " " or "\ud800" <= ch <= "\udfff" for ch in name)


def key_hash(name: str, key_data: bytes) -> int:
    """Key ID: ``SHA-256(name || 0x0A || key_data)[:4]`` as a big-endian ``uint32``.

    ``key_data`` is the signature type byte followed by the encoded public key
    (``0x01 || 32 bytes`` for Ed25519).
    """
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + key_data).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: key name, key ID and the raw signature bytes.

    ``signature`` is what follows the 4-byte key ID in the decoded base64.
    """

    name: str
    key_hash: int
    signature: bytes

    def to_line(self) -> str:
        """The signature line, ``"— name base64(key ID || signature)\\n"``."""
        blob = self.key_hash.to_bytes(4, "big") + self.signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode('ascii')}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text (with final newline) and its signatures.

    ``verified`` holds one signature per known key that signed; ``unverified`` the signatures
    by keys not in the verifier list. The text is authenticated only if ``verified`` is
    non-empty — :func:`open_note` guarantees that; :func:`parse_unverified_note` does not.
    """

    text: str
    verified: tuple[Signature, ...]
    unverified: tuple[Signature, ...]


@dataclass(frozen=True)
class VerifierKey:
    """An Ed25519 note verifier key: key name, key ID and 32-byte public key.

    Construction checks that the key ID is the one the name and key determine, so an instance
    is always self-consistent.
    """

    name: str
    key_hash: int
    public_key: bytes

    def __post_init__(self) -> None:
        if not is_valid_key_name(self.name):
            raise MalformedNoteError("verifier key: invalid key name")
        if len(self.public_key) != ED25519_PUBLIC_KEY_SIZE:
            raise MalformedNoteError(
                f"verifier key {self.name}: Ed25519 public key must be "
                f"{ED25519_PUBLIC_KEY_SIZE} bytes, got {len(self.public_key)}"
            )
        expected = key_hash(self.name, bytes([ALG_ED25519]) + self.public_key)
        if self.key_hash != expected:
            raise MalformedNoteError(
                f"verifier key {self.name}: key ID {self.key_hash:08x} does not match "
                f"the key (expected {expected:08x})"
            )

    @classmethod
    def from_ed25519(cls, name: str, public_key: bytes) -> VerifierKey:
        """The verifier key for ``name`` and a raw 32-byte Ed25519 public key."""
        return cls(name, key_hash(name, bytes([ALG_ED25519]) + public_key), public_key)

    @property
    def text(self) -> str:
        """The Go/C2SP text form ``name+hhhhhhhh+base64(0x01 || public key)``."""
        key64 = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_hash:08x}+{key64}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is a valid Ed25519 signature of ``message`` by this key."""
        if len(signature) != ED25519_SIGNATURE_SIZE:
            return False
        return verify_ed25519(self.public_key, signature, message)


@functools.lru_cache(maxsize=64)  # pure; a bundle names one signer key thousands of times
def parse_verifier_key(text: str) -> VerifierKey:
    """Parse a verifier key ``name+hhhhhhhh+base64(0x01 || 32-byte Ed25519 public key)``.

    Raises :class:`MalformedNoteError` on a bad name, a key ID that is not 8 hex digits or does
    not match the key, bad base64, an algorithm byte other than ``0x01`` or a key that is not
    32 bytes. As in Go, the hex key ID may use either letter case.
    """
    if not isinstance(text, str):
        raise TypeError("verifier key must be a str")
    name, sep1, rest = text.partition("+")
    hash16, sep2, key64 = rest.partition("+")
    if not sep1 or not sep2:
        raise MalformedNoteError("verifier key: expected name+hash+key")
    if not is_valid_key_name(name):
        raise MalformedNoteError("verifier key: invalid key name")
    if _HEX8.fullmatch(hash16) is None:
        raise MalformedNoteError(f"verifier key {name}: key ID must be 8 hex digits")
    key = strict_b64decode(key64)
    if not key:
        raise MalformedNoteError(f"verifier key {name}: key is not canonical non-empty base64")
    if int(hash16, 16) != key_hash(name, key):
        raise MalformedNoteError(f"verifier key {name}: key ID does not match the key")
    if key[0] != ALG_ED25519:
        raise MalformedNoteError(f"verifier key {name}: unknown algorithm 0x{key[0]:02x}")
    if len(key) != 1 + ED25519_PUBLIC_KEY_SIZE:
        raise MalformedNoteError(
            f"verifier key {name}: Ed25519 key must be {ED25519_PUBLIC_KEY_SIZE} bytes"
        )
    return VerifierKey(name, int(hash16, 16), key[1:])


def _parse_signature_line(line: bytes) -> Signature:
    if not line.startswith(_SIG_PREFIX_BYTES):
        raise MalformedNoteError("signature line does not start with '— '")
    # The note is valid UTF-8 and the prefix is whole characters, so this cannot fail.
    rest = line[len(_SIG_PREFIX_BYTES) :].decode("utf-8")
    name, sep, b64 = rest.partition(" ")
    if not sep or not b64:
        raise MalformedNoteError("signature line: expected '— name signature'")
    if not is_valid_key_name(name):
        raise MalformedNoteError("signature line: invalid key name")
    raw = strict_b64decode(b64)
    if raw is None:
        raise MalformedNoteError(f"signature line {name}: signature is not canonical base64")
    if len(raw) < 5:
        raise MalformedNoteError(f"signature line {name}: signature too short")
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def _split_note(note: bytes) -> tuple[bytes, str, list[Signature]]:
    """Check the note's form; return the signed text bytes, the text and its signature lines."""
    if not isinstance(note, bytes | bytearray | memoryview):
        raise TypeError("a signed note must be bytes")
    data = bytes(note)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedNoteError("note is not valid UTF-8") from None
    if _FORBIDDEN_CONTROL.search(data) is not None:
        raise MalformedNoteError("note contains an ASCII control character other than newline")
    split = data.rfind(b"\n\n")
    if split < 0:
        raise MalformedNoteError("note has no blank line before its signatures")
    text, block = data[: split + 1], data[split + 2 :]
    if not block or not block.endswith(b"\n"):
        raise MalformedNoteError("note signatures must end in a newline")
    lines = block[:-1].split(b"\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNoteError(f"note has more than {MAX_SIGNATURES} signatures")
    sigs = [_parse_signature_line(line) for line in lines]
    seen: set[tuple[str, int]] = set()
    for sig in sigs:
        slot = (sig.name, sig.key_hash)
        if slot in seen:
            # Two lines for one key would give one note two byte forms (and Go would check
            # only the first): exactly one signature line per signer key.
            raise MalformedNoteError(
                f"note has more than one signature line for key {sig.name[:80]}+{sig.key_hash:08x}"
            )
        seen.add(slot)
    return text, text.decode("utf-8"), sigs


def parse_unverified_note(note: bytes) -> Note:
    """Check a note's form and return it **without verifying anything**.

    Every signature goes to ``unverified`` (identical lines once). The text must not be trusted;
    this exists for diagnostics and for adding a cosignature to a note. Raises
    :class:`MalformedNoteError` exactly where :func:`open_note` would.
    """
    _, text, sigs = _split_note(note)
    return Note(text, (), tuple(dict.fromkeys(sigs)))


def _known_keys(
    verifier_keys: Iterable[str | VerifierKey],
) -> dict[tuple[str, int], VerifierKey]:
    if isinstance(verifier_keys, str | bytes):
        raise TypeError("verifier_keys must be a sequence of keys, not a single string")
    known: dict[tuple[str, int], VerifierKey] = {}
    for item in verifier_keys:
        key = item if isinstance(item, VerifierKey) else parse_verifier_key(item)
        slot = (key.name, key.key_hash)
        other = known.setdefault(slot, key)
        if other.public_key != key.public_key:
            # Two different keys share name and ID: the list is not trustworthy (Go reports
            # "ambiguous key"). The same key listed twice is harmless and kept once.
            raise MalformedNoteError(f"ambiguous verifier keys {key.name}+{key.key_hash:08x}")
    return known


def open_note(note: bytes, verifier_keys: Sequence[str | VerifierKey]) -> Note:
    """Parse a signed note and verify its signatures against the known ``verifier_keys``.

    ``verifier_keys`` are verifier key texts (see :func:`parse_verifier_key`) or parsed
    :class:`VerifierKey` objects. Raises

    * :class:`MalformedNoteError` — the note, a signature line or a verifier key is malformed,
      the note has more than :data:`MAX_SIGNATURES` signatures, or two different verifier keys
      share name and key ID;
    * :class:`InvalidSignatureError` — a signature by a known key does not verify;
    * :class:`UnverifiedNoteError` — no known key signed the note.

    For any ``bytes`` input nothing but these (all :class:`NoteError`) is raised.
    """
    known = _known_keys(verifier_keys)
    signed, text, sigs = _split_note(note)
    verified: dict[tuple[str, int], Signature] = {}
    unverified: dict[Signature, None] = {}
    for sig in sigs:
        key = known.get((sig.name, sig.key_hash))
        if key is None:
            unverified.setdefault(sig)
            continue
        if not key.verify(signed, sig.signature):
            raise InvalidSignatureError(f"invalid signature for key {sig.name}+{sig.key_hash:08x}")
        verified.setdefault((sig.name, sig.key_hash), sig)
    if not verified:
        signers = ", ".join(f"{s.name[:80]}+{s.key_hash:08x}" for s in list(unverified)[:5])
        raise UnverifiedNoteError(
            "note has no signature from a known key"
            + (f" (signed by unknown keys: {signers})" if signers else "")
        )
    return Note(text, tuple(verified.values()), tuple(unverified))


def open_note_signed_once(note: bytes, verifier_keys: Sequence[str | VerifierKey]) -> Note:
    """``open_note``, and the note must carry exactly one signature, by a known key.

    Our manifests, checkpoints and receipts are signed once by the operator key; an extra
    signature line (even by an unknown key, which ``open_note`` tolerates per the signed-note
    spec) would be bytes in the evidence that nothing binds, so it is refused here.
    """
    opened = open_note(note, verifier_keys)
    if len(opened.verified) != 1 or opened.unverified:
        raise MalformedNoteError(
            f"note carries {len(opened.verified) + len(opened.unverified)} signatures; "
            "exactly one, by the signer, is allowed"
        )
    return opened
