"""The in-sandbox bridge: the agent's 127.0.0.1 port, relayed to the proxy's Unix socket.

A sandboxed agent runs in a network namespace of its own (``bwrap --unshare-net``): it has a
loopback interface and nothing else, so it cannot reach the host's 127.0.0.1 where a TCP proxy
would listen. The proxy listens on a Unix socket in the batch's io folder instead (mounted
into the sandbox), and this bridge, started by bubblewrap in place of the agent, listens on
``127.0.0.1:<port>`` inside the namespace, relays every TCP connection to a new connection on
that socket, and runs the agent as its child::

    python -P -m harness.orchestrate.proxy.bridge --socket S --port P -- argv...

* The listening socket is bound (``SO_REUSEADDR``) and listening before the child is started,
  so the agent's first request never races it; a port that cannot be bound ends the bridge
  with status 125 and a message, the child never started.
* The child gets the bridge's stdin, stdout, stderr and environment. SIGTERM, SIGINT and
  SIGHUP are forwarded to it (through a pidfd where the kernel has one: never to a recycled
  pid), once it has started if they came earlier; except one from a sender outside the
  bridge's PID namespace (``si_pid`` 0): in a sandbox that is the supervisor, which signals
  every process of the sandbox itself (runtime.md §14.5), so the child already has it.
* When the child exits, the bridge closes every connection and exits with the child's status,
  ``128 + n`` when it was killed by signal ``n`` (what a shell and bubblewrap report); 126/127
  when the program cannot be executed / is not found. Relays never delay that exit.
* Bounds: at most ``--max-connections`` (64) relayed connections at once (one more gets the
  proxy's own ``503`` and is closed), each closed after ``--idle-timeout`` (330 s: longer than
  the proxy's upstream idle timeout, 300 s) without a byte either way; at most 64 KiB buffered
  per direction; the connection to the socket must be accepted within 10 s.
* Half-close aware: the end of one side's data is passed on as ``shutdown(SHUT_WR)`` of the
  other, and the connection is closed once both directions have ended (or on an error).

Standard library only, and nothing of the harness is imported: it runs inside the sandbox,
with the harness package mounted read-only, like the scripted agent. docs/spec/proxy.md §10.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_PORT",
    "FORWARDED",
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MODULE",
    "bridge_argv",
    "exit_status",
    "main",
]

MODULE: Final = "harness.orchestrate.proxy.bridge"
DEFAULT_PORT: Final = 8377
MAX_CONNECTIONS: Final = 64
IDLE_TIMEOUT_S: Final = 330.0
CONNECT_TIMEOUT_S: Final = 10.0
FORWARDED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
BRIDGE_FAILED: Final = 125
_CHUNK: Final = 65536
_SUN_PATH_MAX: Final = 107
_OVERLOADED: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
    b"Connection: close\r\nx-should-retry: false\r\n\r\n"
)


def bridge_argv(python: str, socket: Path, port: int, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` behind a bridge from ``127.0.0.1:port`` to
    ``socket`` (``python`` is the interpreter that has the harness package)."""
    if not argv:
        raise ValueError("bridge_argv: no command to run")
    if not 0 < port < 65536:
        raise ValueError(f"bridge_argv: port {port} is not in 1..65535")
    return [python, "-P", "-m", MODULE, "--socket", str(socket), "--port", str(port), "--", *argv]


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: ``128 + n`` for a death by signal ``n``."""
    return 128 - returncode if returncode < 0 else returncode


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"harness bridge: {message}\n")
        sys.stderr.flush()


class _Target:
    """Where relayed connections go: the Unix socket, by a short name if its path is long."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._folder: int | None = None
        self.address = str(path)
        if len(os.fsencode(self.address)) > _SUN_PATH_MAX:
            self._folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            self.address = f"/proc/self/fd/{self._folder}/{path.name}"

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # a Unix connect() blocks while the server's backlog is full; SO_SNDTIMEO bounds it
            timeout = struct.pack("ll", int(CONNECT_TIMEOUT_S), 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeout)
            sock.connect(self.address)
        except BaseException:
            sock.close()
            raise
        return sock


