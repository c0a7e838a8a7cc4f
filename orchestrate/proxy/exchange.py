"""One proxied exchange: its replay key, the usage the API reported, and its record.

The replay key is ``harness.verify.modelkey.exchange_key`` (the verifier recomputes it with
the same function): the journal's ``call_key`` of

* ``adapter``: the upstream's API family (``anthropic`` / ``openai``),
* ``model``: the body's ``model`` member (``-`` when it has none),
* ``request``: the RFC 8785 canonical JSON of the request body *without* the family's
  unkeyed members (``modelkey.UNKEYED_MEMBERS``: tracking and cache hints, which never change the
  answer but change per session, such as Claude Code's ``metadata.user_id``),
* ``parameters``: ``{"method", "path", "stream", "headers"}``: the HTTP method, the upstream
  path with its query, whether the body asked for a stream (``"stream": true``: the bytes
  differ), and the family's answer-changing headers (``modelkey.KEY_HEADERS``) as sent, names
  lowercased, absent ones left out.

so the verifier recomputes it from the request blob and the record (docs/spec/proxy.md §4).
Usage is read from the recorded response bytes after the exchange, never from the agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from harness.verify.modelkey import (
    Api,
    Family,
    ModelKeyError,
    api_of,
    exchange_key,
    recompute_exchange_key,
)

Source = Literal["live", "journal", "live-miss"]
Outcome = Literal["answered", "refused", "replay-miss", "error"]

_MAX_TOKENS: Final = 2**53 - 1


class BadRequestError(ValueError):
    """The agent's request cannot be keyed (not a JSON object, duplicate members...)."""


