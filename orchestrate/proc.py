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

Since issue 11 the work is done by :class:`harness.orchestrate.supervise.Supervised`, the
non-blocking supervised process the parallel tick loop steps; :func:`run_process` starts one
and steps it to completion, with the same guarantees. It obeys the same lifetime cap (1800 s):
a ``timeout_s`` above it is cut to it.

Limits, stated honestly: a descendant that leaves the group (``setsid``) escapes the group
signals. Killed descendants are re-parented to init (or the nearest subreaper), which reaps
them; this module does not reap processes that are not its own children.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.orchestrate.model import ProcResult
from harness.orchestrate.supervise import MAX_LIFETIME_S, Limits, Supervised, signal_name

__all__ = ["run_process", "signal_name"]

_STEP_S = 1.0
"""How long one step may wait (steps return earlier on any event or deadline)."""


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
    limits = Limits(wall_s=timeout_s, lifetime_s=min(timeout_s, MAX_LIFETIME_S), grace_s=grace_s)
    proc = Supervised.start(
        argv,
        cwd=cwd,
        limits=limits,
        env=env,
        stdin=stdin,
        sandboxed=sandboxed,
        max_output=max_output,
    )
    try:
        while (outcome := proc.step(_STEP_S)) is None:
            pass
    finally:
        proc.close()  # an exception escaped the loop: leave nothing behind
    return outcome.result
