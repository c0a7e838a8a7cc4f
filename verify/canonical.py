"""RFC 8785 (JCS) canonical JSON: one canonical form, everywhere.

Why this module exists: every digest, MAC and signature in our formats is computed over the
canonical bytes of a JSON value, so a reader must accept exactly one byte string per value.
``parse_canonical`` is that reader: it rejects invalid UTF-8, duplicate keys, NaN/Infinity,
lone surrogates, integers outside the I-JSON range, nesting deeper than 64, and any input whose
bytes differ from the canonical form of the value it decodes to.

Our own records use *integers only* (time is an RFC 3339 string; see docs/decisions/0001), which
keeps every implementation away from ECMAScript float formatting. Floats are accepted only where
a caller asks (``allow_floats=True``, e.g. third-party JCS vectors), and then the exact RFC 8785
serializer of the ``rfc8785`` package decides.

Speed matters (a verifier re-checks every record), so input without characters beyond the
Basic Multilingual Plane is checked with ``orjson``: for such float-free values its
``OPT_SORT_KEYS`` output is byte-identical to RFC 8785 (key order by UTF-16 code units equals
code point order when no key holds a supplementary character — the one place the two orders
differ; both escape only ``"``, ``\\`` and control characters, the latter as ``\\b \\t \\n \\f
\\r`` or lowercase ``\\u00xx``, and write every other character as itself, checked for every BMP
code point in tests; integers print in plain decimal). Duplicate keys collapse on decoding and
so fail the byte comparison. Input holding a 4-byte UTF-8 sequence and any value holding a float
take the exact ``rfc8785`` path.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NoReturn

import orjson
import rfc8785

from .errors import CanonicalEncodingError

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Largest integer every JSON implementation represents exactly (RFC 7493 I-JSON §2.2)."""

MAX_NESTING: Final = 64
"""Deepest nesting of arrays/objects we accept; deeper input is refused, never recursed into."""

_SORTED_STRICT: Final = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER


def _reject_constant(name: str) -> Any:
    raise CanonicalEncodingError(f"{name} is not valid JSON")


def _checked_int(text: str) -> int:
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    raise CanonicalEncodingError(
        f"integer {text[:40]} is outside ±(2^53−1); use a string for large values"
    )


def _no_floats(text: str) -> Any:
    raise CanonicalEncodingError(
        f"number {text[:40]} is not an integer; records carry integers only"
    )


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CanonicalEncodingError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


_STRICT_DECODER: Final = json.JSONDecoder(
    parse_int=_checked_int,
    parse_constant=_reject_constant,
    object_pairs_hook=_pairs_without_duplicates,
)
_STRICT_INT_DECODER: Final = json.JSONDecoder(
    parse_float=_no_floats,
    parse_int=_checked_int,
    parse_constant=_reject_constant,
    object_pairs_hook=_pairs_without_duplicates,
)


def _decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalEncodingError(f"not valid UTF-8 at byte {exc.start}") from None


