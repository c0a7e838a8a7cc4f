"""The runtime's side of the review gate: one socket per batch, answered from the loop's tick.

``ReviewDesk.of(run)`` is the run's desk. A batch whose agent CLI has a pre-tool hook (Claude
Code) gets a socket when it is prepared (``open``); ``poll`` — called from ``RunCore.poll_bus``
on every tick of the single-threaded loop (decision 0010), never from another thread — accepts
connections, reads requests without blocking, classifies and decides each with the pure rule
(``harness.verify.rules.review``), **records ``action.review`` and flushes it before it
answers** (decision 0011: group commit before effects; the effect here is the tool call the
answer lets run), then answers. A call that needs an operator's approval waits (its hook
blocks, the loop keeps ticking) until an ``approve`` command naming it is applied
(``approve``, called by the command desk, which writes the receipt first) or the review wait
passes (denied, recorded). When the agent has ended, ``close`` denies what still waits,
records it, and removes the socket, all before the batch's ``agent.exit`` is recorded.

Bounds (what one agent can cause): a request is at most 1 MiB and must arrive within
``READ_S``; at most ``MAX_OPEN`` connections are open per batch (more are closed unanswered:
the client denies); at most ``MAX_WAITING`` calls wait for approval per batch (another is
denied at once); at most ``MAX_REQUESTS`` requests per batch (later ones are denied). A
request that is not a PreToolUse hook document, or over a bound, is denied and not recorded:
no tool was named, so there is no action to record (nothing runs either way).
"""

from __future__ import annotations

import contextlib
import hashlib
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from harness.verify.canonical import jcs_bytes, parse_strict_json
from harness.verify.errors import VerificationError
from harness.verify.rules.review import (
    DEFAULT_PHASE,
    PATH_TOOLS,
    classify,
    decide,
    egress_host,
    needs_approval,
    strictness_of,
    target_of,
)
from harness.verify.rules.scope import glob_match, in_scope

from .protocol import MAX_REQUEST, answer_bytes, listen

__all__ = [
    "DEFAULT_WAIT_S",
    "MAX_OPEN",
    "MAX_REQUESTS",
    "MAX_WAITING",
    "ReviewDesk",
    "close_batch",
    "review_tick",
    "waiters",
]

DEFAULT_WAIT_S: Final = 300
"""How long a call waits for an operator's approval unless the run says otherwise."""
MAX_WAIT_S: Final = 3600
READ_S: Final = 10.0
MAX_OPEN: Final = 8
MAX_WAITING: Final = 4
MAX_REQUESTS: Final = 1000


class _Job(Protocol):
    released: bool
    lock: list[str]


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    data: bytearray = field(default_factory=bytearray)
    refuse: str | None = None
    """Deny with this reason once the request is read (read first: closing a socket with
    unread data resets it, and the answer could be lost)."""


@dataclass
class _Waiting:
    sock: socket.socket
    body: dict[str, Any]
    """The ``action.review`` body so far (no decision yet)."""
    host: str | None
    deadline: float
    approval: str | None = None


@dataclass
class _Gate:
    batch: str
    task: str
    tasks: tuple[str, ...]
    lock: tuple[str, ...]
    worktree: str
    path: Path
    listener: socket.socket
    count: int = 0
    requests: int = 0
    reading: list[_Conn] = field(default_factory=list)
    waiting: dict[int, _Waiting] = field(default_factory=dict)