class _Relay:
    """One accepted TCP connection and its connection on the Unix socket."""

    def __init__(self, client: socket.socket, idle_s: float) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.idle_s = idle_s

    def run(self, target: _Target, done: threading.Semaphore, failures: list[str]) -> None:
        try:
            try:
                self.upstream = target.connect()
            except OSError as exc:
                if len(failures) < 3:  # a few lines on the agent's stderr, not one per retry
                    failures.append(str(exc))
                    _say(f"cannot reach the proxy at {target.path}: {exc}")
                return
            self._pump(self.client, self.upstream)
        except (OSError, ValueError):
            pass  # a reset, or a socket shut (or closed: ValueError) by the bridge's exit
        finally:
            self.close()
            done.release()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        # per direction (source, sink): a buffer of at most one read, and whether it ended
        buffers = {client: bytearray(), upstream: bytearray()}
        ended = {client: False, upstream: False}
        passed = {client: False, upstream: False}  # EOF passed on as SHUT_WR of the sink
        peer = {client: upstream, upstream: client}
        for sock in (client, upstream):
            sock.setblocking(False)
        last = time.monotonic()
        with selectors.DefaultSelector() as selector:
            while not (passed[client] and passed[upstream]):
                wanted: dict[socket.socket, int] = {client: 0, upstream: 0}
                for source in (client, upstream):
                    if buffers[source]:
                        wanted[peer[source]] |= selectors.EVENT_WRITE
                    elif not ended[source]:
                        wanted[source] |= selectors.EVENT_READ
                for sock, events in wanted.items():
                    if events:
                        _set(selector, sock, events)
                    else:
                        with contextlib.suppress(KeyError):
                            selector.unregister(sock)
                left = self.idle_s - (time.monotonic() - last)
                if left <= 0:
                    return  # idle: no byte either way for idle_s
                for key, events in selector.select(timeout=left):
                    sock = client if key.fileobj is client else upstream
                    with contextlib.suppress(BlockingIOError, InterruptedError):  # spurious
                        if events & selectors.EVENT_READ:
                            data = sock.recv(_CHUNK)
                            if data:
                                buffers[sock] += data
                            else:
                                ended[sock] = True
                            last = time.monotonic()
                        if events & selectors.EVENT_WRITE:
                            source = peer[sock]
                            sent = sock.send(buffers[source])
                            del buffers[source][:sent]
                            last = time.monotonic()
                for source in (client, upstream):
                    if ended[source] and not buffers[source] and not passed[source]:
                        peer[source].shutdown(socket.SHUT_WR)
                        passed[source] = True

    def close(self) -> None:
        """Shut both sockets (wakes a relay blocked on them) and close them."""
        for sock in (self.client, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def _set(selector: selectors.BaseSelector, sock: socket.socket, events: int) -> None:
    try:
        selector.modify(sock, events)
    except KeyError:
        selector.register(sock, events)


class _Child:
    """The agent process, and the forwarding of signals to it (through a pidfd where the
    kernel has one, so never to a recycled pid)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None

    def start(self, argv: Sequence[str]) -> int | None:
        """Start the child; None, or the status to exit with when it could not be."""
        try:
            self.process = subprocess.Popen(  # the adapter's argv
                list(argv),
                preexec_fn=_unblock,  # noqa: PLW1509 - no other thread exists yet
            )
        except FileNotFoundError as exc:
            _say(f"cannot run {argv[0]!r}: {exc}")
            return 127
        except OSError as exc:
            _say(f"cannot run {argv[0]!r}: {exc}")
            return 126
        with contextlib.suppress(OSError, AttributeError):
            self.pidfd = os.pidfd_open(self.process.pid)
        threading.Thread(target=self._forward_signals, name="signals", daemon=True).start()
        return None

    def _forward_signals(self) -> None:
        """Forward every held signal, except those the child got (or sent) itself.

        A sender the bridge cannot see (``si_pid`` 0: outside its PID namespace, i.e. the
        supervisor, which signals every process of the sandbox itself, runtime.md §14.5; or
        the kernel) already reached the child: forwarding would deliver it twice, and a second
        SIGTERM can kill an agent in the middle of its orderly exit.
        """
        process = self.process
        assert process is not None
        while True:
            info = signal.sigwaitinfo(FORWARDED)
            if info.si_pid in (0, process.pid):
                continue
            with contextlib.suppress(ProcessLookupError, OSError):
                if self.pidfd is not None:
                    signal.pidfd_send_signal(self.pidfd, info.si_signo)
                elif process.returncode is None:
                    process.send_signal(info.si_signo)


def _unblock() -> None:
    """In the child, before exec: the signals the bridge holds are the child's to receive."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)


def _listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Relay 127.0.0.1:PORT to the proxy's Unix socket while running a command.",
    )
    parser.add_argument("--socket", required=True, type=Path, help="the proxy's Unix socket")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port to listen on")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS)
    parser.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- argv...")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("no command to run (after --)")
    if not 0 < args.port < 65536:
        parser.error(f"--port {args.port} is not in 1..65535")
    if args.max_connections < 1 or not args.idle_timeout > 0:
        parser.error("--max-connections must be >= 1 and --idle-timeout > 0")
    args.command = command
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bridge; the exit status is the child's (docs/spec/proxy.md §10)."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    # held from now on (every thread inherits the mask): one arriving before the child has
    # started waits, and is forwarded once it has
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        target = _Target(args.socket)
    except OSError as exc:
        _say(f"cannot open the folder of {args.socket}: {exc}")
        return BRIDGE_FAILED
    try:
        listener = _listen(args.port)
    except OSError as exc:
        _say(f"cannot listen on 127.0.0.1:{args.port}: {exc}")
        return BRIDGE_FAILED
    child = _Child()
    failed = child.start(args.command)
    if failed is not None:
        return failed
    try:
        return _serve(listener, target, child, args.max_connections, args.idle_timeout)
    except Exception as exc:  # a bug of ours must not orphan the agent or hide its status
        _say(f"relaying stopped: {type(exc).__name__}: {exc}")
        assert child.process is not None
        return exit_status(child.process.wait())
    finally:
        listener.close()


