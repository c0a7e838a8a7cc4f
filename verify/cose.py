"""Strict COSE_Sign1 (RFC 9052) and COSE Receipt (RFC 9942) verification.

Why this module exists: receipts and signed statements in a bundle are COSE_Sign1 messages, and
general-purpose COSE libraries are lenient in ways that matter for evidence (pycose, for
instance, takes ``alg`` from the unprotected header, ignores ``crit``, returns ``False`` instead
of raising, and crashes with arbitrary exceptions on garbage). This module accepts exactly one
reading of a message and fails loudly otherwise. Only ``cbor2`` decodes and encodes CBOR; only
``cryptography`` verifies signatures.

Decisions, and why:

* **Encoding.** The message must be CBOR tag 18 around a 4-element array, with nothing after it.
  Every CBOR item in the message and in the protected header must be in *preferred definite-length
  form*: the bytes must equal cbor2's re-encoding of what they decode to, in their own map-key
  order. That one rule rejects indefinite lengths, non-shortest integer/length heads, duplicate
  map keys (RFC 9052 §3 forbids them; a decoder silently keeps one of them) and trailing bytes, so
  one byte string has one meaning. Map keys may appear in any order (RFC 9052 requires no
  deterministic order, and the signature covers the protected bytes as sent). Map keys must be
  integers, byte strings or text strings (header labels: integers or text strings), so two
  keys are duplicates exactly when their encoded bytes are equal; a bool, null, array, map or
  tagged key is refused, because cbor2 would merge keys that differ in CBOR (``1`` and
  ``true``, ``0`` and ``false``, maps with the same entries in another order). Floats, simple
  values other than true/false/null, and CBOR tags that cbor2 interprets (dates, UUIDs, sets,
  shared and string references, self-describe, bignums that fit 64 bits, ...) are refused:
  COSE headers have no use for them and they do not round-trip; other tags are kept as is.
  When the re-encoding differs, a diagnostic scan of the bytes names the first offending
  construct; it only words the error, the decision is cbor2's.
* **Headers.** Labels are ints or text strings (never ``true``, which Python equates with 1).
  A label may not occur in both the protected and the unprotected map. ``alg`` (1) must be in the
  protected header and only there, and must be EdDSA (-8) or ES256 (-7). ``crit`` (2) is
  rejected wherever it appears: we understand no extension header, and a verifier that does
  not enforce a critical header must not accept the message. ``kid`` (4) must be a byte string,
  ``content type`` (3) an unsigned int or text string. A protected header with no parameters
  must be the zero-length byte string (RFC 9052 §3), so an encoded empty map is refused; as
  ``alg`` is mandatory it is refused anyway.
* **Algorithms are pinned to the key type**, never chosen by the message alone: EdDSA needs an
  ``Ed25519PublicKey``, ES256 a P-256 ``EllipticCurvePublicKey``; ES256 signatures are raw
  ``r || s`` (64 bytes) and are converted to DER for ``cryptography``. Signature lengths are
  checked before verifying.
* **Payload.** A nil payload needs a detached payload from the caller; an embedded payload with
  a detached one also given is an error (the caller would not know which one was signed).
* **Receipts** (RFC 9942, ``vds`` = RFC9162_SHA256): the protected header holds ``alg`` and
  ``vds`` = 1; the unprotected header holds ``vdp`` = ``{-1: [proof]}``. Exactly one inclusion
  proof is accepted: a receipt vouches for one leaf, and extra proofs would be unverified
  baggage a reader might trust. Only the inclusion-proof key (-1) is allowed in ``vdp``. The
  payload must be nil; the signature is verified over the root recomputed from the proof
  (detached payload), so a wrong leaf hash, index, path or size shows up as a signature failure
  unless it is malformed first. The signature covers the root, not the tree size (RFC 9942
  puts the proof in the unprotected header), so callers must match the root and size against
  a signed checkpoint; see :class:`InclusionReceipt`.

Every failure raises a :class:`CoseError` (a ``VerificationError``) naming the field and what was
expected. No input ``bytes`` makes these functions raise anything else.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import cbor2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ec import (
    ECDSA,
    SECP256R1,
    EllipticCurvePublicKey,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from .ed25519 import verify_ed25519
from .errors import InclusionProofError, VerificationError
from .merkle import MAX_TREE_SIZE, root_from_inclusion_proof

__all__ = [
    "ALG_EDDSA",
    "ALG_ES256",
    "COSE_SIGN1_TAG",
    "HEADER_ALG",
    "HEADER_CONTENT_TYPE",
    "HEADER_CRIT",
    "HEADER_KID",
    "HEADER_VDP",
    "HEADER_VDS",
    "INCLUSION_PROOFS",
    "VDS_RFC9162_SHA256",
    "CoseAlgorithmError",
    "CoseError",
    "CoseHeaderError",
    "CosePayloadError",
    "CoseSignatureError",
    "InclusionReceipt",
    "KnownRoot",
    "MalformedCoseError",
    "ReceiptError",
    "ReceiptProofError",
    "Sign1",
    "decode_sign1",
    "sig_structure1",
    "verify_inclusion_receipt",
    "verify_sign1",
]

COSE_SIGN1_TAG: Final = 18
HEADER_ALG: Final = 1
HEADER_CRIT: Final = 2
HEADER_CONTENT_TYPE: Final = 3
HEADER_KID: Final = 4
HEADER_VDS: Final = 395
"""RFC 9942 verifiable data structure (protected header)."""
HEADER_VDP: Final = 396
"""RFC 9942 verifiable data structure proofs (unprotected header)."""
VDS_RFC9162_SHA256: Final = 1
INCLUSION_PROOFS: Final = -1
"""Key of the inclusion-proof list inside ``vdp``."""

ALG_EDDSA: Final = -8
ALG_ES256: Final = -7
_ALG_NAMES: Final[Mapping[int, str]] = {ALG_EDDSA: "EdDSA", ALG_ES256: "ES256"}

_SIGNATURE_SIZE: Final = 64  # Ed25519, and ES256 raw r || s
_P256_COORD_SIZE: Final = 32
_MAX_DEPTH: Final = 64  # container nesting; COSE headers need a handful of levels
_SIGN1_FIELDS: Final = ("protected header", "unprotected header", "payload", "signature")
_SHOW_LIMIT: Final = 60


def _show(value: object) -> str:
    """A short ``repr`` of an untrusted value for an error message; never raises.

    ``repr`` of an int with more than ``sys.get_int_max_str_digits()`` digits raises
    ``ValueError``, and a CBOR bignum can be that large.
    """
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 1] + "…"


# --------------------------------------------------------------------------- errors


class CoseError(VerificationError):
    """A COSE message or receipt failed a check."""


class MalformedCoseError(CoseError):
    """The bytes are not a well-formed, strictly encoded COSE_Sign1 structure."""


class CoseHeaderError(CoseError):
    """A header parameter is missing, misplaced, duplicated, mistyped or not understood."""


class CoseAlgorithmError(CoseError):
    """The algorithm is unsupported or does not match the verification key."""


class CosePayloadError(CoseError):
    """The payload is missing (nil without a detached payload) or given twice."""


class CoseSignatureError(CoseError):
    """The signature does not verify."""


class ReceiptError(CoseError):
    """A COSE Receipt (RFC 9942) is malformed or does not verify."""


class ReceiptProofError(ReceiptError, InclusionProofError):
    """The inclusion proof inside a receipt is malformed (also an ``InclusionProofError``)."""


# --------------------------------------------------------------------------- strict CBOR

_PLAIN_TYPES: Final = (int, bytes, str, type(None))  # bool is an int subclass


def _is_plain_key(key: object) -> bool:
    """A map key must be an integer, a byte string or a text string (never a bool).

    With keys of these three kinds (each in preferred encoding), two keys are equal as decoded
    values exactly when their encoded bytes are equal, so "no duplicate key" means "no two keys
    with the same bytes". Other keys break that: Python equates ``1`` and ``true``, ``0`` and
    ``false``, and two maps used as keys whatever their key order, so cbor2 would merge them.
    """
    return type(key) is int or type(key) is bytes or type(key) is str


def _label_map(obj: object) -> object:
    """The header map whose labels ``_header_map`` checks (CoseHeaderError), if ``obj`` has one:
    a decoded protected header, or the unprotected header of a decoded COSE_Sign1."""
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj
    if isinstance(obj, cbor2.CBORTag) and isinstance(obj.value, list) and len(obj.value) > 1:
        return obj.value[1]
    return None


_LEAF_KINDS: Final = frozenset({int, bool, bytes, str, type(None)})
"""Exact types of the items cbor2 decodes most (all are ``_PLAIN_TYPES``): tested first."""
_KEY_KINDS: Final = frozenset({int, bytes, str})
"""Exact types ``_is_plain_key`` accepts."""


def _check_item_types(obj: object, what: str, depth: int = 0, labels: object = None) -> None:
    """Refuse anything but ints, strings, bools, null, arrays, maps and unknown tags, and map
    keys other than ints, byte strings and text strings (the header map ``labels`` excepted:
    its labels are checked, more narrowly, by ``_header_map``).

    Every receipt goes through this walk three times, so the exact types cbor2 decodes to
    (``list``, ``dict``, the leaf types) are tested by ``type()`` first and a leaf child is not
    recursed into; the decision is the general walk's (``_check_other_item``), which still
    handles every other type (subclasses, tuples and frozen maps used as keys, tags, floats).
    """
    kind = type(obj)
    if kind in _LEAF_KINDS:
        return
    if kind is not list and kind is not dict:
        _check_other_item(obj, what, depth, labels)
        return
    if depth > _MAX_DEPTH:  # unreachable: the decoder limits nesting; keeps this walk bounded
        raise MalformedCoseError(f"{what}: CBOR nesting deeper than {_MAX_DEPTH}")
    if kind is list:
        for item in obj:  # type: ignore[attr-defined]
            if type(item) not in _LEAF_KINDS:
                _check_item_types(item, what, depth + 1, labels)
    elif kind is dict:
        for key, value in obj.items():  # type: ignore[attr-defined]
            if type(key) not in _KEY_KINDS:
                if obj is not labels:
                    raise MalformedCoseError(
                        f"{what}: map key {_show(key)} is not an integer, byte string or "
                        "text string"
                    )
                _check_item_types(key, what, depth + 1, labels)
            if type(value) not in _LEAF_KINDS:
                _check_item_types(value, what, depth + 1, labels)


def _check_other_item(obj: object, what: str, depth: int, labels: object) -> None:
    """``_check_item_types`` for an item whose type is not one of the exact common ones."""
    if isinstance(obj, _PLAIN_TYPES):
        return
    if depth > _MAX_DEPTH:  # unreachable: the decoder limits nesting; keeps this walk bounded
        raise MalformedCoseError(f"{what}: CBOR nesting deeper than {_MAX_DEPTH}")
    if isinstance(obj, list | tuple):
        for item in obj:
            _check_item_types(item, what, depth + 1, labels)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if obj is not labels and not _is_plain_key(key):
                raise MalformedCoseError(
                    f"{what}: map key {_show(key)} is not an integer, byte string or text string"
                )
            _check_item_types(key, what, depth + 1, labels)
            _check_item_types(value, what, depth + 1, labels)
    elif isinstance(obj, cbor2.CBORTag):
        _check_item_types(obj.value, what, depth + 1, labels)
    elif isinstance(obj, float):
        raise MalformedCoseError(f"{what}: floating-point values are not allowed")
    else:
        raise MalformedCoseError(
            f"{what}: CBOR item decoding to {type(obj).__name__} (a tagged or special value) "
            "is not allowed"
        )


class _EncoderSlot(threading.local):
    """This thread's reusable encoder (see ``_dumps``)."""

    state: tuple[io.BytesIO, cbor2.CBOREncoder] | None = None


