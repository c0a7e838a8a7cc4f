"""Run one process with a hard wall-clock limit, and leave nothing of it behind.

Why process groups: an agent CLI is rarely one process. It starts shells, language servers,
test runners and other helpers, and those may start their own children. Killing only the
pid we spawned would orphan all of them: they would keep running (and keep writing to the
worktree, or holding the output pipes open) after the agent is "done". Each process is
therefore started in a new session (``start_new_session=True``), which makes it the leader of
a fresh process group whose id is its pid; every descendant inherits that group unless it
deliberately leaves it (``setsid``/``setpgid``). Signals are sent to the whole group with
``os.killpg``:

* on wall-clock expiry: SIGTERM to the group, ``grace_s`` seconds to exit, then SIGKILL;
* whenever the leader has exited (on its own or not): SIGKILL to the group, so background
  children cannot outlive it. There are no idle agents.

The group is signalled while the leader is still an unreaped zombie (its exit is observed
with ``waitid(..., WNOWAIT)``): a process group id cannot be reused while its leader's pid
is held, so the final ``killpg`` can never hit an unrelated group.

Sandboxed processes (``sandboxed=True``): the leader is bubblewrap, and the sandboxed program
runs in a new session and PID namespace below it, out of reach of the group signals. SIGKILL to
the group still ends everything (bubblewrap's ``--die-with-parent`` makes the namespace's init
die with it, and the kernel kills a PID namespace whose init dies). SIGTERM, though, would make
bubblewrap exit at once and take the program down without its grace period, so on time-out it
is sent instead to every descendant of the leader (found through ``/proc``), not to the leader;
the namespace's init ignores it (an init process gets only the signals it handles), the
program gets its grace period, then SIGKILL to the group as usual.

Output is read concurrently from both pipes with a selector (no deadlock when the child
fills one pipe while we wait on the other); each stream keeps at most ``max_output`` bytes and
the rest is read and discarded, the truncation being recorded in the result.

Limits, stated honestly: a descendant that leaves the group (``setsid``) escapes the group
signals. Killed descendants are re-parented to init (or the nearest subreaper), which reaps
them; this module does not reap processes that are not its own children.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.orchestrate.model import ProcResult

__all__ = ["run_process", "signal_name"]

_CHUNK = 1 << 16
_POLL_S = 0.02
"""Exit polling interval, used only when ``os.pidfd_open`` is unavailable."""
_DRAIN_S = 1.0
"""How long to keep draining the pipes after the whole group is dead (a descendant that
escaped the group may hold them open; we stop waiting for it)."""


_GROUP_DEATH_S = 2.0
"""Bound on the wait for SIGKILLed group members to die (one stuck in the kernel may lag)."""


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for numbers without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _killpg(pgid: int, sig: int) -> None:
    # ProcessLookupError: the group is already empty. PermissionError: a member changed its
    # credentials (setuid); there is nothing more we are allowed to do about it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the leader has exited; does NOT reap it (the zombie keeps the group id held).

    Where ``os.waitid`` is missing (not Linux) it falls back to ``poll``, which reaps.
    """
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    pid = proc.pid
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