def _serve(
    listener: socket.socket, target: _Target, child: _Child, most: int, idle_s: float
) -> int:
    process = child.process
    assert process is not None
    slots = threading.Semaphore(most)
    relays: list[_Relay] = []
    failures: list[str] = []
    waiter: threading.Thread | None = None
    exited_r, exited_w = os.pipe()
    if child.pidfd is None:  # no pidfd (old kernel): a thread waits and says so on a pipe
        waiter = threading.Thread(target=lambda: (process.wait(), os.write(exited_w, b"x")))
        waiter.daemon = True
        waiter.start()
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        selector.register(
            child.pidfd if child.pidfd is not None else exited_r, selectors.EVENT_READ
        )
        while process.poll() is None:
            for key, _ in selector.select(timeout=1.0):
                if key.fileobj is not listener:
                    continue
                try:
                    client, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:  # out of descriptors: back off, the client waits
                    _say(f"accept failed: {exc}")
                    time.sleep(0.05)
                    continue
                if not slots.acquire(blocking=False):
                    with contextlib.suppress(OSError):
                        client.settimeout(1.0)
                        client.sendall(_OVERLOADED)
                    client.close()
                    continue
                try:
                    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:  # already reset by the client
                    client.close()
                    slots.release()
                    continue
                relay = _Relay(client, idle_s)
                relays = [r for r in relays if r.client.fileno() != -1]
                relays.append(relay)
                thread = threading.Thread(target=relay.run, args=(target, slots, failures))
                thread.daemon = True  # never waited for: the child's exit ends the bridge
                thread.start()
    for relay in relays:
        relay.close()
    for fd in (exited_r, exited_w, child.pidfd):
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    return exit_status(process.wait())


if __name__ == "__main__":
    raise SystemExit(main())