_ENCODER: Final = _EncoderSlot()


def _dumps(obj: object) -> bytes:
    """``cbor2.dumps(obj)``: the same encoder class with the same (default) options, but one
    per thread, reused: building an encoder costs more than encoding a receipt's items, and a
    receipt is encoded four times (three strictness re-encodings and its Sig_structure). An
    encoder that raised is dropped, never reused, so no state of a failed call can leak."""
    state = _ENCODER.state
    if state is None:
        fp = io.BytesIO()
        state = _ENCODER.state = (fp, cbor2.CBOREncoder(fp))
    fp, encoder = state
    fp.seek(0)
    fp.truncate()
    try:
        encoder.encode(obj)
    except BaseException:
        _ENCODER.state = None
        raise
    return fp.getvalue()


def _strict_loads(data: bytes, what: str) -> object:
    """Decode one CBOR item that must fill ``data`` exactly and be in preferred encoding."""
    fp = io.BytesIO(data)
    try:
        obj = cbor2.CBORDecoder(fp, max_depth=_MAX_DEPTH).decode()
    except Exception as exc:  # cbor2 raises CBORDecodeError, ValueError, OverflowError, ...
        raise MalformedCoseError(f"{what} is not well-formed CBOR: {exc}") from None
    end = fp.tell()
    if end != len(data):
        raise MalformedCoseError(
            f"{what} has {len(data) - end} trailing byte(s) after its CBOR item (ends at {end})"
        )
    _check_item_types(obj, what, labels=_label_map(obj))
    try:
        again = _dumps(obj)
    except Exception as exc:  # e.g. a cyclic structure built from shared references
        raise MalformedCoseError(f"{what} does not re-encode as CBOR: {exc}") from None
    if again != data:
        problem = _describe_non_preferred(data)
        if problem is None:
            problem = "it differs from its re-encoding (map keys equal as values, e.g. 1 and true)"
        raise MalformedCoseError(f"{what} is not in preferred definite-length CBOR: {problem}")
    return obj


