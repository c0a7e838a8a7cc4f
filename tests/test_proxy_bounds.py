"""What the proxy refuses, and bad input: a clear error, recorded, bounded, never a crash.

Off-list routes, tunnels and absolute URIs (the sandbox's only way out must not become an
open proxy), paths leaving the allowed prefix, non-JSON bodies, oversized bodies and headers,
chunked uploads, slowloris clients, an upstream that never answers, too many connections.
"""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path

import pytest

from harness.orchestrate.proxy import AllowList, Limits, ProxyServer, Upstream
from harness.orchestrate.replay import Journal

from .fake_model_server import FakeModelServer
from .proxy_helpers import SHAPES, body_of, call, make_proxy


def _raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` on a fresh connection and read until the proxy closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("/evil/v1/messages", "route 'evil' is not on the allow-list"),
        ("http://evil.example/v1/messages", "absolute URIs are refused"),
        ("/anthropic/admin/keys", "is outside '/v1/'"),
        ("/anthropic/v1/../admin", "is outside '/v1/'"),
        ("/anthropic/v1/%2e%2e/admin", "is outside '/v1/'"),
        ("/", "not a proxy route"),
    ],
)
def test_off_list_targets_are_refused_with_403_and_recorded(
    fake: FakeModelServer, tmp_path: Path, target: str, why: str
) -> None:
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        status, headers, data = call(proxy.port, target, body_of("anthropic", False))
    assert status == 403 and headers["content-type"] == "application/json"
    error = json.loads(data)["error"]
    assert error["type"] == "permission_error" and why in error["message"]
    (record,) = proxy.exchanges()
    assert (record.outcome, record.status, record.source) == ("refused", 403, None)
    assert why in (record.reason or "")
    assert fake.seen == []


def test_a_tunnel_to_another_host_is_refused_and_recorded(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        answer = _raw(
            proxy.port, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 403 ")
    (record,) = proxy.exchanges()
    assert record.outcome == "refused" and "evil.example:443" in (record.reason or "")


@pytest.mark.parametrize(
    ("body", "status", "why"),
    [
        (b"not json", 400, "not strict JSON"),
        (b'{"model": "a", "model": "b"}', 400, "duplicate"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"model": NaN}', 400, "not strict JSON"),
        (b"", 400, "empty"),
    ],
)
def test_bad_bodies_get_a_clear_error_and_never_reach_the_upstream(
    fake: FakeModelServer, tmp_path: Path, body: bytes, status: int, why: str
) -> None:
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        got, _, data = call(proxy.port, SHAPES["anthropic"][1], body)
        assert call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))[0] == 200
    assert got == status and why in json.loads(data)["error"]["message"]
    assert proxy.exchanges()[0].outcome == "refused"
    assert len(fake.seen) == 1  # only the good request


def test_body_and_header_caps(fake: FakeModelServer, tmp_path: Path) -> None:
    limits = Limits(max_body=1000)
    with make_proxy(fake.base, tmp_path / "j", limits=limits) as proxy:
        # a declared body over the cap is refused before it is read
        start = time.monotonic()
        answer = _raw(
            proxy.port,
            b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 413 ") and b"1000-byte cap" in answer
        assert time.monotonic() - start < 5
        chunked = (
            b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        assert _raw(proxy.port, chunked).startswith(b"HTTP/1.1 411 ")
        huge = b"POST /anthropic/v1/messages HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
        answer = _raw(proxy.port, huge)
        assert answer.startswith(b"HTTP/1.1 431 ") and b'"type": "error"' in answer
        many = b"".join(b"X-%d: 1\r\n" % index for index in range(150))
        answer = _raw(proxy.port, b"POST /anthropic/v1/messages HTTP/1.1\r\n" + many + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))[0] == 200
    statuses = [record.status for record in proxy.exchanges()]
    assert statuses == [413, 411, 431, 431, 200]
    assert len(fake.seen) == 1


def test_a_slowloris_client_is_cut_off_and_others_are_served(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    limits = Limits(request_deadline_s=0.5)
    with make_proxy(fake.base, tmp_path / "j", limits=limits) as proxy:
        slow = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        slow.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nContent-Length: 50\r\n")
        started = time.monotonic()
        assert call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))[0] == 200
        closed = False
        while not closed and time.monotonic() - started < 4:
            try:  # trickling a byte every 0.1 s defeats a per-read timeout, not the deadline
                slow.sendall(b"X")
            except OSError:
                break
            ready, _, _ = select.select([slow], [], [], 0.1)
            closed = bool(ready) and slow.recv(65536) == b""
        assert time.monotonic() - started < 3  # cut at the 0.5 s deadline, not at our 4 s
        slow.close()
        assert call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))[0] == 200
    assert [record.status for record in proxy.exchanges()].count(200) == 2
    assert any(record.status == 408 for record in proxy.exchanges())


def test_an_upstream_that_never_answers_times_out(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        allow = AllowList([Upstream("anthropic", "anthropic", f"http://127.0.0.1:{port}")])
        limits = Limits(idle_timeout_s=0.5)
        with ProxyServer(allow, Journal(tmp_path / "j", "live"), limits=limits) as proxy:
            start = time.monotonic()
            status, _, data = call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))
            assert time.monotonic() - start < 5
    assert status == 502 and json.loads(data)["error"]["type"] == "upstream_error"
    (record,) = proxy.exchanges()
    assert (record.outcome, record.journaled) == ("error", False)


def test_an_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    with make_proxy(f"http://127.0.0.1:{port}", tmp_path / "j") as proxy:
        status, _, data = call(proxy.port, SHAPES["chat"][1], body_of("chat", True))
    assert status == 502 and "failed" in json.loads(data)["error"]["message"]
    assert proxy.exchanges()[0].outcome == "error"


def test_connections_over_the_cap_get_503_and_the_proxy_recovers(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    with make_proxy(fake.base, tmp_path / "j", limits=Limits(max_connections=2)) as proxy:
        held = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(2)]
        time.sleep(0.2)  # let the server accept both (no event to await on its side)
        assert _raw(proxy.port, b"GET /anthropic/v1/models HTTP/1.1\r\n\r\n").startswith(
            b"HTTP/1.1 503 "
        )
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while True:  # the held slots are released once their handlers see the close
            status = call(proxy.port, SHAPES["anthropic"][1], body_of("anthropic", False))[0]
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert status == 200
