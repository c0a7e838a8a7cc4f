"""The review socket's wire protocol, shared by the hook client and the runtime's gate.

One connection per tool call. The client (``harness hook pre-tool-use``, running inside the
agent's sandbox as the agent CLI's child) sends the hook's JSON document exactly as it read
it, at most ``MAX_REQUEST`` bytes, then shuts its side down (``SHUT_WR``): end of file is the
end of the request. The runtime answers with one JSON object on one line,
``{"decision": "allow"|"deny", "reason": text, "review": "<batch>/<n>"|null}``, and closes.
Anything else — no socket, a refused or reset connection, no answer within the client's
wait, an answer that is not exactly that — is a deny on the client's side.

Unix socket paths are limited to 107 bytes, and a state folder may be deeper than that: both
sides therefore reach the socket through its folder's descriptor (``/proc/self/fd/N/name``),
which is short whatever the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ENV_SOCKET: Final = "HARNESS_REVIEW_SOCKET"
"""The socket's path as the agent sees it (set by the runtime in the agent's environment)."""
ENV_WAIT: Final = "HARNESS_REVIEW_WAIT_S"
"""How long (whole seconds) the client waits for the answer."""
SANDBOX_SOCKET: Final = "/run/harness/review.sock"
"""Where the batch's socket is bound inside a bubblewrap sandbox (read-only)."""
MAX_REQUEST: Final = 1 << 20
"""Bytes of one request, at most (1 MiB); a longer one is denied unread."""
MAX_ANSWER: Final = 1 << 16
CLIENT_MARGIN_S: Final = 10
"""The client waits this much longer than the runtime's review wait; the agent CLI's hook
time-out is this much longer again (a CLI that kills a hook may run the tool)."""
DECISIONS: Final = ("allow", "deny")


@contextlib.contextmanager
def short_path(path: str) -> Iterator[str]:
    """``path`` itself when it fits a socket address, else ``/proc/self/fd/N/<name>`` for a
    descriptor of its folder, open while the context lasts."""
    if len(os.fsencode(path)) < 100:
        yield path
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)


def listen(path: Path, backlog: int = 8) -> socket.socket:
    """A non-blocking listening Unix socket at ``path`` (mode 0600; any old file removed)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with short_path(str(path)) as address:
            old = os.umask(0o177)
            try:
                server.bind(address)
            finally:
                os.umask(old)
        server.listen(backlog)
        server.setblocking(False)
    except BaseException:
        server.close()
        raise
    return server


def answer_bytes(decision: str, reason: str, review: str | None) -> bytes:
    body = {"decision": decision, "reason": reason, "review": review}
    return json.dumps(body, ensure_ascii=True, sort_keys=True).encode("ascii") + b"\n"


def parse_answer(data: bytes) -> tuple[str, str, str | None]:
    """``(decision, reason, review)`` of an answer; ValueError unless it is exactly one."""
    text = data.decode("utf-8")
    if not text.endswith("\n") or "\n" in text[:-1]:
        raise ValueError("the answer is not one line")
    value = json.loads(text)
    if type(value) is not dict or set(value) != {"decision", "reason", "review"}:
        raise ValueError("the answer is not {decision, reason, review}")
    decision, reason, review = value["decision"], value["reason"], value["review"]
    if decision not in DECISIONS or type(reason) is not str:
        raise ValueError("the answer's decision or reason is malformed")
    if review is not None and type(review) is not str:
        raise ValueError("the answer's review is malformed")
    return decision, reason, review


def ask(path: str, request: bytes, timeout_s: float) -> tuple[str, str, str | None]:
    """Send one request and wait for its answer (at most ``timeout_s`` in all). Any failure
    raises (OSError, TimeoutError, ValueError): the caller denies."""
    deadline = time.monotonic() + timeout_s
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(timeout_s)
        with short_path(path) as address:
            client.connect(address)
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer within the review wait")
            client.settimeout(left)
            chunk = client.recv(4096)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER:
                raise ValueError("the answer is too long")
            chunks.append(chunk)
    finally:
        client.close()
    return parse_answer(b"".join(chunks))
