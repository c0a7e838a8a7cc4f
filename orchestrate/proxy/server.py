"""The recording model proxy: a 127.0.0.1 HTTP server that is the agent's only way out.

``ProxyServer(allow, journal)`` listens on 127.0.0.1 (port 0: any free port) and forwards
``/<route>/<path>`` to the allow-listed upstream of that route, injecting the upstream's
credential, recording every answer in the replay journal (``orchestrate/replay.Journal``:
request and response bodies as content-addressed blobs, streams as the exact bytes streamed)
and reporting each exchange (``Exchange``) to ``on_exchange`` and ``exchanges()``.

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
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

from ..replay import Journal
from .exchange import Exchange
from .handler import KEY_HEADER, SOURCE_HEADER, Handler
from .limits import Limits, Watchdog
from .upstream import AllowList

__all__ = ["KEY_HEADER", "SOURCE_HEADER", "Limits", "ProxyServer"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    proxy: ProxyServer

    def __init__(self, proxy: ProxyServer) -> None:
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(proxy.limits.max_connections)
        super().__init__(("127.0.0.1", proxy.requested_port), Handler)

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


class ProxyServer:
    """The recording proxy: ``start()``, then ``base_url(route)``; ``close()`` when done."""

    def __init__(
        self,
        allow: AllowList,
        journal: Journal,
        *,
        port: int = 0,
        limits: Limits | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.allow = allow
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
        self._server = _Server(self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def base_url(self, route: str) -> str:
        """``http://127.0.0.1:P/<route>`` (what the agent's base-URL variable is set to)."""
        return f"http://127.0.0.1:{self.port}/{route}"

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
