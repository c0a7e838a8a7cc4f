"""The recording model proxy against the fake model server: real sockets on 127.0.0.1.

Every API shape streaming and not (passthrough bytes, journal entry, usage), replay with the
upstream stopped (byte-identical, source ``journal``), a strict miss and a live miss, key
injection and the agent's credentials dropped, a tampered blob refused, and the replay key's
members (docs/spec/proxy.md §4).
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import pytest

from harness.orchestrate.proxy import Exchange, Limits, ProxyServer, Usage, recompute_key
from harness.orchestrate.replay import Journal

from .fake_model_server import FakeModelServer
from .proxy_helpers import ANT_KEY, OAI_KEY, SHAPES, allow_list, body_of, call, make_proxy

USAGE = {
    ("anthropic", False): Usage(None, 5, 3, 0),
    ("anthropic", True): Usage(None, 5, 3, 0),
    ("chat", False): Usage(None, 5, 2, None),
    ("chat", True): Usage(None, 5, 2, None),
    ("responses", False): Usage(None, 5, 1, None),
    ("responses", True): Usage(None, 5, 1, None),
}


def _direct(fake: FakeModelServer, shape: str, stream: bool) -> bytes:
    path = SHAPES[shape][1].split("/", 2)[2]
    status, _, data = call(fake.port, "/" + path, body_of(shape, stream))
    assert status == 200
    return data


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_live_then_replay_with_upstream_stopped_is_byte_identical(
    fake: FakeModelServer, tmp_path: Path, shape: str, stream: bool
) -> None:
    expected = _direct(fake, shape, stream)
    path = SHAPES[shape][1]
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        status, headers, data = call(proxy.port, path, body_of(shape, stream))
    assert status == 200
    assert data == expected  # the exact bytes the upstream sent (SSE included)
    assert headers["x-harness-source"] == "live"
    assert headers["content-type"].startswith("text/event-stream" if stream else "application/json")
    (record,) = proxy.exchanges()
    assert (record.source, record.outcome, record.journaled, record.stream) == (
        "live", "answered", True, stream,
    )  # fmt: skip
    assert record.usage is not None
    assert record.usage.input_tokens is not None and record.usage.input_tokens > 0
    assert record.usage.output_tokens == USAGE[shape, stream].output_tokens
    assert record.usage.cache_read == USAGE[shape, stream].cache_read
    assert record.usage.cache_write == USAGE[shape, stream].cache_write
    journal = Journal(tmp_path / "j", "replay")
    entry = journal.entry(record.key or "")
    assert entry is not None and entry.response_sha256 == record.response_sha256
    assert journal.read_blob(entry.response_sha256).encode() == expected
    # the verifier's recomputation: from the request blob and the recorded parameters
    request = journal.read_blob(entry.request_sha256).encode()
    assert record.family is not None and record.parameters is not None
    assert recompute_key(record.family, request, record.parameters) == record.key

    fake.stop()  # no upstream any more: the replay must not need it
    with make_proxy(fake.base, tmp_path / "j", "replay") as replay:
        status, headers, again = call(replay.port, path, body_of(shape, stream))
    assert (status, again) == (200, expected)
    assert headers["x-harness-source"] == "journal"
    (served,) = replay.exchanges()
    assert (served.source, served.key, served.usage) == ("journal", record.key, record.usage)


def test_replay_miss_is_a_502_naming_the_key_and_live_miss_goes_upstream(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    body = body_of("anthropic", False)
    with make_proxy(fake.base, tmp_path / "j", "replay") as proxy:
        status, headers, data = call(proxy.port, SHAPES["anthropic"][1], body)
    assert status == 502 and headers["x-should-retry"] == "false"
    error = json.loads(data)["error"]
    (record,) = proxy.exchanges()
    assert error["type"] == "replay_miss" and "replay miss" in error["message"]
    assert error["key"] == record.key and record.key in error["message"]
    assert (record.outcome, record.source, record.journaled) == ("replay-miss", None, False)
    assert fake.seen == []  # strict replay opens no connection

    with make_proxy(fake.base, tmp_path / "j", "replay", allow_live_miss=True) as proxy:
        status, headers, data = call(proxy.port, SHAPES["anthropic"][1], body)
        assert status == 200 and headers["x-harness-source"] == "live-miss"
        status, headers, again = call(proxy.port, SHAPES["anthropic"][1], body)
    assert again == data and headers["x-harness-source"] == "journal"
    first, second = proxy.exchanges()
    assert (first.source, first.journaled, second.source) == ("live-miss", True, "journal")
    assert len(fake.seen) == 1


@pytest.mark.parametrize("shape", ["anthropic", "chat"])
def test_upstream_sees_the_proxy_key_and_never_the_agents(
    fake: FakeModelServer, tmp_path: Path, shape: str
) -> None:
    agent = {
        "x-api-key": "sk-agent-own",
        "Authorization": "Bearer sk-agent-own",
        "Cookie": "session=agent",
        "anthropic-version": "2023-06-01",
    }
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        status, _, _ = call(proxy.port, SHAPES[shape][1], body_of(shape, False), agent)
    assert status == 200
    (seen,) = fake.seen
    assert "sk-agent-own" not in json.dumps(seen.headers)
    assert "cookie" not in seen.headers
    if shape == "anthropic":
        assert seen.headers["x-api-key"] == ANT_KEY and "authorization" not in seen.headers
        assert seen.headers["anthropic-version"] == "2023-06-01"
    else:
        assert seen.headers["authorization"] == f"Bearer {OAI_KEY}"
        assert "x-api-key" not in seen.headers
    assert seen.headers["accept-encoding"] == "identity"
    (record,) = proxy.exchanges()
    assert sorted(record.dropped_credentials) == ["authorization", "cookie", "x-api-key"]


def test_a_tampered_journal_blob_is_refused_on_replay(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    body = body_of("responses", True)
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        assert call(proxy.port, SHAPES["responses"][1], body)[0] == 200
    (record,) = proxy.exchanges()
    blob = tmp_path / "j" / "blobs" / (record.response_sha256 or "")
    blob.write_bytes(blob.read_bytes().replace(b"Answer", b"Lie"))
    with make_proxy(fake.base, tmp_path / "j", "replay") as replay:
        status, _, data = call(replay.port, SHAPES["responses"][1], body)
    assert status == 502
    assert json.loads(data)["error"]["type"] == "journal_integrity"
    assert b"Lie" not in data
    (served,) = replay.exchanges()
    assert (served.outcome, served.source) == ("error", None)


def test_the_key_ignores_tracking_members_but_not_stream_or_version(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    path = SHAPES["anthropic"][1]
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        call(proxy.port, path, body_of("anthropic", False, metadata={"user_id": "session-1"}))
        call(proxy.port, path, body_of("anthropic", False, metadata={"user_id": "session-2"}))
        call(proxy.port, path, body_of("anthropic", True))
        call(proxy.port, path, body_of("anthropic", False), {"anthropic-version": "2023-06-01"})
        call(proxy.port, path, body_of("anthropic", False, max_tokens=65))
    keys = [record.key for record in proxy.exchanges()]
    assert keys[0] == keys[1]
    assert len(set(keys)) == 4
    # key order and whitespace never matter: the canonical body is keyed
    text = json.dumps(body_of("anthropic", False), indent=3)[::1]
    reordered = json.dumps(dict(reversed(list(json.loads(text).items())))).encode()
    with make_proxy(fake.base, tmp_path / "j", "replay") as replay:
        status, headers, _ = call(replay.port, path, reordered)
    assert status == 200 and headers["x-harness-source"] == "journal"


def test_the_first_event_reaches_the_client_before_the_upstream_finishes(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    fake.gate = threading.Event()
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
        body = json.dumps(body_of("anthropic", True)).encode()
        connection.request("POST", SHAPES["anthropic"][1], body=body)
        response = connection.getresponse()
        first = response.read1(65536)  # arrives while the upstream is held after one event
        assert first.startswith(b"event: message_start\n")
        assert proxy.exchanges() == []  # the exchange is still going
        fake.gate.set()
        rest = response.read()
        connection.close()
    assert (first + rest).endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    (record,) = proxy.exchanges()
    assert record.journaled and record.usage is not None and record.usage.output_tokens == 5


def test_two_clients_stream_at_once(fake: FakeModelServer, tmp_path: Path) -> None:
    fake.gate = threading.Event()
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        responses = []
        for shape in ("anthropic", "responses"):
            connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
            body = json.dumps(body_of(shape, True)).encode()
            connection.request("POST", SHAPES[shape][1], body=body)
            response = connection.getresponse()
            responses.append((connection, response, response.read1(65536)))
        # both streams started before either upstream finished: served concurrently
        assert [first[:6] for _, _, first in responses] == [b"event:", b"event:"]
        fake.gate.set()
        for connection, response, _ in responses:
            response.read()
            connection.close()
    assert sorted(record.api or "" for record in proxy.exchanges()) == [
        "anthropic-messages", "openai-responses",
    ]  # fmt: skip
    assert all(record.journaled for record in proxy.exchanges())


def test_an_upstream_error_status_is_passed_through_and_not_journaled(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        status, _, data = call(proxy.port, SHAPES["anthropic"][1], {"model": "status-429"})
    assert status == 429 and json.loads(data)["error"]["type"] == "api_error"
    (record,) = proxy.exchanges()
    assert (record.status, record.journaled, record.source) == (429, False, "live")
    assert len(Journal(tmp_path / "j", "replay")) == 0


def test_an_exchange_is_reported_only_once_its_answer_is_durable(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []

    def observe(exchange: Exchange) -> None:  # what the runtime will turn into model.call
        entry = Journal(tmp_path / "j", "replay").entry(exchange.key or "")
        seen.append((exchange.source or "", entry is not None))

    journal = Journal(tmp_path / "j", "live")
    with ProxyServer(allow_list(fake.base), journal, on_exchange=observe) as proxy:
        for shape in sorted(SHAPES):
            assert call(proxy.port, SHAPES[shape][1], body_of(shape, True))[0] == 200
    assert seen == [("live", True)] * len(SHAPES)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_answer_over_the_response_cap_is_cut_and_never_journaled(
    fake: FakeModelServer, tmp_path: Path, stream: bool
) -> None:
    limits = Limits(max_response=300)
    with make_proxy(fake.base, tmp_path / "j", limits=limits) as proxy:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
        body = json.dumps(body_of("anthropic", stream)).encode()
        connection.request("POST", SHAPES["anthropic"][1], body=body)
        response = connection.getresponse()
        if stream:  # the stream started, then stops short of its end
            assert response.status == 200
            with pytest.raises(http.client.IncompleteRead):
                response.read()
        else:
            assert response.status == 502
            assert "300-byte cap" in json.loads(response.read())["error"]["message"]
        connection.close()
    (record,) = proxy.exchanges()
    assert (record.outcome, record.journaled) == ("error", False)
    assert len(Journal(tmp_path / "j", "replay")) == 0
