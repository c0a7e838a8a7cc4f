"""Third-party COSE_Sign1 vectors: cose-wg/Examples, veraison/go-cose (third_party/SOURCES.md).

Keys are built from the vectors' JWK / hex fields with ``cryptography``; expected results come
from the files (``fail`` / ``shouldVerify``), never from our own code.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from harness.receipts.cose import sign1_with_headers
from harness.verify.cose import (
    CoseError,
    CoseSignatureError,
    MalformedCoseError,
    decode_sign1,
    sig_structure1,
    verify_sign1,
)

COSE_WG = {
    "eddsa": "cose-wg-examples/eddsa-examples/eddsa-sig-01.json",
    "c21": "cose-wg-examples/RFC8152/Appendix_C_2_1.json",
    "ecdsa": "cose-wg-examples/ecdsa-examples/ecdsa-sig-01.json",
    "pass02": "cose-wg-examples/sign1-tests/sign-pass-02.json",
    "fail01": "cose-wg-examples/sign1-tests/sign-fail-01.json",
    "fail02": "cose-wg-examples/sign1-tests/sign-fail-02.json",
}
VERAISON = {
    "0000": "veraison-go-cose/sign1-verify-0000.json",
    "0001": "veraison-go-cose/sign1-verify-0001.json",
    "neg0000": "veraison-go-cose/sign1-verify-negative-0000.json",
}


def _load(root: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / rel).read_text(encoding="utf-8"))
    return data


def _b64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _public_key(jwk: dict[str, Any]) -> Ed25519PublicKey | ec.EllipticCurvePublicKey:
    if jwk["kty"] == "OKP":
        assert jwk["crv"] == "Ed25519"
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(jwk["x_hex"]))
    assert jwk["kty"] == "EC"
    assert jwk["crv"] == "P-256"
    numbers = ec.EllipticCurvePublicNumbers(
        int.from_bytes(_b64u(jwk["x"]), "big"),
        int.from_bytes(_b64u(jwk["y"]), "big"),
        ec.SECP256R1(),
    )
    return numbers.public_key()


def _cose_wg(root: Path, name: str) -> tuple[bytes, Any, bytes, dict[str, Any]]:
    data = _load(root, COSE_WG[name])
    sign0 = data["input"]["sign0"]
    message = bytes.fromhex(data["output"]["cbor"])
    aad = bytes.fromhex(sign0.get("external", ""))
    return message, _public_key(sign0["key"]), aad, data


@pytest.mark.parametrize("name", ["eddsa", "c21", "ecdsa", "pass02"])
def test_cose_wg_pass(third_party_vectors: Path, name: str) -> None:
    message, key, aad, data = _cose_wg(third_party_vectors, name)
    assert not data.get("fail", False)
    payload = verify_sign1(message, key, external_aad=aad)
    assert payload == data["input"]["plaintext"].encode()
    # our Sig_structure is byte-identical to the vector's ToBeSign
    decoded = decode_sign1(message)
    tbs = sig_structure1(decoded.protected_bytes, aad, payload)
    assert tbs == bytes.fromhex(data["intermediates"]["ToBeSign_hex"])


@pytest.mark.parametrize("name", ["c21", "ecdsa", "pass02"])
def test_cose_wg_es256_wrong_aad_fails(third_party_vectors: Path, name: str) -> None:
    message, key, aad, _ = _cose_wg(third_party_vectors, name)
    with pytest.raises(CoseSignatureError):
        verify_sign1(message, key, external_aad=aad + b"x")


def test_cose_wg_sign_pass_02_needs_its_external_aad(third_party_vectors: Path) -> None:
    message, key, aad, _ = _cose_wg(third_party_vectors, "pass02")
    assert aad == bytes.fromhex("11aa22bb33cc44dd55006699")
    with pytest.raises(CoseSignatureError):
        verify_sign1(message, key)


def test_cose_wg_eddsa_resign_is_byte_identical(third_party_vectors: Path) -> None:
    message, _, _, data = _cose_wg(third_party_vectors, "eddsa")
    jwk = data["input"]["sign0"]["key"]
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(jwk["d_hex"]))
    assert private.public_key().public_bytes_raw() == bytes.fromhex(jwk["x_hex"])
    ours = sign1_with_headers(
        data["input"]["plaintext"].encode(),
        private,
        protected={1: -8, 3: 0},  # {"alg": "EdDSA", "ctyp": 0}
        unprotected={4: jwk["kid"].encode()},  # kid '11' as bstr
    )
    assert ours == message


def test_cose_wg_sign_fail_01_wrong_tag(third_party_vectors: Path) -> None:
    message, key, aad, data = _cose_wg(third_party_vectors, "fail01")
    assert data["fail"] is True
    assert data["input"]["failures"] == {"ChangeCBORTag": 998}
    with pytest.raises(MalformedCoseError, match="tag 18, got tag 998"):
        verify_sign1(message, key, external_aad=aad)


def test_cose_wg_sign_fail_02_changed_payload(third_party_vectors: Path) -> None:
    message, key, aad, data = _cose_wg(third_party_vectors, "fail02")
    assert data["fail"] is True
    with pytest.raises(CoseSignatureError, match="does not verify"):
        verify_sign1(message, key, external_aad=aad)


@pytest.mark.parametrize("name", sorted(VERAISON))
def test_veraison(third_party_vectors: Path, name: str) -> None:
    data = _load(third_party_vectors, VERAISON[name])
    case = data["sign1::verify"]
    message = bytes.fromhex(case["taggedCOSESign1"]["cborHex"])
    aad = bytes.fromhex(case.get("external", ""))
    key = _public_key(data["key"])
    if case["shouldVerify"]:
        assert verify_sign1(message, key, external_aad=aad) == b"This is the content."
    else:
        with pytest.raises(CoseError):
            verify_sign1(message, key, external_aad=aad)


def test_veraison_negative_0000_reason(third_party_vectors: Path) -> None:
    data = _load(third_party_vectors, VERAISON["neg0000"])
    message = bytes.fromhex(data["sign1::verify"]["taggedCOSESign1"]["cborHex"])
    with pytest.raises(MalformedCoseError, match="protected header must be a byte string"):
        verify_sign1(message, _public_key(data["key"]))


def test_veraison_0000_needs_external_aad(third_party_vectors: Path) -> None:
    data = _load(third_party_vectors, VERAISON["0000"])
    message = bytes.fromhex(data["sign1::verify"]["taggedCOSESign1"]["cborHex"])
    with pytest.raises(CoseSignatureError):
        verify_sign1(message, _public_key(data["key"]))


def test_vector_with_key_of_other_type_fails(third_party_vectors: Path) -> None:
    """ES256 vector, Ed25519 key: the algorithm is pinned to the key type."""
    message, _, aad, _ = _cose_wg(third_party_vectors, "c21")
    ed = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(CoseError, match="needs a P-256 key, got Ed25519"):
        verify_sign1(message, ed, external_aad=aad)
    eddsa_message, *_ = _cose_wg(third_party_vectors, "eddsa")
    p256 = _public_key(_load(third_party_vectors, COSE_WG["c21"])["input"]["sign0"]["key"])
    with pytest.raises(CoseError, match="needs an Ed25519 key, got EC secp256r1"):
        verify_sign1(eddsa_message, p256)
