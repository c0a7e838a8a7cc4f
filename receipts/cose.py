"""Building COSE_Sign1 messages (RFC 9052) and COSE Receipts (RFC 9942), EdDSA/Ed25519 only.

The counterpart of :mod:`harness.verify.cose`: everything written here verifies there, and the
bytes signed (the ``Sig_structure``) come from the verify side, so there is one definition of
them. Header maps and the message are encoded deterministically (cbor2 ``canonical=True``:
shortest heads, definite lengths, keys sorted length-first), so the same inputs give the same
bytes (Ed25519 is deterministic too).

Before returning, every message is decoded again with the verifier's strict
:func:`~harness.verify.cose.decode_sign1`; a message the verifier would reject (``crit``, ``alg``
in the unprotected header, a label in both headers, a float, ...) is never produced — a
``ValueError`` is raised instead. Bad argument types raise ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.verify.cose import (
    ALG_EDDSA,
    COSE_SIGN1_TAG,
    HEADER_ALG,
    HEADER_CONTENT_TYPE,
    HEADER_KID,
    HEADER_VDP,
    HEADER_VDS,
    INCLUSION_PROOFS,
    VDS_RFC9162_SHA256,
    CoseError,
    decode_sign1,
    sig_structure1,
)
from harness.verify.merkle import HASH_SIZE, MAX_TREE_SIZE

__all__ = ["inclusion_receipt", "sign1", "sign1_with_headers"]


def _dumps(obj: object) -> bytes:
    return cbor2.dumps(obj, canonical=True)


def sign1_with_headers(
    payload: bytes,
    key: Ed25519PrivateKey,
    *,
    protected: Mapping[int | str, object],
    unprotected: Mapping[int | str, object] | None = None,
    detached: bool = False,
    external_aad: bytes = b"",
) -> bytes:
    """Sign ``payload`` into a tagged COSE_Sign1 with exactly the given header maps.

    ``protected`` must hold ``alg`` = EdDSA (-8). With ``detached`` the message carries nil and
    the verifier must be given ``payload`` separately. Lower-level than :func:`sign1`; used to
    reproduce third-party vectors whose ``kid`` sits in the unprotected header.
    """
    if not isinstance(key, Ed25519PrivateKey):
        raise TypeError(f"key must be an Ed25519PrivateKey, got {type(key).__name__}")
    for name, value in (("payload", payload), ("external_aad", external_aad)):
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    alg = protected.get(HEADER_ALG)
    if type(alg) is not int or alg != ALG_EDDSA:
        raise ValueError(
            f"protected alg must be EdDSA ({ALG_EDDSA}) for an Ed25519 key, got {alg!r}"
        )
    protected_bytes = _dumps(dict(protected))
    unprotected_map = dict(unprotected or {})
    to_be_signed = sig_structure1(protected_bytes, external_aad, payload)
    signature = key.sign(to_be_signed)
    message = _dumps(
        cbor2.CBORTag(
            COSE_SIGN1_TAG,
            [protected_bytes, unprotected_map, None if detached else payload, signature],
        )
    )
    try:
        decode_sign1(message)
    except CoseError as exc:
        raise ValueError(f"refusing to build a COSE_Sign1 the verifier rejects: {exc}") from None
    return message


def sign1(
    payload: bytes,
    key: Ed25519PrivateKey,
    *,
    kid: bytes,
    content_type: str | int | None = None,
    detached: bool = False,
    protected_extra: Mapping[int, object] | None = None,
    unprotected: Mapping[int, object] | None = None,
) -> bytes:
    """Sign ``payload`` into a tagged COSE_Sign1 with protected ``{1: -8, 4: kid, 3: ctype}``.

    ``protected_extra`` adds protected parameters and may not redefine alg, kid or content type;
    ``unprotected`` is the unprotected map. ``detached`` leaves the payload out (nil).
    """
    if not isinstance(kid, bytes):
        raise TypeError(f"kid must be bytes, got {type(kid).__name__}")
    protected: dict[int | str, object] = {HEADER_ALG: ALG_EDDSA, HEADER_KID: kid}
    if content_type is not None:
        if isinstance(content_type, bool) or not isinstance(content_type, str | int):
            raise TypeError(f"content_type must be str or int, got {type(content_type).__name__}")
        if isinstance(content_type, int) and content_type < 0:
            raise ValueError(f"content_type {content_type} is negative")
        protected[HEADER_CONTENT_TYPE] = content_type
    for label, value in (protected_extra or {}).items():
        if label in protected:
            raise ValueError(f"protected_extra may not redefine header label {label!r}")
        protected[label] = value
    return sign1_with_headers(
        payload,
        key,
        protected=protected,
        unprotected={label: value for label, value in (unprotected or {}).items()},
        detached=detached,
    )


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_TREE_SIZE:
        raise ValueError(f"{name} {value} is outside 0 .. 2**64-1")
    return value


def _hash(name: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    if len(value) != HASH_SIZE:
        raise ValueError(f"{name} is {len(value)} bytes, expected {HASH_SIZE}")
    return value


def inclusion_receipt(
    key: Ed25519PrivateKey,
    *,
    kid: bytes,
    tree_size: int,
    leaf_index: int,
    path: Sequence[bytes],
    root: bytes,
) -> bytes:
    """RFC 9942 inclusion receipt (RFC9162_SHA256) for leaf ``leaf_index`` of a ``tree_size`` tree.

    Protected ``{1: -8, 4: kid, 395: 1}``; unprotected
    ``{396: {-1: [bstr(cbor([tree_size, leaf_index, [path...]]))]}}``; nil payload; the
    signature is over ``root`` as the detached payload. The verifier recomputes ``root`` from the
    leaf hash and ``path``, so ``path`` and ``root`` must come from the same tree.
    """
    size = _count("tree_size", tree_size)
    index = _count("leaf_index", leaf_index)
    if index >= size:
        raise ValueError(f"leaf_index {index} >= tree_size {size}")
    if isinstance(path, str | bytes):
        raise TypeError("path must be a sequence of hashes")
    hashes = [_hash(f"path[{i}]", h) for i, h in enumerate(path)]
    proof = _dumps([size, index, hashes])
    return sign1(
        _hash("root", root),
        key,
        kid=kid,
        detached=True,
        protected_extra={HEADER_VDS: VDS_RFC9162_SHA256},
        unprotected={HEADER_VDP: {INCLUSION_PROOFS: [proof]}},
    )
