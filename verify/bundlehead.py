"""The head of a bundle: what is read, and all that is decoded, before the manifest is trusted.

``manifest.json`` is the first member, ``manifest.sig`` the second and the signer's key file
(``keys/<key id>.vkey``) the third (docs/spec/bundle.md). The manifest's bytes are only hashed
as they stream in; the note (< 4 KiB) is checked against the key in the key file (< 4 KiB, named
after its key id) and must sign exactly that digest; only then is the manifest decoded, and only
if it is no denser in JSON values than a manifest can be. Nothing the manifest says is believed
before that, so a junk or forged signature costs the reading of the bytes, never their decoding.

Also here: the per-kind size limits of members held in memory, the JSON density guard, and the
hashing reader the single pass streams store members through.
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import orjson

from .archive import ArchiveReader, Member
from .canonical import parse_canonical
from .errors import NoteError, SchemaError, VerificationError
from .keyids import key_id
from .layout import MANIFEST, MANIFEST_SIG, key_member, manifest_note_text
from .manifest import Manifest, UnsupportedBundleError, parse_manifest
from .note import open_note_signed_once, parse_verifier_key
from .receipt import MAX_RECEIPT_BYTES
from .records import HEX64_RE
from .report import Status
from .runreceipts import ENVELOPE_LIMIT

MANIFEST_LIMIT: Final = 32 << 20
"""A manifest lists every member in ~150 bytes: 32 MiB holds 10^5 members with room to spare."""
SIGNATURE_LIMIT: Final = 4 << 10
"""manifest.sig and the key file: all that is read (and parsed) before the signature verifies."""
NOTE_LIMIT: Final = 64 << 10
PROOF_LIMIT: Final = 1 << 20
OTHER_LIMIT: Final = 64 << 20
"""Run members with no tighter kind limit (quarantine files, the plan, future small members)."""
JSON_DENSITY: Final = 8
"""A bundle JSON document has at most one value per this many bytes (plus 256): a manifest
member entry is ~150 bytes for 7 values. Denser input is refused before it is decoded, so a
"[[],[],...]" cannot make the decoder allocate ~20 times its size."""


@dataclass(frozen=True)
class SignedManifest:
    manifest: Manifest
    signer: str
    """The signer's verifier key text (the key file's line, the manifest's ``signer``)."""
    signer_id: str
    key: Member
    key_data: bytes


