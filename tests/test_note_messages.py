"""Signed notes: every refusal has one exact error type and message (mutation survivors).

The verifier's errors name what is wrong, and tools match on them; a regex ``match`` finds the
text inside a longer one, so these tests compare whole messages. Written for the survivors of
``python -m tests.mutation verify/note.py`` (docs/testing.md), including one that was a real
gap: ``open_note_signed_once`` accepting a note with an extra signature by an unknown key.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.note import NoteSigner
from harness.verify.errors import (
    InvalidSignatureError,
    MalformedNoteError,
    UnverifiedNoteError,
)
from harness.verify.note import (
    MAX_SIGNATURES,
    Signature,
    key_hash,
    open_note,
    open_note_signed_once,
    parse_verifier_key,
)

ALICE = NoteSigner(Ed25519PrivateKey.from_private_bytes(b"\x01" * 32), "alice.example/log")
BOB = NoteSigner(Ed25519PrivateKey.from_private_bytes(b"\x02" * 32), "bob.example/log")
AK, BK = ALICE.verifier_key(), BOB.verifier_key()
NAME, HASH, KEY64 = AK.split("+")
NOTE = ALICE.sign("hello\n")
SIG_LINES = NOTE.split(b"\n\n", 1)[1]


def _vkey(name: str, key: bytes) -> str:
    return f"{name}+{key_hash(name, key):08x}+{base64.b64encode(key).decode()}"


def _note(*lines: str) -> bytes:
    return ("hello\n\n" + "".join(f"{line}\n" for line in lines)).encode()


RAW_KEY = base64.b64decode(KEY64)

CASES: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    "key not a str": (
        lambda: parse_verifier_key(b"x"),  # type: ignore[arg-type]
        TypeError,
        "verifier key must be a str",
    ),
    "key with one +": (
        lambda: parse_verifier_key(f"{NAME}+{HASH}"),
        MalformedNoteError,
        "verifier key: expected name+hash+key",
    ),
    "key without +": (
        lambda: parse_verifier_key(NAME),
        MalformedNoteError,
        "verifier key: expected name+hash+key",
    ),
    "key name with a space": (
        lambda: parse_verifier_key(f"bad name+{HASH}+{KEY64}"),
        MalformedNoteError,
        "verifier key: invalid key name",
    ),
    "key ID of 7 digits": (
        lambda: parse_verifier_key(f"{NAME}+{HASH[:7]}+{KEY64}"),
        MalformedNoteError,
        f"verifier key {NAME}: key ID must be 8 hex digits",
    ),
    "key not canonical base64": (
        lambda: parse_verifier_key(f"{NAME}+{HASH}+{KEY64}="),
        MalformedNoteError,
        f"verifier key {NAME}: key is not canonical non-empty base64",
    ),
    "key ID of another key": (
        lambda: parse_verifier_key(f"{NAME}+{int(HASH, 16) ^ 1:08x}+{KEY64}"),
        MalformedNoteError,
        f"verifier key {NAME}: key ID does not match the key",
    ),
    "key algorithm 2": (
        lambda: parse_verifier_key(_vkey(NAME, b"\x02" + RAW_KEY[1:])),
        MalformedNoteError,
        f"verifier key {NAME}: unknown algorithm 0x02",
    ),
    "key of 31 bytes": (
        lambda: parse_verifier_key(_vkey(NAME, RAW_KEY[:-1])),
        MalformedNoteError,
        f"verifier key {NAME}: Ed25519 key must be 32 bytes",
    ),
    "note not bytes": (
        lambda: open_note("x", [AK]),  # type: ignore[arg-type]
        TypeError,
        "a signed note must be bytes",
    ),
    "keys as one string": (
        lambda: open_note(NOTE, AK),
        TypeError,
        "verifier_keys must be a sequence of keys, not a single string",
    ),
    "not UTF-8": (
        lambda: open_note(b"\xff\n\n" + SIG_LINES, [AK]),
        MalformedNoteError,
        "note is not valid UTF-8",
    ),
    "control character": (
        lambda: open_note(b"he\x01llo\n\n" + SIG_LINES, [AK]),
        MalformedNoteError,
        "note contains an ASCII control character other than newline",
    ),
    "no blank line": (
        lambda: open_note(b"hello\n", [AK]),
        MalformedNoteError,
        "note has no blank line before its signatures",
    ),
    "no final newline": (
        lambda: open_note(NOTE[:-1], [AK]),
        MalformedNoteError,
        "note signatures must end in a newline",
    ),
    "too many signatures": (
        lambda: open_note(_note(*[f"\u2014 k{i} AAAAAAA=" for i in range(MAX_SIGNATURES + 1)]), []),
        MalformedNoteError,
        f"note has more than {MAX_SIGNATURES} signatures",
    ),
    "line without the em dash": (
        lambda: open_note(_note("- alice.example/log AAAAAAA="), [AK]),
        MalformedNoteError,
        "signature line does not start with '— '",
    ),
    "line without a signature": (
        lambda: open_note(_note(f"\u2014 {NAME}"), [AK]),
        MalformedNoteError,
        "signature line: expected '— name signature'",
    ),
    "line with an empty signature": (
        lambda: open_note(_note(f"\u2014 {NAME} "), [AK]),
        MalformedNoteError,
        "signature line: expected '— name signature'",
    ),
    "line with two spaces": (  # the name ends at the first space, as in Go
        lambda: open_note(_note(f"\u2014 {NAME} AAAA AAAA"), [AK]),
        MalformedNoteError,
        f"signature line {NAME}: signature is not canonical base64",
    ),
    "line with a bad key name": (
        lambda: open_note(_note("\u2014 bad+name AAAAAAA="), [AK]),
        MalformedNoteError,
        "signature line: invalid key name",
    ),
    "signature not canonical base64": (
        lambda: open_note(_note(f"\u2014 {NAME} AAAAAAB="), [AK]),
        MalformedNoteError,
        f"signature line {NAME}: signature is not canonical base64",
    ),
    "signature of 4 bytes": (
        lambda: open_note(_note(f"\u2014 {NAME} AAAAAA=="), [AK]),
        MalformedNoteError,
        f"signature line {NAME}: signature too short",
    ),
    "two lines for one key": (
        lambda: open_note(NOTE + SIG_LINES, [AK]),
        MalformedNoteError,
        f"note has more than one signature line for key {NAME}+{HASH}",
    ),
    "signed by an unknown key": (
        lambda: open_note(NOTE, [BK]),
        UnverifiedNoteError,
        f"note has no signature from a known key (signed by unknown keys: {NAME}+{HASH})",
    ),
    "a bad signature": (
        lambda: open_note(NOTE.replace(b"hello", b"hellp"), [AK]),
        InvalidSignatureError,
        f"invalid signature for key {NAME}+{HASH}",
    ),
    "signed once: two known signers": (
        lambda: open_note_signed_once(NOTE + BOB.sign("hello\n").split(b"\n\n")[1], [AK, BK]),
        MalformedNoteError,
        "note carries 2 signatures; exactly one, by the signer, is allowed",
    ),
    "signed once: an extra unknown signer": (
        lambda: open_note_signed_once(NOTE + BOB.sign("hello\n").split(b"\n\n")[1], [AK]),
        MalformedNoteError,
        "note carries 2 signatures; exactly one, by the signer, is allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refusal_message_is_exact(case: str) -> None:
    call, error, message = CASES[case]
    with pytest.raises(error) as raised:
        call()
    assert type(raised.value) is error
    assert str(raised.value) == message


def test_no_known_signer_without_any_signature_line_names_no_one() -> None:
    # The message lists unknown signers only when there are some.
    with pytest.raises(UnverifiedNoteError) as raised:
        open_note(NOTE, [])
    assert str(raised.value) == (
        f"note has no signature from a known key (signed by unknown keys: {NAME}+{HASH})"
    )


def test_unknown_signers_listed_at_most_five_names_at_most_80_characters() -> None:
    names = [("n" * 90) + str(i) for i in range(6)]
    note = _note(*[f"\u2014 {name} AAAAAAA=" for name in names])
    with pytest.raises(UnverifiedNoteError) as raised:
        open_note(note, [AK])
    listed = ", ".join(f"{'n' * 80}+00000000" for _ in range(5))
    assert str(raised.value) == (
        f"note has no signature from a known key (signed by unknown keys: {listed})"
    )


def test_signed_once_returns_the_one_signature() -> None:
    opened = open_note_signed_once(NOTE, [AK])
    assert opened.unverified == ()
    assert [s.name for s in opened.verified] == [NAME]


def test_signature_key_id_is_big_endian_and_round_trips() -> None:
    line = f"\u2014 {NAME} " + base64.b64encode(b"\x00\x00\x01\x02" + b"\x05").decode()
    note = _note(line)
    with pytest.raises(UnverifiedNoteError, match=rf"{NAME}\+00000102\)$"):
        open_note(note, [AK])
    signature = Signature(NAME, 0x102, b"\x05")
    assert signature.to_line() == line + "\n"
