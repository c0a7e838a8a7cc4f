"""Quality gates: real commands (tests, lint, custom checks) run in a task's worktree.

A gate passes when its command exits 0 within its timeout; a gate that times out (or is
killed by a signal, or cannot be started) fails. All gates run, in order, whatever the
earlier ones returned, so the record says about each gate whether it passed: the merge
decision is "every gate passed", and a failure report names every failing gate, not just
the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.orchestrate.model import Gate, ProcResult
from harness.orchestrate.proc import run_process

__all__ = ["TAIL_CHARS", "GateResult", "all_passed", "run_gate", "run_gates"]

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


def run_gate(gate: Gate, worktree: Path) -> GateResult:
    """Run one gate's command in ``worktree`` with the gate's timeout."""
    if not gate.command:
        return GateResult(gate.name, False, None, 0, f"gate {gate.name!r} has an empty command")
    result = run_process(
        gate.command, cwd=worktree, timeout_s=gate.timeout_s, max_output=_MAX_OUTPUT
    )
    return GateResult(
        name=gate.name,
        passed=result.exit_code == 0 and not result.timed_out,
        exit_code=result.exit_code,
        duration_ms=result.duration_ms,
        output_tail=_tail(result, gate),
        timed_out=result.timed_out,
        signal=result.signal,
    )


def run_gates(gates: Sequence[Gate], worktree: Path) -> list[GateResult]:
    """Run every gate (none is skipped because an earlier one failed); one result each."""
    return [run_gate(gate, worktree) for gate in gates]


def all_passed(results: Sequence[GateResult]) -> bool:
    """The merge condition: every gate passed (vacuously true with no gates)."""
    return all(r.passed for r in results)
