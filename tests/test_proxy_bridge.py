"""The proxy on a Unix socket, and the in-sandbox bridge (docs/spec/proxy.md §10).

Real sockets, real subprocesses and, for the sandboxed checks, real bubblewrap with its own
network namespace: the agent reaches the proxy through the bridge's 127.0.0.1:8377 and
nothing else (not the host's 127.0.0.1, not a public address), a forward-proxy request is
refused and recorded, the agent's status and signals pass through the bridge unchanged.
The bridge's own properties (half-close, bounds, idle time-out, start order, exit) are
checked unsandboxed, where they are the same and quicker to set up.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.orchestrate.proc import run_process
from harness.orchestrate.proxy import Limits, ProxyServer
from harness.orchestrate.proxy.bridge import DEFAULT_PORT, MODULE, bridge_argv
from harness.orchestrate.proxy.server import SocketPathError
from harness.orchestrate.replay import Journal
from harness.orchestrate.sandbox import BatchDirs, Sandbox, Settings, probe

from .fake_model_server import FakeModelServer
from .proxy_helpers import SHAPES, allow_list, body_of

needs_bwrap = pytest.mark.skipif(
    not probe().available, reason=f"bubblewrap cannot sandbox here: {probe().reason}"
)
PY = sys.executable


def _unix_proxy(base: str, tmp: Path, sock: Path) -> ProxyServer:
    return ProxyServer(allow_list(base), Journal(tmp / "j", "live"), unix_path=sock).start()


def _free_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return int(probe_socket.getsockname()[1])


def _wait_for(check: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def _unix_post(sock: Path, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(sock))
        client.sendall(
            b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
        )
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# -- the proxy on a Unix socket -------------------------------------------------------------


def test_unix_proxy_socket_is_0600_even_under_umask_0_and_removed_on_close(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    sock = tmp_path / "model.sock"
    old = os.umask(0)  # without the chmod the socket would be 0777: anyone could connect
    try:
        proxy = _unix_proxy(fake.base, tmp_path, sock)
    finally:
        os.umask(old)
    try:
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        assert proxy.unix_path == sock
        with pytest.raises(ValueError, match="no port"):
            _ = proxy.port
        assert proxy.base_url("anthropic", port=DEFAULT_PORT) == "http://127.0.0.1:8377/anthropic"
        answer = _unix_post(sock, body_of("anthropic", False))
        assert answer.startswith(b"HTTP/1.1 200 ") and b"x-harness-source: live" in answer
    finally:
        proxy.close()
    assert not os.path.lexists(sock)
    (record,) = proxy.exchanges()
    assert (record.outcome, record.journaled, record.route) == ("answered", True, "anthropic")


def test_a_stale_socket_of_ours_is_replaced(fake: FakeModelServer, tmp_path: Path) -> None:
    sock = tmp_path / "model.sock"
    with socket.socket(socket.AF_UNIX) as old:
        old.bind(str(sock))  # closed without unlinking: what a killed proxy leaves
    assert sock.is_socket()
    with _unix_proxy(fake.base, tmp_path, sock):
        assert _unix_post(sock, body_of("anthropic", False)).startswith(b"HTTP/1.1 200 ")
    assert not os.path.lexists(sock)


def test_a_live_socket_is_refused_and_left_alone(fake: FakeModelServer, tmp_path: Path) -> None:
    sock = tmp_path / "model.sock"
    with _unix_proxy(fake.base, tmp_path, sock):
        with pytest.raises(SocketPathError, match="live socket"):
            ProxyServer(allow_list(fake.base), Journal(tmp_path / "j2", "live"), unix_path=sock)
        # the first proxy still owns and serves the path
        assert _unix_post(sock, body_of("anthropic", False)).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("kind", ["file", "folder", "symlink"])
def test_anything_else_at_the_path_is_refused_and_kept(
    fake: FakeModelServer, tmp_path: Path, kind: str
) -> None:
    sock = tmp_path / "model.sock"
    if kind == "file":
        sock.write_text("keep me")
    elif kind == "folder":
        sock.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(tmp_path / "elsewhere.sock"))
        sock.symlink_to(tmp_path / "elsewhere.sock")  # a link to a stale socket: still no
    with pytest.raises(SocketPathError, match="not a socket of ours"):
        ProxyServer(allow_list(fake.base), Journal(tmp_path / "j", "live"), unix_path=sock)
    assert os.path.lexists(sock)
    if kind == "file":
        assert sock.read_text() == "keep me"


def test_a_socket_path_longer_than_sun_path_works(fake: FakeModelServer, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    sock = deep / "model.sock"
    assert len(str(sock)) > 108
    with _unix_proxy(fake.base, tmp_path, sock):
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        child = "import sys; print(sys.argv[1])"
        port = _free_port()
        argv = bridge_argv(PY, sock, port, [PY, "-c", _client(port) + child, "x"])
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout.splitlines()[0])["status"] == 200
    assert not os.path.lexists(sock)


def test_the_unix_proxy_keeps_the_deadline_and_the_connection_bound(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    sock = tmp_path / "model.sock"
    limits = Limits(request_deadline_s=1.5, max_connections=1)
    journal = Journal(tmp_path / "j", "live")
    with (
        ProxyServer(allow_list(fake.base), journal, limits=limits, unix_path=sock),
        socket.socket(socket.AF_UNIX) as silent,
        socket.socket(socket.AF_UNIX) as extra,
    ):
        silent.settimeout(10)
        silent.connect(str(sock))
        silent.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\n")  # and no more
        extra.settimeout(10)
        extra.connect(str(sock))
        assert extra.recv(4096).startswith(b"HTTP/1.1 503 ")  # one connection at most
        started = time.monotonic()
        while silent.recv(4096):  # the watchdog shuts the trickling one
            pass
        assert time.monotonic() - started < 8


def test_the_tcp_proxy_is_unchanged(fake: FakeModelServer, tmp_path: Path) -> None:
    with ProxyServer(allow_list(fake.base), Journal(tmp_path / "j", "live")) as proxy:
        assert proxy.unix_path is None and proxy.port > 0
        assert proxy.base_url("openai") == f"http://127.0.0.1:{proxy.port}/openai"


# -- the bridge, unsandboxed -----------------------------------------------------------------


def _client(port: int) -> str:
    """Child code: one POST through the bridge; prints {"status", "source", "body"} as JSON."""
    body = body_of("anthropic", False)
    return textwrap.dedent(f"""
        import http.client, json
        c = http.client.HTTPConnection("127.0.0.1", {port}, timeout=20)
        c.request("POST", "/anthropic/v1/messages", body={json.dumps(json.dumps(body))})
        r = c.getresponse()
        print(json.dumps({{"status": r.status, "source": r.getheader("x-harness-source"),
                           "body": r.read().decode()}}), flush=True)
    """)


def test_bridge_argv_is_the_contract() -> None:
    assert bridge_argv("/py", Path("/io/model.sock"), 8377, ["claude", "-p", "--x"]) == [
        "/py", "-P", "-m", "harness.orchestrate.proxy.bridge",
        "--socket", "/io/model.sock", "--port", "8377", "--", "claude", "-p", "--x",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        bridge_argv("/py", Path("/s"), 8377, [])
    with pytest.raises(ValueError):
        bridge_argv("/py", Path("/s"), 0, ["x"])


def test_bridge_relays_and_keeps_stdin_env_and_exit_status(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    sock = tmp_path / "model.sock"
    port = _free_port()
    code = _client(port) + textwrap.dedent("""
        import os, sys
        print(sys.stdin.read().strip(), os.environ.get("BRIDGE_MARK"), flush=True)
        raise SystemExit(3)
    """)
    env = {**os.environ, "BRIDGE_MARK": "marked"}
    with _unix_proxy(fake.base, tmp_path, sock) as proxy:
        done = subprocess.run(
            bridge_argv(PY, sock, port, [PY, "-c", code]), input=b"the prompt\n",
            capture_output=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        assert proxy.wait_idle()
    assert done.returncode == 3, done.stderr.decode()
    first, second = done.stdout.decode().splitlines()
    answer = json.loads(first)
    assert (answer["status"], answer["source"]) == (200, "live")
    assert json.loads(answer["body"])["type"] == "message"
    assert second == "the prompt marked"
    (record,) = proxy.exchanges()
    assert (record.outcome, record.journaled, record.api) == (
        "answered", True, "anthropic-messages",
    )  # fmt: skip


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_signal_death_comes_back_as_128_plus_n(tmp_path: Path, signum: int) -> None:
    code = f"import os; os.kill(os.getpid(), {int(signum)})"
    argv = bridge_argv(PY, tmp_path / "none.sock", _free_port(), [PY, "-c", code])
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.returncode == 128 + signum, done.stderr.decode()


TRAP = textwrap.dedent("""
    import os, signal, sys, time
    folder = sys.argv[1]
    def on(signum, frame):
        with open(os.path.join(folder, "got"), "a") as fh:
            fh.write(signal.Signals(signum).name + "\\n")
        if frame is not None and frame.f_code.co_name == "on":
            return  # a second signal during the orderly exit below: recorded, and that is all
        time.sleep(0.5)  # an orderly exit takes a while: a duplicate signal would show
        raise SystemExit(7)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on)
    open(os.path.join(folder, "ready"), "w").close()
    time.sleep(60)
    raise SystemExit(1)
