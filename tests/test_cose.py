"""COSE_Sign1 and COSE Receipt (RFC 9942): building, strict verification, interop, tampering.

Tampered messages are built so that only the property under test is wrong: wherever the
strictness rule is about something signed, the tampered message is *validly signed*, so the
rejection must come from the rule and not from the signature check.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.cose import inclusion_receipt, sign1, sign1_with_headers
from harness.receipts.merkle import MerkleTree
from harness.verify.cose import (
    HEADER_VDP,
    HEADER_VDS,
    INCLUSION_PROOFS,
    VDS_RFC9162_SHA256,
    CoseAlgorithmError,
    CoseError,
    CoseHeaderError,
    CosePayloadError,
    CoseSignatureError,
    InclusionReceipt,
    MalformedCoseError,
    ReceiptError,
    ReceiptProofError,
    Sign1,
    decode_sign1,
    verify_inclusion_receipt,
    verify_sign1,
)
from harness.verify.errors import InclusionProofError, VerificationError
from harness.verify.merkle import leaf_hash

KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"cose test key").digest())
PUB = KEY.public_key()
OTHER = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"other key").digest()).public_key()
KID = b"test-kid"
PAYLOAD = b'{"statement": "run 42 passed"}'


# --------------------------------------------------------------------------- helpers


def _tbs(protected_bytes: bytes, payload: bytes, aad: bytes = b"") -> bytes:
    """Independent Sig_structure (written here, not imported)."""
    return cbor2.dumps(["Signature1", protected_bytes, aad, payload])


def _raw(
    protected: dict[Any, Any] | bytes,
    unprotected: Any = None,
    payload: Any = PAYLOAD,
    *,
    sign_payload: bytes | None = None,
    signature: bytes | None = None,
    tag: int | None = 18,
    extra: Sequence[Any] = (),
) -> bytes:
    """A COSE_Sign1 assembled by hand, validly signed by KEY unless ``signature`` is given."""
    pbytes = protected if isinstance(protected, bytes) else cbor2.dumps(protected)
    if signature is None:
        signed = sign_payload if sign_payload is not None else payload
        signature = KEY.sign(_tbs(pbytes, signed))
    items = [pbytes, {} if unprotected is None else unprotected, payload, signature, *extra]
    return cbor2.dumps(items if tag is None else cbor2.CBORTag(tag, items))


def _replace(message: bytes, index: int, value: Any) -> bytes:
    """Re-encode ``message`` with array element ``index`` replaced (signature left as is)."""
    obj = cbor2.loads(message)
    obj.value[index] = value
    return cbor2.dumps(obj)


def _tree(size: int) -> MerkleTree:
    return MerkleTree([leaf_hash(b"leaf %d" % i) for i in range(size)])


def _receipt(size: int = 6, index: int = 4) -> tuple[bytes, MerkleTree]:
    tree = _tree(size)
    receipt = inclusion_receipt(
        KEY,
        kid=KID,
        tree_size=size,
        leaf_index=index,
        path=tree.inclusion_proof(index),
        root=tree.root(),
    )
    return receipt, tree


def _with_proofs(receipt: bytes, proofs: Any) -> bytes:
    """Replace the receipt's (unsigned) vdp inclusion-proof list."""
    return _replace(receipt, 1, {HEADER_VDP: {INCLUSION_PROOFS: proofs}})


def _proof(size: int, index: int, path: Sequence[bytes]) -> bytes:
    return cbor2.dumps([size, index, list(path)])


def _signed_receipt(protected: dict[Any, Any], unprotected: dict[Any, Any], root: bytes) -> bytes:
    return sign1_with_headers(
        root, KEY, protected=protected, unprotected=unprotected, detached=True
    )


# --------------------------------------------------------------------------- round trips


def test_sign1_round_trip_and_decoded_fields() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    assert message[:2] == b"\xd2\x84"  # tag 18, array of 4
    assert verify_sign1(message, PUB) == PAYLOAD
    decoded = decode_sign1(message)
    assert decoded.protected == {1: -8, 4: KID}
    assert decoded.protected_bytes == cbor2.dumps({1: -8, 4: KID}, canonical=True)
    assert decoded.unprotected == {}
    assert decoded.payload == PAYLOAD
    assert len(decoded.signature) == 64
    assert decoded.alg == -8
    assert decoded.kid == KID


def test_sign1_is_deterministic() -> None:
    assert sign1(PAYLOAD, KEY, kid=KID) == sign1(PAYLOAD, KEY, kid=KID)


@pytest.mark.parametrize("ctype", ["application/json", 50, 0])
def test_sign1_content_type(ctype: str | int) -> None:
    message = sign1(PAYLOAD, KEY, kid=KID, content_type=ctype)
    assert decode_sign1(message).protected == {1: -8, 3: ctype, 4: KID}
    assert verify_sign1(message, PUB) == PAYLOAD


def test_sign1_extra_headers() -> None:
    message = sign1(
        PAYLOAD, KEY, kid=KID, protected_extra={-70000: "x", 15: {1: "iss"}}, unprotected={33: b"c"}
    )
    decoded = decode_sign1(message)
    assert decoded.protected[-70000] == "x"
    assert decoded.protected[15] == {1: "iss"}
    assert decoded.unprotected == {33: b"c"}
    assert verify_sign1(message, PUB) == PAYLOAD


def test_sign1_empty_payload() -> None:
    assert verify_sign1(sign1(b"", KEY, kid=KID), PUB) == b""


