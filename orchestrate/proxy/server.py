"""The recording model proxy: a 127.0.0.1 HTTP server that is the agent's only way out.

``ProxyServer(allow, journal)`` listens on 127.0.0.1 (port 0: any free port) and forwards
``/<route>/<path>`` to the allow-listed upstream of that route, injecting the upstream's
credential, recording every answer in the replay journal (``orchestrate/replay.Journal``:
request and response bodies as content-addressed blobs, streams as the exact bytes streamed)
and reporting each exchange (``Exchange``) to ``on_exchange`` and ``exchanges()``.

With ``unix_path`` it listens on an ``AF_UNIX`` stream socket there instead (created mode
0600, removed on close): a sandboxed agent reaches it through the in-sandbox bridge
(``bridge.py``), its only way out of a network namespace of its own.

Modes are the journal's: ``live`` asks the upstream; ``replay`` answers from the journal only
(no socket is opened; a miss is a 502 naming ``replay miss`` and the key), and with
``allow_live_miss`` a miss goes upstream and is marked ``live-miss``. Streams are passed
through as the upstream sends them (each read is written and flushed at once).

Bounds (``Limits``): request bodies, response bodies, the time to receive a whole request
(a watchdog shuts a connection that has not delivered its request in time: slowloris),
upstream connect and idle timeouts and a total deadline, concurrent exchanges and
connections. Bad input gets a JSON error; nothing a client sends crashes or hangs the proxy.
See docs/spec/proxy.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import stat
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from ..replay import Journal
from .exchange import Exchange
from .handler import KEY_HEADER, SOURCE_HEADER, Handler
from .limits import Limits, Watchdog
from .upstream import AllowList

__all__ = ["KEY_HEADER", "SOURCE_HEADER", "Limits", "ProxyServer", "SocketPathError"]

_SUN_PATH_MAX: Final = 107
"""Bytes of a socket path ``bind``/``connect`` take (``sun_path`` is 108 with its NUL)."""


class SocketPathError(OSError):
    """The Unix socket path is taken: not a stale socket of ours (or a live one)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    proxy: ProxyServer

    def __init__(
        self, proxy: ProxyServer, address: Any = None, handler: type[Handler] = Handler
    ) -> None:
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(proxy.limits.max_connections)
        super().__init__(address or (proxy.host, proxy.requested_port), handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\nx-should-retry: false\r\n\r\n"
                )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _UnixHandler(Handler):
    def setup(self) -> None:
        """``Handler.setup`` without ``TCP_NODELAY`` (a Unix socket has no Nagle to turn off)."""
        socketserver.StreamRequestHandler.setup(self)
        self.connection.settimeout(self.server.proxy.limits.request_deadline_s)


