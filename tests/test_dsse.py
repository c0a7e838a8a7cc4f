"""DSSE v1: signing, strict verification, tamper cases, interop with securesystemslib, fuzzing.

The decisions under test are documented in ``harness.verify.dsse``'s module docstring.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.dsse import sign_envelope
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.dsse import (
    MAX_ENVELOPE_BYTES,
    MAX_SIGNATURES,
    PAYLOAD_TYPE_IN_TOTO,
    DisallowedPayloadTypeError,
    DsseError,
    MalformedEnvelopeError,
    UnverifiedEnvelopeError,
    decode_base64,
    pae,
    verify_envelope,
)
from harness.verify.errors import VerificationError
from harness.verify.keyids import key_id

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUB = KEY.public_key()
KEY_ID = key_id(PUB.public_bytes_raw())
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
P256 = ec.derive_private_key(0x1234567890ABCDEF, ec.SECP256R1())
PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1","hello":"world"}'
OTHER_TYPE = "application/vnd.example+json"
BOTH_TYPES = frozenset({PAYLOAD_TYPE_IN_TOTO, OTHER_TYPE})


def b64(data: bytes) -> str:
    return base64.standard_b64encode(data).decode("ascii")


def envelope_dict(data: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(data)
    return obj


def dump(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8")


def signed(payload: bytes = PAYLOAD, payload_type: str = PAYLOAD_TYPE_IN_TOTO) -> bytes:
    return sign_envelope(payload_type, payload, KEY, keyid=KEY_ID)


def ed_sig(key: Ed25519PrivateKey, payload_type: str, payload: bytes) -> str:
    return b64(key.sign(pae(payload_type, payload)))


def p256_raw_sig(payload_type: str, payload: bytes) -> bytes:
    der = P256.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


# ---- PAE --------------------------------------------------------------------------------


def test_pae_layout() -> None:
    assert pae("t", b"") == b"DSSEv1 1 t 0 "
    assert pae("", b"x") == b"DSSEv1 0  1 x"
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_length_is_utf8_bytes_not_characters() -> None:
    assert pae("tÿpe", b"\xff\x00 ") == "DSSEv1 5 tÿpe 3 ".encode() + b"\xff\x00 "


# ---- round trip -------------------------------------------------------------------------


def test_round_trip() -> None:
    env = signed()
    assert verify_envelope(env, [PUB]) == (PAYLOAD_TYPE_IN_TOTO, PAYLOAD)


def test_signed_envelope_is_canonical_with_one_keyed_signature() -> None:
    env = signed()
    obj = parse_canonical(env)
    assert obj == {
        "payload": b64(PAYLOAD),
        "payloadType": PAYLOAD_TYPE_IN_TOTO,
        "signatures": [{"keyid": KEY_ID, "sig": ed_sig(KEY, PAYLOAD_TYPE_IN_TOTO, PAYLOAD)}],
    }


def test_empty_and_binary_payloads_round_trip() -> None:
    for payload in (b"", bytes(range(256)), b"\xff" * 1000):
        assert verify_envelope(signed(payload), [PUB])[1] == payload


def test_any_of_several_keys_suffices() -> None:
    assert verify_envelope(signed(), [OTHER.public_key(), P256.public_key(), PUB])[1] == PAYLOAD


def test_sign_envelope_refuses_bad_inputs() -> None:
    with pytest.raises(ValueError, match="payload_type"):
        sign_envelope("", PAYLOAD, KEY, keyid=KEY_ID)
    with pytest.raises(TypeError, match="payload"):
        sign_envelope(PAYLOAD_TYPE_IN_TOTO, "text", KEY, keyid=KEY_ID)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keyid"):
        sign_envelope(PAYLOAD_TYPE_IN_TOTO, PAYLOAD, KEY, keyid=None)  # type: ignore[arg-type]


# ---- ECDSA P-256: raw r||s and DER --------------------------------------------------------


def _p256_envelope(sig: bytes, payload_type: str = PAYLOAD_TYPE_IN_TOTO) -> bytes:
    return dump({"payload": b64(PAYLOAD), "payloadType": payload_type,
                 "signatures": [{"sig": b64(sig)}]})  # fmt: skip


def test_p256_raw_and_der_both_verify() -> None:
    raw = p256_raw_sig(PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    der = P256.sign(pae(PAYLOAD_TYPE_IN_TOTO, PAYLOAD), ec.ECDSA(hashes.SHA256()))
    assert len(raw) == 64
    for sig in (raw, der):
        assert verify_envelope(_p256_envelope(sig), [P256.public_key()])[1] == PAYLOAD


def test_p256_wrong_signatures_fail() -> None:
    raw = p256_raw_sig(PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    bad_raw = raw[:-1] + bytes([raw[-1] ^ 1])
    swapped = raw[32:] + raw[:32]
    for sig in (bad_raw, swapped, raw[:63], raw + b"\x00", b"", b"\x30" * 70):
        with pytest.raises(UnverifiedEnvelopeError):
            verify_envelope(_p256_envelope(sig), [P256.public_key()])


def test_p256_signature_does_not_verify_under_ed25519_key_and_back() -> None:
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(_p256_envelope(p256_raw_sig(PAYLOAD_TYPE_IN_TOTO, PAYLOAD)), [PUB])
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(signed(), [P256.public_key()])


def test_unsupported_key_types_are_a_usage_error() -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    with pytest.raises(TypeError, match="Ed25519 and ECDSA P-256"):
        verify_envelope(signed(), [p384])  # right type, wrong curve
    with pytest.raises(TypeError):
        verify_envelope(signed(), [b"\x00" * 32])  # type: ignore[list-item]


def test_no_keys_fails_closed() -> None:
    with pytest.raises(UnverifiedEnvelopeError, match="no public key"):
        verify_envelope(signed(), [])


# ---- tamper cases -----------------------------------------------------------------------


def _flip_payload_byte(env: bytes, index: int = 5) -> bytes:
    obj = envelope_dict(env)
    raw = bytearray(base64.b64decode(obj["payload"]))
    raw[index] ^= 0x01
    obj["payload"] = b64(bytes(raw))
    return dump(obj)


def test_tampered_payload_byte_fails() -> None:
    env = signed()
    for index in (0, 5, len(PAYLOAD) - 1):
        with pytest.raises(UnverifiedEnvelopeError, match="none of the 1 signature"):
            verify_envelope(_flip_payload_byte(env, index), [PUB])


def test_payload_type_changed_to_another_allowed_type_fails_the_signature() -> None:
    obj = envelope_dict(signed())
    obj["payloadType"] = OTHER_TYPE
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(dump(obj), [PUB], allowed_payload_types=BOTH_TYPES)


def test_disallowed_payload_type_is_reported_as_such_before_the_signature() -> None:
    obj = envelope_dict(signed())
    obj["payloadType"] = OTHER_TYPE  # also breaks the signature: the type must win
    with pytest.raises(DisallowedPayloadTypeError, match="not allowed"):
        verify_envelope(dump(obj), [PUB])
    # a correctly signed envelope of a disallowed type is refused too
    good_other = signed(payload_type=OTHER_TYPE)
    with pytest.raises(DisallowedPayloadTypeError):
        verify_envelope(good_other, [PUB])
    assert verify_envelope(good_other, [PUB], allowed_payload_types=BOTH_TYPES)[0] == OTHER_TYPE


def test_payload_type_is_checked_before_the_payload_is_decoded() -> None:
    obj = envelope_dict(signed())
    obj["payloadType"] = OTHER_TYPE
    obj["payload"] = "!!! not base64 !!!"
    with pytest.raises(DisallowedPayloadTypeError):
        verify_envelope(dump(obj), [PUB])


def test_empty_allow_list_refuses_everything() -> None:
    with pytest.raises(DisallowedPayloadTypeError, match="allowed: none"):
        verify_envelope(signed(), [PUB], allowed_payload_types=frozenset())


def test_flipped_signature_fails() -> None:
    obj = envelope_dict(signed())
    sig = bytearray(base64.b64decode(obj["signatures"][0]["sig"]))
    for index in (0, 31, 32, 63):
        flipped = sig.copy()
        flipped[index] ^= 0x80
        obj["signatures"][0]["sig"] = b64(bytes(flipped))
        with pytest.raises(UnverifiedEnvelopeError):
            verify_envelope(dump(obj), [PUB])


def test_signature_by_untrusted_key_only_fails() -> None:
    env = sign_envelope(PAYLOAD_TYPE_IN_TOTO, PAYLOAD, OTHER, keyid=KEY_ID)  # lies about keyid
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(env, [PUB])
    assert verify_envelope(env, [OTHER.public_key()])[1] == PAYLOAD


def test_truncated_or_extended_signature_fails() -> None:
    obj = envelope_dict(signed())
    sig = base64.b64decode(obj["signatures"][0]["sig"])
    for bad in (sig[:63], sig + b"\x00", b""):
        obj["signatures"][0]["sig"] = b64(bad)
        with pytest.raises(UnverifiedEnvelopeError):
            verify_envelope(dump(obj), [PUB])


# ---- keyid rule: an unauthenticated hint, ignored for the verdict -------------------------


def _multi(*sigs: dict[str, str]) -> bytes:
    return dump({"payload": b64(PAYLOAD), "payloadType": PAYLOAD_TYPE_IN_TOTO,
                 "signatures": list(sigs)})  # fmt: skip


def test_keyid_does_not_select_keys() -> None:
    good = ed_sig(KEY, PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    for keyid in (None, "", "66301bbf", key_id(OTHER.public_key().public_bytes_raw()), "x" * 500):
        sig = {"sig": good} if keyid is None else {"keyid": keyid, "sig": good}
        assert verify_envelope(_multi(sig), [PUB])[1] == PAYLOAD


def test_failing_signature_naming_a_given_key_is_just_not_counted() -> None:
    good = ed_sig(KEY, PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    forged = ed_sig(OTHER, PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    # a bad signature that claims our key id, next to a good one (any keyid): passes
    env = _multi({"keyid": KEY_ID, "sig": forged}, {"keyid": "whatever", "sig": good})
    assert verify_envelope(env, [PUB])[1] == PAYLOAD
    env = _multi({"keyid": KEY_ID, "sig": good}, {"keyid": KEY_ID, "sig": forged})
    assert verify_envelope(env, [PUB])[1] == PAYLOAD
    # alone it is not counted, and the failure is the generic "no signature verifies"
    with pytest.raises(UnverifiedEnvelopeError, match="none of the 1 signature"):
        verify_envelope(_multi({"keyid": KEY_ID, "sig": forged}), [PUB])


def test_invalid_signatures_by_other_keys_do_not_matter() -> None:
    good = ed_sig(KEY, PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    junk = b64(b"\x00" * 64)
    env = _multi({"sig": junk}, {"sig": b64(b"short")}, {"sig": good}, {"sig": junk})
    assert verify_envelope(env, [PUB])[1] == PAYLOAD


# ---- malformed envelopes ----------------------------------------------------------------


def _malformed(data: bytes, match: str) -> None:
    with pytest.raises(MalformedEnvelopeError, match=match):
        verify_envelope(data, [PUB])


def test_empty_signatures() -> None:
    obj = envelope_dict(signed())
    obj["signatures"] = []
    _malformed(dump(obj), "signatures is empty")


def test_duplicate_json_key_in_envelope() -> None:
    env = signed()
    good_type = json.dumps(PAYLOAD_TYPE_IN_TOTO).encode()
    dup = env.replace(b'"payloadType":', b'"payloadType":' + good_type + b',"payloadType":', 1)
    _malformed(dup, "duplicate key 'payloadType'")
    dup_sig = env.replace(b'{"keyid":', b'{"sig":"AAAA","keyid":', 1)
    _malformed(dup_sig, "duplicate key 'sig'")


def test_extra_or_missing_members() -> None:
    obj = envelope_dict(signed())
    _malformed(dump({**obj, "extra": 1}), r"unknown extra")
    _malformed(dump({k: v for k, v in obj.items() if k != "payload"}), "missing payload")
    sig = dict(obj["signatures"][0])
    _malformed(dump({**obj, "signatures": [{**sig, "cert": "x"}]}), r"unknown member\(s\) cert")
    _malformed(dump({**obj, "signatures": [{"keyid": KEY_ID}]}), "lacks sig")


def test_wrong_member_types() -> None:
    obj = envelope_dict(signed())
    sig = dict(obj["signatures"][0])
    _malformed(dump([obj]), "must be a JSON object")
    _malformed(dump({**obj, "payloadType": 1}), "payloadType must be a string")
    _malformed(dump({**obj, "payload": None}), "payload must be")
    _malformed(dump({**obj, "signatures": sig}), "signatures must be a list")
    _malformed(dump({**obj, "signatures": ["x"]}), r"signatures\[0\] must be an object")
    _malformed(dump({**obj, "signatures": [{**sig, "sig": 5}]}), r"sig must be a base64")
    _malformed(dump({**obj, "signatures": [{**sig, "keyid": 5}]}), "keyid must be a string")
    _malformed(dump({**obj, "signatures": [{**sig, "keyid": None}]}), "keyid must be a string")


def test_not_json() -> None:
    _malformed(b"", "not strict JSON")
    _malformed(b"\xff\xfe{}", "not valid UTF-8")
    _malformed(b'{"payload": NaN}', "not strict JSON")
    _malformed(b"[" * 100 + b"]" * 100, "nesting")


def test_limits() -> None:
    obj = envelope_dict(signed())
    too_many = [obj["signatures"][0]] * (MAX_SIGNATURES + 1)
    _malformed(dump({**obj, "signatures": too_many}), f"limit {MAX_SIGNATURES}")
    assert verify_envelope(dump({**obj, "signatures": too_many[:MAX_SIGNATURES]}), [PUB])
    big = signed()[:-1] + b" " * (MAX_ENVELOPE_BYTES - len(signed()) + 1) + b"}"
    assert len(big) == MAX_ENVELOPE_BYTES + 1
    _malformed(big, f"limit {MAX_ENVELOPE_BYTES}")


# ---- base64 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("aGVsbG8gd29ybGQ", "not valid padded base64"),  # padding missing
        ("aGVsbG8gd29ybGR=", "not canonical"),  # non-zero trailing bits
        ("aGVsbG8g d29ybGQ=", "not valid padded base64"),  # whitespace
        ("aGVsbG8gd29ybGQ=\n", "not valid padded base64"),
        ("aGVsbG8gd29ybGQ==", "not valid padded base64"),  # extra padding
        ("aGVs*G8gd29ybGQ=", "not valid padded base64"),
        ("+-//", "mixes the standard and URL-safe"),
        ("aGVsbG8gd29ybGQ＝", "non-ASCII"),
    ],
)
def test_strict_base64_refusals(text: str, reason: str) -> None:
    with pytest.raises(MalformedEnvelopeError, match=reason):
        decode_base64(text, "payload")


def test_base64_alphabets() -> None:
    data = bytes([0xFB, 0xFF, 0xBF, 0x00])
    assert decode_base64(base64.standard_b64encode(data).decode(), "x") == data
    assert decode_base64(base64.urlsafe_b64encode(data).decode(), "x") == data
    assert decode_base64("", "x") == b""


def test_url_safe_payload_and_signature_are_accepted() -> None:
    payload = b"\xfb\xff\xbf" * 20  # encodes with '+' and '/' in standard base64
    obj = envelope_dict(signed(payload))
    assert "+" in obj["payload"] and "/" in obj["payload"]
    obj["payload"] = base64.urlsafe_b64encode(payload).decode()
    sig = base64.b64decode(obj["signatures"][0]["sig"])
    obj["signatures"][0]["sig"] = base64.urlsafe_b64encode(sig).decode()
    assert verify_envelope(dump(obj), [PUB])[1] == payload


def test_non_canonical_base64_in_envelope() -> None:
    obj = envelope_dict(signed(b"hello world"))
    assert obj["payload"] == "aGVsbG8gd29ybGQ="
    _malformed(dump({**obj, "payload": "aGVsbG8gd29ybGR="}), "payload is not canonical base64")
    _malformed(dump({**obj, "payload": "aGVsbG8gd29ybGQ"}), "payload is not valid padded")
    sig = obj["signatures"][0]["sig"]
    _malformed(
        dump({**obj, "signatures": [{"sig": sig.rstrip("=")}]}),
        r"signatures\[0\].sig is not valid padded base64",
    )


# ---- interop: securesystemslib ------------------------------------------------------------


def test_our_envelope_verifies_with_securesystemslib() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    env = signed()
    theirs = Envelope.from_dict(json.loads(env))
    assert theirs.payload == PAYLOAD
    assert theirs.payload_type == PAYLOAD_TYPE_IN_TOTO
    assert theirs.pae() == pae(PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    key = SSlibKey.from_crypto(PUB, keyid=KEY_ID)
    assert set(theirs.verify([key], 1)) == {KEY_ID}


def test_securesystemslib_rejects_our_tampered_envelope() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError as SslibVerificationError
    from securesystemslib.signer import SSlibKey

    theirs = Envelope.from_dict(json.loads(_flip_payload_byte(signed())))
    with pytest.raises(SslibVerificationError):
        theirs.verify([SSlibKey.from_crypto(PUB, keyid=KEY_ID)], 1)


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_securesystemslib_envelopes_verify_with_ours(kind: str) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    private = KEY if kind == "ed25519" else P256
    signer = CryptoSigner(private, SSlibKey.from_crypto(private.public_key(), keyid="k1"))
    theirs = Envelope(PAYLOAD, PAYLOAD_TYPE_IN_TOTO, {})
    theirs.sign(signer)
    data = json.dumps(theirs.to_dict()).encode()
    assert verify_envelope(data, [private.public_key()]) == (PAYLOAD_TYPE_IN_TOTO, PAYLOAD)
    tampered = _flip_payload_byte(data)
    with pytest.raises(UnverifiedEnvelopeError):
        verify_envelope(tampered, [private.public_key()])


def test_securesystemslib_and_ours_sign_identical_ed25519_bytes() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    signer = CryptoSigner(KEY, SSlibKey.from_crypto(PUB, keyid=KEY_ID))
    theirs = Envelope(PAYLOAD, PAYLOAD_TYPE_IN_TOTO, {})
    theirs.sign(signer)
    assert canonical_bytes(theirs.to_dict()) == signed()  # Ed25519 is deterministic


# ---- fuzzing: only VerificationError subclasses, never anything else ---------------------


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    buf = bytearray(data)
    for position, value in edits:
        if buf:
            buf[position % len(buf)] = value
    return bytes(buf)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_dsse_errors(data: bytes) -> None:
    with pytest.raises(DsseError):
        verify_envelope(data, [PUB, P256.public_key()])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_envelopes_raise_only_verification_errors(edits: list[tuple[int, int]]) -> None:
    env = signed()
    mutated = _mutate(env, edits)
    try:
        result = verify_envelope(mutated, [PUB, P256.public_key()])
    except DsseError:
        return
    # a mutation that still verifies must not have changed what was signed
    assert result == (PAYLOAD_TYPE_IN_TOTO, PAYLOAD)


_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.text(max_size=12))
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    payload=st.one_of(_JSON, st.text(alphabet="AZaz09+/-_=", max_size=16)),
    payload_type=st.one_of(_JSON, st.just(PAYLOAD_TYPE_IN_TOTO)),
    signatures=st.one_of(
        _JSON,
        st.lists(
            st.dictionaries(
                st.sampled_from(["sig", "keyid", "x"]),
                st.one_of(_JSON, st.text(alphabet="AZaz09+/=", max_size=90)),
            ),
            max_size=3,
        ),
    ),
)
def test_structured_garbage_raises_only_verification_errors(
    payload: Any, payload_type: Any, signatures: Any
) -> None:
    data = dump({"payload": payload, "payloadType": payload_type, "signatures": signatures})
    with pytest.raises(VerificationError):
        verify_envelope(data, [PUB, P256.public_key()])