# Diagnostics only: called after cbor2 decoded ``data`` and its re-encoding differed, to say
# where. It never decides acceptance, so a gap here can only make a message less specific.

_MAJOR_NAMES: Final = ("uint", "negint", "byte string", "text string", "array", "map", "tag")
_TRANSPARENT_TAGS: Final = frozenset({25, 28, 29, 256, 55799})
"""Tags cbor2 resolves without a trace (string/value sharing, self-described CBOR)."""


def _head(data: bytes, off: int) -> tuple[int, int, int | None, int]:
    """Return (major type, additional info, argument or None if indefinite, next offset)."""
    initial = data[off]
    major, info = initial >> 5, initial & 0x1F
    off += 1
    if info < 24:
        return major, info, info, off
    if info <= 27:
        size = 1 << (info - 24)
        if off + size > len(data):
            raise IndexError(off)
        return major, info, int.from_bytes(data[off : off + size], "big"), off + size
    if info == 31:
        return major, info, None, off
    raise ValueError(info)


def _scan(data: bytes, off: int) -> tuple[str | None, int]:
    """Return (first non-preferred construct in the item at ``off`` or None, item end)."""
    start = off
    major, info, arg, off = _head(data, off)
    if major == 7:
        return None, off
    if arg is None:
        return f"indefinite-length {_MAJOR_NAMES[major]} at byte {start}", off
    if info >= 24 and arg < (24 if info == 24 else 1 << (8 << (info - 25))):
        return f"non-shortest {_MAJOR_NAMES[major]} head at byte {start}", off
    if major in (2, 3):
        return None, off + arg
    if major == 6:
        if arg in _TRANSPARENT_TAGS:
            return f"tag {arg} at byte {start} is not allowed", off
        return _scan(data, off)
    if major == 4:
        for _ in range(arg):
            problem, off = _scan(data, off)
            if problem:
                return problem, off
    elif major == 5:
        seen: dict[object, object] = {}
        for _ in range(arg):
            key_start = off
            problem, off = _scan(data, off)
            if problem:
                return problem, off
            raw = data[key_start:off]
            key: object = cbor2.loads(raw)
            try:
                hash(key)
            except TypeError:  # array or map key: compare encodings (loads never gives a tuple)
                key = ("raw", raw)
            if key in seen:
                if type(seen[key]) is type(key) and seen[key] == key:
                    return f"duplicate map key {_show(key)} at byte {key_start}", off
                return (
                    f"map keys {_show(seen[key])} and {_show(key)} (byte {key_start}) are equal",
                    off,
                )
            seen[key] = key
            problem, off = _scan(data, off)
            if problem:
                return problem, off
    return None, off