def test_sign1_external_aad() -> None:
    message = sign1_with_headers(PAYLOAD, KEY, protected={1: -8, 4: KID}, external_aad=b"context")
    assert verify_sign1(message, PUB, external_aad=b"context") == PAYLOAD
    with pytest.raises(CoseSignatureError):
        verify_sign1(message, PUB)


def test_sign1_detached() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID, detached=True)
    assert decode_sign1(message).payload is None
    assert verify_sign1(message, PUB, detached_payload=PAYLOAD) == PAYLOAD
    with pytest.raises(CosePayloadError, match=r"nil .* no detached payload"):
        verify_sign1(message, PUB)
    with pytest.raises(CoseSignatureError):
        verify_sign1(message, PUB, detached_payload=PAYLOAD + b" ")


def test_embedded_and_detached_payload_is_an_error() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    with pytest.raises(CosePayloadError, match="embedded payload and a detached"):
        verify_sign1(message, PUB, detached_payload=PAYLOAD)


def test_wrong_key() -> None:
    with pytest.raises(CoseSignatureError, match="EdDSA signature does not verify"):
        verify_sign1(sign1(PAYLOAD, KEY, kid=KID), OTHER)


def test_es256_round_trip_and_signature_form() -> None:
    private = ec.derive_private_key(12345, ec.SECP256R1())
    protected = cbor2.dumps({1: -7, 4: KID})
    der = private.sign(_tbs(protected, PAYLOAD), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    good = _raw(protected, signature=raw)
    assert verify_sign1(good, private.public_key()) == PAYLOAD
    with pytest.raises(CoseSignatureError, match=r"is \d+ bytes, expected 64"):
        verify_sign1(_raw(protected, signature=der), private.public_key())
    flipped = raw[:10] + bytes([raw[10] ^ 1]) + raw[11:]
    with pytest.raises(CoseSignatureError, match="ES256 signature does not verify"):
        verify_sign1(_raw(protected, signature=flipped), private.public_key())
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    with pytest.raises(CoseAlgorithmError, match="needs a P-256 key, got EC secp384r1"):
        verify_sign1(good, p384)
    with pytest.raises(CoseAlgorithmError, match="needs a P-256 key, got Ed25519"):
        verify_sign1(good, PUB)


def test_unknown_tag_in_unprotected_header_is_kept() -> None:
    message = _raw({1: -8}, unprotected={99: cbor2.CBORTag(1234, b"x")})
    assert verify_sign1(message, PUB) == PAYLOAD
    assert decode_sign1(message).kid is None


def test_kid_from_unprotected_header() -> None:
    assert decode_sign1(_raw({1: -8}, unprotected={4: b"u"})).kid == b"u"


# --------------------------------------------------------------------------- builder refusals


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"protected_extra": {1: -7}}, ValueError, "redefine header label 1"),
        ({"protected_extra": {4: b"x"}}, ValueError, "redefine header label 4"),
        ({"protected_extra": {2: [4]}}, ValueError, "crit"),
        ({"unprotected": {1: -8}}, ValueError, "both"),
        ({"unprotected": {4: b"other"}}, ValueError, "both"),
        ({"unprotected": {2: [33]}}, ValueError, "crit"),
        ({"unprotected": {99: 1.5}}, ValueError, "floating-point"),
        ({"kid": "text"}, TypeError, "kid must be bytes"),
        ({"content_type": True}, TypeError, "content_type"),
        ({"content_type": -1}, ValueError, "negative"),
    ],
)
def test_sign1_refuses_what_the_verifier_rejects(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args: dict[str, Any] = {"kid": KID, **kwargs}
    with pytest.raises(error, match=match):
        sign1(PAYLOAD, KEY, **args)


def test_sign1_with_headers_refuses_other_alg() -> None:
    with pytest.raises(ValueError, match="EdDSA"):
        sign1_with_headers(PAYLOAD, KEY, protected={1: -7})
    with pytest.raises(ValueError, match="EdDSA"):
        sign1_with_headers(PAYLOAD, KEY, protected={4: KID})


def test_inclusion_receipt_argument_checks() -> None:
    tree = _tree(4)
    path, root = tree.inclusion_proof(1), tree.root()
    with pytest.raises(ValueError, match="leaf_index 4 >= tree_size 4"):
        inclusion_receipt(KEY, kid=KID, tree_size=4, leaf_index=4, path=path, root=root)
    with pytest.raises(TypeError, match="tree_size must be an int"):
        inclusion_receipt(KEY, kid=KID, tree_size=True, leaf_index=0, path=path, root=root)
    with pytest.raises(ValueError, match=r"path\[0\] is 31 bytes"):
        inclusion_receipt(
            KEY, kid=KID, tree_size=4, leaf_index=1, path=[path[0][:31], path[1]], root=root
        )
    with pytest.raises(ValueError, match="root is 33 bytes"):
        inclusion_receipt(KEY, kid=KID, tree_size=4, leaf_index=1, path=path, root=root + b"x")


# --------------------------------------------------------------------------- interop


def test_interop_independent_cbor2_cryptography_check() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID, content_type="text/plain")
    obj = cbor2.loads(message)
    assert isinstance(obj, cbor2.CBORTag)
    assert obj.tag == 18
    protected_bytes, unprotected, payload, signature = obj.value
    assert cbor2.loads(protected_bytes) == {1: -8, 3: "text/plain", 4: KID}
    assert unprotected == {}
    assert payload == PAYLOAD
    pub = Ed25519PublicKey.from_public_bytes(PUB.public_bytes_raw())
    pub.verify(signature, _tbs(protected_bytes, payload))  # raises if wrong
    with pytest.raises(InvalidSignature):
        pub.verify(signature, _tbs(protected_bytes, payload + b"x"))


