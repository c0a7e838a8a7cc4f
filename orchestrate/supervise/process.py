"""A supervised process: started at once, stepped by the caller, never blocking it.

Why: the tick loop keeps many batch processes in flight from one thread. It cannot call a
blocking ``run_process`` for each; it starts each one here and then calls :meth:`Supervised.step`
for each, and :func:`wait_any` to sleep until one of them needs attention (output, exit, or a
limit or probe falling due). No threads: everything is one selector over the pipes and pidfds.

What is guaranteed is what ``harness.orchestrate.proc`` guaranteed for one blocking process
(its module docstring has the reasons): the process leads a new session and process group;
limits end it with SIGTERM to the group (to the leader's descendants when it is bubblewrap),
``grace_s``, then SIGKILL to the group; whenever the leader exits, its group is SIGKILLed while
the leader is still an unreaped zombie (so the group id cannot have been reused), the
supervisor waits (bounded) until no member runs, then reaps it; the pipes are drained for at
most ``DRAIN_S`` after that; output beyond ``max_output`` is read and dropped, and flagged.

A step goes through phases: ``running`` (pump I/O, probe progress, enforce limits), then, once
the leader has exited, ``reaping`` (until the group is dead, re-SIGKILLing late forks), then
``draining`` (until both pipes close or ``DRAIN_S``), then ``done``. Each phase's waiting is a
deadline the caller's loop sleeps towards, never a sleep inside a step.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from harness.orchestrate.model import ProcResult

from .identity import ProcIdentity, identity_of
from .limits import Limits, Outcome, check_why, exec_failed
from .pipes import Streams
from .procfs import (
    GROUP_DEATH_S,
    killpg,
    leader_exited,
    live_members,
    open_pidfd,
    signal_name,
    terminate_tree,
    wait_group_dead,
)
from .progress import PROBE_SHARE, ProbeStats, ProgressProbe

__all__ = ["DRAIN_S", "Supervised"]

DRAIN_S: Final = 1.0
"""How long to keep draining the pipes after the whole group is dead (a descendant that
escaped the group may hold them open; we stop waiting for it)."""
_POLL_S: Final = 0.02
"""Exit polling interval, used only when ``os.pidfd_open`` is unavailable."""
_REAP_POLL_S: Final = 0.005
"""How often the group is checked for live members while it dies."""
_ROUNDS: Final = 16
"""Selector rounds a zero-wait step makes while data keeps coming (bounds one step's work)."""

OnOutput = Callable[[str, bytes], None]


class _Phase(enum.Enum):
    RUNNING = "running"
    REAPING = "reaping"
    DRAINING = "draining"
    DONE = "done"


class Supervised:
    """One process under supervision. Create it with :meth:`start`; step it until done."""

    identity: ProcIdentity | None
    """The process's identity for ``agent.started``; None when the exec failed (the process
    is then already done with exit code 127 or 126) or ``/proc`` cannot tell."""

    def __init__(self, limits: Limits, t0: float) -> None:
        """Internal: use :meth:`start`."""
        self.limits = limits
        self.identity = None
        self._t0 = t0
        self._phase = _Phase.DONE
        self._outcome: Outcome | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._io: Streams | None = None
        self._pidfd: int | None = None
        self._sandboxed = False
        self._probe: ProgressProbe | None = None
        self._next_probe = t0
        self._last_progress = t0
        self._max_silence = 0.0
        self._anomaly: str | None = None
        self._timed_out = False
        self._kill_at: float | None = None
        self._phase_end = t0
        self._returncode = 0
        self._duration_ms = 0

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        sandboxed: bool = False,
        max_output: int = 4 << 20,
        progress_paths: Sequence[Path] = (),
        on_output: OnOutput | None = None,
    ) -> Supervised:
        """Start ``argv`` in ``cwd`` in a new session; return at once.

        ``env`` replaces the environment when given; ``stdin`` is written to the process (else
        it reads ``/dev/null``). ``sandboxed``: ``argv`` is a bubblewrap command line (SIGTERM
        goes to the leader's descendants). ``progress_paths`` are fingerprinted every
        ``limits.probe_s`` when ``limits.idle_s`` is set. ``on_output(stream, chunk)`` sees every
        chunk read from ``"stdout"``/``"stderr"`` (also past ``max_output``); an exception it
        raises propagates out of :meth:`step`, the process staying supervised (call
        :meth:`kill` or :meth:`close`). A missing executable gives a done process with exit
        code 127 (126 when it cannot be run), the error in ``stderr``; it never raises for that.
        """
        if not argv:
            raise ValueError("Supervised.start: empty argv")
        if max_output < 0:
            raise ValueError("Supervised.start: max_output must be >= 0")
        probe = None
        if progress_paths and limits.idle_s is not None:
            probe = ProgressProbe(progress_paths)  # the baseline: before the process can write
        t0 = time.monotonic()
        self = cls(limits, t0)
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._outcome = exec_failed(argv[0], cwd, exc, int((time.monotonic() - t0) * 1000))
            return self
        self._proc = proc
        self._phase = _Phase.RUNNING
        self.identity = identity_of(proc.pid)
        self._sandboxed = sandboxed
        self._probe = probe
        self._next_probe = t0 + limits.probe_s
        assert proc.stdout is not None and proc.stderr is not None
        io = self._io = Streams(proc.stdout, proc.stderr, max_output, on_output)
        if proc.stdin is not None and stdin:
            io.feed_stdin(proc.stdin, stdin)
        self._pidfd = open_pidfd(proc.pid)
        if self._pidfd is not None:
            io.sel.register(self._pidfd, selectors.EVENT_READ, "exit")
        return self

    # -- what the loop asks -------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> Outcome | None:
        return self._outcome

    @property
    def probe_stats(self) -> ProbeStats | None:
        """What progress probing has cost (None when nothing is probed)."""
        return self._probe.stats if self._probe is not None else None

    def fds(self) -> list[int]:
        """The file descriptors to watch for this process (pipes, stdin, pidfd)."""
        return [fd for fd, _ in self.watch()]

    def watch(self) -> list[tuple[int, int]]:
        """``(fd, selector events)`` pairs to watch for this process (see :func:`wait_any`)."""
        if self._io is None or self._outcome is not None:
            return []
        return self._io.watch()

    def wake_at(self, now: float) -> float:
        """The monotonic time by which :meth:`step` must run again even without I/O."""
        if self._outcome is not None:
            return now
        if self._phase is _Phase.REAPING:
            return min(self._phase_end, now + _REAP_POLL_S)
        if self._phase is _Phase.DRAINING:
            return self._phase_end
        due = [self._t0 + self.limits.cap_s] if self._anomaly is None else []
        if self._kill_at is not None:
            due.append(self._kill_at)
        if self._anomaly is None and self.limits.idle_s is not None:
            due.append(self._last_progress + self.limits.idle_s)
            if self._probe is not None:
                due.append(self._next_probe)
        if self._pidfd is None:
            due.append(now + _POLL_S)  # no pidfd to wake us at the exit
        return min(due) if due else math.inf

    # -- stepping -----------------------------------------------------------------------

    def step(self, wait_s: float = 0.0) -> Outcome | None:
        """Pump I/O, probe, enforce limits; the outcome once done (then every time after).

        Returns within ``wait_s`` seconds (plus the cost of the work done), earlier when the
        process is done.
        """
        end = time.monotonic() + max(0.0, wait_s)
        while True:
            self._advance(time.monotonic())
            if self._outcome is not None:
                return self._outcome
            now = time.monotonic()
            timeout = max(0.0, min(end, self.wake_at(now)) - now)
            rounds = 0
            while self._pump(timeout) and rounds < _ROUNDS:
                rounds += 1
                timeout = 0.0
            if time.monotonic() >= end:
                self._advance(time.monotonic())
                return self._outcome

    def kill(self, why: str) -> None:
        """End the process for ``why`` (e.g. "budget", "stop"): SIGTERM (to the tree when
        sandboxed), ``grace_s``, SIGKILL, stepped like any limit. The outcome's anomaly is
        ``"killed:<why>"``, unless another limit was already ending it or it had exited."""
        check_why(why)
        if self._phase is _Phase.RUNNING and self._anomaly is None:
            self._terminate(f"killed:{why}", time.monotonic())

    def close(self) -> None:
        """Leave nothing behind, now (blocking, bounded): for a caller giving up on the
        process (an exception, shutdown). SIGKILL to the group, wait, reap, release fds."""
        if self._outcome is not None:
            return
        proc = self._proc
        assert proc is not None
        if self._phase is _Phase.RUNNING:
            self._anomaly = self._anomaly or "killed:close"
        if self._phase in (_Phase.RUNNING, _Phase.REAPING):
            killpg(proc.pid, signal.SIGKILL)
            wait_group_dead(proc.pid)
            self._reap(time.monotonic())
        self._finish()

    # -- internals ----------------------------------------------------------------------

    def _progress(self, now: float) -> None:
        self._max_silence = max(self._max_silence, now - self._last_progress)
        self._last_progress = now

    def _terminate(self, anomaly: str, now: float, *, timed_out: bool = False) -> None:
        assert self._proc is not None
        self._anomaly = anomaly
        self._timed_out = timed_out
        if self._sandboxed:
            terminate_tree(self._proc.pid)
        else:
            killpg(self._proc.pid, signal.SIGTERM)
        self._kill_at = now + self.limits.grace_s

    def _probe_now(self, now: float) -> None:
        assert self._probe is not None
        if self._probe.changed():
            self._progress(now)
        spacing = PROBE_SHARE * self._probe.stats.last_ns / 1e9  # bound the probing's cost
        self._next_probe = time.monotonic() + max(self.limits.probe_s, spacing)

    def _advance(self, now: float) -> None:
        proc = self._proc
        if self._outcome is not None or proc is None:
            return
        if self._phase is _Phase.RUNNING:
            if leader_exited(proc):
                self._progress(now)  # the silence up to the exit counts
                killpg(proc.pid, signal.SIGKILL)
                self._close_pidfd()  # stays readable from now on: would wake every wait
                self._phase = _Phase.REAPING
                self._phase_end = now + GROUP_DEATH_S
            else:
                self._enforce(now)
                return
        if self._phase is _Phase.REAPING:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                live: list[int] | None = []
            else:
                live = live_members(proc.pid)
            if live and now < self._phase_end:
                killpg(proc.pid, signal.SIGKILL)  # a member forked after the previous signal
                return
            self._reap(now)
        if self._phase is _Phase.DRAINING:
            assert self._io is not None
            if self._io.readers and now < self._phase_end:
                return
            self._finish()

    def _enforce(self, now: float) -> None:
        limits = self.limits
        if self._anomaly is None:
            probed = False
            if self._probe is not None and now >= self._next_probe:
                self._probe_now(now)
                probed = True
            if now >= self._t0 + limits.cap_s:
                anomaly = "lifetime" if limits.capped_by_lifetime else "timeout"
                self._terminate(anomaly, now, timed_out=True)
            elif limits.idle_s is not None and now - self._last_progress >= limits.idle_s:
                if self._probe is not None and not probed:
                    self._probe_now(now)  # confirm: a change since the last probe is progress
                if now - self._last_progress >= limits.idle_s:
                    self._max_silence = max(self._max_silence, now - self._last_progress)
                    self._terminate("hung", now)
        if self._kill_at is not None and now >= self._kill_at:
            assert self._proc is not None
            killpg(self._proc.pid, signal.SIGKILL)
            self._kill_at = None

    def _reap(self, now: float) -> None:
        """The group is dead (or the bound passed): reap the leader, start draining."""
        assert self._proc is not None and self._io is not None
        self._returncode = self._proc.wait()
        self._duration_ms = int((time.monotonic() - self._t0) * 1000)
        self._close_pidfd()
        self._io.close_stdin()
        self._phase = _Phase.DRAINING
        self._phase_end = now + DRAIN_S

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            assert self._io is not None
            self._io.sel.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _finish(self) -> None:
        assert self._proc is not None and self._io is not None
        proc = self._proc
        sinks = self._io.sinks
        self._io.sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._io.readers.clear()
        self._phase = _Phase.DONE
        code = self._returncode
        self._outcome = Outcome(
            result=ProcResult(
                exit_code=code if code >= 0 else None,
                signal=None if code >= 0 else signal_name(-code),
                timed_out=self._timed_out,
                duration_ms=self._duration_ms,
                stdout=bytes(sinks["stdout"].data),
                stderr=bytes(sinks["stderr"].data),
                stdout_truncated=sinks["stdout"].truncated,
                stderr_truncated=sinks["stderr"].truncated,
            ),
            anomaly=self._anomaly,
            idle_ms=int(self._max_silence * 1000),
        )

    def _pump(self, timeout: float) -> bool:
        assert self._io is not None
        return self._io.pump(timeout, self._on_data)

    def _on_data(self) -> None:
        if self._phase is _Phase.RUNNING:
            self._progress(time.monotonic())
