"""Unit, tamper and property tests for signed notes and checkpoints."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.receipts.checkpoint import format_checkpoint_body
from harness.receipts.note import NoteSigner, parse_signer_key, sign_note
from harness.verify.checkpoint import (
    MAX_TREE_SIZE,
    Checkpoint,
    parse_checkpoint,
    require_sha256_root,
)
from harness.verify.errors import (
    CheckpointError,
    InvalidSignatureError,
    MalformedNoteError,
    NoteError,
    UnverifiedNoteError,
    VerificationError,
)
from harness.verify.note import (
    MAX_SIGNATURES,
    Signature,
    VerifierKey,
    is_valid_key_name,
    key_hash,
    open_note,
    open_note_signed_once,
    parse_unverified_note,
    parse_verifier_key,
    strict_b64decode,
)

# Published test keys of golang.org/x/mod/sumdb/note (note_test.go / package doc).
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_LINE = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfq"
    "dngotpRZb6KE6RyyBwJnAM=\n"
)
PETER_NOTE = (PETER_TEXT + "\n" + PETER_LINE).encode()
# The doubly-signed example of the Go package documentation (EnochRoot's key is not published).
ENOCH_LINE = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWL"
    "ox33WWd1RvMc+QQ=\n"
)


def _signer(name: str = "example.com/log", seed: int = 1) -> NoteSigner:
    return NoteSigner(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32), name)


ALICE = _signer("alice.example/k", 1)
BOB = _signer("bob.example/k", 2)


def _line(name: str, blob: bytes) -> bytes:
    return f"— {name} {base64.b64encode(blob).decode()}\n".encode()


# --- Round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "hello\n",
        "\n",
        "a\n\nb\n",  # empty lines inside the text are allowed
        "a\n\n\n",  # text may end in empty lines
        "— not a signature AAAA\n",  # text that looks like a signature line
        "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n"
        "\ned è subito sera.\n",
        "emoji 🙂 and NBSP\xa0and DEL\x7f\n",
    ],
)
def test_sign_open_round_trip(text: str) -> None:
    note = ALICE.sign(text)
    opened = open_note(note, [ALICE.verifier_key()])
    assert opened.text == text
    assert opened.verified == (ALICE.signature(text),)
    assert opened.unverified == ()
    assert parse_unverified_note(note).unverified == (ALICE.signature(text),)


def test_go_doc_example_with_unknown_cosigner() -> None:
    note = PETER_NOTE + ENOCH_LINE.encode()
    opened = open_note(note, [PETER_VKEY])
    assert opened.text == PETER_TEXT
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [s.name for s in opened.unverified] == ["EnochRoot"]
    assert opened.verified[0].key_hash == 0xC74F20A3
    assert opened.unverified[0].to_line() == ENOCH_LINE


def test_signer_key_text_and_parse() -> None:
    signer = parse_signer_key(PETER_SKEY)
    assert signer.verifier_key() == PETER_VKEY
    assert signer.key_hash == 0xC74F20A3
    assert signer.sign(PETER_TEXT) == PETER_NOTE
    assert repr(signer) == "NoteSigner(name='PeterNeumann', key_hash=c74f20a3)"
    fresh = NoteSigner.generate("fresh.example")
    again = parse_signer_key(fresh.signer_key())
    assert again.verifier_key() == fresh.verifier_key()
    assert "PRIVATE" not in repr(fresh)


def test_cosign_and_multi_signer() -> None:
    note = ALICE.sign("checkpoint\n")
    cosigned = BOB.add_signature(note)
    assert cosigned.startswith(note)  # existing lines first, new one last
    opened = open_note(cosigned, [ALICE.verifier_key(), BOB.verifier_key()])
    assert [s.name for s in opened.verified] == [ALICE.name, BOB.name]
    # Re-signing by the same key replaces its line rather than adding a second one.
    assert BOB.add_signature(cosigned) == cosigned
    resigned = ALICE.add_signature(cosigned)
    assert resigned == (
        b"checkpoint\n\n"
        + BOB.signature("checkpoint\n").to_line().encode()
        + ALICE.signature("checkpoint\n").to_line().encode()
    )
    both = sign_note("checkpoint\n", [ALICE, BOB, ALICE])
    assert both == cosigned
    only_bob = open_note(cosigned, [BOB.verifier_key()])
    assert [s.name for s in only_bob.unverified] == [ALICE.name]
    with pytest.raises(MalformedNoteError):
        BOB.add_signature(b"not a note")
    with pytest.raises(ValueError, match="at least one signer"):
        sign_note("x\n", [])


# --- Tampering ---------------------------------------------------------------------------------


def test_every_byte_flip_fails() -> None:
    note = ALICE.sign("origin.example\n42\nAAAA\n")
    text_len = len("origin.example\n42\nAAAA\n")
    keys = [ALICE.verifier_key()]
    for i in range(len(note)):
        for mask in (0x01, 0x20, 0x80):
            tampered = bytearray(note)
            tampered[i] ^= mask
            with pytest.raises(NoteError) as info:
                open_note(bytes(tampered), keys)
            if i < text_len:
                assert isinstance(info.value, InvalidSignatureError | MalformedNoteError)


def test_signature_bytes_tampered_is_invalid_signature() -> None:
    sig = ALICE.signature("hello\n")
    head = sig.key_hash.to_bytes(4, "big")
    for i in range(len(sig.signature)):
        bad = bytearray(sig.signature)
        bad[i] ^= 0x01
        note = b"hello\n\n" + _line(sig.name, head + bytes(bad))
        with pytest.raises(InvalidSignatureError, match=r"alice\.example/k"):
            open_note(note, [ALICE.verifier_key()])
    # Wrong length by a known key: a failed verification, not a parse error (as Go).
    for blob in (head + sig.signature[:-1], head + sig.signature + b"\x00", head + b"\x00"):
        with pytest.raises(InvalidSignatureError):
            open_note(b"hello\n\n" + _line(sig.name, blob), [ALICE.verifier_key()])


def test_signature_over_other_text_is_invalid() -> None:
    line = ALICE.signature("hello\n").to_line().encode()
    with pytest.raises(InvalidSignatureError):
        open_note(b"hellO\n\n" + line, [ALICE.verifier_key()])


def test_unknown_keys() -> None:
    note = ALICE.sign("hello\n")
    with pytest.raises(UnverifiedNoteError):
        open_note(note, [])
    with pytest.raises(UnverifiedNoteError):
        open_note(note, [BOB.verifier_key()])
    # Same name, other key ID, and same key ID, other name: both ignored as unknown.
    sig = ALICE.signature("hello\n")
    for name, khash in ((sig.name, sig.key_hash ^ 1), ("alice.example/other", sig.key_hash)):
        line = _line(name, khash.to_bytes(4, "big") + sig.signature)
        with pytest.raises(UnverifiedNoteError):
            open_note(b"hello\n\n" + line, [ALICE.verifier_key()])
        opened = open_note(b"hello\n\n" + line + sig.to_line().encode(), [ALICE.verifier_key()])
        assert opened.verified == (sig,)
        assert opened.unverified == (Signature(name, khash, sig.signature),)


def test_verifier_key_objects_accepted() -> None:
    note = ALICE.sign("x\n")
    assert open_note(note, [ALICE.verifier]).verified == (ALICE.signature("x\n"),)
    assert open_note(note, (ALICE.verifier_key(), BOB.verifier)).text == "x\n"


# --- Malformed notes ---------------------------------------------------------------------------

_SIG = ALICE.signature("hello\n")
_GOOD_LINE = _SIG.to_line().encode()
_BLOB = _SIG.key_hash.to_bytes(4, "big") + _SIG.signature
_B64 = base64.b64encode(_BLOB).decode()


@pytest.mark.parametrize(
    "note",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"hello\n" + _GOOD_LINE, id="no blank line"),
        pytest.param(b"hello\n\n" + _GOOD_LINE[:-1], id="no final newline"),
        pytest.param(b"hello\n\n", id="no signatures"),
        pytest.param(b"hello\n\n" + _GOOD_LINE + b"\n", id="blank line after signatures"),
        pytest.param(b"hello\r\n\n" + _GOOD_LINE, id="CR in text"),
        pytest.param(b"hello\n\n" + _GOOD_LINE[:-1] + b"\r\n", id="CRLF signature line"),
        pytest.param(b"hel\x00lo\n\n" + _GOOD_LINE, id="NUL"),
        pytest.param(b"a\tb\n\n" + _GOOD_LINE, id="tab"),
        pytest.param(b"a\x1fb\n\n" + _GOOD_LINE, id="unit separator"),
        pytest.param(b"caf\xe9\n\n" + _GOOD_LINE, id="latin-1 byte"),
        pytest.param(b"\xc0\xaf\n\n" + _GOOD_LINE, id="overlong UTF-8"),
        pytest.param(b"\xed\xa0\x80\n\n" + _GOOD_LINE, id="UTF-8 surrogate"),
        pytest.param(b"\xf4\x90\x80\x80\n\n" + _GOOD_LINE, id="beyond U+10FFFF"),
        pytest.param(b"hello\n\n" + _GOOD_LINE[:-2] + b"\n", id="truncated base64"),
        pytest.param(b"hello\n\n" + _GOOD_LINE.replace(b"=", b""), id="missing padding"),
        pytest.param(b"hello\n\n" + _GOOD_LINE[:-1] + b"==\n", id="extra padding"),
        pytest.param(b"hello\n\n" + _GOOD_LINE[:-1] + b" \n", id="trailing space"),
        pytest.param(
            b"hello\n\n\xe2\x80\x94 k " + base64.urlsafe_b64encode(b"\xfb\xff\xbf" * 3) + b"\n",
            id="base64url",
        ),
        pytest.param(b"hello\n\n- alice.example/k " + _B64.encode() + b"\n", id="hyphen"),
        pytest.param(
            b"hello\n\n\xe2\x80\x93 alice.example/k " + _B64.encode() + b"\n", id="en dash"
        ),
        pytest.param(
            b"hello\n\n\xe2\x80\x94alice.example/k " + _B64.encode() + b"\n", id="no space"
        ),
        pytest.param(b"hello\n\n\xe2\x80\x94  " + _B64.encode() + b"\n", id="empty name"),
        pytest.param(b"hello\n\n\xe2\x80\x94 alice.example/k\n", id="no signature"),
        pytest.param(b"hello\n\n\xe2\x80\x94 alice.example/k \n", id="empty signature"),
        pytest.param(b"hello\n\n" + _line("a+b", _BLOB), id="plus in name"),
        pytest.param(b"hello\n\n" + _line("a\xa0b", _BLOB), id="NBSP in name"),
        pytest.param(b"hello\n\n" + _line("a\u3000b", _BLOB), id="ideographic space in name"),
        pytest.param(b"hello\n\n" + _line("alice", b"\x00\x00\x00\x00"), id="4-byte signature"),
        pytest.param(b"hello\n\n" + _line("alice", b""), id="0-byte signature"),
        pytest.param(b"hello\n\n" + _GOOD_LINE + b"junk\n", id="junk line"),
        pytest.param(b"hello\n\n" + _GOOD_LINE + b"\xe2\x80\x94 x\n", id="bad later line"),
    ],
)
def test_malformed_notes(note: bytes) -> None:
    with pytest.raises(MalformedNoteError):
        open_note(note, [ALICE.verifier_key()])
    with pytest.raises(MalformedNoteError):
        parse_unverified_note(note)


def test_non_canonical_trailing_bits() -> None:
    # 68 bytes -> 92 base64 chars ending in "=": the last char carries 2 unused bits.
    last = _B64[-2]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    variant = _B64[:-2] + alphabet[alphabet.index(last) ^ 1] + "="
    assert base64.b64decode(variant) == _BLOB  # lenient decoders accept it ...
    with pytest.raises(MalformedNoteError):  # ... we do not
        open_note(b"hello\n\n\xe2\x80\x94 alice.example/k " + variant.encode() + b"\n", [])


def test_signature_count_limit() -> None:
    unknown = b"".join(_line(f"u{i}", b"\x00\x00\x00\x01\x02") for i in range(MAX_SIGNATURES - 1))
    ok = b"hello\n\n" + unknown + _GOOD_LINE
    assert open_note(ok, [ALICE.verifier_key()]).verified == (_SIG,)
    with pytest.raises(MalformedNoteError, match="more than 100"):
        open_note(b"hello\n\n" + unknown + _GOOD_LINE + _GOOD_LINE, [ALICE.verifier_key()])


def test_duplicate_signature_lines() -> None:
    """Exactly one signature line per (key name, key ID): duplicates — identical or not, by a
    known or an unknown key — are refused, so a note has one byte form (issue 9 §2)."""
    keys = [ALICE.verifier_key()]
    assert open_note(b"hello\n\n" + _GOOD_LINE, keys).verified == (_SIG,)
    unknown = _line("u", b"\x00\x00\x00\x01\x02")
    assert len(open_note(b"hello\n\n" + unknown + _GOOD_LINE, keys).unverified) == 1
    bad = _line(_SIG.name, _BLOB[:-1] + bytes([_BLOB[-1] ^ 1]))
    for block in (
        _GOOD_LINE * 2,
        _GOOD_LINE * 3,
        unknown * 2 + _GOOD_LINE,
        _GOOD_LINE + bad,
        bad + _GOOD_LINE,
    ):
        note = b"hello\n\n" + block
        with pytest.raises(MalformedNoteError, match="more than one signature line for key"):
            open_note(note, keys)
        with pytest.raises(MalformedNoteError, match="more than one signature line"):
            parse_unverified_note(note)
        with pytest.raises(MalformedNoteError, match="more than one signature line"):
            open_note_signed_once(note, keys)


def test_wrong_input_types() -> None:
    with pytest.raises(TypeError):
        open_note("hello\n\n", [])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        open_note(ALICE.sign("x\n"), ALICE.verifier_key())
    assert open_note(bytearray(ALICE.sign("x\n")), [ALICE.verifier_key()]).text == "x\n"  # type: ignore[arg-type]


# --- Verifier keys -----------------------------------------------------------------------------


def _vkey(name: str, data: bytes, khash: int | None = None) -> str:
    khash = key_hash(name, data) if khash is None else khash
    return f"{name}+{khash:08x}+{base64.b64encode(data).decode()}"


_PUB = ALICE.public_key


@pytest.mark.parametrize(
    "vkey",
    [
        pytest.param("", id="empty"),
        pytest.param("PeterNeumann", id="name only"),
        pytest.param("PeterNeumann+c74f20a3", id="no key"),
        pytest.param("PeterNeumann+c74f20a3+", id="empty key"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "c74f20a4"), id="wrong hash"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "c74f20a"), id="7 hex digits"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "0c74f20a3"), id="9 hex digits"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "+c74f20a"), id="signed hex"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "c74f_0a3"), id="underscore hex"),
        pytest.param(PETER_VKEY.replace("c74f20a3", "c74f20g3"), id="non-hex"),
        pytest.param(PETER_VKEY[:-1], id="bad base64"),
        pytest.param(PETER_VKEY + "=", id="extra padding"),
        pytest.param(PETER_VKEY.replace("+ARpc", "+ ARpc"), id="space in base64"),
        pytest.param(_vkey("k", b"\x02" + _PUB), id="algorithm 0x02"),
        pytest.param(_vkey("k", b"\x00" + _PUB), id="algorithm 0x00"),
        pytest.param(_vkey("k", b"\x01" + _PUB[:31]), id="31-byte key"),
        pytest.param(_vkey("k", b"\x01" + _PUB + b"\x00"), id="33-byte key"),
        pytest.param(_vkey("k", b"\x01"), id="algorithm byte only"),
        pytest.param(_vkey("", b"\x01" + _PUB), id="empty name"),
        pytest.param(_vkey("a b", b"\x01" + _PUB), id="space in name"),
        pytest.param(_vkey("a\u2028b", b"\x01" + _PUB), id="line separator in name"),
        pytest.param(_vkey("a\nb", b"\x01" + _PUB), id="newline in name"),
        pytest.param(_vkey("a\x01b", b"\x01" + _PUB), id="control in name"),
    ],
)
def test_malformed_verifier_keys(vkey: str) -> None:
    with pytest.raises(MalformedNoteError):
        parse_verifier_key(vkey)
    with pytest.raises(MalformedNoteError):
        open_note(PETER_NOTE, [PETER_VKEY, vkey])


def test_verifier_key_forms() -> None:
    key = parse_verifier_key(PETER_VKEY)
    # Go parses the hex key ID with either letter case; the text form is lowercase.
    assert parse_verifier_key(PETER_VKEY.replace("c74f20a3", "C74F20A3")) == key
    assert key.text == PETER_VKEY
    assert _vkey("k", b"\x01" + _PUB) == VerifierKey.from_ed25519("k", _PUB).text
    with pytest.raises(MalformedNoteError):
        VerifierKey("k", key_hash("k", b"\x01" + _PUB) ^ 1, _PUB)
    with pytest.raises(MalformedNoteError):
        VerifierKey.from_ed25519("k", _PUB[:31])
    with pytest.raises(MalformedNoteError):
        VerifierKey.from_ed25519("k+", _PUB)
    with pytest.raises(TypeError):
        parse_verifier_key(PETER_VKEY.encode())  # type: ignore[arg-type]


def test_ambiguous_and_repeated_verifier_keys() -> None:
    assert open_note(PETER_NOTE, [PETER_VKEY, PETER_VKEY]).text == PETER_TEXT
    # Two different keys sharing name and key ID (constructed by brute force is impractical,
    # so bypass the self-consistency check of VerifierKey to simulate a colliding list entry).
    real = parse_verifier_key(PETER_VKEY)
    twin = object.__new__(VerifierKey)
    object.__setattr__(twin, "name", real.name)
    object.__setattr__(twin, "key_hash", real.key_hash)
    object.__setattr__(twin, "public_key", _PUB)
    with pytest.raises(MalformedNoteError, match="ambiguous"):
        open_note(PETER_NOTE, [real, twin])


def test_key_names() -> None:
    assert is_valid_key_name("example.com/log42")
    assert is_valid_key_name("ключ/κλειδί")
    assert is_valid_key_name("a\x7fb")  # DEL is not below U+0020
    for bad in ("", "a+b", "a b", "a\tb", "a\x85b", "a\u200ab", "a\u3000b", "a\x00b", "\ud800"):
        assert not is_valid_key_name(bad), repr(bad)


def test_strict_b64decode() -> None:
    assert strict_b64decode("") == b""
    assert strict_b64decode("YQ==") == b"a"
    for bad in ("YQ", "YQ=", "YR==", "Y Q==", "YQ==\n", "YQ==YQ==", "YQ-_", "ÿQ==", "=", "Y==="):
        assert strict_b64decode(bad) is None, bad


# --- Signing side validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["abc", "", "a\r\n", "a\x00\n", "a\tb\n", b"\xff\n", "\ud800\n"],
)
def test_sign_rejects_malformed_text(text: str | bytes) -> None:
    with pytest.raises(ValueError, match="malformed note"):
        ALICE.sign(text)


@pytest.mark.parametrize(
    "skey",
    [
        PETER_SKEY.replace("PRIVATE+KEY+", "PRIVATE+"),
        PETER_SKEY.replace("c74f20a3", "c74f20a4"),
        PETER_SKEY.replace("c74f20a3", "c74f20a"),
        PETER_SKEY[:-1],
        PETER_SKEY.replace("PeterNeumann", "Peter Neumann"),
        PETER_SKEY.replace("PeterNeumann", "Other"),  # key ID no longer matches
        "PRIVATE+KEY+k+00000000+" + base64.b64encode(b"\x02" + bytes(32)).decode(),
        "PRIVATE+KEY+k+00000000+" + base64.b64encode(b"\x01" + bytes(31)).decode(),
        PETER_VKEY,
        "",
    ],
)
def test_parse_signer_key_rejects(skey: str) -> None:
    with pytest.raises(ValueError, match="malformed signer key") as info:
        parse_signer_key(skey)
    assert "AYEKFALV" not in str(info.value)  # the secret never reaches the message


def test_signer_rejects_bad_name() -> None:
    for name in ("", "a b", "a+b"):
        with pytest.raises(ValueError, match="invalid signer"):
            NoteSigner(Ed25519PrivateKey.generate(), name)


# --- Checkpoints -------------------------------------------------------------------------------

ROOT = bytes(range(32))
ROOT64 = base64.b64encode(ROOT).decode()


def test_checkpoint_parse_basic() -> None:
    body = f"example.com/log\n0\n{ROOT64}\n".encode()
    assert parse_checkpoint(body) == Checkpoint("example.com/log", 0, ROOT, ())
    assert parse_checkpoint(body.decode()) == parse_checkpoint(body)
    ext = f"Rekor - 123\n{MAX_TREE_SIZE}\n{ROOT64}\nTimestamp: 1\nx y+z\n".encode()
    cp = parse_checkpoint(ext, hash_size=32)
    assert cp == Checkpoint("Rekor - 123", 2**64 - 1, ROOT, ("Timestamp: 1", "x y+z"))
    assert require_sha256_root(cp) == ROOT
    with pytest.raises(CheckpointError, match="expected 20"):
        parse_checkpoint(ext, hash_size=20)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(f"log\n5\n{ROOT64}".encode(), id="no trailing newline"),
        pytest.param(f"\n5\n{ROOT64}\n".encode(), id="empty origin"),
        pytest.param(f"log\n01\n{ROOT64}\n".encode(), id="leading zero"),
        pytest.param(f"log\n00\n{ROOT64}\n".encode(), id="double zero"),
        pytest.param(f"log\n+5\n{ROOT64}\n".encode(), id="plus sign"),
        pytest.param(f"log\n-1\n{ROOT64}\n".encode(), id="negative"),
        pytest.param(f"log\n 5\n{ROOT64}\n".encode(), id="space before size"),
        pytest.param(f"log\n5 \n{ROOT64}\n".encode(), id="space after size"),
        pytest.param(f"log\n1_000\n{ROOT64}\n".encode(), id="underscore"),
        pytest.param(f"log\n0x10\n{ROOT64}\n".encode(), id="hex size"),
        pytest.param(f"log\n\u0665\n{ROOT64}\n".encode(), id="arabic-indic digit"),
        pytest.param(f"log\n\uff15\n{ROOT64}\n".encode(), id="fullwidth digit"),
        pytest.param(f"log\n{2**64}\n{ROOT64}\n".encode(), id="2^64"),
        pytest.param(f"log\n{'9' * 5000}\n{ROOT64}\n".encode(), id="huge size"),
        pytest.param(b"log\n5\n\n", id="empty root"),
        pytest.param(b"log\n5\nnot base64!\n", id="non-base64 root"),
        pytest.param(f"log\n5\n{ROOT64.rstrip('=')}\n".encode(), id="unpadded root"),
        pytest.param(f"log\n5\n{ROOT64} \n".encode(), id="space after root"),
        pytest.param(b"log\n5\nYR==\n", id="non-canonical root"),
        pytest.param(f"log\n5\n{ROOT64}\n\next\n".encode(), id="empty extension line"),
        pytest.param(f"log\n5\n{ROOT64}\n\n".encode(), id="trailing blank line"),
        pytest.param(f"log\r\n5\n{ROOT64}\n".encode(), id="CR"),
        pytest.param(f"log\n5\n{ROOT64}\r\n".encode(), id="CRLF"),
        pytest.param(f"l\x00g\n5\n{ROOT64}\n".encode(), id="NUL"),
        pytest.param(b"l\xffg\n5\n" + ROOT64.encode() + b"\n", id="invalid UTF-8"),
        pytest.param(b"log\n5\n", id="two lines"),
    ],
)
def test_checkpoint_parse_negative(body: bytes) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint(body)


def test_checkpoint_parse_bad_str() -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint(f"l\ud800g\n5\n{ROOT64}\n")
    with pytest.raises(TypeError):
        parse_checkpoint(5)  # type: ignore[arg-type]


def test_checkpoint_error_is_verification_error() -> None:
    assert issubclass(CheckpointError, VerificationError)
    assert issubclass(MalformedNoteError, NoteError)


@pytest.mark.parametrize(
    ("args", "exc"),
    [
        (("", 1, ROOT), ValueError),
        (("a\nb", 1, ROOT), ValueError),
        (("a\rb", 1, ROOT), ValueError),
        (("\ud800", 1, ROOT), ValueError),
        (("log", -1, ROOT), ValueError),
        (("log", 2**64, ROOT), ValueError),
        (("log", True, ROOT), TypeError),
        (("log", 1.0, ROOT), TypeError),
        (("log", 1, b""), ValueError),
        (("log", 1, ROOT64), TypeError),
        (("log", 1, ROOT, ("",)), ValueError),
        (("log", 1, ROOT, ("a\nb",)), ValueError),
        (("log", 1, ROOT, "ext"), TypeError),
    ],
)
def test_format_checkpoint_rejects(args: tuple[object, ...], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        format_checkpoint_body(*args)  # type: ignore[arg-type]


def test_signed_checkpoint_end_to_end() -> None:
    body = format_checkpoint_body("example.com/log", 7, ROOT, ["ext one"])
    note = ALICE.sign(body)
    opened = open_note(note, [ALICE.verifier_key()])
    cp = parse_checkpoint(opened.text.encode(), hash_size=32)
    assert cp == Checkpoint("example.com/log", 7, ROOT, ("ext one",))


# --- Properties --------------------------------------------------------------------------------

_NAME_CHARS = st.characters(codec="utf-8", exclude_characters="+ \t\n\r\x0b\x0c")
_line_text = st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1)


@st.composite
def _noteish(draw: st.DrawFn) -> bytes:
    """Inputs near the note grammar, so the property reaches the deeper checks."""
    text = draw(st.lists(st.text(max_size=20), max_size=4))
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        prefix = draw(st.sampled_from(["— ", "—", "- ", ""]))
        name = draw(st.sampled_from([ALICE.name, BOB.name, "x"]) | st.text(_NAME_CHARS, max_size=8))
        blob = draw(st.sampled_from([_BLOB, _BLOB[:5], b""]) | st.binary(max_size=72))
        b64 = base64.b64encode(blob).decode()
        b64 = draw(st.sampled_from([b64, b64.rstrip("="), b64 + "=", b64[:-1], " " + b64]))
        lines.append(prefix + name + draw(st.sampled_from([" ", "", "  "])) + b64)
    raw = "\n".join(text) + draw(st.sampled_from(["\n\n", "\n", ""])) + "\n".join(lines)
    raw += draw(st.sampled_from(["\n", "", "\n\n", "\r\n"]))
    return raw.encode("utf-8", "surrogatepass")


_NOTE_INPUTS = st.binary(max_size=300) | _noteish()


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_NOTE_INPUTS)
def test_open_note_raises_only_note_errors(data: bytes) -> None:
    for keys in ([], [ALICE.verifier_key()], [ALICE.verifier_key(), BOB.verifier_key()]):
        try:
            note = open_note(data, keys)
        except NoteError:
            continue
        assert note.verified
        assert data.startswith(note.text.encode())
    try:
        parsed = parse_unverified_note(data)
    except NoteError:
        return
    assert parsed.verified == ()


@settings(max_examples=300)
@given(st.binary(max_size=200), st.integers(0, 200), st.binary(min_size=0, max_size=3))
def test_mutated_note_never_crashes(prefix: bytes, pos: int, insert: bytes) -> None:
    text = "".join(c for c in prefix.decode("utf-8", "replace") if c >= " " or c == "\n")
    note = ALICE.sign(text + "\n")
    pos %= len(note) + 1
    mutated = note[:pos] + insert + note[pos + len(insert) :]
    try:
        opened = open_note(mutated, [ALICE.verifier_key()])
    except NoteError:
        return
    # Anything that still opens carries exactly the signed text.
    assert opened.text.encode() == note[: note.rindex(b"\n\n") + 1]


@settings(max_examples=200)
@given(st.lists(_line_text, min_size=1, max_size=6).map("\n".join))
def test_sign_open_property(text: str) -> None:
    text = "".join(c for c in text if c >= " " or c == "\n") + "\n"
    opened = open_note(ALICE.sign(text), [ALICE.verifier_key()])
    assert opened.text == text


@settings(max_examples=400)
@given(
    st.binary(max_size=200)
    | st.lists(
        st.sampled_from(["log", "0", "01", "5", "-1", "+5", ROOT64, "YR==", "", " ", "ext"])
        | st.text(max_size=10),
        max_size=6,
    ).map(lambda ls: ("\n".join(ls) + "\n").encode("utf-8", "surrogatepass"))
)
def test_parse_checkpoint_raises_only_checkpoint_errors(data: bytes) -> None:
    try:
        cp = parse_checkpoint(data)
    except CheckpointError:
        return
    assert format_checkpoint_body(cp.origin, cp.size, cp.root_hash, cp.extensions) == data


_CHECKPOINT_LINE = st.text(
    st.characters(codec="utf-8", exclude_characters="\n\r\t\x00"),
    min_size=1,
    max_size=30,
).filter(lambda s: all(c >= " " for c in s))


@settings(max_examples=300)
@given(
    _CHECKPOINT_LINE,
    st.integers(0, MAX_TREE_SIZE),
    st.binary(min_size=1, max_size=64),
    st.lists(_CHECKPOINT_LINE, max_size=3),
)
def test_checkpoint_round_trip(origin: str, size: int, root: bytes, ext: list[str]) -> None:
    body = format_checkpoint_body(origin, size, root, ext)
    assert parse_checkpoint(body) == Checkpoint(origin, size, root, tuple(ext))
    assert body.endswith(b"\n")