def test_interop_receipt_independent_check() -> None:
    receipt, tree = _receipt(11, 7)
    obj = cbor2.loads(receipt)
    protected_bytes, unprotected, payload, signature = obj.value
    assert payload is None
    assert cbor2.loads(protected_bytes) == {1: -8, 4: KID, 395: 1}
    (proof,) = unprotected[396][-1]
    size, index, path = cbor2.loads(proof)
    assert (size, index, path) == (11, 7, tree.inclusion_proof(7))
    PUB.verify(signature, _tbs(protected_bytes, tree.root()))


def _pycose_key() -> Any:
    from pycose.keys.curves import Ed25519
    from pycose.keys.okp import OKPKey

    return OKPKey(crv=Ed25519, x=PUB.public_bytes_raw())


def test_interop_pycose_verifies_our_sign1() -> None:
    from pycose.messages.sign1message import Sign1Message

    message = sign1(PAYLOAD, KEY, kid=KID, content_type="application/json")
    decoded = Sign1Message.decode(message)
    decoded.key = _pycose_key()
    assert decoded.verify_signature() is True
    assert decoded.payload == PAYLOAD
    # negative control: pycose really checks (it returns False rather than raising)
    tampered = Sign1Message.decode(_replace(message, 2, PAYLOAD + b"x"))
    tampered.key = _pycose_key()
    assert tampered.verify_signature() is False


def test_interop_pycose_verifies_our_receipt() -> None:
    from pycose.messages.sign1message import Sign1Message

    receipt, tree = _receipt(9, 8)
    decoded = Sign1Message.decode(receipt)
    decoded.key = _pycose_key()
    assert decoded.verify_signature(detached_payload=tree.root()) is True
    assert decoded.verify_signature(detached_payload=bytes(32)) is False


def test_interop_we_verify_pycose_sign1() -> None:
    from pycose.algorithms import EdDSA
    from pycose.headers import KID as PKID
    from pycose.headers import Algorithm
    from pycose.keys.curves import Ed25519
    from pycose.keys.okp import OKPKey

    key = OKPKey(
        crv=Ed25519,
        x=PUB.public_bytes_raw(),
        d=KEY.private_bytes_raw(),
    )
    from pycose.messages.sign1message import Sign1Message

    msg = Sign1Message(phdr={Algorithm: EdDSA, PKID: KID}, payload=PAYLOAD)
    msg.key = key
    encoded = msg.encode()
    assert verify_sign1(encoded, PUB) == PAYLOAD
    assert decode_sign1(encoded).kid == KID


# --------------------------------------------------------------------------- sign1 tampering


def test_tamper_payload() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    with pytest.raises(CoseSignatureError, match="does not verify"):
        verify_sign1(_replace(message, 2, PAYLOAD.replace(b"42", b"43")), PUB)


def test_tamper_protected_header_byte() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    protected = decode_sign1(message).protected_bytes
    pos = message.index(protected) + len(protected) - 1  # last byte of the kid
    tampered = message[:pos] + bytes([message[pos] ^ 1]) + message[pos + 1 :]
    with pytest.raises(CoseSignatureError, match="does not verify"):
        verify_sign1(tampered, PUB)


def test_tamper_kid() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    forged = _replace(message, 0, cbor2.dumps({1: -8, 4: b"attacker"}, canonical=True))
    with pytest.raises(CoseSignatureError):
        verify_sign1(forged, PUB)


def test_tamper_signature_bit_flip() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    sig = decode_sign1(message).signature
    for bit in (0, 255, 511):
        flipped = bytearray(sig)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CoseSignatureError, match="does not verify"):
            verify_sign1(_replace(message, 3, bytes(flipped)), PUB)


def test_signature_wrong_length() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    with pytest.raises(CoseSignatureError, match="is 63 bytes, expected 64"):
        verify_sign1(_replace(message, 3, decode_sign1(message).signature[:63]), PUB)


def test_alg_moved_to_unprotected() -> None:
    message = _raw({4: KID}, unprotected={1: -8})
    with pytest.raises(CoseHeaderError, match=r"alg .* unprotected header"):
        verify_sign1(message, PUB)


def test_alg_in_both_headers() -> None:
    with pytest.raises(CoseHeaderError, match="1 occur in both"):
        verify_sign1(_raw({1: -8}, unprotected={1: -8}), PUB)


def test_alg_missing() -> None:
    with pytest.raises(CoseHeaderError, match="no alg"):
        verify_sign1(_raw({4: KID}), PUB)
    with pytest.raises(CoseHeaderError, match="no alg"):
        verify_sign1(_raw(b""), PUB)  # zero-length protected = empty map


def test_alg_swapped_to_es256_with_ed25519_key() -> None:
    with pytest.raises(CoseAlgorithmError, match=r"ES256 \(-7\) needs a P-256 key, got Ed25519"):
        verify_sign1(_raw({1: -7, 4: KID}), PUB)


@pytest.mark.parametrize("alg", [-35, -19, 0, "EdDSA", True, None])
def test_unsupported_alg(alg: Any) -> None:
    with pytest.raises(CoseAlgorithmError, match=r"alg .* is not supported; expected EdDSA"):
        verify_sign1(_raw({1: alg, 4: KID}), PUB)


def test_float_alg_is_malformed_before_it_is_an_algorithm() -> None:
    # -8.0 is not EdDSA (-8): floats are refused by the strict decoder, before any alg lookup.
    with pytest.raises(MalformedCoseError, match="floating-point values are not allowed"):
        verify_sign1(_raw({1: -8.0, 4: KID}), PUB)