def _describe_non_preferred(data: bytes) -> str | None:
    try:
        return _scan(data, 0)[0]
    except Exception:  # diagnostics must never replace the real error
        return None


# --------------------------------------------------------------------------- COSE_Sign1


@dataclass(frozen=True)
class Sign1:
    """A decoded, structurally valid COSE_Sign1 (its signature not yet checked)."""

    protected: dict[int | str, object]
    protected_bytes: bytes
    unprotected: dict[int | str, object]
    payload: bytes | None
    signature: bytes

    @property
    def alg(self) -> int:
        """The algorithm from the protected header (``decode_sign1`` guarantees it is there)."""
        alg = self.protected[HEADER_ALG]
        assert isinstance(alg, int)
        return alg

    @property
    def kid(self) -> bytes | None:
        """The key id from the protected header, else from the unprotected one, else None."""
        kid = self.protected.get(HEADER_KID, self.unprotected.get(HEADER_KID))
        assert kid is None or isinstance(kid, bytes)
        return kid


def _header_map(value: object, which: str) -> dict[int | str, object]:
    """Check a decoded header map: labels are ints or text strings."""
    if not isinstance(value, dict):
        raise MalformedCoseError(
            f"COSE_Sign1 {which} header must be a CBOR map, got {type(value).__name__}"
        )
    result: dict[int | str, object] = {}
    for label, param in value.items():
        # ``type() is``: a bool label would otherwise alias the int label 1 or 0.
        if type(label) is not int and type(label) is not str:
            raise CoseHeaderError(
                f"COSE_Sign1 {which} header label {_show(label)} is not an int or text string"
            )
        result[label] = param
    return result


