"""harness.verify.modelkey: the one replay-key function of the runtime, the proxy and the verifier.

Known answers were computed by the code before it moved to verify (orchestrate/replay.py's
``call_key`` and orchestrate/proxy/exchange.py's ``keyed_request``): a journal written before
the move must still be found after it. The properties: the key ignores member order,
whitespace and the family's unkeyed members, and changes with every keyed input.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.orchestrate.proxy import recompute_key
from harness.orchestrate.proxy.exchange import keyed_request
from harness.orchestrate.replay import call_key as runtime_call_key
from harness.verify.canonical import jcs_bytes
from harness.verify.modelkey import (
    UNKEYED_MEMBERS,
    ModelKeyError,
    api_of,
    call_key,
    exchange_key,
    recompute_exchange_key,
)

ANTHROPIC_BODY = (
    b'{"stream": true, "model": "claude-x", "max_tokens": 64, "temperature": 0.5, '
    b'"metadata": {"user_id": "u1"}, "messages": [{"role": "user", "content": "hi \\u00e9"}]}'
)
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "b1", "x-other": "z"}
OPENAI_BODY = (
    b'{"model":"gpt-x","input":"hello","user":"me","store":false,"prompt_cache_key":"p","n":1}'
)


def test_known_answers_computed_before_the_move() -> None:
    found = exchange_key(
        "anthropic", ANTHROPIC_BODY, "POST", "/v1/messages?beta=true", ANTHROPIC_HEADERS
    )
    assert found.key == "2fe6ebbd7c9d4835f0ceb09300a7eba5741b8376f94ccd4d86602615bc70ddc3"
    assert (found.model, found.stream) == ("claude-x", True)
    assert found.parameters == {
        "method": "POST",
        "path": "/v1/messages?beta=true",
        "stream": True,
        "headers": {"anthropic-version": "2023-06-01", "anthropic-beta": "b1"},
    }
    openai = exchange_key("openai", OPENAI_BODY, "POST", "/v1/responses", {"openai-beta": "a=v2"})
    assert openai.key != "4dfdfe8e53f10cfd10c1733b4def887bb11e8efa4891f4fada03c6e42ae711db"
    openai = exchange_key(
        "openai", OPENAI_BODY, "POST", "/v1/responses", {"openai-beta": "assistants=v2"}
    )
    assert openai.key == "4dfdfe8e53f10cfd10c1733b4def887bb11e8efa4891f4fada03c6e42ae711db"
    empty_get = exchange_key("openai", b"", "GET", "/v1/models", {})
    assert empty_get.key == "47b8d53744257f80e957ad7aa2897b5b135ebd52b684fd6fbb35ce0965e75f37"
    assert empty_get.model == "-"
    assert call_key("a", "m", "r", {"max_tokens": 5}) == (
        "792a5f43c17ef1bea5933a46d128da4d2060e4cdcf695704efcc8c371f75f53f"
    )
    assert call_key("claude", "opus", "hello", {"t": 0.25, "n": [1, 2]}) == (
        "98e3bd39da16544de7b9ea405a31ec78f89f78a3e6a830d27d92763a3f673913"
    )


def test_the_runtime_and_the_proxy_use_this_function() -> None:
    assert runtime_call_key is call_key
    proxied = keyed_request(
        "anthropic", "POST", "/v1/messages?beta=true", ANTHROPIC_HEADERS, ANTHROPIC_BODY
    )
    assert (
        proxied.key
        == exchange_key(
            "anthropic", ANTHROPIC_BODY, "POST", "/v1/messages?beta=true", ANTHROPIC_HEADERS
        ).key
    )
    assert proxied.api == "anthropic-messages"
    assert recompute_key("anthropic", ANTHROPIC_BODY, dict(proxied.parameters)) == proxied.key


def test_recompute_refuses_parameters_the_blob_does_not_give() -> None:
    found = exchange_key("anthropic", ANTHROPIC_BODY, "POST", "/v1/messages", ANTHROPIC_HEADERS)
    good = dict(found.parameters)
    assert recompute_exchange_key("anthropic", ANTHROPIC_BODY, good) == found.key
    bad: list[Any] = [
        {**good, "stream": False},  # the body asks for a stream
        {**good, "stream": 1},  # 1 is not true, even where Python says 1 == True
        {**good, "headers": {**ANTHROPIC_HEADERS}},  # x-other is not a key header
        {**good, "headers": {"anthropic-version": 2023}},
        {**good, "extra": 1},
        {name: value for name, value in good.items() if name != "headers"},
        {**good, "method": None},
        "not an object",
    ]
    for parameters in bad:
        with pytest.raises(ModelKeyError):
            recompute_exchange_key("anthropic", ANTHROPIC_BODY, parameters)
    with pytest.raises(ModelKeyError, match="family"):
        recompute_exchange_key("cohere", ANTHROPIC_BODY, good)


@pytest.mark.parametrize(
    "body",
    [b"[1]", b'{"a": 1, "a": 2}', b'{"a": NaN}', b"\xff", b'{"n": 9007199254740993}', b"{"],
)
def test_a_body_without_a_key_is_refused(body: bytes) -> None:
    with pytest.raises(ModelKeyError):
        exchange_key("openai", body, "POST", "/v1/chat/completions", {})
    with pytest.raises(ModelKeyError, match="empty"):
        exchange_key("openai", b"", "POST", "/v1/chat/completions", {})


def test_api_of() -> None:
    assert api_of("anthropic", "/v1/messages?beta=true") == "anthropic-messages"
    assert api_of("anthropic", "/v1/messages/count_tokens") == "other"
    assert api_of("openai", "/v1/chat/completions") == "openai-chat"
    assert api_of("openai", "/v1/responses/") == "openai-responses"
    assert api_of("openai", "/v1/messages") == "other"


# ---- properties -----------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | _text
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_bodies = st.dictionaries(
    st.sampled_from(["model", "messages", "max_tokens", "temperature", "tools", "x"]),
    _values,
    max_size=5,
)


def _dump(document: dict[str, Any], order: list[int], spaced: bool) -> bytes:
    names = list(document)
    names = [names[index % len(names)] for index in order] + names if names else []
    ordered = {name: document[name] for name in dict.fromkeys(names)}
    separators = (" ,  ", " :\t") if spaced else (",", ":")
    return json.dumps(ordered, separators=separators, ensure_ascii=not spaced).encode()


@settings(max_examples=150, deadline=None)
@given(
    family=st.sampled_from(["anthropic", "openai"]),
    document=_bodies,
    order=st.lists(st.integers(0, 9), max_size=6),
    unkeyed=st.dictionaries(st.sampled_from(["metadata", "user", "store"]), _values, max_size=3),
)
def test_key_ignores_order_whitespace_and_unkeyed_members(
    family: str, document: dict[str, Any], order: list[int], unkeyed: dict[str, Any]
) -> None:
    path = "/v1/messages"
    base = exchange_key(family, _dump(document, [], False), "POST", path, {})
    dropped = {name: value for name, value in unkeyed.items() if name in UNKEYED_MEMBERS[family]}
    noisy = exchange_key(family, _dump({**document, **dropped}, order, True), "POST", path, {})
    assert noisy.key == base.key
    assert noisy.parameters == base.parameters


@settings(max_examples=150, deadline=None)
@given(
    family=st.sampled_from(["anthropic", "openai"]),
    document=_bodies,
    change=st.sampled_from(["member", "method", "path", "header", "stream", "model"]),
    value=_values,
)
def test_key_changes_with_any_keyed_input(
    family: str, document: dict[str, Any], change: str, value: Any
) -> None:
    headers = {"anthropic-version": "1", "openai-beta": "1"}
    base = exchange_key(family, _dump(document, [], False), "POST", "/v1/x", headers)
    method, path, changed_headers, changed = "POST", "/v1/x", dict(headers), dict(document)
    if change == "member":
        changed["x"] = (
            [value] if "x" in changed and jcs_bytes(changed["x"]) == jcs_bytes(value) else value
        )
    elif change == "method":
        method = "PUT"
    elif change == "path":
        path = "/v1/x?y"
    elif change == "header":
        name = "anthropic-version" if family == "anthropic" else "openai-beta"
        changed_headers[name] = "2"
    elif change == "stream":
        changed["stream"] = changed.get("stream") is not True
    else:
        changed["model"] = str(changed.get("model")) + "!"
    again = exchange_key(family, _dump(changed, [], False), method, path, changed_headers)
    if change == "member" and jcs_bytes(changed) == jcs_bytes(document):
        return  # the same canonical JSON (1.0 against 1): the same question
    assert again.key != base.key


def test_url_credentials_are_named_and_dropped_keeping_the_rest_byte_for_byte() -> None:
    """A Gemini key in the URL (``?key=``) must never be keyed, forwarded or recorded: the
    proxy drops it with this function, and the verifier's rule E8 finds it with the other."""
    from harness.verify.modelkey import url_credentials, without_url_credentials

    call = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert without_url_credentials(call) == (call, [])
    assert without_url_credentials(call + "?alt=sse") == (call + "?alt=sse", [])
    assert without_url_credentials(call + "?key=SECRET") == (call, ["key"])
    assert without_url_credentials(call + "?alt=sse&key=S&x=%20a+b") == (
        call + "?alt=sse&x=%20a+b",
        ["key"],
    )
    assert without_url_credentials(call + "?k%65y=S&key&alt=sse") == (
        call + "?alt=sse",
        ["key", "key"],
    )
    assert without_url_credentials(call + "?ke+y=S") == (call + "?ke+y=S", [])  # "ke y"
    assert without_url_credentials(call + "?keys=1&akey=2") == (call + "?keys=1&akey=2", [])
    assert without_url_credentials(call + "?") == (call + "?", [])
    assert url_credentials(call) == [] and url_credentials(call + "?") == []
    assert url_credentials(call + "?alt=sse&key=1&k%65y=2") == ["key", "key"]
    assert url_credentials(call + "?keys=1&ke+y=2") == []
