"""A worker's relay: the sandbox's ``<io>/model.sock``, forwarded to the coordinator's proxy.

On a Ray worker the agent of a proxied batch runs in a sandbox without network, below the
in-sandbox bridge (``harness.orchestrate.proxy.bridge``), which relays its TCP connections
on ``127.0.0.1:8377`` to ``<io>/model.sock``. The recording proxy itself runs on the
coordinator (keys, journal and evidence never leave it, runtime.md §18); this relay, a thread
of the worker OUTSIDE the sandbox, accepts on that socket (mode 0600, made before it listens)
and forwards each connection over TCP to the proxy's ``host:port``. The agent thus reaches
the coordinator's proxy and nothing else; the proxy admits only requests that carry the
batch's access token.

Each connection is pumped by the bridge's own relay code (``bridge._Relay``: half-close
aware, 64 KiB per direction, an idle timeout); at most ``MAX_CONNECTIONS`` at once (one more
gets a 503 and is closed), the TCP connect bounded by ``CONNECT_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
from pathlib import Path
from typing import Final

from ..proxy.bridge import _OVERLOADED, CONNECT_TIMEOUT_S, IDLE_TIMEOUT_S, MAX_CONNECTIONS, _Relay
from ..proxy.server import bindable

__all__ = ["SocketRelay", "TcpTarget", "parse_address"]

_ACCEPT_POLL_S: Final = 0.5


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` -> ``(host, port)``; ValueError for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"proxy address {address!r} is not host:port")
    return host, int(port)


class TcpTarget:
    """Where relayed connections go: the coordinator's proxy (``_Relay``'s target face)."""

    def __init__(self, address: str) -> None:
        self.host, self.port = parse_address(address)
        self.path = address  # named in the relay's failure message

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            raise
        return sock


class SocketRelay:
    """Accepts on a Unix socket at ``path`` and relays each connection to ``address``."""

    def __init__(
        self, path: Path, address: str, *, most: int = MAX_CONNECTIONS,
        idle_s: float = IDLE_TIMEOUT_S,
    ) -> None:  # fmt: skip
        self.path = path
        self.target = TcpTarget(address)
        self.idle_s = idle_s
        self.failures: list[str] = []
        self._slots = threading.Semaphore(most)
        self._relays: list[_Relay] = []
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address_text, folder = bindable(path)
        try:
            self._listener.bind(address_text)
            os.chmod(path, 0o600)  # before listen(): nobody connects while it is the umask's
            self._listener.listen(64)
            self._listener.setblocking(False)
        except BaseException:
            self._listener.close()
            for fd in (self._stop_r, self._stop_w):
                os.close(fd)
            raise
        finally:
            if folder is not None:
                os.close(folder)
        self._thread = threading.Thread(target=self._serve, name="relay", daemon=True)
        self._stopped = False

    def start(self) -> SocketRelay:
        self._thread.start()
        return self

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._stop_r, selectors.EVENT_READ)
            while True:
                events = selector.select(timeout=_ACCEPT_POLL_S)
                if any(key.fileobj == self._stop_r for key, _ in events):
                    return
                if not events:
                    continue
                try:
                    client, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError, OSError):
                    continue
                if not self._slots.acquire(blocking=False):
                    with contextlib.suppress(OSError):
                        client.settimeout(1.0)
                        client.sendall(_OVERLOADED)
                    client.close()
                    continue
                relay = _Relay(client, self.idle_s)
                with self._lock:
                    self._relays = [r for r in self._relays if r.client.fileno() != -1]
                    self._relays.append(relay)
                thread = threading.Thread(
                    target=relay.run, args=(self.target, self._slots, self.failures), daemon=True
                )
                thread.start()

    def stop(self) -> None:
        """After the agent exited: stop accepting, close every connection, remove the socket."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            for relay in self._relays:
                relay.close()
        self._listener.close()
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
