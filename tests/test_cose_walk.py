"""verify/cose.py's strict CBOR: the fast type walk and the reused encoder decide as before.

``_check_item_types`` runs three times per COSE receipt, so it tests the exact types cbor2
decodes to first (issue 14). ``_reference`` below is the walk as it was before that change,
copied verbatim; for every decoded item, with the header map exempted as ``_strict_loads``
does, both must accept, or refuse with the same error and the same message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.verify.cose import (
    _ENCODER,
    _MAX_DEPTH,
    _PLAIN_TYPES,
    CoseAlgorithmError,
    CoseHeaderError,
    MalformedCoseError,
    _check_item_types,
    _dumps,
    _is_plain_key,
    _label_map,
    _show,
    decode_sign1,
)


def _reference(obj: object, what: str, depth: int = 0, labels: object = None) -> None:
    if isinstance(obj, _PLAIN_TYPES):
        return
    if depth > _MAX_DEPTH:
        raise MalformedCoseError(f"{what}: CBOR nesting deeper than {_MAX_DEPTH}")
    if isinstance(obj, list | tuple):
        for item in obj:
            _reference(item, what, depth + 1, labels)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if obj is not labels and not _is_plain_key(key):
                raise MalformedCoseError(
                    f"{what}: map key {_show(key)} is not an integer, byte string or text string"
                )
            _reference(key, what, depth + 1, labels)
            _reference(value, what, depth + 1, labels)
    elif isinstance(obj, cbor2.CBORTag):
        _reference(obj.value, what, depth + 1, labels)
    elif isinstance(obj, float):
        raise MalformedCoseError(f"{what}: floating-point values are not allowed")
    else:
        raise MalformedCoseError(
            f"{what}: CBOR item decoding to {type(obj).__name__} (a tagged or special value) "
            "is not allowed"
        )


def _outcome(check: Any, obj: object, labels: object) -> tuple[str, str] | None:
    try:
        check(obj, "item", labels=labels)
    except MalformedCoseError as exc:
        return type(exc).__name__, str(exc)
    return None


def _same(obj: object) -> None:
    for labels in (None, _label_map(obj)):
        assert _outcome(_check_item_types, obj, labels) == _outcome(_reference, obj, labels)


TAGS = [0, 1, 2, 3, 4, 5, 21, 24, 25, 28, 29, 30, 32, 35, 36, 37, 100, 256, 258, 260, 261]
TAGS += [1000, 1004, 55799]

leaves = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
    st.text(max_size=8),
    st.floats(allow_nan=False) | st.just(math.inf),
    st.just(cbor2.undefined),
    st.integers(min_value=32, max_value=255).map(cbor2.CBORSimpleValue),
)
keys = st.one_of(
    st.integers(min_value=-5, max_value=400),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.text(max_size=4),
    st.floats(allow_nan=False, width=16),
    st.tuples(st.integers(0, 3), st.text(max_size=2)),
    st.dictionaries(st.integers(0, 3), st.integers(0, 3), max_size=2).map(cbor2.FrozenDict),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
        st.builds(cbor2.CBORTag, st.sampled_from(TAGS), children),
    )


items = st.recursive(leaves, _extend, max_leaves=20)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(items, st.booleans())
def test_the_fast_walk_decides_as_the_reference_walk(value: Any, as_sign1: bool) -> None:
    """Every encodable item, as cbor2 decodes it, alone and as a COSE_Sign1's unprotected map
    (the map ``_strict_loads`` exempts from the key rule)."""
    if as_sign1:
        value = cbor2.CBORTag(18, [b"", value, None, b""])
    try:
        decoded = cbor2.loads(cbor2.dumps(value))
    except Exception:
        return  # not encodable, or a tag cbor2 refuses to decode: never reaches the walk
    _same(decoded)


@pytest.mark.parametrize(
    "obj",
    [
        {True: 1},
        {1: {True: 1}},
        {(1, 2): 1},
        {cbor2.FrozenDict({1: 2}): 1},
        [1.5],
        {1: [b"x", [cbor2.undefined]]},
        cbor2.CBORTag(18, [b"", {True: [1.0]}, None, b""]),
        cbor2.CBORTag(18, [b"", {1: {None: 1}}, None, b""]),
    ],
)
def test_chosen_items_decide_as_the_reference_walk(obj: object) -> None:
    _same(obj)


def test_a_cycle_is_refused_by_depth_as_before() -> None:
    """Shared references (tag 28/29) can make cbor2 return a list holding itself."""
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    as_map: dict[int, Any] = {}
    as_map[1] = as_map
    for obj in (cyclic, as_map):
        outcome = _outcome(_check_item_types, obj, None)
        assert outcome == _outcome(_reference, obj, None)
        assert outcome is not None and "nesting deeper than 64" in outcome[1]


# --------------------------------------------------------------------------- _dumps

encodable = st.recursive(
    st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.booleans(),
        st.none(),
        st.binary(max_size=40),
        st.text(max_size=8),
        st.floats(allow_nan=False),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.integers(-3, 400) | st.text(max_size=3), children, max_size=4),
        st.builds(cbor2.CBORTag, st.integers(6, 2**20), children),
    ),
    max_leaves=20,
)


@settings(max_examples=400)
@given(st.lists(encodable, min_size=1, max_size=4))
def test_the_reused_encoder_writes_what_cbor2_dumps_writes(values: list[Any]) -> None:
    """One encoder per thread, reused call after call, gives ``cbor2.dumps``'s bytes."""
    for value in values:
        assert _dumps(value) == cbor2.dumps(value)


def test_an_encoder_that_raised_is_not_reused() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    for _ in range(2):
        with pytest.raises(Exception) as ours:
            _dumps(cyclic)
        with pytest.raises(Exception) as theirs:
            cbor2.dumps(cyclic)
        assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))
        assert _ENCODER.state is None
        assert _dumps([cyclic[0], b"after"]) == cbor2.dumps([1, b"after"])


# --------------------------------------------------------------------------- protected header


def test_a_remembered_protected_header_is_a_fresh_equal_dict() -> None:
    protected = cbor2.dumps({1: -8, 4: b"kid-for-the-cache-test", 395: 1})
    message = cbor2.dumps(cbor2.CBORTag(18, [protected, {}, None, b"s" * 64]))
    first = decode_sign1(message).protected
    first[1] = -7  # a caller's edit must not reach the next decode
    again = decode_sign1(message)
    assert again.protected == {1: -8, 4: b"kid-for-the-cache-test", 395: 1}
    assert again.protected is not decode_sign1(message).protected


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ({1: -8, 2: [1]}, CoseHeaderError),
        ({1: 1.5}, MalformedCoseError),
        ({}, MalformedCoseError),
        ({1: -9}, CoseAlgorithmError),
    ],
)
def test_a_refused_protected_header_is_refused_every_time(
    header: dict[int, Any], error: type[Exception]
) -> None:
    message = cbor2.dumps(cbor2.CBORTag(18, [cbor2.dumps(header), {}, None, b"s" * 64]))
    for _ in range(3):
        with pytest.raises(error):
            decode_sign1(message)


def test_a_protected_header_with_a_container_value_is_not_shared() -> None:
    protected = cbor2.dumps({1: -8, 33: [b"chain"]})
    message = cbor2.dumps(cbor2.CBORTag(18, [protected, {}, None, b"s" * 64]))
    first = decode_sign1(message).protected
    chain = first[33]
    assert isinstance(chain, list)
    chain.append(b"edited")
    assert decode_sign1(message).protected == {1: -8, 33: [b"chain"]}