def _check_headers(
    protected: dict[int | str, object], unprotected: dict[int | str, object]
) -> None:
    both = sorted(set(protected) & set(unprotected), key=_show)
    if both:
        raise CoseHeaderError(
            f"COSE_Sign1 header label(s) {', '.join(map(_show, both))} occur in both the "
            "protected and the unprotected header"
        )
    for which, header in (("protected", protected), ("unprotected", unprotected)):
        if HEADER_CRIT in header:
            raise CoseHeaderError(
                f"COSE_Sign1 {which} header has crit (label 2) = {_show(header[HEADER_CRIT])}; "
                "no critical extension header is understood, so crit is rejected"
            )
        if HEADER_KID in header and not isinstance(header[HEADER_KID], bytes):
            raise CoseHeaderError(
                f"COSE_Sign1 {which} header kid (label 4) must be a byte string, "
                f"got {type(header[HEADER_KID]).__name__}"
            )
        if HEADER_CONTENT_TYPE in header:
            ctype = header[HEADER_CONTENT_TYPE]
            if not (type(ctype) is str or (type(ctype) is int and ctype >= 0)):
                raise CoseHeaderError(
                    f"COSE_Sign1 {which} header content type (label 3) must be a uint or "
                    f"text string, got {_show(ctype)}"
                )
    if HEADER_ALG in unprotected:
        raise CoseHeaderError(
            "COSE_Sign1 alg (label 1) is in the unprotected header; it is accepted only "
            "from the protected header"
        )
    if HEADER_ALG not in protected:
        raise CoseHeaderError("COSE_Sign1 protected header has no alg (label 1)")
    alg = protected[HEADER_ALG]
    if type(alg) is not int or alg not in _ALG_NAMES:
        raise CoseAlgorithmError(
            f"COSE_Sign1 alg {_show(alg)} is not supported; expected EdDSA (-8) or ES256 (-7)"
        )


_PROTECTED_CACHE: Final[dict[bytes, tuple[tuple[int | str, object], ...]]] = {}
_PROTECTED_CACHE_BYTES: Final = 256
_PROTECTED_CACHE_ENTRIES: Final = 64


def _protected_header(protected_bytes: bytes) -> dict[int | str, object]:
    """``_header_map(_strict_loads(protected_bytes, "protected header"), "protected")``.

    Both are pure functions of the bytes, and every COSE receipt of one tree by one key carries
    the same protected header, so a small header whose values are all immutable scalars is
    remembered by its exact bytes (a fresh dict is returned each time; what raised is never
    remembered). At most ``_PROTECTED_CACHE_ENTRIES`` headers are kept.
    """
    items = _PROTECTED_CACHE.get(protected_bytes)
    if items is not None:
        return dict(items)
    header = _header_map(_strict_loads(protected_bytes, "protected header"), "protected")
    if (
        len(protected_bytes) <= _PROTECTED_CACHE_BYTES
        and len(_PROTECTED_CACHE) < _PROTECTED_CACHE_ENTRIES
        and all(type(value) in _LEAF_KINDS for value in header.values())
    ):
        _PROTECTED_CACHE[protected_bytes] = tuple(header.items())
    return header