def bindable(path: Path) -> tuple[str, int | None]:
    """The address to bind or connect for ``path``, and a folder descriptor to close after.

    A path longer than ``sun_path`` (a deep batch folder) goes through the folder's descriptor:
    ``/proc/self/fd/<fd>/<name>`` names the same file, in a few bytes.
    """
    text = os.fspath(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX:
        return text, None
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{folder}/{path.name}", folder


def _claim(path: Path) -> None:
    """Make ``path`` free for our socket: absent, or a stale socket of ours (removed).

    Refused (``SocketPathError``): anything else at the path (a file, a folder, a symbolic
    link, another user's socket) and a socket something is listening on.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
        raise SocketPathError(f"{path} exists and is not a socket of ours: refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address, folder = bindable(path)
    try:
        probe.settimeout(1.0)
        probe.connect(address)
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: nothing listens on it any more
        return
    except OSError as exc:
        raise SocketPathError(f"{path}: cannot tell whether it is stale: {exc}") from exc
    finally:
        probe.close()
        if folder is not None:
            os.close(folder)
    raise SocketPathError(f"{path} is a live socket: another server listens on it")


class _UnixServer(_Server):
    """The proxy on an ``AF_UNIX`` stream socket at ``path`` (mode 0600, removed on close)."""

    address_family = socket.AF_UNIX

    def __init__(self, proxy: ProxyServer, path: Path) -> None:
        self.unix_path = path
        self._made: tuple[int, int] | None = None
        super().__init__(proxy, str(path), _UnixHandler)

    def server_bind(self) -> None:
        _claim(self.unix_path)
        address, folder = bindable(self.unix_path)
        try:
            self.socket.bind(address)
            # before listen(): nobody can connect while the mode is still the umask's
            os.chmod(self.unix_path, 0o600)
            info = os.lstat(self.unix_path)
        finally:
            if folder is not None:
                os.close(folder)
        self._made = (info.st_dev, info.st_ino)  # server_address stays the path we were given
        self.server_name, self.server_port = "localhost", 0

    def get_request(self) -> tuple[Any, Any]:
        request, _ = self.socket.accept()
        return request, (str(self.unix_path), 0)  # http.server wants a (host, port) pair

    def server_close(self) -> None:
        super().server_close()
        made, self._made = self._made, None
        if made is None:
            return
        with contextlib.suppress(OSError):
            info = os.lstat(self.unix_path)
            if (info.st_dev, info.st_ino) == made:  # ours still, not a newer one
                os.unlink(self.unix_path)


class ProxyServer:
    """The recording proxy: ``start()``, then ``base_url(route)``; ``close()`` when done.

    ``unix_path``: listen on a Unix socket there instead of TCP ``host:port``.
    ``access_token``: the credential every request must carry (see the attribute).
    ``host``: the TCP address to bind (default ``127.0.0.1``); any other address (the Ray
    executor's workers reach the coordinator's proxy over the network) is refused without
    an ``access_token`` (``ValueError``): a port other hosts reach must admit only the agent.
    """

    def __init__(
        self,
        allow: AllowList,
        journal: Journal,
        *,
        port: int = 0,
        limits: Limits | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        unix_path: Path | None = None,
        access_token: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        if unix_path is None and host != "127.0.0.1" and not access_token:
            raise ValueError(f"a proxy bound to {host} needs an access token")
        self.host = host
        self.allow = allow
        self.access_token = access_token
        """Set: a request must carry it as its credential (``x-api-key``, ``api-key`` or
        ``Authorization: Bearer``), else 403 (recorded): only the batch's own agent, which
        got it as its placeholder key, may use a proxy on a loopback port other local
        processes can reach. The proxy drops it like every credential."""
        self.journal = journal
        self.journal_lock = threading.Lock()
        self.limits = limits or Limits()
        self.requested_port = port
        self.on_exchange = on_exchange
        self.slots = threading.BoundedSemaphore(self.limits.max_concurrent)
        self._records: list[Exchange] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._busy = 0
        self._idle = threading.Condition()
        self.watchdog = Watchdog(min(0.1, self.limits.request_deadline_s / 4))
        self.unix_path = unix_path
        try:
            self._server: _Server = (
                _Server(self) if unix_path is None else _UnixServer(self, unix_path)
            )
        except BaseException:
            self.watchdog.stop()
            raise
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The TCP port (a Unix-socket proxy has none: ``ValueError``)."""
        if self.unix_path is not None:
            raise ValueError(f"the proxy listens on the Unix socket {self.unix_path}, no port")
        return int(self._server.server_address[1])

    def base_url(self, route: str, port: int | None = None) -> str:
        """``http://127.0.0.1:P/<route>`` (what the agent's base-URL variable is set to);
        ``port``: the bridge's port, for a Unix-socket proxy."""
        host = self.host if port is None else "127.0.0.1"
        return f"http://{host}:{self.port if port is None else port}/{route}"

    def start(self) -> ProxyServer:
        """Serve in a daemon thread (a second call is a no-op)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Counts an exchange from its request line until it is reported."""
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no exchange is in flight (every answered one is reported)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=timeout)

    def close(self) -> None:
        """Stop accepting, let exchanges in flight finish (bounded), and close."""
        if self._thread is not None:  # shutdown() waits for serve_forever, which never ran
            self._server.shutdown()
        self.wait_idle()
        self._server.server_close()
        self.watchdog.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def report(self, exchange: Exchange) -> None:
        with self._lock:
            self._records.append(exchange)
        if self.on_exchange is not None:
            self.on_exchange(exchange)

    def exchanges(self) -> list[Exchange]:
        """Every exchange so far, in the order they finished."""
        with self._lock:
            return sorted(self._records, key=lambda record: record.seq)