def test_alg_true_is_not_edDSA_alias() -> None:
    with pytest.raises(CoseAlgorithmError, match="alg True is not supported"):
        verify_sign1(_raw({1: True}), PUB)


def test_bool_label_does_not_alias_alg() -> None:
    # {true: -8}: Python would treat the key True as label 1
    with pytest.raises(CoseHeaderError, match="label True is not an int or text string"):
        verify_sign1(_raw({True: -8}), PUB)


@pytest.mark.parametrize(
    ("protected", "unprotected"),
    [
        ({1: -8, 2: [4], 4: KID}, {}),
        ({1: -8, 2: [99], 99: 1}, {}),
        ({1: -8, 2: []}, {}),
        ({1: -8}, {2: [4]}),
    ],
)
def test_crit_is_rejected(protected: dict[Any, Any], unprotected: dict[Any, Any]) -> None:
    with pytest.raises(CoseHeaderError, match=r"crit \(label 2\)"):
        verify_sign1(_raw(protected, unprotected=unprotected), PUB)


def test_same_label_in_both_headers() -> None:
    with pytest.raises(CoseHeaderError, match="4 occur in both"):
        verify_sign1(_raw({1: -8, 4: KID}, unprotected={4: KID}), PUB)


def test_kid_must_be_bstr() -> None:
    with pytest.raises(CoseHeaderError, match=r"kid \(label 4\) must be a byte string"):
        verify_sign1(_raw({1: -8, 4: "text"}), PUB)
    with pytest.raises(CoseHeaderError, match="unprotected header kid"):
        verify_sign1(_raw({1: -8}, unprotected={4: 5}), PUB)


@pytest.mark.parametrize("ctype", [-1, b"json", [1]])
def test_content_type_must_be_uint_or_tstr(ctype: Any) -> None:
    with pytest.raises(CoseHeaderError, match="content type"):
        verify_sign1(_raw({1: -8, 3: ctype}), PUB)


def test_untagged() -> None:
    with pytest.raises(MalformedCoseError, match="got an untagged list"):
        verify_sign1(_raw({1: -8}, tag=None), PUB)


@pytest.mark.parametrize("tag", [17, 98, 61, 55799])
def test_wrong_tag(tag: int) -> None:
    with pytest.raises(MalformedCoseError, match=f"tag {tag}"):
        verify_sign1(_raw({1: -8}, tag=tag), PUB)


def test_tag_18_nested_in_other_tag() -> None:
    inner = cbor2.loads(_raw({1: -8}))
    with pytest.raises(MalformedCoseError, match="tag 55799 at byte 0 is not allowed"):
        verify_sign1(cbor2.dumps(cbor2.CBORTag(55799, inner)), PUB)
    with pytest.raises(MalformedCoseError, match="got tag 61"):
        verify_sign1(cbor2.dumps(cbor2.CBORTag(61, inner)), PUB)


def test_extra_array_element() -> None:
    with pytest.raises(MalformedCoseError, match="5 elements, expected 4"):
        verify_sign1(_raw({1: -8}, extra=[b""]), PUB)


def test_missing_array_element() -> None:
    message = cbor2.loads(_raw({1: -8}))
    message.value.pop()
    with pytest.raises(MalformedCoseError, match="3 elements, expected 4"):
        verify_sign1(cbor2.dumps(message), PUB)


def test_tag_content_not_array() -> None:
    with pytest.raises(MalformedCoseError, match="tag content must be an array"):
        verify_sign1(cbor2.dumps(cbor2.CBORTag(18, {1: 2})), PUB)


def test_trailing_bytes() -> None:
    with pytest.raises(MalformedCoseError, match="1 trailing byte"):
        verify_sign1(sign1(PAYLOAD, KEY, kid=KID) + b"\x00", PUB)


def test_trailing_bytes_inside_protected_header() -> None:
    protected = cbor2.dumps({1: -8}) + b"\xf6"
    with pytest.raises(MalformedCoseError, match="protected header has 1 trailing byte"):
        verify_sign1(_raw(protected), PUB)


def test_truncated() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    with pytest.raises(MalformedCoseError, match="not well-formed CBOR"):
        verify_sign1(message[:-1], PUB)


def test_duplicate_key_in_protected_header() -> None:
    # {1: -8, 4: 'a', 4: 'b'}: a decoder keeps one kid; we refuse the map (validly signed)
    protected = b"\xa3\x01\x27\x04\x41a\x04\x41b"
    with pytest.raises(MalformedCoseError, match=r"protected header .*duplicate map key 4"):
        verify_sign1(_raw(protected), PUB)


def test_duplicate_alg_in_protected_header() -> None:
    protected = b"\xa2\x01\x26\x01\x27"  # {1: -7, 1: -8}
    with pytest.raises(MalformedCoseError, match="duplicate map key 1"):
        verify_sign1(_raw(protected), PUB)


def test_duplicate_key_in_unprotected_header() -> None:
    message = _raw({1: -8}, unprotected={33: b"x"})
    head = b"\xa1\x18\x21\x41x"
    assert message.count(head) == 1
    forged = message.replace(head, b"\xa2\x18\x21\x41x\x18\x21\x41y")
    with pytest.raises(MalformedCoseError, match=r"COSE_Sign1 .*duplicate map key 33"):
        verify_sign1(forged, PUB)


def test_keys_equal_as_python_values() -> None:
    # {1: -8, 1.0: 0} and {1: -8, true: 0} collapse to one dict entry in Python
    for protected, match in [
        (b"\xa2\x01\x27\xf9\x3c\x00\x00", "map keys 1 and 1.0 .* are equal"),
        (b"\xa2\x01\x27\xf5\x00", "map keys 1 and True .* are equal"),
    ]:
        with pytest.raises(MalformedCoseError, match=match):
            verify_sign1(_raw(protected), PUB)


