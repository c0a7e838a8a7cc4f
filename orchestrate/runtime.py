"""The deterministic tick loop: plan in, agents in worktrees, gates, merges, evidence out.

No model call and no randomness in coordination: at each decision point the loop takes a
snapshot of task states and asks pure functions (scheduler, capability matrix, capsule, locks)
what to do. Up to ``plan.max_in_flight`` batches (and each role's ``concurrency``) run at once,
as processes served by this one thread; results **retire strictly in batch order**, like a
CPU's reorder buffer: the loop waits for the oldest batch in flight, retires it (records,
gates' verdicts, merge), and only then decides again. Decisions therefore depend only on the
sequence of retirements, never on which process happened to finish first, so the same plan
with the same journal gives the same records and lineage run after run (decision 0027).

Every decision is an audit record, every file an agent changes a lineage record computed from
the worktree's git diff after the agent exits (the one write boundary), every model call a
replay record. Batches whose scopes intersect never run at once (write locks); a failed
attempt is restarted from the current HEAD while its task has attempts left.

Crash safety: task states are not kept anywhere but in the audit store. On start, an existing
run is resumed by replaying its records; tasks caught mid-flight are released, retried or
failed, with the reason recorded, and agents a crashed runtime left running are killed.

This module is the loop only; the parts it drives live in ``harness.orchestrate.runner``.
``Runtime``, ``RunSummary``, ``RunAbortedError`` and ``task_states`` stay importable from here.
"""

from __future__ import annotations

import contextlib

from harness.verify.fsm import TaskState

from .bus import BusError
from .capabilities import check_task
from .capsule import pre_spawn_violations
from .model import Batch
from .rounds.batch import is_rounds_batch, prior_state, run_rounds_batch
from .rounds.job import RoundsState
from .runner.core import ReplayMissError, RunAbortedError, RunCore, RunSummary
from .runner.job import BatchJob
from .runner.lifecycle import begin, finish
from .runner.resume import resume, task_states
from .runner.retire import retire
from .runner.start import start
from .sandbox.policy import check_sandboxed
from .scheduler import choose_batches, is_quiescent, promotions
from .supervise import wait_any

__all__ = ["RunAbortedError", "RunSummary", "Runtime", "task_states"]

S = TaskState