def decode_sign1(message: bytes) -> Sign1:
    """Decode a tagged COSE_Sign1 strictly and check its headers; the signature is not checked.

    Raises :class:`MalformedCoseError` for encoding/structure problems, :class:`CoseHeaderError`
    or :class:`CoseAlgorithmError` for header problems (see the module docstring).
    """
    if not isinstance(message, bytes):
        raise MalformedCoseError(f"COSE_Sign1 must be bytes, got {type(message).__name__}")
    if not message:
        raise MalformedCoseError("COSE_Sign1 is empty")
    obj = _strict_loads(message, "COSE_Sign1")
    if not isinstance(obj, cbor2.CBORTag):
        raise MalformedCoseError(
            f"COSE_Sign1 must be CBOR tag {COSE_SIGN1_TAG}, got an untagged {type(obj).__name__}"
        )
    if obj.tag != COSE_SIGN1_TAG:
        raise MalformedCoseError(f"COSE_Sign1 must be CBOR tag {COSE_SIGN1_TAG}, got tag {obj.tag}")
    items = obj.value
    if not isinstance(items, list):
        raise MalformedCoseError(
            f"COSE_Sign1 tag content must be an array, got {type(items).__name__}"
        )
    if len(items) != len(_SIGN1_FIELDS):
        raise MalformedCoseError(f"COSE_Sign1 array has {len(items)} elements, expected 4")
    protected_bytes, unprotected_raw, payload, signature = items
    if not isinstance(protected_bytes, bytes):
        raise MalformedCoseError(
            "COSE_Sign1 protected header must be a byte string wrapping a map, "
            f"got {type(protected_bytes).__name__}"
        )
    if payload is not None and not isinstance(payload, bytes):
        raise MalformedCoseError(
            f"COSE_Sign1 payload must be a byte string or nil, got {type(payload).__name__}"
        )
    if not isinstance(signature, bytes):
        raise MalformedCoseError(
            f"COSE_Sign1 signature must be a byte string, got {type(signature).__name__}"
        )
    if protected_bytes:
        protected = _protected_header(protected_bytes)
        if not protected:
            raise MalformedCoseError(
                "COSE_Sign1 protected header is an encoded empty map; an empty protected "
                "header must be the zero-length byte string"
            )
    else:
        protected = {}
    unprotected = _header_map(unprotected_raw, "unprotected")
    _check_headers(protected, unprotected)
    return Sign1(
        protected=protected,
        protected_bytes=protected_bytes,
        unprotected=unprotected,
        payload=payload,
        signature=signature,
    )


def sig_structure1(protected_bytes: bytes, external_aad: bytes, payload: bytes) -> bytes:
    """The bytes a COSE_Sign1 signs: ``["Signature1", protected, external_aad, payload]``.

    A text string and three byte strings have exactly one preferred encoding, so this is the
    deterministic encoding RFC 9052 §4.4 requires.
    """
    return _dumps(["Signature1", protected_bytes, external_aad, payload])


def _key_name(key: object) -> str:
    if isinstance(key, Ed25519PublicKey):
        return "Ed25519"
    if isinstance(key, EllipticCurvePublicKey):
        return f"EC {key.curve.name}"
    return type(key).__name__


