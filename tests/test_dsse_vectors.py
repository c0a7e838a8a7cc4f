"""Third-party vectors for DSSE v1 and in-toto Statement v1 (third_party/SOURCES.md).

* secure-systems-lab-dsse: the spec's PAE case and its two ECDSA P-256 envelopes (raw r||s).
* in-toto-attestation: the five statement-validation cases of the Go reference. We agree with
  its verdicts except one, asserted explicitly: the legacy v0.1 ``_type`` (we refuse it).
* sigstore-python: a real Sigstore DSSE envelope (DER ECDSA signature, SLSA v1 statement).

Every case is exercised and the counts are asserted, so none can be silently skipped.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from harness.verify.dsse import (
    DisallowedPayloadTypeError,
    UnverifiedEnvelopeError,
    pae,
    verify_envelope,
)
from harness.verify.intoto import (
    PAYLOAD_TYPE_IN_TOTO,
    PREDICATE_SLSA_PROVENANCE,
    StatementError,
    StatementTypeError,
    parse_statement,
)

DSSE = "secure-systems-lab-dsse/dsse-v1-spec-example.json"
INTOTO = "in-toto-attestation/statement-validation.json"
SIGSTORE_DSSE = "sigstore-python/a.dsse.staging-rekor-v2.txt.sigstore.json"


def _read(third_party_vectors: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((third_party_vectors / rel).read_text(encoding="utf-8"))
    return data


def test_case_counts(third_party_vectors: Path) -> None:
    dsse = _read(third_party_vectors, DSSE)
    assert len(dsse["pae_cases"]) == 1
    assert len(dsse["envelopes"]) == 2
    assert len(_read(third_party_vectors, INTOTO)["cases"]) == 5


# ---- DSSE spec example ------------------------------------------------------------------


def _spec_key(vector: dict[str, Any]) -> ec.EllipticCurvePublicKey:
    key = vector["key"]
    numbers = ec.EllipticCurvePublicNumbers(int(key["x_dec"]), int(key["y_dec"]), ec.SECP256R1())
    public = numbers.public_key()
    from_pem = serialization.load_pem_public_key(key["public_pem"].encode())
    assert isinstance(from_pem, ec.EllipticCurvePublicKey)
    assert from_pem.public_numbers() == numbers  # the transcribed forms agree
    point = public.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert point.hex() == key["public_uncompressed_hex"]
    return public


def test_dsse_pae_case(third_party_vectors: Path) -> None:
    (case,) = _read(third_party_vectors, DSSE)["pae_cases"]
    payload = base64.b64decode(case["payload_b64"])
    assert payload == case["payload_utf8"].encode()
    encoded = pae(case["payloadType"], payload)
    assert encoded == case["expected_pae_utf8"].encode()
    assert encoded.hex() == case["expected_pae_hex"]


def _envelopes(third_party_vectors: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(e["id"], e) for e in _read(third_party_vectors, DSSE)["envelopes"]]


def test_dsse_spec_envelopes_verify(third_party_vectors: Path) -> None:
    vector = _read(third_party_vectors, DSSE)
    key = _spec_key(vector)
    for case in vector["envelopes"]:
        assert case["expected"] == "verify"
        env = json.dumps(case["envelope"]).encode()
        allowed = frozenset({case["envelope"]["payloadType"]})
        assert verify_envelope(env, [key], allowed_payload_types=allowed) == (
            "http://example.com/HelloWorld",
            b"hello world",
        )


def test_dsse_spec_envelope_keyid_is_ignored(third_party_vectors: Path) -> None:
    """The reference skips a signature whose keyid differs from the verifier's; we do not.

    Our verifier has no keyid of its own for this key, and the envelope's "66301bbf" (a
    truncated id in the reference's own scheme) neither selects nor excludes the key.
    """
    vector = _read(third_party_vectors, DSSE)
    key = _spec_key(vector)
    (with_keyid,) = [c for c in vector["envelopes"] if "keyid" in c["envelope"]["signatures"][0]]
    obj = with_keyid["envelope"]
    allowed = frozenset({obj["payloadType"]})
    for keyid in ("66301bbf", "someone-else", ""):
        obj = {**obj, "signatures": [{**obj["signatures"][0], "keyid": keyid}]}
        assert verify_envelope(json.dumps(obj).encode(), [key], allowed_payload_types=allowed)


def test_dsse_spec_signature_is_raw_and_its_der_form_verifies_too(
    third_party_vectors: Path,
) -> None:
    vector = _read(third_party_vectors, DSSE)
    key = _spec_key(vector)
    obj = vector["envelopes"][0]["envelope"]
    raw = base64.b64decode(obj["signatures"][0]["sig"])
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    obj = {**obj, "signatures": [{"sig": base64.b64encode(der).decode()}]}
    allowed = frozenset({obj["payloadType"]})
    assert verify_envelope(json.dumps(obj).encode(), [key], allowed_payload_types=allowed)


def test_dsse_spec_envelopes_tampered(third_party_vectors: Path) -> None:
    vector = _read(third_party_vectors, DSSE)
    key = _spec_key(vector)
    for case in vector["envelopes"]:
        obj = case["envelope"]
        allowed = frozenset({obj["payloadType"], "http://example.com/HelloWorlD"})
        sig = bytearray(base64.b64decode(obj["signatures"][0]["sig"]))
        sig[10] ^= 0x01
        tampered = [
            {**obj, "payload": base64.b64encode(b"hello worle").decode()},
            {**obj, "payload": base64.b64encode(b"hello world ").decode()},
            {**obj, "payloadType": "http://example.com/HelloWorlD"},
            {
                **obj,
                "signatures": [{**obj["signatures"][0], "sig": base64.b64encode(sig).decode()}],
            },
        ]
        for bad in tampered:
            with pytest.raises(UnverifiedEnvelopeError):
                verify_envelope(json.dumps(bad).encode(), [key], allowed_payload_types=allowed)


def test_dsse_spec_envelope_type_is_not_in_the_default_allow_list(
    third_party_vectors: Path,
) -> None:
    vector = _read(third_party_vectors, DSSE)
    env = json.dumps(vector["envelopes"][0]["envelope"]).encode()
    with pytest.raises(DisallowedPayloadTypeError, match="HelloWorld"):
        verify_envelope(env, [_spec_key(vector)])


# ---- in-toto statement validation ---------------------------------------------------------

# Our verdict per case id: None = valid, else (exception type, message fragment).
OUR_VERDICTS: dict[str, tuple[type[StatementError], str] | None] = {
    "TestJsonUnmarshalStatement": None,
    # Go accepts the legacy type; we refuse it (see harness.verify.intoto: only v1 is written
    # by our producer, v0.1 had a different model, and one claim must have one spelling).
    "TestStatementTypeVersions/v0.1": (StatementTypeError, "legacy statement type"),
    "TestBadStatementType": (StatementTypeError, "wrong statement type"),
    "TestBadStatementSubject/no subjects": (StatementError, "at least one subject required"),
    "TestBadStatementSubject/subject missing Statement requirement on digest": (
        StatementError,
        "at least one digest required",
    ),
}


def _statement_cases(third_party_vectors: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = _read(third_party_vectors, INTOTO)["cases"]
    assert {c["id"] for c in cases} == set(OUR_VERDICTS)
    return cases


def test_intoto_statement_cases(third_party_vectors: Path) -> None:
    for case in _statement_cases(third_party_vectors):
        payload = case["statement_json"].encode()
        verdict = OUR_VERDICTS[case["id"]]
        if verdict is None:
            assert case["expected"] == "valid"
            statement = parse_statement(
                payload, allowed_predicate_types=frozenset({"thePredicate"})
            )
            # the toy digest: unknown algorithm names are accepted, values are lowercase hex
            assert statement.subjects[0].digest == {"alg1": "abc123"}
            assert statement.predicate == {"keyObj": {"subKey": "subVal"}}
            continue
        error, fragment = verdict
        with pytest.raises(error, match=fragment):
            parse_statement(payload, allowed_predicate_types=frozenset({"thePredicate"}))


def test_intoto_legacy_type_we_are_stricter_than_go(third_party_vectors: Path) -> None:
    """The one disagreement with the reference: Go says valid, we say invalid, on purpose."""
    (legacy,) = [c for c in _statement_cases(third_party_vectors) if "v0.1" in c["id"]]
    assert legacy["expected"] == "valid"  # the reference verdict ...
    with pytest.raises(
        StatementTypeError, match=r"legacy .*v0\.1.* only https://in-toto.io/Statement/v1"
    ):
        parse_statement(  # ... and ours
            legacy["statement_json"].encode(), allowed_predicate_types=frozenset({"thePredicate"})
        )


def test_intoto_invalid_cases_agree_with_the_reference(third_party_vectors: Path) -> None:
    for case in _statement_cases(third_party_vectors):
        if case["expected"] == "invalid":
            verdict = OUR_VERDICTS[case["id"]]
            assert verdict is not None
            assert case["error"] == verdict[1]  # our message carries the reference's words


def test_intoto_toy_digest_rules(third_party_vectors: Path) -> None:
    """The toy ``alg1`` digest passes because it is lowercase hex; its variants do not."""
    (case,) = [
        c for c in _statement_cases(third_party_vectors) if c["id"] == "TestJsonUnmarshalStatement"
    ]
    allowed = frozenset({"thePredicate"})
    for bad in ('"ABC123"', '"abc12"', '"xyz123"', '""'):
        text = case["statement_json"].replace('"abc123"', bad)
        with pytest.raises(StatementError, match="lowercase hex"):
            parse_statement(text.encode(), allowed_predicate_types=allowed)
    sha = case["statement_json"].replace('"alg1":"abc123"', '"sha256":"abc123"')
    with pytest.raises(StatementError, match="expected 64"):
        parse_statement(sha.encode(), allowed_predicate_types=allowed)


def test_intoto_python_bindings_verdicts(third_party_vectors: Path) -> None:
    """The in-toto-attestation Python bindings: same verdicts as ours on all five cases.

    (Unlike Go, the Python binding also refuses the legacy v0.1 type.)
    """
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    for case in _statement_cases(third_party_vectors):
        message = json_format.Parse(case["statement_json"], statement_pb2.Statement())
        try:
            Statement.copy_from_pb(message).validate()
        except ValueError:
            python_valid = False
        else:
            python_valid = True
        assert python_valid == (OUR_VERDICTS[case["id"]] is None), case["id"]


# ---- a real Sigstore DSSE envelope (DER ECDSA P-256) --------------------------------------


def test_sigstore_dsse_envelope_verifies(third_party_vectors: Path) -> None:
    bundle = _read(third_party_vectors, SIGSTORE_DSSE)
    cert = x509.load_der_x509_certificate(
        base64.b64decode(bundle["verificationMaterial"]["certificate"]["rawBytes"])
    )
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    envelope = bundle["dsseEnvelope"]
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    assert sig[0] == 0x30  # DER
    payload_type, payload = verify_envelope(json.dumps(envelope).encode(), [key])
    assert payload_type == PAYLOAD_TYPE_IN_TOTO
    statement = parse_statement(
        payload, allowed_predicate_types=frozenset({PREDICATE_SLSA_PROVENANCE})
    )
    assert [s.name for s in statement.subjects] == ["a.txt"]
    assert statement.subjects[0].digest["sha256"] == (
        "a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"
    )
    flipped = bytearray(payload)
    flipped[-3] ^= 1
    tampered = {**envelope, "payload": base64.b64encode(bytes(flipped)).decode()}
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(json.dumps(tampered).encode(), [key])