class ReviewDesk:
    """A run's review gates (see the module docstring)."""

    def __init__(self, run: Any, wait_s: int = DEFAULT_WAIT_S) -> None:
        self.run = run
        self.wait_s = max(1, min(int(wait_s), MAX_WAIT_S))
        self.gates: dict[str, _Gate] = {}
        self.jobs: dict[str, _Job] = {}
        """Every batch that took a lock and has not released it yet (the write-lock registry
        as the audit store has it: a job is released exactly when its ``lock.release`` is
        queued)."""
        self.known: dict[str, set[str]] = {}
        """task -> hosts an operator approved egress to."""
        capsule = getattr(getattr(run, "plan", None), "capsule", None)
        self.egress = frozenset(getattr(capsule, "egress", ()) or ())

    @classmethod
    def of(cls, run: Any) -> ReviewDesk:
        """The run's desk, made on first use (its wait from the plan's ``review_wait_s``)."""
        desk = getattr(run, "review_desk", None)
        if not isinstance(desk, ReviewDesk):
            wait = getattr(getattr(run, "plan", None), "review_wait_s", None)
            desk = cls(run, wait if isinstance(wait, int) and wait > 0 else DEFAULT_WAIT_S)
            run.review_desk = desk
        return desk

    # -- the batch side -------------------------------------------------------------------

    def hold(self, batch: str, job: _Job) -> None:
        """Register a batch that has just queued its ``lock.acquire``."""
        self.jobs[batch] = job

    def open(
        self, batch: str, tasks: tuple[str, ...], lock: tuple[str, ...], worktree: Path
    ) -> Path:
        """The batch's socket (listening), in ``<run folder>/review/``; its host path."""
        folder = Path(self.run.folder) / "review"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / f"{batch}.sock"
        self.close(batch)
        listener = listen(path)
        self.gates[batch] = _Gate(batch, tasks[0], tasks, lock, str(worktree), path, listener)
        return path

    def close(self, batch: str) -> None:
        """The agent has ended: deny and record what waits (an approval that came too late
        included), drop the rest, remove the socket."""
        gate = self.gates.pop(batch, None)
        if gate is None:
            return
        for number in sorted(gate.waiting):
            gate.waiting[number].approval = None  # its agent is gone: the call cannot run
            self._finish(gate, number)
        for conn in gate.reading:
            conn.sock.close()
        gate.listener.close()
        with contextlib.suppress(OSError):
            gate.path.unlink()
        self.run.flush()

    def wake_at(self, batch: str, now: float) -> float:
        """The next deadline of the batch's gate (a read or an approval wait), else far."""
        gate = self.gates.get(batch)
        if gate is None:
            return now + 3600.0
        times = [c.deadline for c in gate.reading] + [w.deadline for w in gate.waiting.values()]
        return min(times, default=now + 3600.0)

    # -- the tick -------------------------------------------------------------------------

    def poll(self) -> None:
        """Serve every gate once, without blocking (see the module docstring)."""
        for batch in [b for b, job in self.jobs.items() if job.released]:
            del self.jobs[batch]
        for gate in list(self.gates.values()):
            self._accept(gate)
            self._read(gate)
            self._expire(gate)

    def _accept(self, gate: _Gate) -> None:
        while True:
            try:
                conn, _ = gate.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            gate.requests += 1
            if len(gate.reading) + len(gate.waiting) >= MAX_OPEN:
                conn.close()  # the client sees no answer: it denies
                continue
            conn.setblocking(False)
            refuse = (
                f"more than {MAX_REQUESTS} requests in this batch"
                if gate.requests > MAX_REQUESTS
                else None
            )
            gate.reading.append(_Conn(conn, time.monotonic() + READ_S, refuse=refuse))

    def _read(self, gate: _Gate) -> None:
        now = time.monotonic()
        for conn in list(gate.reading):
            complete = False
            try:
                while True:
                    chunk = conn.sock.recv(65536)
                    if not chunk:
                        complete = True
                        break
                    conn.data += chunk
                    if len(conn.data) > MAX_REQUEST:
                        break
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                gate.reading.remove(conn)
                conn.sock.close()
                continue
            if len(conn.data) > MAX_REQUEST:
                gate.reading.remove(conn)
                _send(conn.sock, "deny", "request over 1 MiB", None)
            elif complete:
                gate.reading.remove(conn)
                if conn.refuse is not None:
                    _send(conn.sock, "deny", conn.refuse, None)
                else:
                    self._request(gate, conn.sock, bytes(conn.data))
            elif now > conn.deadline:
                gate.reading.remove(conn)
                _send(conn.sock, "deny", f"request not complete within {READ_S:g} s", None)

    def _request(self, gate: _Gate, sock: socket.socket, data: bytes) -> None:
        try:
            document = parse_strict_json(data, allow_floats=True)
        except VerificationError as exc:
            _send(sock, "deny", f"malformed hook request: {exc}", None)
            return
        if (
            type(document) is not dict
            or document.get("hook_event_name") != "PreToolUse"
            or type(document.get("tool_name")) is not str
            or not document["tool_name"]
            or type(document.get("tool_input")) is not dict
        ):
            _send(sock, "deny", "not a PreToolUse hook request {tool_name, tool_input}", None)
            return
        tool = str(document["tool_name"])[:256]
        tool_input: dict[str, Any] = document["tool_input"]
        try:
            digest = hashlib.sha256(jcs_bytes(tool_input)).hexdigest()
        except VerificationError as exc:
            _send(sock, "deny", f"tool_input has no canonical form: {exc}", None)
            return
        gate.count += 1
        number = gate.count
        target = target_of(tool, tool_input, gate.worktree)
        body: dict[str, Any] = {
            "task": gate.task,
            "batch": gate.batch,
            "review": number,
            "tool": tool,
            "input_sha256": digest,
            "target": target,
            "class": classify(tool, target),
            "phase": self.phase(),
        }
        host = egress_host(tool, target)
        waiting = _Waiting(sock, body, host, time.monotonic() + self.wait_s)
        strictness = strictness_of(body["phase"])
        known = self._known(gate, host)
        if (
            needs_approval(body["class"], strictness=strictness, host_known=known)
            and len(gate.waiting) < MAX_WAITING
        ):
            gate.waiting[number] = waiting
            label = f"{gate.batch}/{number}"
            sys.stderr.write(
                f"review {label} waits for approval ({self.wait_s} s): {tool} "
                f"{target[:120]!r} -- harness approve --run {self.run.run_id} "
                f"--review {label}\n"
            )
            sys.stderr.flush()
            return
        gate.waiting[number] = waiting
        self._finish(gate, number)

    def _expire(self, gate: _Gate) -> None:
        now = time.monotonic()
        for number in sorted(gate.waiting):
            waiting = gate.waiting[number]
            if waiting.approval is not None or now >= waiting.deadline:
                self._finish(gate, number)

    def _known(self, gate: _Gate, host: str | None) -> bool:
        return bool(host) and (host in self.egress or host in self.known.get(gate.task, set()))

    def _finish(self, gate: _Gate, number: int) -> None:
        """Decide a call, record and flush it, then answer (in that order)."""
        waiting = gate.waiting.pop(number)
        body = {**waiting.body, "phase": self.phase()}  # the phase in force when decided
        cls = body["class"]
        strictness = strictness_of(body["phase"])
        known = self._known(gate, waiting.host)
        approval = waiting.approval
        if approval is not None and not needs_approval(
            cls, strictness=strictness, host_known=known
        ):
            approval = None  # the phase changed meanwhile: the call needs (or takes) none
        path = body["tool"] in PATH_TOOLS and cls == "write"
        target = body["target"]
        scoped = in_scope(target, gate.lock) if path else True
        locked = path and any(
            glob_match(glob, target)
            for batch, job in self.jobs.items()
            if batch != gate.batch and not job.released
            for glob in job.lock
        )
        decision, reason = decide(
            cls, in_scope=scoped, locked=locked, strictness=strictness,
            approved=approval is not None, host_known=known,
        )  # fmt: skip
        record = {**body, "decision": decision, "reason": reason, "approval": approval}
        self.run.audit("action.review", record)
        self.run.flush()
        if waiting.host and approval is not None:  # approved and needing it: allowed
            self.known.setdefault(gate.task, set()).add(waiting.host)
        _send(waiting.sock, decision, reason, f"{gate.batch}/{number}")

    def phase(self) -> str:
        """The phase in force (the control layer's, whose changes it records as
        ``control.phase`` at once; implement where there is none)."""
        phase = getattr(getattr(self.run, "control", None), "phase", None)
        return phase if isinstance(phase, str) and phase else DEFAULT_PHASE

    # -- approvals (the command desk) -----------------------------------------------------

    def approve(self, command_id: str, label: Any) -> tuple[str, str]:
        """``(outcome, reason)`` of an ``approve`` command with ``args.review`` = ``label``:
        applied when that review waits and has no approval yet, else rejected."""
        if type(label) is not str or label.count("/") != 1:
            return "rejected", "args.review must be <batch>/<review>"
        batch, _, number = label.partition("/")
        gate = self.gates.get(batch)
        waiting = gate.waiting.get(int(number)) if gate is not None and number.isdigit() else None
        if waiting is None:
            return "rejected", f"no review {label} waits for approval"
        if waiting.approval is not None:
            return "rejected", f"review {label} is already approved by {waiting.approval}"
        waiting.approval = command_id
        return "applied", f"approves review {label}"


