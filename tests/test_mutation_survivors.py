"""Tests written for the survivors of ``python -m tests.mutation`` on the core modules.

Each test names the mutant it kills (function and change). Two were real gaps, not just
messages: ``contains_float`` looking only at a list's first level would let ``[1.5]`` pass
``parse_canonical`` (nothing tested a float inside a list), and ``CompactRange.from_state``
accepting ``True`` as a size. Messages are compared whole: a regex ``match`` also finds the
text inside a mutated, longer one. Survivors left as equivalent are listed in docs/testing.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.receipts.merkle import MerkleTree
from harness.verify.canonical import (
    MAX_NESTING,
    canonical_bytes,
    encode_checked,
    jcs_bytes,
    parse_canonical,
    parse_strict_json,
)
from harness.verify.errors import CanonicalEncodingError, ConsistencyProofError, MalformedNoteError
from harness.verify.merkle import CompactRange, verify_consistency
from harness.verify.note import VerifierKey, key_hash, open_note, parse_verifier_key

RFC8785 = "bytes are not the RFC 8785 canonical form (key order, whitespace, escapes or numbers)"
NOT_INTEGER = "a number is not an integer; records carry integers only"


def _message(call: Any, error: type[Exception] = CanonicalEncodingError) -> str:
    with pytest.raises(error) as raised:
        call()
    assert type(raised.value) is error
    return str(raised.value)


# ---- canonical.py ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", [b"[1.5]", b"[[1.5]]", b'{"a":[1,{"b":1.5}]}', b'[{"a":[2,[0.5]]}]', b"[1,2,0.25]"]
)
def test_float_anywhere_is_refused(data: bytes) -> None:
    """Kills contains_float: ``any(contains_float(None) for item in value)`` (lists)."""
    assert _message(lambda: parse_canonical(data)) == NOT_INTEGER
    assert parse_canonical(data, allow_floats=True) is not None


def test_non_canonical_float_in_non_ascii_data_names_the_form_not_the_float() -> None:
    """Kills _parse_canonical_exact / _explain_non_canonical losing ``allow_floats=True``."""
    data = '["é",1.50]'.encode()
    assert _message(lambda: parse_canonical(data, allow_floats=True)) == RFC8785
    assert _message(lambda: parse_canonical(b'{"b":1,"a":2}')) == RFC8785


def test_decode_error_is_described_with_floats_allowed() -> None:
    """Kills _describe_decode_error parsing without ``allow_floats=True``: the float before
    the NaN is not the problem, the NaN is."""
    assert _message(lambda: parse_canonical(b"[1.5,NaN]")) == "NaN is not valid JSON"


def test_long_numbers_are_shown_to_40_characters() -> None:
    """Kills ``text[:41]`` in _no_floats and _checked_int."""
    fraction = "1." + "1" * 50
    assert _message(lambda: parse_strict_json(f"[{fraction}]".encode())) == (
        f"number {fraction[:40]} is not an integer; records carry integers only"
    )
    big = "1" + "0" * 50
    assert _message(lambda: parse_strict_json(f"[{big}]".encode())) == (
        f"integer {big[:40]} is outside ±(2^53−1); use a string for large values"
    )


def test_duplicate_key_message_names_the_duplicate() -> None:
    """Kills _pairs_without_duplicates: ``if key not in seen`` (names the first key instead)."""
    assert _message(lambda: parse_canonical(b'{"a":1,"b":2,"b":3}')) == "duplicate key 'b'"


def test_messages_of_parse_canonical_and_strict_json_are_exact() -> None:
    assert _message(lambda: parse_canonical(b"[1.5]")) == NOT_INTEGER
    assert _message(lambda: parse_canonical(b'["\\ud800"]')) == "string holds a lone surrogate"


def test_unencodable_values_say_why() -> None:
    """Kills encode_checked / jcs_bytes raising ``CanonicalEncodingError(None)``."""
    assert _message(lambda: encode_checked({"a": "\ud800"})).startswith(
        "value has no canonical form: "
    )
    assert _message(lambda: jcs_bytes(float("inf"))) == (
        "value has no canonical form: inf is not representable in JCS"
    )


def _nested(depth: int, wrap: Any) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = wrap(value)
    return value


@pytest.mark.parametrize("wrap", [lambda v: [v], lambda v: {"a": v}], ids=["lists", "objects"])
def test_nesting_limit_is_exact_for_lists_and_objects(wrap: Any) -> None:
    """Kills check_json_types: ``depth: int = 2`` and ``kind is list and kind is tuple`` /
    ``kind is dict and kind is list`` (lists or objects escaping the depth check)."""
    assert canonical_bytes(_nested(MAX_NESTING, wrap))
    too_deep = _nested(MAX_NESTING + 1, wrap)
    assert _message(lambda: canonical_bytes(too_deep)) == f"nesting deeper than {MAX_NESTING}"


# ---- merkle.py ---------------------------------------------------------------------------------


def test_compact_range_size_must_be_a_real_int() -> None:
    """Kills CompactRange.from_state: ``isinstance(size, bool) and not isinstance(...)``."""
    for size in (True, False):
        message = _message(lambda size=size: CompactRange.from_state(size, [bytes(32)]), ValueError)
        assert message == f"size {size!r} is not a non-negative int"
    assert CompactRange.from_state(1, [bytes(32)]).size == 1


def test_builder_type_error_names_the_type() -> None:
    """Kills _builder_leaf_hash: ``type(None).__name__`` in its message."""
    for call in (
        lambda: CompactRange().append("x"),  # type: ignore[arg-type]
        lambda: CompactRange.from_state(1, ["x"]),  # type: ignore[list-item]
        lambda: MerkleTree().append("x"),  # type: ignore[arg-type]
    ):
        assert _message(call, TypeError) == "leaf hash must be bytes, got str"


@pytest.mark.parametrize(
    ("size1", "size2", "proof", "expected"),
    [
        (3, 3, 1, "proof has 1 hashes, expected 0 (size1 3, size2 3)"),
        (0, 3, 1, "proof has 1 hashes, expected 0 (size1 0, size2 3)"),
        (1, 3, 1, "proof has 1 hashes, expected 2 (size1 1, size2 3)"),
    ],
)
def test_consistency_proof_length_errors_name_both_sizes(
    size1: int, size2: int, proof: int, expected: str
) -> None:
    """Kills verify_consistency passing ``None`` as the context of its proof-length errors."""
    h = bytes(32)
    assert _message(
        lambda: verify_consistency(size1, size2, [h] * proof, h, h), ConsistencyProofError
    ) == (expected)


# ---- note.py -----------------------------------------------------------------------------------


def test_key_name_with_a_lone_surrogate_is_malformed() -> None:
    """Kills is_valid_key_name: ``"\\ud800" <= ch < "\\udfff"`` (U+DFFF slipping through, then
    a UnicodeEncodeError from the key hash instead of a MalformedNoteError)."""
    key = b"\x01" + bytes(32)
    for ch in ("\ud800", "\udb7f", "\udfff"):
        text = f"a{ch}+00000000+" + "AQ" + "A" * 42 + "="
        assert _message(lambda text=text: parse_verifier_key(text), MalformedNoteError) == (
            "verifier key: invalid key name"
        )
    assert key_hash("a", key) == VerifierKey.from_ed25519("a", bytes(32)).key_hash


def test_duplicate_signature_line_names_the_key_to_80_characters() -> None:
    """Kills _split_note: ``sig.name[:81]`` in the duplicate-line message."""
    name = "n" * 90
    line = f"\u2014 {name} AAAAAAA=\n"
    note = ("hello\n\n" + line + line).encode()
    assert _message(lambda: open_note(note, []), MalformedNoteError) == (
        f"note has more than one signature line for key {'n' * 80}+00000000"
    )


def test_verifier_key_construction_messages() -> None:
    """Kills VerifierKey.__post_init__ messages (None, XX...XX, upper case)."""
    assert _message(lambda: VerifierKey("bad name", 1, bytes(32)), MalformedNoteError) == (
        "verifier key: invalid key name"
    )
    assert _message(lambda: VerifierKey.from_ed25519("ok", bytes(31)), MalformedNoteError) == (
        "verifier key ok: Ed25519 public key must be 32 bytes, got 31"
    )
    expected = VerifierKey.from_ed25519("ok", bytes(32)).key_hash
    assert _message(lambda: VerifierKey("ok", 1, bytes(32)), MalformedNoteError) == (
        f"verifier key ok: key ID 00000001 does not match the key (expected {expected:08x})"
    )
