"""A run's state and the record primitives every other part of the runtime goes through.

Task states live only in the audit store (crash safety, see ``harness.orchestrate.runtime``),
so the one way to change a state is ``move``: it records the transition (or the refusal of an
illegal one) in the same queue that ``flush`` makes durable before any outside effect. Keeping
this in one class means the resume, batch and landing modules cannot change a state without
its record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder, run_dir
from harness.verify.fsm import TaskState, is_legal
from harness.verify.rules.phases import SETTLED

from ..budgeting import RunBudget
from ..capabilities import CapabilityMatrix, Denial
from ..capsule import capsule_digest
from ..clock import LogicalClock
from ..control import RunControl
from ..events import EventBus
from ..model import Plan, TaskSpec
from ..replay import Journal
from ..review.desk import review_tick
from ..sandbox import Sandbox, Settings, default_work_root
from ..scheduler import TaskTable

S = TaskState


@dataclass
class RunSummary:
    """What ``Runtime.run`` returns: the final task states and what was merged."""

    run_id: str
    states: dict[str, TaskState]
    batches: int
    merged: list[str] = field(default_factory=list)
    stopped: bool = False


class RunAbortedError(Exception):
    """The run stopped early (e.g. a strict-replay miss); its evidence is sealed."""


class ReplayMissError(RunAbortedError):
    """A strict-replay miss at retirement: the loop stops every other batch in flight,
    records ``run.end`` and seals before it propagates."""


class RunCore:
    """The state of one run (plan, stores, task states, counters) and its record primitives."""

    def __init__(
        self,
        *,
        repo: Path,
        plan: Plan,
        state_dir: Path,
        keys: OperatorKeys,
        run_id: str,
        clock: Callable[[], str],
        capabilities: CapabilityMatrix,
        journal: Journal | None = None,
        grace_s: float = 2.0,
        git_date: str | None = None,
        sandbox: Settings | None = None,
        work_root: Path | None = None,
        keys_dir: Path | None = None,
    ) -> None:
        self.repo = repo
        self.plan = plan
        self.specs: dict[str, TaskSpec] = {task.id: task for task in plan.tasks}
        self.state_dir = state_dir
        self.keys = keys
        self.run_id = run_id
        self.clock = clock
        self.capabilities = capabilities
        self.journal = journal
        self.grace_s = grace_s
        self.git_date = git_date
        self.folder = run_dir(state_dir, run_id)
        # Worktrees live outside the state folder (decision 0017): an agent walking up from
        # its working directory finds neither the stores nor the keys.
        self.work = (work_root or default_work_root(repo)) / run_id
        self.sandbox = Sandbox.for_run(
            sandbox or Settings(), repo=repo, state_dir=state_dir, keys_dir=keys_dir
        )
        self.recorder = RunRecorder(
            state_dir,
            run_id,
            keys,
            clock=clock,
            seal_every_records=plan.seal_every_records,
            seal_every_s=plan.seal_every_s,
        )
        self.states: dict[str, TaskState] = {}
        self.table = TaskTable.from_plan(plan)
        """Indexed snapshot for the scheduler, kept in step with ``states`` by ``set_state``."""
        self.batch_number = 1
        self.step = 0
        self.stop_seen = False
        self.epoch = 0
        """The run's resume epoch: 0 at the first start, +1 per continue (``resume``)."""
        self.status: str | None = None
        """The run's lifecycle state (``run.status``; ``harness.verify.rules.lifecycle``)."""
        self.suspended: dict[str, str] = {}
        """Rounds tasks suspended ``incomplete`` or ``blocked`` (in_progress -> blocked)."""
        self.open_gate: tuple[str, int, str] | None = None
        """(task, round, the command that closes it) while a round gate waits."""
        self._desk: Any = None
        self.control = RunControl(self)
        """The control layers (sensors, I/D layers, phases, configuration versions)."""
        self.control_begun = False
        """True once configuration version 1 is recorded (or read back on resume)."""
        self.events = EventBus(
            self.recorder, clock.peek if isinstance(clock, LogicalClock) else clock
        )
        """The event bus: publishes after every audit group commit (docs/spec/events.md)."""
        self._pending: list[tuple[str, Mapping[str, Any]]] = []
        self._when_durable: list[Callable[[], None]] = []
        """Effects waiting for the queued records that authorise them (``when_durable``)."""
        self.merged: list[str] = []
        self.prechecked: set[str] = set()
        """Tasks whose promotion-time capsule check is recorded (not repeated every tick)."""
        self.attempts: dict[str, int] = {}
        """Per task, the number of the attempt last spawned (rebuilt from ``agent.spawn`` on
        resume)."""
        self.last_failure: dict[str, tuple[int, str]] = {}
        """Per task, (attempt, anomaly class) of its latest failed attempt (the step's class)."""
        self.feedback: dict[str, str] = {}
        """Per task, what failed in its last attempt: carried into the next attempt's prompt."""
        self.budget: RunBudget | None = None
        """The budget keeper (``harness.orchestrate.budgeting``), made on first use."""
        self.executor: Any = None
        """Where agents run: None for local supervised processes, else a remote executor
        (``harness.orchestrate.executors``) whose handles step like ``Supervised``."""
        self.run_profile: Mapping[str, Any] | None = None
        """The run's default sandbox profile as ``run.start`` records it: promotion-time
        trifecta decisions use it (the verifier re-decides them with the same record)."""

    def audit(self, kind: str, body: Mapping[str, Any]) -> None:
        """Queue an audit record; ``flush`` makes the queue durable in one group commit.

        The rule that keeps this honest: flush before every effect outside the evidence (a
        worktree, a process, a merge) and at the end of each tick, so no effect ever happens on
        the strength of a decision that a crash could lose.
        """
        self._pending.append((kind, body))

    def flush(self) -> None:
        """Append the queued audit records in one group commit (see ``audit``), then carry
        out the effects that waited for them (``when_durable``)."""
        if self._pending:
            pending, self._pending = self._pending, []
            effects, self._when_durable = self._when_durable, []
            # A failed append drops the waiting effects: their records are not durable.
            acks = self.recorder.store("audit").append_many(pending)
            try:
                self.events.audited(pending, acks)
            finally:
                _carry_out(effects)  # the records are durable, whatever the bus did

    def when_durable(self, effect: Callable[[], None]) -> None:
        """Carry out ``effect`` once every record queued so far is durable: at once when the
        queue is empty, else right after the next flush.

        Why: a flush costs one fdatasync (most of the evidence's CPU per event, issue 14),
        so an effect that needs the records before it but nothing else to wait for it (a
        retired batch's worktree removal) is not a reason for a flush of its own; it rides on
        the next one, which comes before the next outside effect anyway (the next decision
        point's spawn flush, or ``run.end``). "Flush before every effect" holds as before.
        """
        if self._pending:
            self._when_durable.append(effect)
        else:
            effect()

    @property
    def desk(self) -> Any:
        """The control bus desk (``runner.commands.CommandDesk``), made on first use."""
        if self._desk is None:
            from .commands import CommandDesk

            self._desk = CommandDesk(self)
        return self._desk

    def poll_bus(self) -> bool:
        """Answer new operator commands; True once a stop or an abort was applied."""
        if not self.stop_seen and self.desk.poll():
            self.stop_seen = True
        review_tick(self)  # hooks waiting on the action review gate (after the receipts)
        return self.stop_seen

    @property
    def aborted(self) -> bool:
        return self._desk is not None and self._desk.abort_command is not None

    def take_gate_input(self) -> Any:
        return self.desk.take_gate_input()

    def take_instructions(self, task: str) -> list[Any]:
        return list(self.desk.take_instructions(task))

    def set_status(self, status: str, reason: str, *, command: str | None = None) -> None:
        """Record a lifecycle step (``run.status``), flushed at once; a repeat is skipped."""
        if status == self.status and command is None:
            return
        self.status = status
        self.audit(
            "run.status",
            {"status": status, "epoch": self.epoch, "reason": reason, "command": command},
        )
        self.flush()

    def move(self, task: str, target: TaskState, reason: str) -> bool:
        """Apply a transition if legal; an illegal one is refused and recorded, not applied."""
        current = self.states[task]
        if not is_legal(current, target):
            self.audit(
                "task.refused",
                {"task": task, "from": current.value, "to": target.value, "reason": reason},
            )
            return False
        self.audit(
            "task.transition",
            {"task": task, "from": current.value, "to": target.value, "reason": reason},
        )
        self.set_state(task, target)
        if self.control_begun and target.value in SETTLED:
            self.control.settled()
        return True

    def set_state(self, task: str, state: TaskState) -> None:
        """Set a state without a record: only for states whose record already exists (a
        ``task.planned`` being written, or one replayed from the audit store on resume)."""
        self.states[task] = state
        self.table.set_state(task, state)

    def deny(self, denial: Denial, sandbox: Mapping[str, Any] | None) -> None:
        """Record a trifecta denial with the sandbox profile it was decided under."""
        self.audit(
            "capability.denied",
            {
                "task": denial.task,
                "tools": list(denial.tools),
                "tags": list(denial.tags),
                "reason": denial.reason,
                "sandbox": dict(sandbox) if sandbox is not None else None,
            },
        )
        self.move(denial.task, S.DENIED, denial.reason)

    def capsule_check(
        self,
        task: str,
        now: str,
        actions: Sequence[tuple[str, str]],
        violations: Sequence[str],
    ) -> None:
        """Record a capsule decision with its inputs (the verifier recomputes it)."""
        assert self.plan.capsule is not None
        self.audit(
            "capsule.check",
            {
                "task": task,
                "capsule": capsule_digest(self.plan.capsule),
                "now": now,
                "actions": [[kind, target] for kind, target in actions],
                "conforms": not violations,
                "violations": list(violations),
            },
        )


def _carry_out(effects: list[Callable[[], None]]) -> None:
    """Run every effect in order; a failing one does not keep the later ones from running
    (each is independent, e.g. one batch's worktree removal), and the first error is raised
    once they all ran."""
    error: BaseException | None = None
    for effect in effects:
        try:
            effect()
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error
