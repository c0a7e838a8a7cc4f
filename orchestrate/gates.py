"""Quality gates: real commands (tests, lint, custom checks) run in a task's worktree.

A gate passes when its command exits 0 within its timeout; a gate that times out (or is
killed by a signal, or cannot be started) fails. All gates run, in order, whatever the
earlier ones returned, so the record says about each gate whether it passed: the merge
decision is "every gate passed", and a failure report names every failing gate, not just
the first one.

A gate runs the agent's code (``python -m pytest`` imports what the agent wrote), so with a
``Sandbox`` it runs in one: the worktree and the git folder read-only, no network, a fresh
empty HOME, the allow-listed environment (``harness.orchestrate.sandbox``). It cannot change
what is merged, read the keys or the stores, or reach the network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.orchestrate.model import Gate, ProcResult
from harness.orchestrate.sandbox import Profile, Sandbox
from harness.orchestrate.sandbox.policy import argv_files
from harness.orchestrate.supervise import Limits, Supervised

__all__ = ["TAIL_CHARS", "GateResult", "GateRun", "all_passed", "run_gate", "run_gates"]

TAIL_CHARS = 4000
"""How much of a gate's output (its end, where the verdict usually is) is kept."""
_MAX_OUTPUT = 1 << 20


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    exit_code: int | None
    """None when the gate was killed by a signal (e.g. on timeout)."""
    duration_ms: int
    output_tail: str
    """The last ``TAIL_CHARS`` characters of stdout followed by stderr (UTF-8, lossy)."""
    timed_out: bool = False
    signal: str | None = None
    sandbox: Profile | None = None
    """The profile the gate ran in (None: run without a ``Sandbox``, the caller's own
    environment)."""


def _tail(result: ProcResult, gate: Gate) -> str:
    parts = [
        stream.decode("utf-8", "replace") for stream in (result.stdout, result.stderr) if stream
    ]
    text = "\n".join(part.rstrip("\n") for part in parts)
    if result.timed_out:
        text += f"\n[gate {gate.name!r} timed out after {gate.timeout_s:g}s, {result.signal}]"
    elif result.signal is not None:
        text += f"\n[gate {gate.name!r} killed by {result.signal}]"
    return text[-TAIL_CHARS:]


def _start(
    gate: Gate, worktree: Path, sandbox: Sandbox | None, home: Path | None
) -> tuple[Supervised, Profile | None]:
    """Start one gate's command (in ``sandbox`` when given, with ``home`` as its HOME: an
    empty tmpfs there under bubblewrap); the caller steps the returned process."""
    profile: Profile | None = None
    argv: list[str] = list(gate.command)
    env: dict[str, str] | None = None
    if sandbox is not None:
        gate_home = home if home is not None else worktree.parent / "gate-home"
        gate_home.mkdir(parents=True, exist_ok=True, mode=0o700)
        profile, env = sandbox.gate(
            worktree, gate_home, programs=[gate.command[0]], files=argv_files(gate.command)
        )
        argv = sandbox.argv(profile, argv)
    proc = Supervised.start(
        argv,
        cwd=worktree,
        limits=Limits(wall_s=gate.timeout_s, lifetime_s=min(gate.timeout_s, 1800.0)),
        max_output=_MAX_OUTPUT,
        env=env,
        sandboxed=profile is not None and profile.kind == "bwrap",
    )
    return proc, profile


def _result(gate: Gate, result: ProcResult, profile: Profile | None) -> GateResult:
    return GateResult(
        name=gate.name,
        passed=result.exit_code == 0 and not result.timed_out,
        exit_code=result.exit_code,
        duration_ms=result.duration_ms,
        output_tail=_tail(result, gate),
        timed_out=result.timed_out,
        signal=result.signal,
        sandbox=profile,
    )


class GateRun:
    """A task list's gates run one after another without blocking the caller.

    The tick loop keeps many batches in flight, each possibly gating: ``step`` advances this
    one (starting the next gate when the previous one finished) and returns at once, so the
    loop can serve every batch from one thread. Results come in run order; every gate runs,
    whatever the earlier ones returned (see the module docstring).
    """

    def __init__(
        self, gates: Sequence[Gate], worktree: Path, sandbox: Sandbox | None, home: Path | None
    ) -> None:
        self._todo = list(gates)
        self._worktree = worktree
        self._sandbox = sandbox
        self._home = home
        self._current: tuple[Gate, Supervised, Profile | None] | None = None
        self.results: list[GateResult] = []

    @property
    def done(self) -> bool:
        return self._current is None and not self._todo

    def processes(self) -> list[Supervised]:
        """The gate process now running (for the loop's ``wait_any``)."""
        return [self._current[1]] if self._current is not None else []

    def step(self, wait_s: float = 0.0) -> bool:
        """Advance; True once every gate has a result."""
        while True:
            if self._current is None:
                if not self._todo:
                    return True
                gate = self._todo.pop(0)
                if not gate.command:
                    self.results.append(
                        GateResult(
                            gate.name, False, None, 0, f"gate {gate.name!r} has an empty command"
                        )
                    )
                    continue
                proc, profile = _start(gate, self._worktree, self._sandbox, self._home)
                self._current = (gate, proc, profile)
            gate, proc, profile = self._current
            outcome = proc.step(wait_s)
            if outcome is None:
                return False
            self.results.append(_result(gate, outcome.result, profile))
            self._current = None
            wait_s = 0.0

    def kill(self, why: str) -> None:
        """End the running gate (the rest are not started); results stay as they are."""
        self._todo.clear()
        if self._current is not None:
            self._current[1].kill(why)


def run_gate(
    gate: Gate, worktree: Path, sandbox: Sandbox | None = None, home: Path | None = None
) -> GateResult:
    """Run one gate's command in ``worktree`` with the gate's timeout (blocking)."""
    return run_gates([gate], worktree, sandbox, home)[0]


def run_gates(
    gates: Sequence[Gate],
    worktree: Path,
    sandbox: Sandbox | None = None,
    home: Path | None = None,
) -> list[GateResult]:
    """Run every gate (none is skipped because an earlier one failed); one result each."""
    run = GateRun(gates, worktree, sandbox, home)
    while not run.step(0.05):
        pass
    return run.results


def all_passed(results: Sequence[GateResult]) -> bool:
    """The merge condition: every gate passed (vacuously true with no gates)."""
    return all(r.passed for r in results)
