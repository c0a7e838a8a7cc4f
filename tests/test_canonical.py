"""RFC 8785 canonical JSON: third-party vectors, strictness, and agreement with rfc8785."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.canonical import (
    MAX_SAFE_INTEGER,
    canonical_bytes,
    jcs_bytes,
    parse_canonical,
    parse_strict_json,
)
from harness.verify.errors import CanonicalEncodingError

JCS_CASES = ["arrays", "french", "structures", "values"]


@pytest.mark.parametrize("case", JCS_CASES)
def test_cyberphone_vectors(third_party_vectors: Path, case: str) -> None:
    folder = third_party_vectors / "cyberphone-json-canonicalization"
    source = (folder / "input" / f"{case}.json").read_bytes()
    expected = (folder / "output" / f"{case}.json").read_bytes()
    hex_bytes = bytes.fromhex((folder / "outhex" / f"{case}.txt").read_text())
    assert expected == hex_bytes
    value = parse_strict_json(source, allow_floats=True)
    assert jcs_bytes(value) == expected
    # The canonical output is accepted as canonical; the pretty input is not.
    assert parse_canonical(expected, allow_floats=True) == value
    with pytest.raises(CanonicalEncodingError):
        parse_canonical(source, allow_floats=True)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"a":1,"a":1}', "duplicate key"),
        (b'{"a":{"b":1,"b":2}}', "duplicate key"),
        (b'{"a": 1}', "canonical"),
        (b'{"b":1,"a":2}', "canonical"),
        (b' {"a":1}', "canonical"),
        (b'{"a":1}\n', "canonical"),
        (b'{"a":"\\u0041"}', "canonical"),
        (b'{"a":"\\/"}', "canonical"),
        (b'{"a":"\\u001F"}', "canonical"),
        (b'{"a":-0}', "canonical"),
        (b'{"a":1E2}', "not an integer"),
        (b'{"a":1.0}', "not an integer"),
        (b'{"a":NaN}', "NaN"),
        (b'{"a":Infinity}', "Infinity"),
        (b'{"a":-Infinity}', "Infinity"),
        (b'{"a":9007199254740992}', "outside"),
        (b'{"a":-9007199254740992}', "outside"),
        (b'{"a":"\\ud800"}', "lone surrogate"),
        (b'{"a":"\\udc00x"}', "lone surrogate"),
        (b'{"\xc3\xa9":1,"\xc3\xa9":2}', "duplicate key"),
        (b"\xff", "UTF-8"),
        (b'"\xed\xa0\x80"', "UTF-8"),
        (b"[1]x", "malformed"),
        (b"", "malformed"),
        (b"[" * 65 + b"]" * 65, "nesting"),
    ],
)
def test_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(CanonicalEncodingError, match=reason):
        parse_canonical(data)


def test_deep_nesting_does_not_recurse() -> None:
    with pytest.raises(CanonicalEncodingError, match="nesting"):
        parse_canonical(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(CanonicalEncodingError, match="nesting"):
        parse_strict_json(b'{"a":' * 70 + b"1" + b"}" * 70)


def test_brackets_inside_strings_are_not_nesting() -> None:
    value = {"a": "[" * 200}
    assert parse_canonical(canonical_bytes(value)) == value


def test_integer_limits_are_inclusive() -> None:
    for n in (MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER):
        assert parse_canonical(canonical_bytes({"n": n})) == {"n": n}
        with pytest.raises(CanonicalEncodingError):
            canonical_bytes({"n": n + (1 if n > 0 else -1)})


@pytest.mark.parametrize(
    "value",
    [{"x": 1.5}, {"x": float("nan")}, {1: "a"}, {"x": b"bytes"}, {"x": "\ud800"}, {"x": {1}}],
)
def test_canonical_bytes_refuses_what_it_cannot_read_back(value: Any) -> None:
    with pytest.raises(CanonicalEncodingError):
        canonical_bytes(value)


def test_strict_json_allows_layout_but_not_duplicates() -> None:
    assert parse_strict_json(b'{ "b": 1,\n "a": [1, 2] }') == {"a": [1, 2], "b": 1}
    with pytest.raises(CanonicalEncodingError, match="duplicate"):
        parse_strict_json(b'{"a": 1, "a": 2}')
    with pytest.raises(CanonicalEncodingError, match="not an integer"):
        parse_strict_json(b'{"a": 1.5}')


def test_utf16_key_order_differs_from_code_point_order() -> None:
    # U+1F600 (surrogates D83D DE00) sorts before U+FFFD in UTF-16 units, after it by code point.
    value = {"\ufffd": 1, "\U0001f600": 2}
    out = canonical_bytes(value)
    assert out == rfc8785.dumps(value)
    assert out.index("\U0001f600".encode()) < out.index("\ufffd".encode())
    code_point_order = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    with pytest.raises(CanonicalEncodingError):
        parse_canonical(code_point_order.encode())


json_keys = st.text(max_size=6)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=12,
)


def _has_surrogate(value: Any) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in json.dumps(value, ensure_ascii=False))


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_canonical_bytes_agree_with_rfc8785(value: Any) -> None:
    if _has_surrogate(value):
        with pytest.raises(CanonicalEncodingError):
            canonical_bytes(value)
        return
    out = canonical_bytes(value)
    assert out == rfc8785.dumps(value)
    assert parse_canonical(out) == value


@settings(max_examples=300, deadline=None)
@given(json_values, st.data())
def test_any_inserted_whitespace_is_rejected(value: Any, data: st.DataObject) -> None:
    if _has_surrogate(value):
        return
    out = canonical_bytes(value)
    position = data.draw(st.integers(min_value=0, max_value=len(out)))
    mutated = out[:position] + b" " + out[position:]
    try:
        decoded = parse_canonical(mutated)
    except CanonicalEncodingError:
        return
    # Only a space inside a string literal keeps the bytes canonical, and then the value changed.
    assert decoded != value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    """Only CanonicalEncodingError, and whatever is accepted re-encodes to exactly itself."""
    try:
        value = parse_canonical(data)
    except CanonicalEncodingError:
        return
    assert canonical_bytes(value) == data


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_accepted_canonical_bytes_re_encode_to_themselves(value: Any) -> None:
    """Canonical bytes are a fixed point: parse then encode gives the same bytes (no surrogates:
    they have no UTF-8 encoding, so they cannot be canonical)."""
    if _has_surrogate(value):
        return
    out = canonical_bytes(value)
    assert canonical_bytes(parse_canonical(out)) == out


# ---- the orjson fast path beyond ASCII (BMP only) -------------------------------------------


def test_orjson_writes_every_bmp_character_as_rfc8785_does() -> None:
    """The fast path's claim: for every code point of the Basic Multilingual Plane (surrogates
    cannot occur in valid UTF-8), orjson and RFC 8785 serialize a string identically."""
    import orjson

    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        text = chr(code)
        assert orjson.dumps(text) == rfc8785.dumps(text), hex(code)


def test_supplementary_keys_take_the_exact_path() -> None:
    """Key order is by UTF-16 code units: U+1F600 (surrogates D83D DE00) sorts before U+E000,
    though its code point is larger. The canonical order is accepted, code point order is not."""
    value = {"\ue000": 1, "\U0001f600": 2}
    canonical = rfc8785.dumps(value)
    assert canonical.index("\U0001f600".encode()) < canonical.index("\ue000".encode())
    assert parse_canonical(canonical) == value
    by_code_point = '{"\ue000":1,"\U0001f600":2}'.encode()
    with pytest.raises(CanonicalEncodingError, match="not the RFC 8785 canonical form"):
        parse_canonical(by_code_point)


_bmp_text = st.text(
    alphabet=st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",)), max_size=8
)


@given(st.dictionaries(_bmp_text, st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), _bmp_text)))
def test_property_bmp_documents_agree_with_rfc8785(value: dict[str, object]) -> None:
    """Fast path and exact serializer agree on BMP text: the RFC 8785 bytes are accepted and
    decode to the value, and any other key order of the same members is refused."""
    canonical = rfc8785.dumps(value)
    assert parse_canonical(canonical) == value
    assert canonical_bytes(value) == canonical
    if len(value) >= 2:
        reordered = dict(reversed(list(value.items())))
        other = json.dumps(reordered, ensure_ascii=False, separators=(",", ":")).encode()
        if other != canonical:
            with pytest.raises(CanonicalEncodingError):
                parse_canonical(other)


@given(
    st.binary(max_size=40)
    | st.lists(st.sampled_from([b'"', b"\\", b"a", b"\n", b"{"])).map(b"".join)
)
def test_json_string_pattern_is_the_plain_definition(data: bytes) -> None:
    """The unrolled string pattern cuts strings exactly where one alternation per character
    (``"(?:[^"\\]|\\.)*"``) does, so the nesting check skips the same bytes."""
    import re

    from harness.verify.canonical import _JSON_STRING

    plain = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
    assert [m.span() for m in _JSON_STRING.finditer(data)] == [
        m.span() for m in plain.finditer(data)
    ]


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='0123456789.eE-+"\\ tru\u00e9\U0001f600', max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(_JSON_VALUES, st.sampled_from([None, 2]))
def test_float_in_text_is_contains_float(value: Any, indent: int | None) -> None:
    """Read off the text (any valid JSON text, canonical or not) or walked: the same answer."""
    from harness.verify.canonical import contains_float, float_in_text

    for text in (
        json.dumps(value, indent=indent).encode(),
        json.dumps(value, ensure_ascii=False).encode(),
    ):
        assert float_in_text(text) is contains_float(json.loads(text))


def test_large_documents_refuse_floats_by_their_text() -> None:
    """Above the size where the text is read, a float is still refused, and an integer-only
    document with digits, dots and e's in its strings still accepted."""
    strings = canonical_bytes({"k": ["1.5e3 true 2.0" * 10] * 40, "n": 12})
    assert len(strings) > 4096
    assert parse_canonical(strings)["n"] == 12
    with pytest.raises(CanonicalEncodingError, match="not an integer"):
        parse_canonical(strings[:-1] + b',"z":1.5}')