def test_indefinite_length_protected_map() -> None:
    protected = b"\xbf\x01\x27\x04\x41a\xff"
    with pytest.raises(MalformedCoseError, match="indefinite-length map at byte 0"):
        verify_sign1(_raw(protected), PUB)


def test_indefinite_length_payload() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    head = cbor2.dumps(PAYLOAD)
    assert message.count(head) == 1
    chunks = b"\x5f" + cbor2.dumps(PAYLOAD[:5]) + cbor2.dumps(PAYLOAD[5:]) + b"\xff"
    with pytest.raises(MalformedCoseError, match="indefinite-length byte string"):
        verify_sign1(message.replace(head, chunks), PUB)


def test_indefinite_length_array() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    assert message[1] == 0x84
    forged = message[:1] + b"\x9f" + message[2:] + b"\xff"
    with pytest.raises(MalformedCoseError, match="indefinite-length array at byte 1"):
        verify_sign1(forged, PUB)


def test_non_shortest_integer_in_protected_header() -> None:
    protected = b"\xa1\x01\x38\x07"  # {1: -8} with -8 in a 1-byte argument
    with pytest.raises(MalformedCoseError, match="non-shortest negint head"):
        verify_sign1(_raw(protected), PUB)


def test_non_shortest_length_head() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    head = cbor2.dumps(PAYLOAD)
    forged = message.replace(head, b"\x59" + len(PAYLOAD).to_bytes(2, "big") + PAYLOAD)
    with pytest.raises(MalformedCoseError, match="non-shortest byte string head"):
        verify_sign1(forged, PUB)


def test_protected_header_must_be_bstr() -> None:
    message = _replace(_raw({1: -8}), 0, {1: -8})
    with pytest.raises(MalformedCoseError, match="protected header must be a byte string"):
        verify_sign1(message, PUB)


def test_protected_header_must_wrap_a_map() -> None:
    with pytest.raises(MalformedCoseError, match="protected header must be a CBOR map"):
        verify_sign1(_raw(cbor2.dumps([1, -8])), PUB)


def test_protected_header_encoded_empty_map() -> None:
    with pytest.raises(MalformedCoseError, match="encoded empty map"):
        verify_sign1(_raw(b"\xa0"), PUB)


@pytest.mark.parametrize("value", [[], b"", None, 0])
def test_unprotected_header_must_be_map(value: Any) -> None:
    with pytest.raises(MalformedCoseError, match="unprotected header must be a CBOR map"):
        verify_sign1(_replace(_raw({1: -8}), 1, value), PUB)


def test_payload_must_be_bstr_or_nil() -> None:
    message = _raw({1: -8}, payload=PAYLOAD.decode(), sign_payload=PAYLOAD)
    with pytest.raises(MalformedCoseError, match="payload must be a byte string or nil, got str"):
        verify_sign1(message, PUB)


def test_signature_must_be_bstr() -> None:
    with pytest.raises(MalformedCoseError, match="signature must be a byte string"):
        verify_sign1(_raw({1: -8}, signature="sig"), PUB)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        cbor2.CBORTag(1, 0),  # epoch date -> datetime
        cbor2.CBORTag(2, b"\x01"),  # bignum -> int (does not round-trip)
        cbor2.CBORTag(37, bytes(16)),  # UUID
        cbor2.undefined,
    ],
)
def test_special_items_refused(value: Any) -> None:
    with pytest.raises(MalformedCoseError):
        verify_sign1(_raw({1: -8}, unprotected={99: value}), PUB)


def test_shared_reference_cycle_refused() -> None:
    # tag 28 (shareable) around [tag 29 (sharedref) 0]: a cycle after decoding
    message = sign1(PAYLOAD, KEY, kid=KID)
    forged = message.replace(b"\xa0", b"\xa1\x18\x63\xd8\x1c\x81\xd8\x1d\x00", 1)
    with pytest.raises(MalformedCoseError):
        verify_sign1(forged, PUB)


def test_deep_nesting_refused() -> None:
    deep = b"\x81" * 10_000 + b"\x00"
    with pytest.raises(MalformedCoseError, match="not well-formed CBOR"):
        verify_sign1(b"\xd2\x84\x40" + deep, PUB)


@pytest.mark.parametrize("message", [b"", b"\xd2", b"\xff", b"\xd2\x84"])
def test_garbage(message: bytes) -> None:
    with pytest.raises(MalformedCoseError):
        verify_sign1(message, PUB)


def test_non_bytes_message() -> None:
    message = sign1(PAYLOAD, KEY, kid=KID)
    with pytest.raises(MalformedCoseError, match="must be bytes, got bytearray"):
        verify_sign1(bytearray(message), PUB)  # type: ignore[arg-type]


def test_error_hierarchy() -> None:
    for cls in (
        MalformedCoseError,
        CoseHeaderError,
        CoseAlgorithmError,
        CosePayloadError,
        CoseSignatureError,
        ReceiptError,
        ReceiptProofError,
    ):
        assert issubclass(cls, CoseError)
        assert issubclass(cls, VerificationError)
    assert issubclass(ReceiptProofError, InclusionProofError)


# --------------------------------------------------------------------------- receipts


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 17])
def test_receipt_round_trip_all_indices(size: int) -> None:
    tree = _tree(size)
    for index in range(size):
        receipt = inclusion_receipt(
            KEY,
            kid=KID,
            tree_size=size,
            leaf_index=index,
            path=tree.inclusion_proof(index),
            root=tree.root(),
        )
        result = verify_inclusion_receipt(receipt, PUB, tree.leaf(index))
        assert result == InclusionReceipt(
            tree_size=size,
            leaf_index=index,
            path=tuple(tree.inclusion_proof(index)),
            root=tree.root(),
            kid=KID,
        )