@dataclass(frozen=True)
class Usage:
    """Token counts exactly as the API reported them (None: not reported).

    Anthropic: ``input_tokens`` excludes cache traffic (``cache_read`` / ``cache_write`` are
    ``cache_read_input_tokens`` / ``cache_creation_input_tokens``). OpenAI: ``input_tokens``
    (Chat's ``prompt_tokens``) includes the cached part (``cache_read``: ``cached_tokens``).
    Google: like OpenAI (``promptTokenCount`` includes ``cachedContentTokenCount``), output
    with the thinking tokens (``_google``).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None

    def body(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


@dataclass(frozen=True)
class KeyedRequest:
    """What the key is computed from, and the key."""

    key: str
    family: Family
    api: Api
    model: str
    stream: bool
    parameters: dict[str, object]
    keyed_body: str
    event_stream: bool = False
    """Whether the answer is server-sent events: a stream, except a Gemini stream asked for
    without ``alt=sse`` (then one JSON array, sent as it comes)."""


@dataclass(frozen=True)
class Exchange:
    """One request the proxy handled: what the runtime turns into a ``model.call`` record.

    ``source`` is None when nothing answered (refused, replay miss, error). ``request_sha256``
    and ``response_sha256`` name journal blobs (the exact bytes received and sent);
    ``journaled`` says whether the answer is in the journal (only complete 200 answers are).
    """

    seq: int
    route: str
    method: str
    path: str
    outcome: Outcome
    status: int
    source: Source | None = None
    family: Family | None = None
    api: Api | None = None
    upstream: str | None = None
    key: str | None = None
    model: str | None = None
    stream: bool = False
    parameters: dict[str, object] | None = None
    request_sha256: str | None = None
    response_sha256: str | None = None
    journaled: bool = False
    usage: Usage | None = None
    dropped_credentials: tuple[str, ...] = ()
    reason: str | None = None
    response_bytes: int = 0


def keyed_request(
    family: Family, method: str, path: str, headers: dict[str, str], body: bytes
) -> KeyedRequest:
    """Parse the body (strict JSON object, or empty for GET) and compute the replay key.

    The key is ``harness.verify.modelkey.exchange_key``: the verifier recomputes the same.
    """
    try:
        found = exchange_key(family, body, method, path, headers)
    except ModelKeyError as exc:
        raise BadRequestError(str(exc)) from None
    query = path.partition("?")[2].split("&")
    return KeyedRequest(
        key=found.key,
        family=family,
        api=api_of(family, path),
        model=found.model,
        stream=found.stream,
        parameters=found.parameters,
        keyed_body=found.keyed_body,
        event_stream=found.stream and (family != "google" or "alt=sse" in query),
    )


def recompute_key(family: Family, request_body: bytes, parameters: dict[str, Any]) -> str:
    """The key of a recorded exchange, from its request blob and recorded parameters."""
    try:
        return recompute_exchange_key(family, request_body, parameters)
    except ModelKeyError as exc:
        raise BadRequestError(str(exc)) from None


# ---- usage ----------------------------------------------------------------------------------


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, _MAX_TOKENS)


def _get(value: object, *names: str) -> object:
    for name in names:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


def sse_data(body: bytes) -> list[tuple[str | None, object]]:
    """The (event name, parsed JSON data) of each server-sent event; unparsable data skipped."""
    events: list[tuple[str | None, object]] = []
    text = body.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for block in text.split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if not data:
            continue
        joined = "\n".join(data)
        if joined == "[DONE]":
            continue
        try:
            events.append((name, json.loads(joined)))
        except ValueError:
            continue
    return events


def _anthropic(usage: object, into: dict[str, int | None]) -> None:
    for ours, theirs in (
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read", "cache_read_input_tokens"),
        ("cache_write", "cache_creation_input_tokens"),
    ):
        found = _count(_get(usage, theirs))
        if found is not None:
            into[ours] = found  # later events carry the running (final) figures


def _openai(usage: object, api: Api, into: dict[str, int | None]) -> None:
    names = ("prompt_tokens", "completion_tokens") if api == "openai-chat" else None
    if names is None:
        names = ("input_tokens", "output_tokens")
    details = "prompt_tokens_details" if api == "openai-chat" else "input_tokens_details"
    for ours, found in (
        ("input_tokens", _count(_get(usage, names[0]))),
        ("output_tokens", _count(_get(usage, names[1]))),
        ("cache_read", _count(_get(usage, details, "cached_tokens"))),
    ):
        if found is not None:
            into[ours] = found


def _google(usage: object, into: dict[str, int | None]) -> None:
    """A Gemini ``usageMetadata``, as Google bills it: input is ``promptTokenCount`` (which
    includes ``cachedContentTokenCount``, our ``cache_read``) plus ``toolUsePromptTokenCount``;
    output is ``candidatesTokenCount`` plus ``thoughtsTokenCount`` (thinking tokens are
    billed as output). The Gemini API reports no cache writes. So input + output is its
    ``totalTokenCount``."""
    if not isinstance(usage, dict):
        return
    into.clear()  # a stream's last usageMetadata is the whole answer's: it replaces, not merges
    for ours, names in (
        ("input_tokens", ("promptTokenCount", "toolUsePromptTokenCount")),
        ("output_tokens", ("candidatesTokenCount", "thoughtsTokenCount")),
        ("cache_read", ("cachedContentTokenCount",)),
    ):
        counts = [
            found for found in (_count(usage.get(name)) for name in names) if found is not None
        ]
        if counts:
            into[ours] = min(sum(counts), _MAX_TOKENS)


def _google_usage(stream: bool, body: bytes, into: dict[str, int | None]) -> None:
    """``usageMetadata`` of a GenerateContentResponse; of a stream, the last one that has it
    (SSE ``data:`` lines with ``?alt=sse``, else one JSON array of responses)."""
    responses: list[object] = [data for _, data in sse_data(body)] if stream else []
    if not responses:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            return
        responses = document if stream and isinstance(document, list) else [document]
    for response in responses:
        _google(_get(response, "usageMetadata"), into)


def extract_usage(api: Api, stream: bool, body: bytes) -> Usage | None:
    """The usage the API reported in a response body (the final events of a stream)."""
    found: dict[str, int | None] = {}
    if api == "other":
        return None
    if api in ("google-generate", "google-stream"):
        _google_usage(stream, body, found)
        return Usage(**found) if found else None
    if not stream:
        try:
            document = json.loads(body)
        except ValueError:
            return None
        if api == "anthropic-messages":
            _anthropic(_get(document, "usage"), found)
        else:
            _openai(_get(document, "usage"), api, found)
    else:
        for name, data in sse_data(body):
            kind = _get(data, "type")
            if api == "anthropic-messages":
                if kind == "message_start":
                    _anthropic(_get(data, "message", "usage"), found)
                elif kind == "message_delta":
                    _anthropic(_get(data, "usage"), found)
            elif api == "openai-chat":
                usage = _get(data, "usage")
                if isinstance(usage, dict):
                    _openai(usage, api, found)
            elif (name or kind) == "response.completed" or kind == "response.completed":
                _openai(_get(data, "response", "usage"), api, found)
    if not found:
        return None
    return Usage(**found)
