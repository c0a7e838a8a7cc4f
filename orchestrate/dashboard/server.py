"""Serve the dashboard with uvicorn on one socket we bind ourselves.

Binding first (``port=0`` picks a free port) lets the app know its real port for the Host
check, and lets us print the one line scripts wait for, ``dashboard: http://HOST:PORT/``,
only once uvicorn is accepting connections. SIGTERM and SIGINT end the server gracefully:
live event streams are told to finish (``Dashboard.stopping``), connections get
``GRACE_S`` to close, and the process exits 0 (uvicorn's default re-raises the signal after
shutdown, which would make the exit status the signal's; the brief wants 0).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Final, TextIO

import uvicorn

from .app import create_app
from .security import is_loopback

GRACE_S: Final = 3


def display_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, line: str, out: TextIO, stopping: Any) -> None:
        super().__init__(config)
        self._line = line
        self._out = out
        self._stopping = stopping

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self._line, file=self._out, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._stopping.set()
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def serve(
    repo: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8799,
    token: str | None = None,
    allow_control: bool = False,
    keys_dir: Path | None = None,
    out: TextIO | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status (0). Refuses (ValueError) a
    non-loopback host without a token: the caller checks first and says why."""
    if token is None and not is_loopback(host):
        raise ValueError(f"binding {host} (not loopback) needs a token")
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    app = create_app(
        repo, allow_control=allow_control, token=token, host=host, port=bound, keys_dir=keys_dir
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=GRACE_S,
        server_header=False,
    )
    line = f"dashboard: http://{display_host(host)}:{bound}/"
    server = _Server(config, line, out or sys.stdout, app.state.dashboard.stopping)
    try:
        server.run(sockets=[sock])
    finally:
        app.state.dashboard.evidence.close()
        sock.close()
    return 0