_JSON_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string, unrolled (runs of plain bytes in one tight loop): about 3x faster than one
alternation per character on large documents, same matches."""
_BRACKET: Final = re.compile(rb"[\[\]{}]")
_NON_BMP_LEAD: Final = re.compile(rb"[\xf0-\xff]")


def _check_depth(text: str | bytes) -> None:
    """Refuse nesting deeper than MAX_NESTING without recursing (strings are skipped).

    Counting the opening brackets settles almost every document; only one with more than
    MAX_NESTING of them is scanned: strings cut out by one regular expression, then the
    brackets alone walked (C-speed scans, so a megabyte statement costs milliseconds).
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= MAX_NESTING:
        return
    depth = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub(b"", data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            if depth > MAX_NESTING:
                raise CanonicalEncodingError(f"nesting deeper than {MAX_NESTING}")
        else:
            depth -= 1


def parse_strict_json(data: bytes, *, allow_floats: bool = False) -> Any:
    """Parse JSON strictly (no duplicate keys, NaN, unsafe integers, invalid UTF-8).

    Unlike ``parse_canonical`` the layout may be anything; use it for human-written files
    (policies, third-party documents), never for signed or hashed records.
    """
    text = _decode_text(data)
    _check_depth(text)
    decoder = _STRICT_DECODER if allow_floats else _STRICT_INT_DECODER
    try:
        value = decoder.decode(text)
    except CanonicalEncodingError:
        raise
    except (ValueError, RecursionError) as exc:
        raise CanonicalEncodingError(f"malformed JSON: {exc}") from None
    try:
        orjson.dumps(value)  # the cheapest complete test for lone surrogates anywhere
    except orjson.JSONEncodeError:
        raise CanonicalEncodingError("string holds a lone surrogate") from None
    return value


_FLOAT_TOKEN: Final = re.compile(rb"[0-9][.eE]")
_TEXT_FLOAT_CHECK_BYTES: Final = 4096
"""From this size on, a document's floats are found in its text, not by walking its value."""


def float_in_text(data: bytes) -> bool:
    """True if the valid JSON text ``data`` holds a number that decodes to a float.

    Python's JSON decoders make a number a float exactly when it has a fraction or an exponent,
    and outside strings ``.``, ``e`` and ``E`` follow a digit only there (``true`` and
    ``false`` have theirs after a letter): so, with the strings cut out, a digit followed by
    one of them. Two C-speed scans, where walking a large value costs a Python call per node
    (a statement with 10^4 subjects: ~0.2 s). Equal to ``contains_float`` of the decoded value
    (tests, hypothesis)."""
    return _FLOAT_TOKEN.search(_JSON_STRING.sub(b"", data)) is not None


def contains_float(value: Any) -> bool:
    """True if a float sits anywhere in ``value`` (a decoded JSON value)."""
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(contains_float(item) for item in value.values())
    if kind is list:
        return any(contains_float(item) for item in value)
    return False


def decode_canonical(data: bytes) -> Any:
    """Decode and prove canonical form, *leaving the float policy to the caller*.

    This is the verifier's hot path: store records go through it, and their schema check then
    rejects floats member by member (typed members by type, free-form objects by a walk), which
    is cheaper than a separate full walk here. Anything that does not have such a schema must
    use ``parse_canonical``.
    """
    return _decode(data, allow_floats=False)


def _decode(data: bytes, *, allow_floats: bool) -> Any:
    _check_depth(data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CanonicalEncodingError(_describe_decode_error(data, exc)) from None
    if data.isascii() or _bmp_only(data):
        try:
            out = orjson.dumps(value, option=_SORTED_STRICT)
        except orjson.JSONEncodeError:
            _explain_non_canonical(data, allow_floats=allow_floats)  # integers beyond 2^53
        if out != data:
            if allow_floats and contains_float(value):
                return _parse_canonical_exact(data)  # orjson does not format floats as JCS
            _explain_non_canonical(data, allow_floats=allow_floats)
        return value
    return _parse_canonical_exact(data)


def _bmp_only(data: bytes) -> bool:
    """No 4-byte UTF-8 sequence (lead bytes 0xF0-0xF4): every character is in the BMP, where
    code point order is UTF-16 order, so orjson's sorted keys are RFC 8785's."""
    return _NON_BMP_LEAD.search(data) is None


def parse_canonical(data: bytes, *, allow_floats: bool = False) -> Any:
    """Decode ``data`` and prove it is exactly the RFC 8785 form of the value.

    Raises ``CanonicalEncodingError`` naming the first problem found.
    """
    value = _decode(data, allow_floats=allow_floats)
    if contains_float(value) if len(data) < _TEXT_FLOAT_CHECK_BYTES else float_in_text(data):
        if not allow_floats:
            raise CanonicalEncodingError("a number is not an integer; records carry integers only")
        # orjson's float formatting is not ECMAScript's: decide with the exact serializer.
        return _parse_canonical_exact(data)
    return value


def _describe_decode_error(data: bytes, exc: orjson.JSONDecodeError) -> str:
    """Error path only: let the strict stdlib decoder name the problem precisely."""
    try:
        parse_strict_json(data, allow_floats=True)
    except CanonicalEncodingError as precise:
        return str(precise)
    return f"malformed JSON: {exc}"


def _parse_canonical_exact(data: bytes) -> Any:
    value = parse_strict_json(data, allow_floats=True)
    try:
        canonical = rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises its own errors for unrepresentable values
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None
    if canonical != data:
        _explain_non_canonical(data, allow_floats=True)
    return value


def _explain_non_canonical(data: bytes, *, allow_floats: bool = False) -> NoReturn:
    """Raise the most precise reason we can find for a failed canonical comparison."""
    parse_strict_json(
        data, allow_floats=allow_floats
    )  # raises on duplicate keys, floats, unsafe integers and the like
    raise CanonicalEncodingError(
        "bytes are not the RFC 8785 canonical form (key order, whitespace, escapes or numbers)"
    )


def canonical_bytes(value: Any) -> bytes:
    """Serialize an integer-only JSON value to its RFC 8785 canonical bytes.

    Raises ``CanonicalEncodingError`` for floats, unsafe integers, non-string keys, lone
    surrogates and over-deep nesting: what we cannot read back we must not write.
    """
    check_json_types(value)
    return encode_checked(value)


def encode_checked(value: Any) -> bytes:
    """Canonical bytes of a value whose types the caller has already checked (hot path)."""
    try:
        out = orjson.dumps(value, option=_SORTED_STRICT)
    except orjson.JSONEncodeError as exc:
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None
    if out.isascii() or _bmp_only(out):
        return out
    return jcs_bytes(value)


def check_json_types(value: Any, depth: int = 1) -> None:
    """Refuse anything but integer-only JSON values (dict/list/str/int/bool/None).

    ``depth`` is the nesting level ``value`` sits at if it is an array or object (the top-level
    value is level 1), so a container deeper than MAX_NESTING is refused exactly as readers do.
    """
    kind = type(value)
    if (kind is dict or kind is list or kind is tuple) and depth > MAX_NESTING:
        raise CanonicalEncodingError(f"nesting deeper than {MAX_NESTING}")
    if kind is str or kind is bool or value is None:
        return
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return
        raise CanonicalEncodingError(f"integer {value} is outside ±(2^53−1)")
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise CanonicalEncodingError(f"object key {key!r} is not a string")
            check_json_types(item, depth + 1)
        return
    if kind is list or kind is tuple:
        for item in value:
            check_json_types(item, depth + 1)
        return
    if kind is float:
        raise CanonicalEncodingError(
            f"number {value!r} is not an integer; records carry integers only"
        )
    raise CanonicalEncodingError(f"{kind.__name__} is not an integer-only JSON value")


def jcs_bytes(value: Any) -> bytes:
    """Full RFC 8785 serialization, floats included (for third-party documents)."""
    try:
        return bytes(rfc8785.dumps(value))
    except Exception as exc:
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None