""")
"""A child that traps SIGTERM/SIGINT/SIGHUP, logs each one to ``<folder>/got`` and exits 7."""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_bridge_reaches_the_child(tmp_path: Path, signum: int) -> None:
    argv = bridge_argv(PY, tmp_path / "none.sock", _free_port(), [PY, "-c", TRAP, str(tmp_path)])
    bridge = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        _wait_for((tmp_path / "ready").exists)
        bridge.send_signal(signum)  # to the bridge alone, not its group
        assert bridge.wait(timeout=20) == 7
    finally:
        bridge.kill()
        bridge.wait()
    assert (tmp_path / "got").read_text() == signal.Signals(signum).name + "\n"


def test_the_child_starts_only_once_the_port_listens(tmp_path: Path) -> None:
    port = _free_port()
    code = textwrap.dedent(f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
        print("connected")
    """)
    argv = bridge_argv(PY, tmp_path / "none.sock", port, [PY, "-c", code])
    for _ in range(3):  # a race would show as a refused connection now and then
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
        assert (done.returncode, done.stdout) == (0, b"connected\n"), done.stderr.decode()


def test_a_port_that_cannot_be_bound_fails_clearly_without_the_child(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        marker = tmp_path / "ran"
        code = f"open({str(marker)!r}, 'w').close()"
        argv = bridge_argv(PY, tmp_path / "none.sock", port, [PY, "-c", code])
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.returncode == 125
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr.decode()
    assert not marker.exists()


def test_a_missing_program_is_127(tmp_path: Path) -> None:
    argv = bridge_argv(PY, tmp_path / "s", _free_port(), [str(tmp_path / "no-such-program")])
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.returncode == 127 and b"cannot run" in done.stderr


class _UnixServer:
    """A Unix listener running ``serve(connection)`` per connection, in threads."""

    def __init__(self, path: Path, serve: Callable[[socket.socket], None]) -> None:
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.serve = serve
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self.serve, args=(connection,), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


@contextlib.contextmanager
def _bridge(tmp: Path, sock: Path, *extra: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A bridge whose child waits (until killed); yields (port, bridge) once it listens."""
    port = _free_port()
    child = [PY, "-c", TRAP, str(tmp)]
    argv = [PY, "-P", "-m", MODULE, "--socket", str(sock), "--port", str(port), *extra, "--"]
    bridge = subprocess.Popen([*argv, *child], stderr=subprocess.PIPE)
    try:
        _wait_for((tmp / "ready").exists)
        yield port, bridge
    finally:
        if bridge.poll() is None:
            bridge.terminate()  # forwarded: the child exits too, nothing is left behind
            try:
                bridge.wait(timeout=20)
            except subprocess.TimeoutExpired:
                bridge.kill()
        bridge.wait()
        if bridge.stderr is not None:
            bridge.stderr.close()


def _quiet(connection: socket.socket) -> None:
    with connection:
        while connection.recv(65536):
            pass


def test_half_close_is_passed_on_both_ways(tmp_path: Path) -> None:
    def count_then_answer(connection: socket.socket) -> None:
        with connection:
            size = 0
            while chunk := connection.recv(65536):  # ends only if the bridge passes the EOF
                size += len(chunk)
            connection.sendall(b"%d bytes" % size)  # after the client's half-close
            connection.shutdown(socket.SHUT_WR)

    sock = tmp_path / "echo.sock"
    server = _UnixServer(sock, count_then_answer)
    try:
        with (
            _bridge(tmp_path, sock) as (port, _),
            socket.create_connection(("127.0.0.1", port), timeout=10) as client,
        ):
            client.sendall(b"x" * 300_000)  # more than a buffer: backpressure on the way
            client.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
    finally:
        server.close()
    assert answer == b"300000 bytes"


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    sock = tmp_path / "quiet.sock"
    server = _UnixServer(sock, _quiet)
    try:
        with (
            _bridge(tmp_path, sock, "--idle-timeout", "0.5") as (port, _),
            socket.create_connection(("127.0.0.1", port), timeout=10) as client,
        ):
            started = time.monotonic()
            assert client.recv(1) == b""  # closed by the bridge, not by the server
            assert 0.4 < time.monotonic() - started < 8
    finally:
        server.close()


def test_connections_are_bounded(tmp_path: Path) -> None:
    sock = tmp_path / "quiet.sock"
    server = _UnixServer(sock, _quiet)
    try:
        with _bridge(tmp_path, sock, "--max-connections", "2") as (port, _):
            held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
            _wait_for(lambda: server.accepted == 2)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
                refused = third.recv(4096)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"x-should-retry: false" in refused
            held[0].close()  # a slot frees when a connection ends
            _wait_for(lambda: _relayed(port), 10)
            for connection in held[1:]:
                connection.close()
    finally:
        server.close()
    assert server.accepted >= 3


def _relayed(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.settimeout(0.3)
        try:
            client.recv(1)  # a 503 (or a close) comes at once; a relayed connection stays silent
        except TimeoutError:
            return True
        return False


def test_open_connections_never_delay_the_childs_exit(tmp_path: Path) -> None:
    sock = tmp_path / "quiet.sock"
    server = _UnixServer(sock, _quiet)
    try:
        with _bridge(tmp_path, sock) as (port, bridge):
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            _wait_for(lambda: server.accepted == 1)
            bridge.send_signal(signal.SIGTERM)  # the child exits 7; the relay is still open
            started = time.monotonic()
            assert bridge.wait(timeout=10) == 7
            assert time.monotonic() - started < 5
            assert client.recv(1) == b""  # closed by the bridge on its way out
            client.close()
    finally:
        server.close()


def test_a_stream_passes_the_bridge_before_the_upstream_finishes(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    fake.gate = threading.Event()
    sock = tmp_path / "model.sock"
    with _unix_proxy(fake.base, tmp_path, sock) as proxy, _bridge(tmp_path, sock) as (port, _):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        connection.request(
            "POST", SHAPES["anthropic"][1], body=json.dumps(body_of("anthropic", True))
        )
        response = connection.getresponse()
        first = response.read1(65536)  # while the upstream is held after its first event
        assert first.startswith(b"event: message_start\n")
        assert proxy.exchanges() == []
        fake.gate.set()
        rest = response.read()
        connection.close()
        assert proxy.wait_idle()
    assert (first + rest).endswith(b'data: {"type":"message_stop"}\n\n')
    (record,) = proxy.exchanges()
    assert record.stream and record.journaled


# -- the bridge in bubblewrap ---------------------------------------------------------------

SANDBOXED = textwrap.dedent("""
    import http.client, json, os, socket, sys, urllib.request
    info = json.loads(sys.argv[1])
    out = {}
    c = http.client.HTTPConnection("127.0.0.1", 8377, timeout=20)
    c.request("POST", "/anthropic/v1/messages", body=info["body"])
    r = c.getresponse()
    out["model"] = [r.status, r.getheader("x-harness-source"), json.loads(r.read())["type"]]

    def attempt(host, port):
        try:
            socket.create_connection((host, port), timeout=3).close()
            return "connected"
        except OSError as exc:
            return type(exc).__name__
    out["host_loopback"] = attempt("127.0.0.1", info["fake_port"])
    out["public"] = attempt("1.1.1.1", 443)

    # a client honouring HTTPS_PROXY / HTTP_PROXY: a CONNECT tunnel and an absolute URI
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(
        {"https": "http://127.0.0.1:8377", "http": "http://127.0.0.1:8377"}))
    def fetch(url):
        try:
            return opener.open(url, timeout=10).status
        except urllib.error.HTTPError as exc:
            return exc.code
        except urllib.error.URLError as exc:
            return str(exc.reason)
    out["connect"] = fetch("https://api.example.com/v1/messages")
    out["absolute"] = fetch("http://api.example.com/v1/messages")
    print(json.dumps(out), flush=True)
    raise SystemExit(5)
""")


def _sandboxed(tmp: Path) -> tuple[Sandbox, BatchDirs]:
    repo, state = tmp / "repo", tmp / "state"
    for folder in (repo, state):
        folder.mkdir()
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=tmp / "keys")
    dirs = BatchDirs(tmp / "work" / "b1")
    dirs.create()
    dirs.tree.mkdir()
    return sandbox, dirs


@needs_bwrap
def test_a_sandboxed_agent_reaches_the_proxy_and_nothing_else(
    fake: FakeModelServer, tmp_path: Path
) -> None:
    sandbox, dirs = _sandboxed(tmp_path)
    profile, env = sandbox.agent(dirs, programs=[PY], network=False)
    assert (profile.kind, profile.network) == ("bwrap", False)
    assert "net" in profile.namespaces
    sock = dirs.io / "model.sock"
    info = {"body": json.dumps(body_of("anthropic", False)), "fake_port": fake.port}
    child = [PY, "-P", "-c", SANDBOXED, json.dumps(info)]
    argv = sandbox.argv(profile, bridge_argv(PY, sock, DEFAULT_PORT, child))
    with _unix_proxy(fake.base, tmp_path, sock) as proxy:
        result = run_process(argv, cwd=dirs.tree, timeout_s=60, env=env, sandboxed=True)
        assert proxy.wait_idle()
    assert result.exit_code == 5, result.stderr.decode()
    seen = json.loads(result.stdout)
    assert seen["model"] == [200, "live", "message"]
    # the same connection from the host reaches the fake server: the sandbox is what stops it
    socket.create_connection(("127.0.0.1", fake.port), timeout=3).close()
    assert seen["host_loopback"] == "ConnectionRefusedError"
    assert seen["public"] in ("OSError", "TimeoutError", "ConnectionRefusedError")
    assert "403" in str(seen["connect"]) and seen["absolute"] == 403
    records = proxy.exchanges()
    assert [(r.outcome, r.status) for r in records] == [
        ("answered", 200), ("refused", 403), ("refused", 403),
    ]  # fmt: skip
    assert records[0].journaled and "CONNECT api.example.com:443" in (records[1].reason or "")
    assert "absolute URIs are refused" in (records[2].reason or "")
    assert len(fake.seen) == 1  # only the allow-listed exchange reached the upstream


@needs_bwrap
def test_a_sandboxed_agent_gets_the_supervisors_sigterm_through_the_bridge(
    tmp_path: Path,
) -> None:
    sandbox, dirs = _sandboxed(tmp_path)
    profile, env = sandbox.agent(dirs, programs=[PY], network=False)
    child = [PY, "-P", "-c", TRAP, str(dirs.io)]
    argv = sandbox.argv(profile, bridge_argv(PY, dirs.io / "model.sock", DEFAULT_PORT, child))
    result = run_process(argv, cwd=dirs.tree, timeout_s=3, grace_s=10, env=env, sandboxed=True)
    assert result.timed_out and result.exit_code == 7, result.stderr.decode()
    assert (dirs.io / "got").read_text().startswith("SIGTERM\n")


INSIDE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    folder = sys.argv[1]
    def on(signum, frame):
        with open(os.path.join(folder, "got"), "a") as fh:
            fh.write(signal.Signals(signum).name + "\\n")
        raise SystemExit(7)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on)
    open(os.path.join(folder, "ready"), "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(folder, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # margin for a (wrongly) forwarded SIGHUP to land first
    # a process inside the sandbox signals the bridge (this child's parent): forwarded
    subprocess.run(["kill", "-TERM", str(os.getppid())], check=True)
    time.sleep(30)
    raise SystemExit(1)
""")


