"""RFC 8785 (JCS) canonical JSON: one canonical form, everywhere.

Why this module exists: every digest, MAC and signature in our formats is computed over the
canonical bytes of a JSON value, so a reader must accept exactly one byte string per value.
``parse_canonical`` is that reader: it rejects invalid UTF-8, duplicate keys, NaN/Infinity,
lone surrogates, integers outside the I-JSON range and any input whose bytes differ from the
canonical form of the value it decodes to.

Our own records use *integers only* (DESIGN: time is an RFC 3339 string, amounts are strings),
which keeps every implementation away from ECMAScript float formatting. Floats are accepted only
where a caller asks for them (``allow_floats=True``, e.g. third-party JCS vectors), and then the
exact RFC 8785 serializer from the ``rfc8785`` package decides.

Speed matters here (a verifier re-checks every record), so for ASCII, float-free input the check
uses the C ``json`` encoder: with sorted keys, ``(",", ":")`` separators and ``ensure_ascii=False``
its output equals RFC 8785 for such values (key order by UTF-16 code units equals code point order
for ASCII keys; both escape only ``"``, ``\\`` and control characters, with lowercase ``\\u00xx``).
Anything else takes the exact ``rfc8785`` path.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from .errors import CanonicalEncodingError

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer every JSON implementation represents exactly (RFC 7493 I-JSON §2.2)."""

MAX_NESTING = 64
"""Deepest nesting of arrays/objects we accept; deeper input is refused, never recursed into."""


class _FloatSeenError(Exception):
    """Internal: the fast decoder met a float and hands over to the exact path."""


def _reject_constant(name: str) -> Any:
    raise CanonicalEncodingError(f"{name} is not valid JSON")


def _checked_int(text: str) -> int:
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    raise CanonicalEncodingError(
        f"integer {text[:40]} is outside ±(2^53−1); use a string for large values"
    )


def _float_seen(text: str) -> Any:
    raise _FloatSeenError(text)


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


_FAST_DECODER = json.JSONDecoder(
    parse_float=_float_seen, parse_int=_checked_int, parse_constant=_reject_constant
)
_STRICT_DECODER = json.JSONDecoder(
    parse_int=_checked_int,
    parse_constant=_reject_constant,
    object_pairs_hook=_pairs_without_duplicates,
)
_STRICT_INT_DECODER = json.JSONDecoder(
    parse_float=_no_floats,
    parse_int=_checked_int,
    parse_constant=_reject_constant,
    object_pairs_hook=_pairs_without_duplicates,
)
_FAST_ENCODER = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
)


def _decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalEncodingError(f"not valid UTF-8 at byte {exc.start}") from None


def _check_depth(text: str) -> None:
    # Cheap upper bound: nesting can't exceed the count of opening brackets.
    opens = text.count("[") + text.count("{")
    if opens <= MAX_NESTING:
        return
    depth = 0
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise CanonicalEncodingError(f"nesting deeper than {MAX_NESTING}")
        elif ch in "]}":
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
    _reject_lone_surrogates(value)
    return value


def _reject_lone_surrogates(value: Any) -> None:
    # Serializing to UTF-8 is the cheapest complete test for lone surrogates anywhere.
    try:
        _FAST_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalEncodingError("string holds a lone surrogate") from None
    except ValueError as exc:
        raise CanonicalEncodingError(str(exc)) from None


def parse_canonical(data: bytes, *, allow_floats: bool = False) -> Any:
    """Decode ``data`` and prove it is exactly the RFC 8785 form of the value.

    Raises ``CanonicalEncodingError`` naming the first problem found.
    """
    text = _decode_text(data)
    _check_depth(text)
    try:
        value = _FAST_DECODER.decode(text)
    except _FloatSeenError as seen:
        if not allow_floats:
            raise CanonicalEncodingError(
                f"number {str(seen)[:40]} is not an integer; records carry integers only"
            ) from None
        return _parse_canonical_exact(data, text)
    except CanonicalEncodingError:
        raise
    except (ValueError, RecursionError) as exc:
        raise CanonicalEncodingError(f"malformed JSON: {exc}") from None
    if data.isascii():
        try:
            same = _FAST_ENCODER.encode(value).encode("utf-8") == data
        except UnicodeEncodeError:
            raise CanonicalEncodingError("string holds a lone surrogate") from None
        if not same:
            _explain_non_canonical(text)
        return value
    return _parse_canonical_exact(data, text)


def _parse_canonical_exact(data: bytes, text: str) -> Any:
    value = parse_strict_json(data, allow_floats=True)
    try:
        canonical = rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises its own errors for unrepresentable values
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None
    if canonical != data:
        _explain_non_canonical(text)
    return value


def _explain_non_canonical(text: str) -> None:
    """Raise the most precise reason we can find for a failed canonical comparison."""
    _STRICT_DECODER.decode(text)  # raises on duplicate keys
    raise CanonicalEncodingError(
        "bytes are not the RFC 8785 canonical form (key order, whitespace, escapes or numbers)"
    )


def canonical_bytes(value: Any) -> bytes:
    """Serialize an integer-only JSON value to its RFC 8785 canonical bytes.

    Raises ``CanonicalEncodingError`` for floats, unsafe integers, non-string keys and lone
    surrogates: what we cannot read back we must not write.
    """
    _check_types(value, 0)
    try:
        out = _FAST_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalEncodingError("string holds a lone surrogate") from None
    if out.isascii():
        return out
    try:
        return bytes(rfc8785.dumps(value))
    except Exception as exc:
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None


def _check_types(value: Any, depth: int) -> None:
    if depth > MAX_NESTING:
        raise CanonicalEncodingError(f"nesting deeper than {MAX_NESTING}")
    kind = type(value)
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
            _check_types(item, depth + 1)
        return
    if kind is list or kind is tuple:
        for item in value:
            _check_types(item, depth + 1)
        return
    raise CanonicalEncodingError(f"{kind.__name__} is not an integer-only JSON value")


def jcs_bytes(value: Any) -> bytes:
    """Full RFC 8785 serialization, floats included (for third-party documents)."""
    try:
        return bytes(rfc8785.dumps(value))
    except Exception as exc:
        raise CanonicalEncodingError(f"value has no canonical form: {exc}") from None