def _verify_signature(
    sign1: Sign1, public_key: object, to_be_signed: bytes, failure: str | None = None
) -> None:
    """Check alg against the key type, the signature length, then the signature itself.

    ``failure`` replaces the message for a signature that has the right form but does not verify.
    """
    alg = sign1.alg
    name = _ALG_NAMES[alg]
    signature = sign1.signature
    if alg == ALG_EDDSA:
        if not isinstance(public_key, Ed25519PublicKey):
            raise CoseAlgorithmError(
                f"COSE_Sign1 alg {name} ({alg}) needs an Ed25519 key, got {_key_name(public_key)}"
            )
    elif not (
        isinstance(public_key, EllipticCurvePublicKey) and isinstance(public_key.curve, SECP256R1)
    ):
        raise CoseAlgorithmError(
            f"COSE_Sign1 alg {name} ({alg}) needs a P-256 key, got {_key_name(public_key)}"
        )
    if len(signature) != _SIGNATURE_SIZE:
        raise CoseSignatureError(
            f"COSE_Sign1 {name} signature is {len(signature)} bytes, expected {_SIGNATURE_SIZE}"
        )
    try:
        if isinstance(public_key, Ed25519PublicKey):
            if not verify_ed25519(public_key.public_bytes_raw(), signature, to_be_signed):
                raise InvalidSignature
        else:
            r = int.from_bytes(signature[:_P256_COORD_SIZE], "big")
            s = int.from_bytes(signature[_P256_COORD_SIZE:], "big")
            public_key.verify(encode_dss_signature(r, s), to_be_signed, ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        raise CoseSignatureError(
            failure or f"COSE_Sign1 {name} signature does not verify under the given key"
        ) from None


def verify_sign1(
    message: bytes,
    public_key: Ed25519PublicKey | EllipticCurvePublicKey,
    *,
    external_aad: bytes = b"",
    detached_payload: bytes | None = None,
) -> bytes:
    """Verify a tagged COSE_Sign1 under ``public_key`` and return its payload.

    The payload returned is the embedded one, or ``detached_payload`` when the message carries
    nil. Raises a :class:`CoseError` on any problem; never returns on a bad signature.
    """
    if not isinstance(external_aad, bytes):
        raise CoseError(f"external_aad must be bytes, got {type(external_aad).__name__}")
    if detached_payload is not None and not isinstance(detached_payload, bytes):
        raise CoseError(f"detached_payload must be bytes, got {type(detached_payload).__name__}")
    sign1 = decode_sign1(message)
    if sign1.payload is None:
        if detached_payload is None:
            raise CosePayloadError(
                "COSE_Sign1 payload is nil (detached) but no detached payload was given"
            )
        payload = detached_payload
    else:
        if detached_payload is not None:
            raise CosePayloadError(
                "COSE_Sign1 has an embedded payload and a detached payload was also given"
            )
        payload = sign1.payload
    _verify_signature(
        sign1, public_key, sig_structure1(sign1.protected_bytes, external_aad, payload)
    )
    return payload


# --------------------------------------------------------------------------- receipts


@dataclass(frozen=True)
class InclusionReceipt:
    """A verified RFC 9942 inclusion receipt: leaf ``leaf_index`` of the ``tree_size`` tree.

    Only ``root`` is signed. ``tree_size`` sits in the unprotected header and is bound only
    through the shape of the path: another size with the same path shape (leaf 2 of 7 or of 8
    leaves) verifies too. Compare ``root`` *and* ``tree_size`` with a signed checkpoint before
    relying on the size.
    """

    tree_size: int
    leaf_index: int
    path: tuple[bytes, ...]
    root: bytes
    kid: bytes | None


def _uint(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ReceiptError(f"COSE receipt {what} must be an unsigned integer, got {_show(value)}")
    if value > MAX_TREE_SIZE:
        raise ReceiptError(f"COSE receipt {what} {_show(value)} exceeds the uint64 range")
    return value


def _decode_inclusion_proof(encoded: object) -> tuple[int, int, tuple[bytes, ...]]:
    what = "inclusion proof"
    if not isinstance(encoded, bytes):
        raise ReceiptError(
            f"COSE receipt {what} must be a byte string (bstr .cbor), got {type(encoded).__name__}"
        )
    try:
        proof = _strict_loads(encoded, f"COSE receipt {what}")
    except MalformedCoseError as exc:
        raise ReceiptError(str(exc)) from None
    if not isinstance(proof, list) or len(proof) != 3:
        raise ReceiptError(
            f"COSE receipt {what} must be the array [tree-size, leaf-index, inclusion-path], "
            f"got {_show(proof)}"
        )
    tree_size = _uint(proof[0], "tree-size")
    leaf_index = _uint(proof[1], "leaf-index")
    path = proof[2]
    if not isinstance(path, list):
        raise ReceiptError(
            f"COSE receipt inclusion-path must be an array, got {type(path).__name__}"
        )
    for i, node in enumerate(path):
        if not isinstance(node, bytes):
            raise ReceiptError(
                f"COSE receipt inclusion-path[{i}] must be a byte string, got {type(node).__name__}"
            )
    return tree_size, leaf_index, tuple(path)


KnownRoot = tuple[int, int, bytes, tuple[bytes, ...], bytes]
"""``(leaf_index, tree_size, leaf_hash, path, root)``: a root the caller itself obtained from
``root_from_inclusion_proof(leaf_index, tree_size, leaf_hash, path)``."""


def _known(
    known_root: KnownRoot | None,
    leaf_index: int,
    tree_size: int,
    leaf_hash: bytes,
    path: tuple[bytes, ...],
) -> bytes | None:
    """The root of ``known_root`` if it was computed from exactly these inputs, else None.

    The inputs are compared by exact type and value (ints that are not bools, ``bytes``), so a
    hit is the same pure function applied to the same arguments: the same root.
    """
    if known_root is None:
        return None
    index, size, leaf, known_path, root = known_root
    if not (
        type(index) is int
        and type(size) is int
        and type(leaf) is bytes
        and type(root) is bytes
        and type(leaf_hash) is bytes
        and all(type(h) is bytes for h in known_path)
    ):
        return None
    if (index, size, leaf, known_path) != (leaf_index, tree_size, leaf_hash, path):
        return None
    return root


def verify_inclusion_receipt(
    receipt: bytes,
    public_key: Ed25519PublicKey | EllipticCurvePublicKey,
    leaf_hash: bytes,
    *,
    known_root: KnownRoot | None = None,
) -> InclusionReceipt:
    """Verify an RFC 9942 RFC9162_SHA256 inclusion receipt for ``leaf_hash``.

    Recomputes the root from the receipt's single inclusion proof and verifies the receipt's
    signature over that root (detached payload). Raises :class:`ReceiptError` for receipt-level
    problems, :class:`ReceiptProofError` for a malformed proof, and the COSE errors of
    :func:`verify_sign1` otherwise (:class:`CoseSignatureError` when the root does not match
    what was signed).

    ``known_root``: a root the caller already computed with ``root_from_inclusion_proof`` (an
    artifact receipt checks the same proof in JSON first); used only when the receipt's proof
    and ``leaf_hash`` are exactly its inputs, otherwise the root is recomputed. A caller must
    pass only a root it computed itself: this saves the hashing, it does not check the proof.
    """
    sign1 = decode_sign1(receipt)
    if HEADER_VDS in sign1.unprotected:
        raise ReceiptError("COSE receipt vds (label 395) must be in the protected header")
    if HEADER_VDS not in sign1.protected:
        raise ReceiptError("COSE receipt protected header has no vds (label 395)")
    vds = sign1.protected[HEADER_VDS]
    if type(vds) is not int or vds != VDS_RFC9162_SHA256:
        raise ReceiptError(
            f"COSE receipt vds is {_show(vds)}, expected {VDS_RFC9162_SHA256} (RFC9162_SHA256)"
        )
    if HEADER_VDP in sign1.protected:
        raise ReceiptError("COSE receipt vdp (label 396) must be in the unprotected header")
    if HEADER_VDP not in sign1.unprotected:
        raise ReceiptError("COSE receipt unprotected header has no vdp (label 396)")
    vdp = sign1.unprotected[HEADER_VDP]
    if not isinstance(vdp, dict):
        raise ReceiptError(f"COSE receipt vdp must be a map, got {type(vdp).__name__}")
    if list(vdp) != [INCLUSION_PROOFS]:
        raise ReceiptError(
            f"COSE receipt vdp must hold exactly the inclusion-proofs key (-1), "
            f"got keys {_show(sorted(map(_show, vdp)))}"
        )
    proofs = vdp[INCLUSION_PROOFS]
    if not isinstance(proofs, list) or not proofs:
        raise ReceiptError("COSE receipt inclusion proofs (vdp -1) must be a non-empty array")
    if len(proofs) != 1:
        raise ReceiptError(
            f"COSE receipt has {len(proofs)} inclusion proofs; exactly one is accepted"
        )
    tree_size, leaf_index, path = _decode_inclusion_proof(proofs[0])
    if sign1.payload is not None:
        raise ReceiptError("COSE receipt payload must be nil (the root is the detached payload)")
    root = _known(known_root, leaf_index, tree_size, leaf_hash, path)
    if root is None:
        try:
            root = root_from_inclusion_proof(leaf_index, tree_size, leaf_hash, path)
        except InclusionProofError as exc:
            raise ReceiptProofError(f"COSE receipt inclusion proof: {exc}") from None
    _verify_signature(
        sign1,
        public_key,
        sig_structure1(sign1.protected_bytes, b"", root),
        failure=(
            f"COSE receipt signature does not verify over the root {root.hex()[:16]}… "
            f"recomputed for leaf {leaf_index} of tree size {tree_size}: wrong leaf hash, "
            "proof, index or size, or signed by another key"
        ),
    )
    return InclusionReceipt(
        tree_size=tree_size, leaf_index=leaf_index, path=path, root=root, kid=sign1.kid
    )
