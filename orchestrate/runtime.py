"""The deterministic tick loop: plan in, agents in worktrees, gates, merges, evidence out.

No model call and no randomness in coordination: each tick takes a snapshot of task states and
asks pure functions (scheduler, capability matrix, capsule) what to do. Batches run one after
the other in this single-threaded loop (so per-role concurrency never exceeds 1 in flight; the
limits still shape which batches are chosen). Every decision is an audit record, every file an
agent changes a lineage record computed from the worktree's git diff after the agent exits
(the one write boundary: an agent writing files directly cannot bypass it), every model call a
replay record.

Crash safety: task states are not kept anywhere but in the audit store. On start, an existing
run is resumed by replaying its ``task.transition`` records; tasks caught mid-flight are
released (claimed -> open) or failed (in_progress/gating -> failed), with the reason recorded,
so nothing is duplicated and nothing acknowledged is lost.

This module is the loop only; the parts it drives live in ``harness.orchestrate.runner``
(state and record primitives, run start, resume, one batch's agent, landing its changes).
``Runtime``, ``RunSummary``, ``RunAbortedError`` and ``task_states`` stay importable from here.
"""

from __future__ import annotations

from harness.verify.fsm import TaskState
from harness.verify.records import parse_record_line

from .capabilities import check_task
from .capsule import pre_spawn_violations
from .runner.batch import fail_batch, run_batch
from .runner.core import RunAbortedError, RunCore, RunSummary
from .runner.resume import resume, task_states
from .runner.start import start
from .sandbox.policy import check_sandboxed
from .scheduler import choose_batches, is_quiescent, promotions

__all__ = ["RunAbortedError", "RunSummary", "Runtime", "task_states"]

S = TaskState


class Runtime(RunCore):
    """Runs one plan as one run; ``run()`` returns when the run is quiescent or stopped."""

    def run(self) -> RunSummary:
        """Start or resume the run, tick until it settles (or the operator stops it), seal."""
        try:
            check_sandboxed(self.plan, self.sandbox)
            if not resume(self):
                start(self)
            self.flush()
            quiet = 0
            stopped = False
            while True:
                if self._stop_requested():
                    stopped = True
                    for task, state in sorted(self.states.items()):
                        if state in (S.PLANNED, S.OPEN, S.BLOCKED, S.CLAIMED):
                            self.move(task, S.CANCELLED, "operator stop")
                    break
                self._promote()
                self.flush()
                batches = choose_batches(
                    self.table, in_flight={}, plan=self.plan, next_batch_number=self.batch_number
                )
                if not batches:
                    if is_quiescent(self.table, {}):
                        quiet += 1
                        if quiet >= self.plan.settle_ticks:
                            break
                    continue
                quiet = 0
                for batch in batches:
                    self.batch_number += 1
                    try:
                        run_batch(self, batch)
                    except RunAbortedError:
                        raise
                    except Exception as exc:  # a batch never takes the run (and its seal) down
                        fail_batch(self, batch, f"runtime error: {type(exc).__name__}: {exc}")
            outcome = "stopped" if stopped else "completed"
            self.audit("run.end", {"outcome": outcome})
            self.flush()
            self.recorder.checkpoint_all()
            return RunSummary(
                self.run_id, dict(self.states), self.batch_number - 1, self.merged, stopped
            )
        finally:
            self.recorder.close()

    def _promote(self) -> None:
        """Decide every planned task's trifecta and capsule (recorded), then promote the rest
        (planned -> open or blocked) as the scheduler says."""
        for task_id, state in sorted(self.states.items()):
            if state is not S.PLANNED:
                continue
            denial = check_task(self.specs[task_id], self.capabilities, self.run_profile)
            if denial is not None:
                self.deny(denial, self.run_profile)
                continue
            if self.plan.capsule is not None and task_id not in self.prechecked:
                self.prechecked.add(task_id)  # once per task here; again right before spawn
                now = self.clock()
                problems = pre_spawn_violations(self.plan.capsule, now, self.specs[task_id])
                self.capsule_check(task_id, now, [], problems)  # every task: re-checkable
                if problems:
                    self.move(task_id, S.DENIED, "intent capsule: " + "; ".join(problems))
        for task_id, target, reason in promotions(self.table):
            self.move(task_id, target, reason)

    def _stop_requested(self) -> bool:
        """True once the control store holds a new ``stop`` command (read incrementally)."""
        path = self.folder / "control.jsonl"
        if not path.exists():
            return False
        lines = path.read_bytes().splitlines()
        new, self.control_seen = lines[self.control_seen :], len(lines)
        for line in new:
            record = parse_record_line(line, "control", self.run_id)
            if record.kind == "command" and record.body["command"] == "stop":
                return True
        return False