def test_receipt_structure() -> None:
    receipt, _ = _receipt()
    decoded = decode_sign1(receipt)
    assert decoded.protected == {1: -8, 4: KID, HEADER_VDS: VDS_RFC9162_SHA256}
    assert list(decoded.unprotected) == [HEADER_VDP]
    assert decoded.payload is None


def test_receipt_wrong_key() -> None:
    receipt, tree = _receipt()
    with pytest.raises(CoseSignatureError, match="receipt signature does not verify"):
        verify_inclusion_receipt(receipt, OTHER, tree.leaf(4))


def test_receipt_wrong_leaf_hash() -> None:
    receipt, tree = _receipt()
    with pytest.raises(CoseSignatureError, match="recomputed for leaf 4 of tree size 6"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(3))
    with pytest.raises(ReceiptProofError, match="leaf hash is 31 bytes"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(4)[:31])


def test_receipt_wrong_root() -> None:
    """Signed over another root (the detached payload does not match the proof)."""
    tree = _tree(6)
    receipt = inclusion_receipt(
        KEY,
        kid=KID,
        tree_size=6,
        leaf_index=4,
        path=tree.inclusion_proof(4),
        root=tree.root(5),
    )
    with pytest.raises(CoseSignatureError, match="receipt signature does not verify"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(4))


@pytest.mark.parametrize("element", [0, 1])
def test_receipt_proof_element_flip(element: int) -> None:
    receipt, tree = _receipt()
    path = tree.inclusion_proof(4)
    path[element] = bytes([path[element][0] ^ 1]) + path[element][1:]
    forged = _with_proofs(receipt, [_proof(6, 4, path)])
    with pytest.raises(CoseSignatureError, match="receipt signature does not verify"):
        verify_inclusion_receipt(forged, PUB, tree.leaf(4))


def test_receipt_leaf_index_plus_minus_one() -> None:
    receipt, tree = _receipt(6, 4)
    path = tree.inclusion_proof(4)
    # index 5 has the same path shape in a 6-leaf tree: the recomputed root differs
    with pytest.raises(CoseSignatureError, match="leaf 5 of tree size 6"):
        verify_inclusion_receipt(_with_proofs(receipt, [_proof(6, 5, path)]), PUB, tree.leaf(4))
    # index 3 needs a 3-hash path
    with pytest.raises(ReceiptProofError, match="proof has 2 hashes, expected 3"):
        verify_inclusion_receipt(_with_proofs(receipt, [_proof(6, 3, path)]), PUB, tree.leaf(4))
    # last leaf + 1 is out of range
    last, tree7 = _receipt(7, 6)
    path7 = tree7.inclusion_proof(6)
    with pytest.raises(ReceiptProofError, match="index 7 >= size 7"):
        verify_inclusion_receipt(_with_proofs(last, [_proof(7, 7, path7)]), PUB, tree7.leaf(6))


def test_receipt_tree_size_plus_minus_one() -> None:
    receipt, tree = _receipt(6, 4)
    path = tree.inclusion_proof(4)
    with pytest.raises(ReceiptProofError, match="proof has 2 hashes, expected 3"):
        verify_inclusion_receipt(_with_proofs(receipt, [_proof(7, 4, path)]), PUB, tree.leaf(4))
    with pytest.raises(ReceiptProofError, match="proof has 2 hashes, expected 1"):
        verify_inclusion_receipt(_with_proofs(receipt, [_proof(5, 4, path)]), PUB, tree.leaf(4))


def test_receipt_tree_size_is_bound_only_through_the_path_shape() -> None:
    """Documented limitation (RFC 9942 / RFC 9162): the tree size is not signed.

    Leaf 2 of a 7-leaf tree has the same path shape in an 8-leaf tree, so a receipt whose
    (unprotected) size is changed from 7 to 8 still verifies: the signed root is what binds the
    size. Callers must compare ``root`` with a signed checkpoint before trusting ``tree_size``.
    """
    receipt, tree = _receipt(7, 2)
    forged = _with_proofs(receipt, [_proof(8, 2, tree.inclusion_proof(2))])
    result = verify_inclusion_receipt(forged, PUB, tree.leaf(2))
    assert result.tree_size == 8
    assert result.root == tree.root()  # the root is still the signed 7-leaf root
    assert result.root != _tree(8).root()


def test_receipt_vds_missing() -> None:
    tree = _tree(2)
    receipt = _signed_receipt(
        {1: -8, 4: KID}, {HEADER_VDP: {-1: [_proof(2, 0, tree.inclusion_proof(0))]}}, tree.root()
    )
    with pytest.raises(ReceiptError, match=r"no vds \(label 395\)"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(0))


@pytest.mark.parametrize("vds", [2, 0, -1, True, "RFC9162_SHA256", b"\x01"])
def test_receipt_vds_other_value(vds: Any) -> None:
    tree = _tree(2)
    receipt = _signed_receipt(
        {1: -8, 395: vds}, {HEADER_VDP: {-1: [_proof(2, 0, tree.inclusion_proof(0))]}}, tree.root()
    )
    with pytest.raises(ReceiptError, match=re.escape(f"vds is {vds!r}, expected 1")):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(0))


