"""Model exchanges as the runtime records them, from a real ``ProxyServer`` and the fake model.

``proxied_session`` drives one proxy (live, then a second one replaying the same journal)
through every outcome the proxy has: answered (plain, stream, an upstream 429), refused
(off-list route, absolute URI, bad body), a strict replay miss and an upstream error; the
records are built as ``orchestrate/runner/proxied.py`` builds them (``exchange_body``,
``source_body``), so the verifier's rules are held to what the proxy really reports.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.orchestrate.proxy import Exchange
from harness.orchestrate.runner.proxied import exchange_body, source_body

from .fake_model_server import FakeModelServer
from .proxy_helpers import allow_list, body_of, call, make_proxy

HEX = "ab" * 32


@dataclass(frozen=True)
class Session:
    """One proxied batch: its egress (the profile member) and its exchanges, in seq order."""

    batch: str
    egress: list[dict[str, object]]
    exchanges: list[Exchange]

    def bodies(self) -> list[dict[str, Any]]:
        return [exchange_body(self.batch, e) for e in self.exchanges]

    def sources(self) -> list[dict[str, Any]]:
        return [source_body(self.batch, e) for e in self.exchanges if e.outcome == "answered"]


def _raw(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        while sock.recv(65536):
            pass


def live_session(fake: FakeModelServer, journal: Path, batch: str = "b1") -> Session:
    """Answered (anthropic plain and stream, chat stream, responses, an upstream 429) and
    refused (an off-list route, an absolute URI, a body that is not JSON) exchanges."""
    with make_proxy(fake.base, journal) as proxy:
        port = proxy.port
        for shape, stream in (("anthropic", False), ("anthropic", True), ("chat", True)):
            path = {"anthropic": "/anthropic/v1/messages", "chat": "/openai/v1/chat/completions"}
            headers = {"anthropic-version": "2023-06-01", "x-api-key": "agent-key"}
            status, _, _ = call(port, path[shape], body_of(shape, stream), headers)
            assert status == 200
        assert call(port, "/openai/v1/responses", body_of("responses", False))[0] == 200
        assert call(port, "/openai/v1/responses", {"model": "status-429", "input": "x"})[0] == 429
        assert call(port, "/google/v1/models", {"x": 1})[0] == 403
        _raw(port, b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        assert call(port, "/anthropic/v1/messages", b"not json")[0] == 400
    exchanges = proxy.exchanges()
    return Session(batch, allow_list(fake.base).describe(), list(exchanges))


def replay_session(fake: FakeModelServer, journal: Path, batch: str = "b2") -> Session:
    """Strict replay of ``live_session``'s journal: journal answers and one replay miss."""
    with make_proxy(fake.base, journal, "replay") as proxy:
        port = proxy.port
        headers = {"anthropic-version": "2023-06-01"}
        status, _, _ = call(port, "/anthropic/v1/messages", body_of("anthropic", False), headers)
        assert status == 200
        assert call(port, "/openai/v1/responses", body_of("responses", False))[0] == 200
        assert call(port, "/openai/v1/responses", {"model": "gpt-x", "input": "new"})[0] == 502
    return Session(batch, allow_list(fake.base).describe(), list(proxy.exchanges()))


def error_session(journal: Path, batch: str = "b3") -> Session:
    """An upstream that is not there: outcome ``error``, status 502."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with make_proxy(dead, journal) as proxy:
        assert call(proxy.port, "/openai/v1/responses", body_of("responses", False))[0] == 502
    return Session(batch, allow_list(dead).describe(), list(proxy.exchanges()))