def _send(sock: socket.socket, decision: str, reason: str, review: str | None) -> None:
    """Answer and close; a client that went away changes nothing (the record stands)."""
    try:
        sock.setblocking(True)
        sock.settimeout(1.0)
        sock.sendall(answer_bytes(decision, reason, review))
    except OSError:
        pass
    finally:
        sock.close()


def review_tick(run: Any) -> None:
    """One tick of the run's review desk, if it has one (called from ``RunCore.poll_bus``)."""
    desk = getattr(run, "review_desk", None)
    if isinstance(desk, ReviewDesk):
        desk.poll()


class _Waiter:
    """A batch's gate as ``wait_any`` sleeps on it (the face of ``Supervised``): the loop
    wakes when a hook connects or sends, or a read or approval deadline falls due."""

    def __init__(self, desk: ReviewDesk, batch: str) -> None:
        self.desk = desk
        self.batch = batch

    @property
    def done(self) -> bool:
        return self.batch not in self.desk.gates

    def watch(self) -> list[tuple[int, int]]:
        gate = self.desk.gates.get(self.batch)
        if gate is None:
            return []
        socks = [gate.listener, *(c.sock for c in gate.reading)]
        return [(s.fileno(), selectors.EVENT_READ) for s in socks]

    def wake_at(self, now: float) -> float:
        return self.desk.wake_at(self.batch, now)


def waiters(run: Any, batch: str) -> list[Any]:
    """What the loop may sleep on for ``batch``'s reviews (empty without a gate)."""
    desk = getattr(run, "review_desk", None)
    if isinstance(desk, ReviewDesk) and batch in desk.gates:
        return [_Waiter(desk, batch)]
    return []


def close_batch(run: Any, batch: str) -> None:
    """The batch's agent has ended (or never started): settle its gate (``close``)."""
    desk = getattr(run, "review_desk", None)
    if isinstance(desk, ReviewDesk):
        desk.close(batch)
