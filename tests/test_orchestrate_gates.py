"""harness.orchestrate.gates: real gate commands run in a folder."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.orchestrate.gates import TAIL_CHARS, GateResult, all_passed, run_gate, run_gates
from harness.orchestrate.model import Gate

PY = sys.executable


def gate(name: str, code: str, timeout_s: float = 10.0) -> Gate:
    return Gate(name=name, command=(PY, "-c", code), timeout_s=timeout_s)


def test_passing_gate_runs_in_worktree(tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")
    [r] = run_gates(
        [gate("tests", "import pathlib; print(pathlib.Path('marker.txt').read_text(), 'ok')")],
        tmp_path,
    )
    assert r == GateResult("tests", True, 0, r.duration_ms, "here ok", timed_out=False)
    assert r.duration_ms >= 0


def test_failing_gate(tmp_path: Path) -> None:
    r = run_gate(gate("lint", "import sys; print('checked 3 files'); sys.exit('E501 too long')"),
                 tmp_path)  # fmt: skip
    assert not r.passed and r.exit_code == 1 and not r.timed_out
    assert r.output_tail == "checked 3 files\nE501 too long"


def test_timed_out_gate_fails(tmp_path: Path) -> None:
    r = run_gate(gate("slow", "import time; print('start', flush=True); time.sleep(30)", 0.3),
                 tmp_path)  # fmt: skip
    assert not r.passed and r.timed_out
    assert r.exit_code is None and r.signal == "SIGTERM"
    assert r.duration_ms < 3000
    assert r.output_tail.startswith("start\n")
    assert "timed out after 0.3s" in r.output_tail


def test_all_gates_run_and_each_is_reported(tmp_path: Path) -> None:
    gates = [
        gate("first-fails", "raise SystemExit(2)"),
        Gate("missing", ("no-such-gate-command-xyz",)),
        Gate("empty", ()),
        gate("last-passes", "pass"),
    ]
    results = run_gates(gates, tmp_path)
    assert [(r.name, r.passed, r.exit_code) for r in results] == [
        ("first-fails", False, 2),
        ("missing", False, 127),
        ("empty", False, None),
        ("last-passes", True, 0),
    ]
    assert "no-such-gate-command-xyz" in results[1].output_tail
    assert not all_passed(results)
    assert all_passed(results[3:])
    assert all_passed([])


def test_output_tail_is_bounded(tmp_path: Path) -> None:
    r = run_gate(gate("noisy", "print('x' * 100000); print('VERDICT: fine')"), tmp_path)
    assert r.passed
    assert len(r.output_tail) == TAIL_CHARS
    assert r.output_tail.endswith("VERDICT: fine")