def _live_members(pgid: int) -> list[int] | None:
    """Pids in group ``pgid`` that are not zombies (None when /proc cannot be read)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    live = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain anything, so split after the last ")"
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            live.append(int(entry))
    return live


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (empty when /proc cannot be read)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _terminate_tree(root: int) -> None:
    for pid in _descendants(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def _wait_group_dead(pgid: int) -> None:
    """After SIGKILL to the group: wait (bounded) until none of its members still runs.

    SIGKILL is delivered asynchronously; a member can take a moment to die. Waiting here
    means that when :func:`run_process` returns, nothing of the group is still executing (and
    so nothing still writes into the worktree). Zombies (dead, awaiting their reaper) count as
    dead. Without /proc this is best effort: nothing is waited for.
    """
    end = time.monotonic() + _GROUP_DEATH_S
    while True:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        live = _live_members(pgid)
        if not live or time.monotonic() >= end:
            return
        _killpg(pgid, signal.SIGKILL)  # a member forked after the previous signal
        time.sleep(0.005)


def _open_pidfd(pid: int) -> int | None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:
        return None
    return fd


class _Sink:
    """One captured stream: keeps the first ``limit`` bytes, counts the rest."""

    def __init__(self, limit: int) -> None:
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room >= len(chunk):
            self.data += chunk
            return
        if room > 0:
            self.data += chunk[:room]
        self.truncated = True


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    grace_s: float = 2.0,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    max_output: int = 4 << 20,
    sandboxed: bool = False,
) -> ProcResult:
    """Run ``argv`` in ``cwd`` in its own process group, with a hard wall-clock limit.

    ``env`` replaces the environment when given (as with :mod:`subprocess`); ``stdin`` is
    written to the process (else it reads ``/dev/null``). The result has ``exit_code`` None
    and ``signal`` set when the process was killed by a signal; ``timed_out`` says whether
    the limit was reached (the process is then signalled even if it would have exited
    cleanly). ``sandboxed``: ``argv`` is a bubblewrap command line (see the module docstring:
    SIGTERM goes to the leader's descendants). A missing executable gives exit code 127
    (126 when it exists but cannot be run), the error being in ``stderr``; it never raises
    for that.
    """
    if not argv:
        raise ValueError("run_process: empty argv")
    if max_output < 0:
        raise ValueError("run_process: max_output must be >= 0")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError | NotADirectoryError) else 126
        return ProcResult(
            exit_code=code,
            signal=None,
            timed_out=False,
            duration_ms=int((time.monotonic() - start) * 1000),
            stdout=b"",
            stderr=f"cannot execute {argv[0]!r} (cwd {str(cwd)!r}): {exc}\n".encode(),
        )

    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    sinks = {"stdout": _Sink(max_output), "stderr": _Sink(max_output)}
    sel = selectors.DefaultSelector()
    pidfd = _open_pidfd(proc.pid)
    timed_out = False
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe.fileno(), selectors.EVENT_READ, name)
        pending = memoryview(stdin) if stdin is not None else None
        if proc.stdin is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
            else:
                proc.stdin.close()
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, "exit")

        deadline = start + timeout_s
        kill_at: float | None = None
        while True:
            if _leader_exited(proc):
                break
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                if sandboxed:
                    _terminate_tree(proc.pid)
                else:
                    _killpg(pgid, signal.SIGTERM)
                kill_at = now + grace_s
            if kill_at is not None and now >= kill_at:
                _killpg(pgid, signal.SIGKILL)
                kill_at = None
            wake = kill_at if timed_out else deadline
            wait = 0.05 if wake is None else max(0.0, wake - now)
            if pidfd is None:
                wait = min(wait, _POLL_S)
            pending = _pump(sel, sinks, proc, pending, wait)

        # The leader is dead but not reaped: take its group down with it, wait until no
        # member runs any more, then reap.
        _killpg(pgid, signal.SIGKILL)
        _wait_group_dead(pgid)
        returncode = proc.wait()
        duration_ms = int((time.monotonic() - start) * 1000)
        if pidfd is not None:
            sel.unregister(pidfd)
        _drain(sel, sinks, proc)
    finally:
        if proc.returncode is None:  # an exception escaped the loop: leave nothing behind
            _killpg(pgid, signal.SIGKILL)
            proc.wait()
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    exit_code: int | None = returncode if returncode >= 0 else None
    return ProcResult(
        exit_code=exit_code,
        signal=None if returncode >= 0 else signal_name(-returncode),
        timed_out=timed_out,
        duration_ms=duration_ms,
        stdout=bytes(sinks["stdout"].data),
        stderr=bytes(sinks["stderr"].data),
        stdout_truncated=sinks["stdout"].truncated,
        stderr_truncated=sinks["stderr"].truncated,
    )


def _pump(
    sel: selectors.BaseSelector,
    sinks: Mapping[str, _Sink],
    proc: subprocess.Popen[bytes],
    pending: memoryview | None,
    wait: float,
) -> memoryview | None:
    """One selector round: read what is readable, write what stdin accepts."""
    if not sel.get_map():
        time.sleep(wait)
        return pending
    for key, _ in sel.select(wait):
        name = key.data
        fd = key.fd
        if name == "exit":
            continue
        if name == "stdin":
            pending = _feed_stdin(sel, proc, pending)
            continue
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if chunk:
            sinks[name].feed(chunk)
        else:
            sel.unregister(fd)
    return pending


def _feed_stdin(
    sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview | None
) -> memoryview | None:
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    done = pending is None or not pending
    if not done and pending is not None:
        try:
            n = os.write(fd, pending[:_CHUNK])
            pending = pending[n:]
            done = not pending
        except BlockingIOError:
            return pending
        except OSError as exc:  # EPIPE: the process closed its stdin, fine
            if exc.errno not in (errno.EPIPE, errno.EINVAL):
                raise
            done = True
    if done:
        sel.unregister(fd)
        with contextlib.suppress(OSError):
            proc.stdin.close()
        return None
    return pending


def _drain(
    sel: selectors.BaseSelector, sinks: Mapping[str, _Sink], proc: subprocess.Popen[bytes]
) -> None:
    """Read what is left in the pipes after the group is dead (bounded by ``_DRAIN_S``)."""
    for key in list(sel.get_map().values()):
        if key.data == "stdin":
            sel.unregister(key.fd)
    end = time.monotonic() + _DRAIN_S
    while sel.get_map():
        left = end - time.monotonic()
        if left <= 0:
            break
        _pump(sel, sinks, proc, None, left)
