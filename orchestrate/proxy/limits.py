"""The proxy's bounds, and the watchdog that enforces the request deadline (slowloris).

A per-read socket timeout does not stop a client that trickles one byte just before each
timeout; the watchdog gives every request one deadline for its whole head and body and shuts
the connection when it passes (docs/spec/proxy.md §6).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from typing import Protocol


class Watched(Protocol):
    """What the watchdog needs of a request handler."""

    connection: socket.socket
    expired: bool


@dataclass(frozen=True)
class Limits:
    """The proxy's bounds (docs/spec/proxy.md §6)."""

    max_body: int = 16 * 1024 * 1024
    max_response: int = 64 * 1024 * 1024
    request_deadline_s: float = 30.0
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    exchange_deadline_s: float = 1800.0
    max_concurrent: int = 16
    queue_wait_s: float = 30.0
    max_connections: int = 64


class Watchdog:
    """Shuts connections that have not delivered a whole request by their deadline."""

    def __init__(self, interval: float) -> None:
        self._lock = threading.Lock()
        self._armed: dict[int, tuple[float, Watched]] = {}
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, name="proxy-watchdog", daemon=True)
        self._thread.start()

    def arm(self, handler: Watched, seconds: float) -> None:
        with self._lock:
            self._armed[id(handler)] = (time.monotonic() + seconds, handler)

    def disarm(self, handler: Watched) -> bool:
        """Disarm; False if the deadline already fired."""
        with self._lock:
            self._armed.pop(id(handler), None)
            return not handler.expired

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            now = time.monotonic()
            with self._lock:
                due = [h for deadline, h in self._armed.values() if deadline <= now]
                for handler in due:
                    del self._armed[id(handler)]
                    handler.expired = True
            for handler in due:
                with contextlib.suppress(OSError):
                    handler.connection.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