def _bridge_pid(leader: int) -> int:
    from harness.orchestrate.supervise.procfs import descendants

    for pid in descendants(leader):
        with contextlib.suppress(OSError):
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if words[1:4] == [b"-P", b"-m", MODULE.encode()]:  # not bwrap's own (same argv)
                return pid
    raise AssertionError("no bridge below bubblewrap")


@needs_bwrap
def test_in_the_sandbox_only_signals_the_agent_did_not_get_itself_are_forwarded(
    tmp_path: Path,
) -> None:
    sandbox, dirs = _sandboxed(tmp_path)
    profile, env = sandbox.agent(dirs, programs=[PY, "kill"], network=False)
    child = [PY, "-P", "-c", INSIDE, str(dirs.io)]
    argv = sandbox.argv(profile, bridge_argv(PY, dirs.io / "model.sock", DEFAULT_PORT, child))
    leader = subprocess.Popen(argv, env=env, cwd=dirs.tree, start_new_session=True)
    try:
        _wait_for((dirs.io / "ready").exists)
        # from the host, to the bridge alone: a sender outside the PID namespace is the
        # supervisor, which signals the agent itself (runtime.md §14.5): not forwarded
        os.kill(_bridge_pid(leader.pid), signal.SIGHUP)
        (dirs.io / "go").touch()
        assert leader.wait(timeout=30) == 7
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
    assert (dirs.io / "got").read_text() == "SIGTERM\n"  # the inside one only


