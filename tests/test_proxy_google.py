"""The Gemini API (family ``google``) through the recording proxy, against the fake model server.

The Gemini API names the model and the stream in the path (``/v1beta/models/{model}:
generateContent``, ``:streamGenerateContent?alt=sse``), takes its key in ``x-goog-api-key``
or in the query (``?key=``), and reports usage in ``usageMetadata`` (docs/spec/proxy.md §3, §4,
§8). Real sockets on 127.0.0.1, a real journal.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.proxy import AllowList, Exchange, ProxyServer, Upstream
from harness.orchestrate.proxy.exchange import Usage, extract_usage
from harness.orchestrate.replay import Journal
from harness.verify.modelkey import (
    exchange_key,
    recompute_exchange_key,
    url_credentials,
    without_url_credentials,
)

from .fake_model_server import FakeModelServer
from .proxy_helpers import call

GOOGLE_KEY = "AIza-operator-secret-g"
URL_SECRET = "AIza-in-the-url-secret"
BODY: dict[str, Any] = {
    "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
    "generationConfig": {"temperature": 0.2},
}
GENERATE = "/google/v1beta/models/gemini-x:generateContent"
STREAM = "/google/v1beta/models/gemini-x:streamGenerateContent?alt=sse"


def google_proxy(
    base: str, journal: Path, mode: str = "live", token: str | None = None
) -> ProxyServer:
    allow = AllowList([Upstream("google", "google", base, credential=GOOGLE_KEY)])
    return ProxyServer(allow, Journal(journal, mode), access_token=token).start()  # type: ignore[arg-type]


def _only(proxy: ProxyServer) -> Exchange:
    (exchange,) = proxy.exchanges()
    return exchange


def test_generate_content_is_keyed_by_the_path_model(fake: FakeModelServer, tmp_path: Path) -> None:
    with google_proxy(fake.base, tmp_path / "j") as proxy:
        status, headers, data = call(proxy.port, GENERATE, BODY, {"x-goog-api-key": "agent"})
    assert status == 200 and headers["content-type"] == "application/json"
    document = json.loads(data)
    assert document["candidates"][0]["content"]["parts"][0]["text"].startswith("Answer ")
    exchange = _only(proxy)
    assert (exchange.family, exchange.api, exchange.model, exchange.stream) == (
        "google", "google-generate", "gemini-x", False,
    )  # fmt: skip
    assert exchange.path == "/v1beta/models/gemini-x:generateContent"
    assert exchange.journaled and exchange.source == "live"
    # the upstream saw the operator's key, never the agent's
    (seen,) = fake.seen
    assert seen.headers["x-goog-api-key"] == GOOGLE_KEY
    assert exchange.dropped_credentials == ("x-goog-api-key",)
    # the key: the path's model and the body (a body "model" member would not name it)
    raw = json.dumps(BODY).encode()
    expected = exchange_key("google", raw, "POST", exchange.path, {})
    assert exchange.key == expected.key and expected.model == "gemini-x"
    other = exchange_key("google", raw, "POST", exchange.path.replace("-x:", "-y:"), {})
    assert other.key != exchange.key and other.model == "gemini-y"
    assert exchange.parameters is not None
    assert recompute_exchange_key("google", raw, exchange.parameters) == exchange.key
    # usage as Google bills it: thinking tokens are output, the prompt count holds the cache
    usage = document["usageMetadata"]
    assert exchange.usage == Usage(
        input_tokens=usage["promptTokenCount"],
        output_tokens=usage["candidatesTokenCount"] + usage["thoughtsTokenCount"],
        cache_read=usage["cachedContentTokenCount"],
        cache_write=None,
    )
    assert exchange.usage.input_tokens + exchange.usage.output_tokens == usage["totalTokenCount"]


def test_a_stream_is_the_path_method_and_its_usage_the_last_chunk(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    streamed = dict(BODY, stream=False)  # a body member named stream says nothing to Gemini
    with google_proxy(fake.base, tmp_path / "j") as proxy:
        status, headers, data = call(proxy.port, STREAM, streamed, {"x-goog-api-key": "a"})
        # without alt=sse the stream is one JSON array, sent as it comes
        array = call(proxy.port, STREAM.removesuffix("?alt=sse"), BODY, {"x-goog-api-key": "a"})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    lines = [line for line in data.decode().split("\r\n") if line.startswith("data: ")]
    chunks = [json.loads(line[6:]) for line in lines]
    assert len(chunks) == 5
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text.startswith("Answer ")
    sse, plain = proxy.exchanges()
    assert (sse.api, sse.stream, sse.model) == ("google-stream", True, "gemini-x")
    assert sse.parameters is not None and sse.parameters["stream"] is True
    final = chunks[-1]["usageMetadata"]
    assert sse.usage is not None and sse.usage.output_tokens == 5 + 4  # words + thoughts
    assert sse.usage.output_tokens == final["candidatesTokenCount"] + final["thoughtsTokenCount"]
    assert sse.usage.input_tokens == final["promptTokenCount"]
    assert sse.response_bytes == len(data) and sse.journaled
    assert array[0] == 200 and array[1]["content-type"] == "application/json"
    assert len(json.loads(array[2])) == len(chunks)
    assert plain.stream and plain.usage is not None and plain.usage.output_tokens == 9


def test_count_tokens_is_other_and_unmetered(fake: FakeModelServer, tmp_path: Path) -> None:
    path = "/google/v1beta/models/gemini-x:countTokens"
    with google_proxy(fake.base, tmp_path / "j") as proxy:
        status, _, data = call(proxy.port, path, {"contents": BODY["contents"]})
    assert status == 200 and "totalTokens" in json.loads(data)
    exchange = _only(proxy)
    assert (exchange.api, exchange.model, exchange.stream, exchange.usage) == (
        "other", "gemini-x", False, None,
    )  # fmt: skip
    assert exchange.journaled


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_a_key_in_the_url_is_never_forwarded_journaled_or_recorded(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    journal = tmp_path / "j"
    with google_proxy(fake.base, journal) as proxy:
        port = proxy.port
        answered = call(port, f"{GENERATE}?key={URL_SECRET}", BODY)
        streamed = call(port, f"{STREAM}&k%65y={URL_SECRET}", BODY)  # an encoded name too
        refused = call(port, f"/nowhere/v1beta/models/g:generateContent?key={URL_SECRET}", BODY)
        _raw(port, f"GET http://example.com/?key={URL_SECRET} HTTP/1.1\r\n\r\n".encode())
        many = "".join(f"x-h{i}: 1\r\n" for i in range(120))  # 431 after the target is parsed
        _raw(port, f"GET {GENERATE}?key={URL_SECRET} HTTP/1.1\r\n{many}\r\n".encode())
    assert (answered[0], streamed[0], refused[0]) == (200, 200, 403)
    exchanges = proxy.exchanges()
    assert [e.status for e in exchanges] == [200, 200, 403, 403, 431]
    for exchange in exchanges:
        assert URL_SECRET not in repr(exchange)
        assert url_credentials(exchange.path) == []
    first, second = exchanges[:2]
    assert first.path == "/v1beta/models/gemini-x:generateContent"
    assert second.path == "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
    assert first.dropped_credentials == ("?key",) and second.dropped_credentials == ("?key",)
    # same request, same key as without the URL key (the journal serves it in replay)
    raw = json.dumps(BODY).encode()
    assert first.key == exchange_key("google", raw, "POST", first.path, {}).key
    # the upstream got the operator's key in its header and no key in the URL
    assert [s.path for s in fake.seen] == [first.path, second.path]
    assert all(s.headers["x-goog-api-key"] == GOOGLE_KEY for s in fake.seen)
    for file in journal.rglob("*"):
        if file.is_file():
            assert URL_SECRET.encode() not in file.read_bytes(), file


def test_without_url_credentials_keeps_the_rest() -> None:
    assert without_url_credentials("/a?alt=sse&key=s&x=1") == ("/a?alt=sse&x=1", ["key"])
    assert without_url_credentials("/a?key=s") == ("/a", ["key"])
    assert without_url_credentials("/a?keys=1&akey=2") == ("/a?keys=1&akey=2", [])
    assert without_url_credentials("/a") == ("/a", [])
    assert url_credentials("/a?b=1&key") == ["key"] and url_credentials("/a?monkey=1") == []


def test_the_access_token_may_come_as_x_goog_api_key(fake: FakeModelServer, tmp_path: Path) -> None:
    token = "harness-proxy-0123456789abcdef"
    with google_proxy(fake.base, tmp_path / "j", token=token) as proxy:
        good = call(proxy.port, GENERATE, BODY, {"x-goog-api-key": token})
        wrong = call(proxy.port, GENERATE, BODY, {"x-goog-api-key": "AIza-stranger"})
        in_url = call(proxy.port, f"{GENERATE}?key={token}", BODY)  # a URL key is dropped
    assert (good[0], wrong[0], in_url[0]) == (200, 403, 403)
    assert len(fake.seen) == 1 and token not in json.dumps(fake.seen[0].headers)


def test_replay_is_byte_identical_with_the_upstream_stopped(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    journal = tmp_path / "j"
    requests = [(GENERATE, BODY), (STREAM, BODY), (STREAM, dict(BODY, contents=[]))]
    with google_proxy(fake.base, journal) as proxy:
        live = [call(proxy.port, path, body, {"x-goog-api-key": "a"}) for path, body in requests]
    fake.stop()
    with google_proxy(fake.base, journal, "replay") as replayer:
        again = [
            call(replayer.port, path, body, {"x-goog-api-key": "b"}) for path, body in requests
        ]
        missing = call(replayer.port, GENERATE.replace("-x:", "-z:"), BODY)
    assert [(s, d) for s, _, d in again] == [(s, d) for s, _, d in live]
    assert [h["content-type"] for _, h, _ in again] == [h["content-type"] for _, h, _ in live]
    assert missing[0] == 502 and json.loads(missing[2])["error"]["type"] == "replay_miss"
    original, replayed = proxy.exchanges(), replayer.exchanges()
    assert [e.source for e in replayed] == ["journal"] * 3 + [None]
    for a, b in zip(original, replayed, strict=False):
        assert (a.key, a.model, a.stream, a.usage, a.response_sha256) == (
            b.key, b.model, b.stream, b.usage, b.response_sha256,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "stream", "expected"),
    [
        (b'{"usageMetadata": {"promptTokenCount": 7}}', False, Usage(input_tokens=7)),
        (
            b'{"usageMetadata": {"promptTokenCount": 7, "toolUsePromptTokenCount": 3,'
            b' "candidatesTokenCount": 2}}',
            False,
            Usage(input_tokens=10, output_tokens=2),
        ),
        (b'{"candidates": []}', False, None),
        (b"not json", False, None),
        (b'{"usageMetadata": {"promptTokenCount": -1, "candidatesTokenCount": true}}', False, None),
        # a stream: the last usageMetadata replaces the earlier ones whole
        (
            b'data: {"usageMetadata": {"promptTokenCount": 5, "thoughtsTokenCount": 9}}\r\n\r\n'
            b'data: {"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1}}\r\n\r\n',
            True,
            Usage(input_tokens=5, output_tokens=1),
        ),
        (b'[{"usageMetadata": {"candidatesTokenCount": 1}}, {"x": 1}]', True, Usage(None, 1)),
        (b"[" * 100000, True, None),
    ],
)
def test_usage_metadata(body: bytes, stream: bool, expected: Usage | None) -> None:
    api = "google-stream" if stream else "google-generate"
    assert extract_usage(api, stream, body) == expected
