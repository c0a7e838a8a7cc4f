"""The replay key of a model call and of a proxied exchange, computed once for everybody.

The runtime's journal (``orchestrate/replay.py``), the recording proxy
(``orchestrate/proxy/exchange.py``) and the verifier all need the same function: the runtime
and the proxy to file and find answers, the verifier to prove that a recorded ``key`` is the
key of the recorded request blob (docs/spec/proxy.md §4). Two copies would drift and a drifted
copy makes every honest bundle fail (or, worse, a wrong one pass), so the function lives here,
in the lowest layer (verify imports nothing of ours), and the others import it.

``call_key(adapter, model, request, parameters)`` is the hex SHA-256 of the canonical JSON of
``{"adapter", "model", "request", "parameters"}``. ``parameters`` must hold *every* input other
than the request text that changes the answer; key order never matters (canonical JSON sorts
keys), tuples count as lists, integral floats equal integers, NaN and infinities are refused.

``exchange_key(family, body, method, path, headers)`` is the key of one HTTP exchange: the
``call_key`` of the family (``adapter``), the body's ``model`` (``-`` when it has none), the RFC
8785 form of the body without the family's ``UNKEYED_MEMBERS`` (``request``) and
``{"method", "path", "stream", "headers"}`` (``parameters``), ``headers`` being the family's
``KEY_HEADERS`` as sent. ``recompute_exchange_key(family, body, parameters)`` is the
verifier's side: it re-keys a request blob and refuses recorded parameters that the blob and
the recorded method/path/headers do not reproduce exactly.

The Gemini API (family ``google``) names the model and the stream in the *path*
(``/v1beta/models/{model}:generateContent``, ``...:streamGenerateContent?alt=sse``), not in
the body: its key's ``model`` and ``stream`` come from the path. Its credential may travel in
the query (``?key=``): ``without_url_credentials`` is what the proxy removes before it keys,
forwards or records a path, and ``url_credentials`` is the verifier's test that it did.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import unquote

from .canonical import canonical_bytes, contains_float, jcs_bytes, parse_strict_json
from .errors import CanonicalEncodingError

Family = Literal["anthropic", "openai", "google"]
FAMILIES: Final[tuple[Family, ...]] = ("anthropic", "openai", "google")
Api = Literal[
    "anthropic-messages",
    "openai-chat",
    "openai-responses",
    "google-generate",
    "google-stream",
    "other",
]
APIS: Final[tuple[Api, ...]] = (
    "anthropic-messages",
    "openai-chat",
    "openai-responses",
    "google-generate",
    "google-stream",
    "other",
)

# Request headers that change the answer, per family: part of the key (names lowercased).
KEY_HEADERS: Final[dict[Family, tuple[str, ...]]] = {
    "anthropic": ("anthropic-version", "anthropic-beta"),
    "openai": ("openai-beta",),
    "google": (),  # the Gemini API has no answer-changing request header
}
# Body members that never change the answer (tracking, caching hints): left out of the key.
UNKEYED_MEMBERS: Final[dict[Family, tuple[str, ...]]] = {
    "anthropic": ("metadata",),
    "openai": ("user", "metadata", "prompt_cache_key", "safety_identifier", "store"),
    "google": (),  # every GenerateContentRequest member changes the answer
}
PARAMETER_NAMES: Final = ("method", "path", "stream", "headers")
URL_CREDENTIAL_PARAMETERS: Final = ("key",)
"""Query parameters that carry a credential (the Gemini API's ``?key=``): the proxy drops
them before a path is keyed, forwarded or recorded, and a recorded path never holds one."""
GOOGLE_STREAM_METHOD: Final = "streamGenerateContent"


class ModelKeyError(ValueError):
    """An input has no key: not JSON data, a body that is not a strict JSON object..."""


class ExchangeKey(NamedTuple):
    """What ``exchange_key`` found: the key and the members it was computed from."""

    key: str
    model: str
    stream: bool
    parameters: dict[str, object]
    keyed_body: str


def _plain(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (dict/list/str/int/float/bool/None); refuses the rest."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ModelKeyError(f"parameter {where} is {value!r}: not a JSON number")
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ModelKeyError(f"parameter {where} has a non-string key {key!r}")
            out[key] = _plain(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise ModelKeyError(f"parameter {where} is a {type(value).__name__}, not JSON data")


def call_key(adapter: str, model: str, request: str, parameters: Mapping[str, object]) -> str:
    """The journal key of a model call: hex SHA-256 of the canonical JSON of all its inputs.

    Integer-only values use the project's canonical form (``canonical_bytes``); values with
    floats (temperature, top-p) the RFC 8785 serializer, whose number form is the same for
    integers, so the two agree wherever both apply.
    """
    for name, text in (("adapter", adapter), ("model", model), ("request", request)):
        if not isinstance(text, str):
            raise ModelKeyError(f"{name} must be a string")
    document = {
        "adapter": adapter,
        "model": model,
        "request": request,
        "parameters": _plain(parameters, "parameters"),
    }
    try:
        data = jcs_bytes(document) if contains_float(document) else canonical_bytes(document)
    except CanonicalEncodingError as exc:
        raise ModelKeyError(f"call parameters have no canonical form: {exc}") from None
    return hashlib.sha256(data).hexdigest()


def api_of(family: str, path: str) -> Api:
    """Which API an upstream path is (what usage extraction and the record's ``api`` say)."""
    bare = path.partition("?")[0].rstrip("/")
    if family == "anthropic" and bare.endswith("/messages"):
        return "anthropic-messages"
    if family == "openai" and bare.endswith("/chat/completions"):
        return "openai-chat"
    if family == "openai" and bare.endswith("/responses"):
        return "openai-responses"
    if family == "google":
        call = google_call(bare)
        if call is not None and call[1] == "generateContent":
            return "google-generate"
        if call is not None and call[1] == GOOGLE_STREAM_METHOD:
            return "google-stream"
    return "other"


def google_call(path: str) -> tuple[str, str] | None:
    """(model, method) of a Gemini API path ending ``/models/{model}:{method}`` (query
    ignored), else None. The Gemini API names the model in the path, never in the body."""
    head, _, last = path.partition("?")[0].rpartition("/")
    model, colon, method = last.partition(":")
    if not (head.endswith("/models") or head == "models") or not colon:
        return None
    if not model or not method.isascii() or not method.isalpha():
        return None
    return model, method


def url_credentials(path: str) -> list[str]:
    """The credential query parameters (``URL_CREDENTIAL_PARAMETERS``) a path carries, by
    name as written (``key``), in order; percent-encoded names count (``k%65y``)."""
    query = path.partition("?")[2]
    found = []
    for item in query.split("&") if query else ():
        name = unquote(item.partition("=")[0].replace("+", " "))
        if name in URL_CREDENTIAL_PARAMETERS:
            found.append(name)
    return found


def without_url_credentials(path: str) -> tuple[str, list[str]]:
    """``path`` without its credential query parameters, and their names (a path with none
    is returned unchanged; the remaining parameters keep their bytes and order)."""
    bare, mark, query = path.partition("?")
    if not mark:
        return path, []
    kept: list[str] = []
    dropped: list[str] = []
    for item in query.split("&"):
        name = unquote(item.partition("=")[0].replace("+", " "))
        if name in URL_CREDENTIAL_PARAMETERS:
            dropped.append(name)
        else:
            kept.append(item)
    if not dropped:
        return path, []
    return (bare + "?" + "&".join(kept) if kept else bare), dropped


def _family(family: str) -> Family:
    for known in FAMILIES:
        if family == known:
            return known
    raise ModelKeyError(f"family {family!r} is not one of {', '.join(FAMILIES)}")


def exchange_key(
    family: str, body: bytes, method: str, path: str, headers: Mapping[str, str]
) -> ExchangeKey:
    """Parse ``body`` (a strict JSON object, or empty for a GET) and compute its replay key.

    ``headers`` maps lowercased names to stripped values (the proxy's view of the request);
    only the family's ``KEY_HEADERS`` are read.
    """
    known = _family(family)
    document: dict[str, Any]
    if body:
        try:
            value = parse_strict_json(body, allow_floats=True)
        except CanonicalEncodingError as exc:
            raise ModelKeyError(f"request body is not strict JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ModelKeyError("request body must be a JSON object")
        document = value
    elif method == "GET":
        document = {}
    else:
        raise ModelKeyError("request body is empty")
    if known == "google":
        # the Gemini API: the model and the stream are the path's ({model}:streamGenerateContent)
        call = google_call(path)
        model_name = call[0] if call is not None else "-"
        stream = call is not None and call[1] == GOOGLE_STREAM_METHOD
    else:
        model = document.get("model")
        model_name = model if isinstance(model, str) and model else "-"
        stream = document.get("stream") is True
    unkeyed = UNKEYED_MEMBERS[known]
    kept = {name: item for name, item in document.items() if name not in unkeyed}
    try:
        keyed_body = jcs_bytes(kept).decode("utf-8")
    except CanonicalEncodingError as exc:
        raise ModelKeyError(f"request body has no canonical form: {exc}") from None
    key_headers = {name: headers[name] for name in KEY_HEADERS[known] if name in headers}
    parameters: dict[str, object] = {
        "method": method,
        "path": path,
        "stream": stream,
        "headers": key_headers,
    }
    key = call_key(known, model_name, keyed_body, parameters)
    return ExchangeKey(key, model_name, stream, parameters, keyed_body)


def recompute_exchange_key(family: str, body: bytes, parameters: Mapping[str, Any]) -> str:
    """The key of a recorded exchange, from its request blob and its recorded ``parameters``.

    The recorded parameters must be exactly what the blob gives (``stream`` from the body,
    only the family's key headers, string values, the four members and no other): compared
    as canonical bytes, so ``1`` never passes for ``true``.
    """
    if not isinstance(parameters, Mapping):
        raise ModelKeyError("parameters must be an object")
    if sorted(parameters) != sorted(PARAMETER_NAMES):
        raise ModelKeyError(
            f"parameters must have exactly the members {', '.join(PARAMETER_NAMES)}"
        )
    method, path, headers = parameters["method"], parameters["path"], parameters["headers"]
    if not isinstance(method, str) or not isinstance(path, str):
        raise ModelKeyError("parameters.method and parameters.path must be strings")
    if not isinstance(headers, Mapping) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in headers.items()
    ):
        raise ModelKeyError("parameters.headers must be an object of strings")
    again = exchange_key(family, body, method, path, headers)
    try:
        same = jcs_bytes(again.parameters) == jcs_bytes(_plain(parameters, "parameters"))
    except CanonicalEncodingError as exc:
        raise ModelKeyError(f"parameters have no canonical form: {exc}") from None
    if not same:
        raise ModelKeyError("recorded parameters do not match the request body")
    return again.key