def test_an_unreachable_proxy_closes_the_connection_and_says_so(tmp_path: Path) -> None:
    with _bridge(tmp_path, tmp_path / "absent.sock") as (port, bridge):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET /anthropic/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(1) == b""  # closed: no proxy behind the bridge
        bridge.terminate()
        assert bridge.wait(timeout=20) == 7  # the child's status, as ever
        assert bridge.stderr is not None
        assert b"cannot reach the proxy at" in bridge.stderr.read()


@pytest.mark.parametrize(
    "extra", [["--port", "0"], ["--port", "x"], ["--max-connections", "0"], []],
    ids=["port-0", "port-text", "no-connections", "no-command"],
)  # fmt: skip
def test_a_bad_command_line_is_a_usage_error(tmp_path: Path, extra: list[str]) -> None:
    argv = [PY, "-P", "-m", MODULE, "--socket", str(tmp_path / "s"), *extra, "--"]
    if extra:
        argv += [PY, "-c", f"open({str(tmp_path / 'ran')!r}, 'w').close()"]
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.returncode == 2 and b"usage:" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_the_bridge_loads_neither_the_proxy_nor_http() -> None:
    """The bridge starts below every proxied agent: importing it must not load the server, the
    key code or the HTTP modules (the package's names are loaded on first use)."""
    probe = (
        "import sys, harness.orchestrate.proxy.bridge\n"
        "print(sorted(m for m in sys.modules if m.startswith(('harness.orchestrate.proxy', "
        "'http', 'harness.verify'))))"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert (
        done.stdout.strip() == "['harness.orchestrate.proxy', 'harness.orchestrate.proxy.bridge']"
    )