class Runtime(RunCore):
    """Runs one plan as one run; ``run()`` returns when the run is quiescent or stopped."""

    def run(self) -> RunSummary:
        """Start or resume the run, tick until it settles (or the operator stops it), seal."""
        window: list[BatchJob] = []
        try:
            check_sandboxed(self.plan, self.sandbox)
            fresh = not resume(self)
            if fresh:
                start(self)
            self.flush()
            begin(self, fresh=fresh)
            quiet = 0
            stopped = False
            while True:
                if self.poll_bus():
                    stopped = True
                    self._drain(window, stop=True)
                    for task, state in sorted(self.states.items()):
                        if state in (S.PLANNED, S.OPEN, S.BLOCKED, S.CLAIMED):
                            self.move(task, S.CANCELLED, "operator stop")
                    break
                self._promote()  # flushed with the batches it lets start (``_launch``)
                started = self._launch(window)
                if not window:
                    if not started and is_quiescent(self.table, {}):
                        quiet += 1
                        if quiet >= self.plan.settle_ticks:
                            break
                    continue
                quiet = 0
                if self._advance(window):
                    try:
                        retire(self, window.pop(0))
                    except ReplayMissError:
                        # Strict replay: a miss aborts the whole run, recorded and sealed first.
                        self._drain(window, stop=True)
                        finish(self, stopped=False, outcome="aborted: replay miss")
                        self.recorder.checkpoint_all()
                        raise
            outcome = "stopped" if stopped else "completed"
            if self.aborted:
                outcome = "aborted: operator"
            finish(self, stopped=stopped, outcome=outcome)
            self.recorder.checkpoint_all()
            return RunSummary(
                self.run_id, dict(self.states), self.batch_number - 1, self.merged, stopped
            )
        except BusError as exc:
            # The control bus is unsafe (a link, a FIFO, a hard link) or tampered (MAC): no
            # command can be trusted, so the run stops and ends failed, recorded without it.
            self._drain(window, stop=True)
            finish(self, stopped=False, outcome=f"aborted: control bus: {exc}", bus=False)
            self.recorder.checkpoint_all()
            raise RunAbortedError(f"control bus refused: {exc}") from None
        finally:
            for job in window:  # an abort: leave no agent or gate running
                job.kill("stop")
                _settle(job)
            self.recorder.close()

    def _launch(self, window: list[BatchJob]) -> bool:
        """Choose batches for the free slots (locks and role limits as the scheduler rules),
        record and flush every spawn in batch order, then start the processes.

        The first flush here is the tick's group commit: the last retirement's records, the
        promotions and every claim, lock and spawn of this decision point, in that order, all
        durable before any of these processes starts (one fdatasync instead of three; issue
        14). It is made whether or not a batch is chosen."""
        free = self._max_in_flight() - len(window)
        if free <= 0 or any(is_rounds_batch(self, job.batch.tasks) for job in window):
            self.flush()  # the tick's records (a retirement, promotions) even so
            return False  # a rounds task runs alone (decision 0033)
        in_flight: dict[str, int] = {}
        for job in window:
            in_flight[job.batch.role] = in_flight.get(job.batch.role, 0) + 1
        batches = choose_batches(
            self.table,
            in_flight=in_flight,
            plan=self.plan,
            next_batch_number=self.batch_number,
            held=[job.lock for job in window],
        )[:free]
        batches = _alone(self, batches, busy=bool(window))
        prepared: list[BatchJob] = []
        rounds: dict[str, RoundsState] = {}
        for batch in batches:
            self.batch_number += 1
            job = BatchJob(self, batch)
            try:
                if is_rounds_batch(self, batch.tasks):
                    state = rounds[batch.id] = prior_state(self, batch.tasks[0])
                    job.start_commit = state.checkpoint
                if job.prepare():
                    prepared.append(job)
            except Exception as exc:  # a batch never takes the run (and its seal) down
                _fail_unstarted(self, job, f"runtime error: {type(exc).__name__}: {exc}")
        self.flush()  # every spawn is durable before any process starts
        for job in prepared:
            try:
                if job.batch.id in rounds:
                    run_rounds_batch(self, job, rounds[job.batch.id])
                else:
                    job.start()
            except Exception as exc:
                job.error = f"runtime error: {type(exc).__name__}: {exc}"
                job.done = True
            window.append(job)
        self.flush()
        return bool(batches)

    def _advance(self, window: list[BatchJob]) -> bool:
        """Serve every job in flight until the oldest one is ready to retire (True), or the
        operator asks to stop (False: the caller's next check sees it)."""
        head = window[0]
        while True:
            for job in window:
                job.step(0.0)
            if head.done:
                return True
            if self.poll_bus():
                return False
            self.recorder.seal_due()  # progressive sealing goes on while agents run
            self.events.tick()  # expiry and escalation on the run's clock
            processes = [proc for job in window for proc in job.processes()]
            wait_any(processes, 0.25)

    def _drain(self, window: list[BatchJob], *, stop: bool) -> None:
        """Stop every job in flight and retire them all, in batch order."""
        for job in window:
            if stop:
                job.kill("stop")
        while window:
            job = window[0]
            _settle(job)
            with contextlib.suppress(ReplayMissError):  # recorded; the run is ending anyway
                retire(self, window.pop(0))

    def _max_in_flight(self) -> int:
        return self.plan.max_in_flight

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


def _alone(run: RunCore, batches: list[Batch], *, busy: bool) -> list[Batch]:
    """A rounds batch starts only with nothing in flight, and nothing starts beside it: the
    batches before the first rounds batch start now, the rest wait (their order is kept)."""
    for index, batch in enumerate(batches):
        if is_rounds_batch(run, batch.tasks):
            return [batch] if index == 0 and not busy else batches[:index]
    return batches


def _settle(job: BatchJob) -> None:
    """Step a (killed) job until it is ready to retire; bounded by its kill grace."""
    while not job.step(0.1):
        pass


def _fail_unstarted(run: RunCore, job: BatchJob, reason: str) -> None:
    """Settle a batch that raised before its agent started: claimed tasks are released then
    cancelled, so an error in one batch never takes the run (and its seal) down."""
    for task in job.batch.tasks:
        state = run.states[task]
        if state is S.CLAIMED:
            run.move(task, S.OPEN, reason)
            run.move(task, S.CANCELLED, reason)
        elif state in (S.IN_PROGRESS, S.GATING):
            run.move(task, S.FAILED, reason)
    run.flush()
    job.cleanup()