class HeadError(Exception):
    """The head does not verify; ``next_member`` is where the pass goes on reading."""

    def __init__(
        self, error: VerificationError | str, next_member: Member | None, status: Status
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.next_member = next_member
        self.status = status


def open_signed_manifest(
    reader: ArchiveReader, first: Member, keep: Callable[[str, bytes], None]
) -> SignedManifest:
    """Read the three head members; raises HeadError (check "manifest-signature")."""

    def refuse(error: VerificationError | str, status: Status = Status.INVALID) -> HeadError:
        return HeadError(error, reader.next(), status)

    if first.name != MANIFEST:
        raise HeadError(f"bundle has no {MANIFEST}", first, Status.INVALID)
    if first.size > MANIFEST_LIMIT:
        raise refuse(f"{MANIFEST}: {first.size} bytes, limit {MANIFEST_LIMIT}", Status.UNREADABLE)
    data = read_member(reader, first)  # hashed below; not decoded yet
    keep(MANIFEST, data)
    sig = reader.next()
    if sig is None or sig.name != MANIFEST_SIG:
        raise HeadError(f"bundle has no {MANIFEST_SIG}", sig, Status.INVALID)
    if sig.size > SIGNATURE_LIMIT:
        raise refuse(
            f"{MANIFEST_SIG}: {sig.size} bytes, more than a signed note ({SIGNATURE_LIMIT})"
        )
    note = read_member(reader, sig)
    keep(MANIFEST_SIG, note)
    key = reader.next()
    if key is None or not key.name.startswith("keys/") or key.size > SIGNATURE_LIMIT:
        raise HeadError(
            f"bundle has no signer key file (keys/<key id>.vkey) after {MANIFEST_SIG}",
            key,
            Status.INVALID,
        )
    key_data = read_member(reader, key)
    keep(key.name, key_data)
    try:
        signer = signer_key(key.name, key_data)
    except VerificationError as exc:
        raise refuse(exc) from None
    try:
        opened = open_note_signed_once(note, [signer])
    except NoteError as exc:
        raise refuse(f"{MANIFEST_SIG}: {exc}") from None
    if opened.text != manifest_note_text(hashlib.sha256(data).hexdigest()):
        raise refuse(f"{MANIFEST_SIG} signs a different manifest digest than manifest.json has")
    # Signed by the key the bundle carries: now, and only now, decode it.
    try:
        bounded_json(data, MANIFEST)
        manifest = parse_manifest(data)
    except UnsupportedBundleError as exc:
        raise refuse(exc, Status.UNREADABLE) from None
    except VerificationError as exc:
        raise refuse(exc) from None
    if manifest.signer != signer:
        raise refuse(f"{key.name}: is not the signer's key (manifest.json names another)")
    signer_id = key_id(parse_verifier_key(signer).public_key)
    return SignedManifest(manifest, signer, signer_id, key, key_data)


def signer_key(name: str, data: bytes) -> str:
    """The verifier key in the key file, which must be one line and named after its key id."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1 or not data.isascii():
        raise SchemaError(f"{name}: not one line of verifier key text", member=name)
    text = data[:-1].decode("ascii")
    try:
        parsed = parse_verifier_key(text)
    except NoteError as exc:
        raise SchemaError(f"{name}: {exc}", member=name) from None
    if key_member(key_id(parsed.public_key)) != name:
        raise SchemaError(
            f"{name}: is not the signer's key (it holds key {key_id(parsed.public_key)})",
            member=name,
        )
    return text


class HashingMember(io.RawIOBase):
    """One member's data from the archive, hashed as it is read (and kept on request)."""

    def __init__(self, reader: ArchiveReader, size: int, *, keep: bool) -> None:
        self._reader = reader
        self.sha = hashlib.sha256()
        self._parts: list[bytes] | None = [] if keep else None
        self.kept: bytes | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._reader.read(len(buffer))
        self.sha.update(data)
        if self._parts is not None:
            self._parts.append(data)
        buffer[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while data := self._reader.read(1 << 20):
            self.sha.update(data)
            if self._parts is not None:
                self._parts.append(data)
        if self._parts is not None:
            self.kept = b"".join(self._parts)


def read_member(reader: ArchiveReader, member: Member) -> bytes:
    """A member's data whole, read in 1 MiB steps so the read budget and the inflation bound
    stop a bomb after one step, not after the size its header declares."""
    if member.size <= _STEP:
        return reader.read(member.size)
    parts = []
    while chunk := reader.read(_STEP):
        parts.append(chunk)
    return b"".join(parts)


_STEP: Final = 1 << 20


def limit_for(name: str) -> int:
    """How large a member other than a store may be; it is held in memory until its run ends."""
    if name.startswith("keys/"):
        return SIGNATURE_LIMIT
    if "/checkpoints/" in name:
        return NOTE_LIMIT
    if "/proofs/" in name:
        return PROOF_LIMIT
    if "/receipts/" in name:
        return MAX_RECEIPT_BYTES
    if "/attestations/" in name:
        return ENVELOPE_LIMIT
    return OTHER_LIMIT


def bounded_json(data: bytes, name: str) -> None:
    """Refuse JSON denser in values than our documents are, before any decoder allocates."""
    values = data.count(b",") + data.count(b"[") + data.count(b"{") + data.count(b":")
    if values > 256 + len(data) // JSON_DENSITY:
        raise SchemaError(
            f"{name}: {values} JSON values in {len(data)} bytes, denser than any document of "
            "its kind: refused before decoding",
            member=name,
        )


def bounded_cbor(data: bytes, name: str) -> None:
    """The same rule for CBOR (a COSE_Sign1 statement): bytes 0x80-0xBF, the initial bytes of
    arrays and maps (and so of the items that cost the decoder most), at most 256 + size/8.
    Counted over the whole document, byte strings included; a genuine statement is mostly a
    JSON payload (ASCII, below 0x80) and one 64-byte signature."""
    containers = len(data) - len(data.translate(None, _CBOR_CONTAINERS))
    if containers > 256 + len(data) // JSON_DENSITY:
        raise SchemaError(
            f"{name}: {containers} CBOR array/map bytes in {len(data)} bytes, denser than any "
            "document of its kind: refused before decoding",
            member=name,
        )


def bounded_envelope(data: bytes, name: str) -> None:
    """A DSSE envelope and the statement inside it (decoded from base64 only here, to count)."""
    bounded_json(data, name)
    try:
        envelope = orjson.loads(data)
        payload = base64.b64decode(envelope["payload"], validate=True)
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        return  # not an envelope: the receipts check says precisely why
    bounded_json(payload, f"{name} payload")


_CBOR_CONTAINERS: Final = bytes(range(0x80, 0xC0))


def read_proof(data: bytes, run_id: str, store: str, size1: int, size2: int) -> list[bytes]:
    bounded_json(data, "proof")
    obj = parse_canonical(data)
    expected = {"proof", "run", "size1", "size2", "store", "v"}
    if type(obj) is not dict or obj.keys() != expected:
        raise SchemaError(f"members must be exactly {sorted(expected)}")
    claimed = (obj["v"], obj["run"], obj["store"], obj["size1"], obj["size2"])
    if [type(value) for value in claimed] != [int, str, str, int, int] or claimed != (
        1,
        run_id,
        store,
        size1,
        size2,
    ):
        raise SchemaError("proof is for another log or other sizes than its name says")
    hashes = obj["proof"]
    if type(hashes) is not list or any(
        type(h) is not str or not HEX64_RE.fullmatch(h) for h in hashes
    ):
        raise SchemaError("proof must be a list of 64-lowercase-hex-digit hashes")
    return [bytes.fromhex(h) for h in hashes]