def test_receipt_vds_unprotected() -> None:
    tree = _tree(2)
    receipt = _signed_receipt(
        {1: -8},
        {395: 1, HEADER_VDP: {-1: [_proof(2, 0, tree.inclusion_proof(0))]}},
        tree.root(),
    )
    with pytest.raises(ReceiptError, match=r"vds .* must be in the protected header"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(0))


def test_receipt_vdp_missing() -> None:
    receipt, tree = _receipt()
    with pytest.raises(ReceiptError, match=r"no vdp \(label 396\)"):
        verify_inclusion_receipt(_replace(receipt, 1, {}), PUB, tree.leaf(4))


def test_receipt_vdp_in_protected_header() -> None:
    tree = _tree(2)
    vdp = {-1: [_proof(2, 0, tree.inclusion_proof(0))]}
    receipt = _signed_receipt({1: -8, 395: 1, 396: vdp}, {}, tree.root())
    with pytest.raises(ReceiptError, match=r"vdp .* must be in the unprotected header"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(0))


@pytest.mark.parametrize(
    ("vdp", "match"),
    [
        ([], "vdp must be a map"),
        ({}, "exactly the inclusion-proofs key"),
        ({-2: []}, "exactly the inclusion-proofs key"),
        ({-1: None}, "non-empty array"),
        ({-1: []}, "non-empty array"),
        ({-1: ["text"]}, "inclusion proof must be a byte string"),
    ],
)
def test_receipt_vdp_malformed(vdp: Any, match: str) -> None:
    receipt, tree = _receipt()
    with pytest.raises(ReceiptError, match=match):
        verify_inclusion_receipt(_replace(receipt, 1, {HEADER_VDP: vdp}), PUB, tree.leaf(4))


def test_receipt_vdp_extra_key() -> None:
    receipt, tree = _receipt()
    proof = _proof(6, 4, tree.inclusion_proof(4))
    forged = _replace(receipt, 1, {HEADER_VDP: {-1: [proof], -2: []}})
    with pytest.raises(ReceiptError, match="exactly the inclusion-proofs key"):
        verify_inclusion_receipt(forged, PUB, tree.leaf(4))


def test_receipt_two_proofs() -> None:
    receipt, tree = _receipt()
    proof = _proof(6, 4, tree.inclusion_proof(4))
    with pytest.raises(ReceiptError, match="2 inclusion proofs; exactly one is accepted"):
        verify_inclusion_receipt(_with_proofs(receipt, [proof, proof]), PUB, tree.leaf(4))


@pytest.mark.parametrize(
    ("proof", "error", "match"),
    [
        (cbor2.dumps([6, 4]), ReceiptError, r"array \[tree-size, leaf-index, inclusion-path\]"),
        (cbor2.dumps({6: 4}), ReceiptError, r"array \[tree-size, leaf-index, inclusion-path\]"),
        (cbor2.dumps([-6, 4, []]), ReceiptError, "tree-size must be an unsigned integer"),
        (cbor2.dumps([6, "4", []]), ReceiptError, "leaf-index must be an unsigned integer"),
        (cbor2.dumps([6, 4, b""]), ReceiptError, "inclusion-path must be an array"),
        (cbor2.dumps([6, 4, [b"x" * 32, "y"]]), ReceiptError, r"inclusion-path\[1\]"),
        (cbor2.dumps([6, 4, [b"x" * 32, b"y" * 31]]), ReceiptProofError, r"proof\[1\] is 31"),
        (cbor2.dumps([6, 4, []]) + b"\x00", ReceiptError, "trailing"),
        (b"\x83\x18\x06\x04\x80", ReceiptError, "non-shortest uint head"),
        (b"\x9f\x06\x04\x80\xff", ReceiptError, "indefinite-length array"),
        (b"\x83\x06", ReceiptError, "not well-formed CBOR"),
    ],
)
def test_receipt_proof_malformed(proof: bytes, error: type[Exception], match: str) -> None:
    receipt, tree = _receipt()
    with pytest.raises(error, match=match):
        verify_inclusion_receipt(_with_proofs(receipt, [proof]), PUB, tree.leaf(4))


def test_receipt_payload_must_be_nil() -> None:
    receipt, tree = _receipt()
    with pytest.raises(ReceiptError, match="payload must be nil"):
        verify_inclusion_receipt(_replace(receipt, 2, tree.root()), PUB, tree.leaf(4))


def test_receipt_crit_rejected() -> None:
    tree = _tree(2)
    protected = cbor2.dumps({1: -8, 2: [395], 395: 1})
    vdp = {HEADER_VDP: {-1: [_proof(2, 0, tree.inclusion_proof(0))]}}
    receipt = _raw(protected, unprotected=vdp, payload=None, sign_payload=tree.root())
    with pytest.raises(CoseHeaderError, match="crit"):
        verify_inclusion_receipt(receipt, PUB, tree.leaf(0))


def test_receipt_is_also_a_plain_sign1_over_the_root() -> None:
    receipt, tree = _receipt()
    assert verify_sign1(receipt, PUB, detached_payload=tree.root()) == tree.root()


# --------------------------------------------------------------------------- property tests

_VALID = sign1(PAYLOAD, KEY, kid=KID, content_type="application/json")
_VALID_RECEIPT, _RECEIPT_TREE = _receipt(6, 4)


