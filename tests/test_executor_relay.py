"""The worker's relay (orchestrate/executors/relay.py) and the proxy's host binding, without
Ray: real Unix and TCP sockets on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.orchestrate.executors.relay import SocketRelay, parse_address
from harness.orchestrate.proxy import AllowList, ProxyServer
from harness.orchestrate.replay import Journal


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers each connection with ``got:`` + what it read."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(b"got:" + data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    server.close()


def _ask(path: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # half-close: passed on, the answer still comes back
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_the_relay_forwards_each_connection_and_cleans_up(tmp_path: Path, echo: int) -> None:
    path = tmp_path / "model.sock"
    relay = SocketRelay(path, f"127.0.0.1:{echo}").start()
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert _ask(path, b"one") == b"got:one"
        assert _ask(path, b"x" * 200_000) == b"got:" + b"x" * 200_000
    finally:
        relay.stop()
    assert not path.exists()
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))


def test_an_unreachable_proxy_closes_the_connection_and_says_why(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed below: nothing listens there
    path = tmp_path / "model.sock"
    relay = SocketRelay(path, f"127.0.0.1:{port}").start()
    try:
        with contextlib.suppress(ConnectionResetError):  # or reset, our bytes unread
            assert _ask(path, b"hello") == b""  # closed at once, nothing relayed
    finally:
        relay.stop()
    assert relay.failures and "refused" in relay.failures[0].lower()


@pytest.mark.parametrize("bad", ["", "host", ":80", "h:0", "h:65536", "h:x"])
def test_a_malformed_proxy_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_address(bad)


def test_a_proxy_off_loopback_needs_an_access_token(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", "live")
    with pytest.raises(ValueError, match="access token"):
        ProxyServer(AllowList([]), journal, host="0.0.0.0")
    server = ProxyServer(AllowList([]), journal, host="127.0.0.1")  # loopback: as before
    server.close()


def test_the_agents_variables_name_a_remote_proxys_host() -> None:
    from harness.orchestrate.modelroutes import BUILTIN_ROUTES
    from harness.orchestrate.runner.proxied import agent_env

    routes = [BUILTIN_ROUTES["anthropic"], BUILTIN_ROUTES["openai"]]
    env = agent_env(routes, 4100, adapter="goose", key="tok", host="10.1.2.3")
    assert env["ANTHROPIC_BASE_URL"] == "http://10.1.2.3:4100/anthropic"
    assert env["OPENAI_HOST"] == "http://10.1.2.3:4100/openai/"
    assert env["HTTPS_PROXY"] == "http://10.1.2.3:4100"
    assert env["NO_PROXY"] == "10.1.2.3,127.0.0.1,localhost"  # the base URLs go direct
    assert env["ANTHROPIC_API_KEY"] == env["OPENAI_API_KEY"] == "tok"


def test_the_proxy_host_is_the_coordinators_address_towards_the_cluster() -> None:
    from harness.orchestrate.executors.ray_executor import RayExecutor

    assert RayExecutor("127.0.0.1:6379").proxy_host() == "127.0.0.1"  # a local cluster
    assert RayExecutor("auto").proxy_host() == "127.0.0.1"  # not host:port
    assert RayExecutor("localhost:6379").proxy_host() == "127.0.0.1"
