"""Third-party vectors for signed notes, checkpoints and Ed25519 (third_party/SOURCES.md).

Every case in each file is exercised; the counts are asserted so a case cannot be silently
skipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from harness.receipts.checkpoint import format_checkpoint_body
from harness.receipts.note import NoteSigner, parse_signer_key
from harness.verify.checkpoint import parse_checkpoint, require_sha256_root
from harness.verify.errors import CheckpointError, UnverifiedNoteError
from harness.verify.note import (
    VerifierKey,
    open_note,
    parse_unverified_note,
    parse_verifier_key,
)

_VECTORS = Path(__file__).resolve().parent / "vectors" / "third_party"

C2SP = "c2sp-signed-note/c2sp-spec-examples.json"
GOLANG = "golang-mod-sumdb-note/note-sign-verify.json"
FORMATS = "transparency-dev-formats/checkpoint-body-parse.json"
RFC8032 = "rfc8032-ed25519/rfc8032-ed25519.json"


def _load(rel: str) -> dict[str, Any]:
    """Read a vector file at collection time; a missing file is an error, never a skip."""
    data: dict[str, Any] = json.loads((_VECTORS / rel).read_text(encoding="utf-8"))
    return data


def _cases(rel: str, key: str = "cases") -> list[Any]:
    cases: list[Any] = _load(rel).get(key, [])
    return cases


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [str(c.get("id", c.get("vkey", i))) for i, c in enumerate(cases)]


def _read(third_party_vectors: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((third_party_vectors / rel).read_text(encoding="utf-8"))
    return data


def test_case_counts(third_party_vectors: Path) -> None:
    """The numbers of cases SOURCES.md announces, so none is silently dropped."""
    assert len(_read(third_party_vectors, C2SP)["cases"]) == 2
    golang = _read(third_party_vectors, GOLANG)
    assert len(golang["sign_cases"]) == 2
    assert len(golang["open_cases"]) == 1
    assert len(golang["vkey_cases"]) == 1
    assert len(golang["keys"]) == 1
    assert len(_read(third_party_vectors, FORMATS)["cases"]) == 4
    assert len(_read(third_party_vectors, RFC8032)["cases"]) == 5


# --- c2sp.org/signed-note and c2sp.org/tlog-checkpoint examples -------------------------------

_C2SP_CASES = _cases(C2SP)


@pytest.mark.parametrize("case", _C2SP_CASES, ids=_ids(_C2SP_CASES))
def test_c2sp_spec_example(third_party_vectors: Path, case: dict[str, Any]) -> None:
    note = case["note"].encode("utf-8")
    for vkey in case["vkeys"]:
        key = parse_verifier_key(vkey)
        assert key.text == vkey
        assert VerifierKey.from_ed25519(key.name, key.public_key) == key

    if case["expected"] == "verify":
        opened = open_note(note, case["vkeys"])
        assert opened.text == case["expected_text"]
        assert [s.name for s in opened.verified] == case["expected_verified_signers"]
        assert opened.unverified == ()
        # The signature line re-encodes to exactly the input.
        assert (
            opened.text.encode() + b"\n" + "".join(s.to_line() for s in opened.verified).encode()
            == note
        )
    elif case["expected"] == "parse_only":
        # No published key: a verifier MUST reject it ...
        with pytest.raises(UnverifiedNoteError, match="no signature from a known key"):
            open_note(note, case["vkeys"])
        # ... also when it trusts some other key (the signature is then an unknown one).
        other = NoteSigner(Ed25519PrivateKey.from_private_bytes(bytes(32)), "other.example/k")
        with pytest.raises(UnverifiedNoteError):
            open_note(note, [other.verifier_key()])
        # ... but its form is valid and the body parses to the listed values.
        parsed = parse_unverified_note(note)
        assert [s.name for s in parsed.unverified] == ["example.com/behind-the-sofa"]
        want = case["expected_checkpoint"]
        cp = parse_checkpoint(parsed.text.encode("utf-8"), hash_size=32)
        assert cp.origin == want["origin"]
        assert cp.size == want["tree_size"]
        assert cp.root_hash == base64.b64decode(want["root_hash_b64"])
        assert cp.extensions == ()
        assert require_sha256_root(cp) == cp.root_hash
        assert format_checkpoint_body(cp.origin, cp.size, cp.root_hash) == parsed.text.encode()
    else:  # pragma: no cover - a new kind of case must be handled explicitly
        pytest.fail(f"unknown expectation {case['expected']!r}")


# --- golang.org/x/mod/sumdb/note -----------------------------------------------------------

_GOLANG = _load(GOLANG)
_GOLANG_SIGN = list(_GOLANG.get("sign_cases", []))
_GOLANG_OPEN = list(_GOLANG.get("open_cases", []))
_GOLANG_VKEY = list(_GOLANG.get("vkey_cases", []))
_GOLANG_KEYS = sorted(_GOLANG.get("keys", {}))


@pytest.mark.parametrize("name", _GOLANG_KEYS)
def test_golang_key_pair(third_party_vectors: Path, name: str) -> None:
    pair = _read(third_party_vectors, GOLANG)["keys"][name]
    signer = parse_signer_key(pair["skey"])
    assert signer.name == name
    assert signer.verifier_key() == pair["vkey"]
    assert signer.signer_key() == pair["skey"]
    key = parse_verifier_key(pair["vkey"])
    assert (key.name, key.key_hash, key.public_key) == (
        signer.name,
        signer.key_hash,
        signer.public_key,
    )


@pytest.mark.parametrize("case", _GOLANG_SIGN, ids=_ids(_GOLANG_SIGN))
def test_golang_sign(third_party_vectors: Path, case: dict[str, Any]) -> None:
    keys = _read(third_party_vectors, GOLANG)["keys"]
    signer = parse_signer_key(keys[case["signer"]]["skey"])
    if case.get("expected") == "error":
        with pytest.raises(ValueError, match=case["error"]):
            signer.sign(case["text"])
        return
    assert signer.sign(case["text"]) == case["expected_note"].encode("utf-8")
    assert signer.sign(case["text"].encode("utf-8")) == case["expected_note"].encode("utf-8")
    opened = open_note(case["expected_note"].encode(), [keys[case["signer"]]["vkey"]])
    assert opened.text == case["text"]


@pytest.mark.parametrize("case", _GOLANG_OPEN, ids=_ids(_GOLANG_OPEN))
def test_golang_open(third_party_vectors: Path, case: dict[str, Any]) -> None:
    assert case["expected"] == "verify"
    opened = open_note(case["note"].encode("utf-8"), case["vkeys"])
    assert opened.text == case["expected_text"]
    assert [s.name for s in opened.verified] == case["expected_verified_signers"]
    assert opened.unverified == ()
    with pytest.raises(UnverifiedNoteError):
        open_note(case["note"].encode("utf-8"), [])


@pytest.mark.parametrize("case", _GOLANG_VKEY, ids=_ids(_GOLANG_VKEY))
def test_golang_vkey(third_party_vectors: Path, case: dict[str, Any]) -> None:
    assert case["expected"] == "valid"
    key = parse_verifier_key(case["vkey"])
    assert key.text == case["vkey"]
    name, hash16, _ = case["vkey"].split("+", 2)
    assert key.name == name
    assert key.key_hash == int(hash16, 16)
    digest = hashlib.sha256(name.encode() + b"\n\x01" + key.public_key).digest()
    assert key.key_hash == int.from_bytes(digest[:4], "big")


# --- transparency-dev/formats checkpoint bodies ---------------------------------------------

_FORMATS_CASES = _cases(FORMATS)


@pytest.mark.parametrize("case", _FORMATS_CASES, ids=_ids(_FORMATS_CASES))
def test_transparency_dev_checkpoint(third_party_vectors: Path, case: dict[str, Any]) -> None:
    body = case["body"].encode("utf-8")
    if case["expected"] == "invalid":
        with pytest.raises(CheckpointError):
            parse_checkpoint(body)
        return
    assert case["expected"] == "valid"
    cp = parse_checkpoint(body)
    assert cp.origin == case["origin"]
    assert cp.size == case["size"]
    assert cp.root_hash == case["root_hash_utf8"].encode("utf-8")
    assert "\n".join(cp.extensions) == case["rest"]
    assert format_checkpoint_body(cp.origin, cp.size, cp.root_hash, cp.extensions) == body
    # These roots are not 32 bytes: only the opt-in length check refuses them.
    with pytest.raises(CheckpointError):
        parse_checkpoint(body, hash_size=32)
    with pytest.raises(CheckpointError):
        require_sha256_root(cp)


# --- RFC 8032 Ed25519 known answers ----------------------------------------------------------

_RFC8032_CASES = _cases(RFC8032)


@pytest.mark.parametrize("case", _RFC8032_CASES, ids=_ids(_RFC8032_CASES))
def test_rfc8032_ed25519(third_party_vectors: Path, case: dict[str, Any]) -> None:
    seed = bytes.fromhex(case["secret_key_hex"])
    public = bytes.fromhex(case["public_key_hex"])
    message = bytes.fromhex(case["message_hex"])
    signature = bytes.fromhex(case["signature_hex"])

    private = Ed25519PrivateKey.from_private_bytes(seed)
    assert private.public_key().public_bytes_raw() == public
    assert private.sign(message) == signature
    Ed25519PublicKey.from_public_bytes(public).verify(signature, message)

    key = VerifierKey.from_ed25519("rfc8032.example/key", public)
    assert key.verify(message, signature)
    for i in (0, 31, 32, 63):
        flipped = bytearray(signature)
        flipped[i] ^= 0x01
        assert not key.verify(message, bytes(flipped))
        with pytest.raises(InvalidSignature):
            Ed25519PublicKey.from_public_bytes(public).verify(bytes(flipped), message)
    assert not key.verify(message + b"\x00", signature)
    if message:
        changed = bytearray(message)
        changed[0] ^= 0x80
        assert not key.verify(bytes(changed), signature)

    # The same key as a note signer: signing is deterministic, and the note opens.
    signer = NoteSigner(private, "rfc8032.example/key")
    assert signer.verifier_key() == key.text
    note = signer.sign("RFC 8032 key as a note signer\n")
    assert note == signer.sign("RFC 8032 key as a note signer\n")
    assert open_note(note, [key.text]).verified[0].signature == private.sign(
        b"RFC 8032 key as a note signer\n"
    )