def _only_verification_errors(func: Callable[[], object]) -> object:
    try:
        return func()
    except VerificationError:
        return None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_verification_errors(data: bytes) -> None:
    with pytest.raises(VerificationError):
        verify_sign1(data, PUB)
    with pytest.raises(VerificationError):
        verify_inclusion_receipt(data, PUB, _RECEIPT_TREE.leaf(4))
    decoded = _only_verification_errors(lambda: decode_sign1(data))
    if decoded is not None:  # strict decoding: what is accepted re-encodes to the same bytes
        assert isinstance(decoded, Sign1)
        items = [decoded.protected_bytes, decoded.unprotected, decoded.payload, decoded.signature]
        assert cbor2.dumps(cbor2.CBORTag(18, items)) == data


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_sign1_head(data: bytes) -> None:
    for prefix in (b"\xd2\x84", b"\xd2\x84\x43\xa1\x01\x27", b"\xd2\x84\x43\xa1\x01\x27\xa0"):
        with pytest.raises(VerificationError):
            verify_sign1(prefix + data, PUB)


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_single_byte_mutation_of_sign1_fails(data: st.DataObject) -> None:
    pos = data.draw(st.integers(0, len(_VALID) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != _VALID[pos]))
    mutated = _VALID[:pos] + bytes([value]) + _VALID[pos + 1 :]
    with pytest.raises(VerificationError):
        verify_sign1(mutated, PUB)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_truncation_or_insertion_of_sign1_fails(data: st.DataObject) -> None:
    pos = data.draw(st.integers(0, len(_VALID)))
    insert = data.draw(st.binary(max_size=3))
    cut = data.draw(st.integers(0, 3))
    mutated = _VALID[:pos] + insert + _VALID[pos + cut :]
    if mutated == _VALID:
        return
    with pytest.raises(VerificationError):
        verify_sign1(mutated, PUB)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_single_byte_mutation_of_receipt(data: st.DataObject) -> None:
    """Only VerificationErrors; whatever still verifies has the signed root and the same path."""
    pos = data.draw(st.integers(0, len(_VALID_RECEIPT) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != _VALID_RECEIPT[pos]))
    mutated = _VALID_RECEIPT[:pos] + bytes([value]) + _VALID_RECEIPT[pos + 1 :]
    result = _only_verification_errors(
        lambda: verify_inclusion_receipt(mutated, PUB, _RECEIPT_TREE.leaf(4))
    )
    if result is not None:
        assert isinstance(result, InclusionReceipt)
        assert result.root == _RECEIPT_TREE.root()
        assert result.path == tuple(_RECEIPT_TREE.inclusion_proof(4))
        assert result.leaf_index == 4


_cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.sampled_from([-1, 1]).map(lambda sign: sign * 2**20000)  # repr() of these raises
    | st.binary(max_size=40)
    | st.text(max_size=10)
    | st.floats(allow_nan=False),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.integers(-3, 400) | st.text(max_size=3), children, max_size=4)
        | st.builds(cbor2.CBORTag, st.sampled_from([0, 1, 2, 18, 24, 28, 29, 99]), children)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_cbor_values, min_size=0, max_size=6), st.sampled_from([None, 18, 17]))
def test_random_cbor_structures_only_verification_errors(items: list[Any], tag: int | None) -> None:
    try:
        encoded = cbor2.dumps(items if tag is None else cbor2.CBORTag(tag, items))
    except Exception:  # hypothesis built something cbor2 will not encode
        return
    with pytest.raises(VerificationError):
        verify_sign1(encoded, PUB)
    with pytest.raises(VerificationError):
        verify_inclusion_receipt(encoded, PUB, _RECEIPT_TREE.leaf(4))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(-5, 400), _cbor_values, max_size=4))
def test_random_protected_headers_validly_signed(extra: dict[int, Any]) -> None:
    """Arbitrary protected maps, validly signed: verify, or a VerificationError — nothing else."""
    protected = {1: -8, **extra}
    try:
        message = _raw(protected)
    except Exception:
        return
    payload = _only_verification_errors(lambda: verify_sign1(message, PUB))
    if payload is not None:  # verified: the signed payload, EdDSA kept, no critical header
        assert payload == PAYLOAD
        assert protected[1] == -8 and type(protected[1]) is int
        assert 2 not in protected


_HUGE = -(2**20000)  # a CBOR bignum whose repr() raises ValueError (int max str digits)


@pytest.mark.parametrize(
    ("protected", "unprotected", "error"),
    [
        ({1: _HUGE}, {}, CoseAlgorithmError),
        ({1: -8, _HUGE: 0}, {_HUGE: 0}, CoseHeaderError),
        ({1: -8, 2: [_HUGE]}, {}, CoseHeaderError),
        ({1: -8, 3: _HUGE}, {}, CoseHeaderError),
        ({1: -8, 395: _HUGE}, {396: {-1: [b""]}}, ReceiptError),
        ({1: -8, 395: 1}, {396: {_HUGE: []}}, ReceiptError),
    ],
)
def test_huge_integers_in_error_messages(
    protected: dict[Any, Any], unprotected: dict[Any, Any], error: type[Exception]
) -> None:
    message = _raw(protected, unprotected=unprotected, payload=None, sign_payload=b"")
    with pytest.raises(error):
        verify_inclusion_receipt(message, PUB, bytes(32))


@pytest.mark.parametrize("field", [0, 1])
@pytest.mark.parametrize("value", [_HUGE, -_HUGE, 2**64], ids=["-huge", "huge", "2**64"])
def test_receipt_huge_size_or_index(field: int, value: int) -> None:
    receipt, tree = _receipt()
    proof = [6, 4, tree.inclusion_proof(4)]
    proof[field] = value
    forged = _with_proofs(receipt, [cbor2.dumps(proof)])
    name = ("tree-size", "leaf-index")[field]
    expected = "must be an unsigned integer" if value < 0 else "exceeds the uint64 range"
    with pytest.raises(ReceiptError, match=rf"COSE receipt {name} .*{expected}"):
        verify_inclusion_receipt(forged, PUB, tree.leaf(4))
