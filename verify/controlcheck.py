"""Run check "control": every control decision re-decided from the evidence (issue 13 §9).

The runtime feeds one pure state machine (``harness.verify.rules.controller.Controller``) a
*step* per ended attempt and records what it returns (docs/spec/verifier.md, "Control").
Folding the audit store in order, this check builds the same machine from the plan member
(``control``: its parameters; the tasks' role, adapter, tools, scope and requirements) and
``run.start`` (the capability matrix and sandbox profile: which tools are risky, which tool
sets the trifecta denies), feeds it the recorded steps, and demands:

* right after the last ``task.planned``: ``config.version`` 1 (the initial document, parent
  and step null, snapshot = ``run.start.base_commit``), then the first ``control.phase``
  (reason ``run start``, step 0, the phase of the progress then);
* an *ending* — ``attempt.failed`` (class: its anomaly), a landing (``-> done``, class null),
  a rounds suspension (``in_progress -> blocked``, class: the attempt's last ``round.end``
  outcome) — is followed by exactly one ``control.sensor`` of that task and attempt before
  the task's next ``agent.spawn`` and before ``run.end``; a sensor without one is refused.
  In a crash recovery (after ``run.status starting``) the runtime records a step for a
  crashed attempt (``attempt.failed``, with no facts: pace 0, no gates) but none for a
  landing or suspension it records there;
* each ``control.sensor``: the next step number, the task's role, subtree, attempt and the
  phase in force; its tier-1 values as the evidence gives them (outcome, restarts, the
  attempt's failing gates per kind, coverage), pace as the batch's ``agent.exit`` gives it,
  and readings exactly ``Controller.readings``; then the records right after it are exactly
  the decisions and configuration versions ``Controller.observe`` returns, in order;
* every ``config.version`` chains (next number, parent = the previous SHA-256, its own
  SHA-256 the document's, a valid document, change/channel/impact as ``configchain`` gives);
* a settled transition that moves ``phase_for(progress)`` is followed at once by its
  ``control.phase``, then by one ``control.review`` per review point it passes (the meta
  layer's ``Controller.reviews``; ``controlfacts.check_review``); no other ``control.phase``
  or ``control.review``;
* ``agent.spawn.config`` is the latest version.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .controlfacts import (
    AttemptFacts,
    Chain,
    ControlError,
    ControlPlan,
    Exit,
    Reviews,
    check_decision,
    check_expected_version,
    check_pace,
    check_readings,
    check_review,
    check_tier1,
    check_version,
    control_plan,
    decision_key,
    describe,
    exit_of,
    gate_sensor,
)
from .layout import plan_member
from .records import Record
from .report import ControlSummary
from .rules import meta, phases, strategy, trifecta
from .rules.controller import Controller, Decision, Version, step_of, subtree_of
from .rules.events import time_us
from .runchecks import plan_object

CONTROL_KINDS: Final = frozenset(
    {
        "control.sensor",
        "control.decision",
        "control.phase",
        "config.version",
        "control.review",
        "control.verdict",
    }
)
PLANNING: Final = frozenset({"task.planned", "capsule.approved"})


@dataclass(frozen=True)
class _Ending:
    attempt: int
    cls: str | None
    recovered: bool
    """Recorded in a crash recovery: the runtime's step has no facts (JobFacts())."""
    where: str
    what: str


@dataclass(eq=False, repr=False)
class ControlCheck:
    run: str
    plan: Mapping[str, Any] | None
    member: str
    stage: str = "before"
    """before (no run.start yet) -> planning (its tasks; then config.version 1 is due) -> phase
    (the first control.phase is due) -> running."""
    cplan: ControlPlan | None = None
    machine: Controller | None = None
    base: str = ""
    chain: Chain | None = None
    settled: set[str] = field(default_factory=set)
    """Tasks in a settled state (done, failed, cancelled, denied: final states)."""
    covered: set[str] = field(default_factory=set)
    """Requirement ids carried by tasks that are done."""
    facts: dict[str, AttemptFacts] = field(default_factory=dict)
    exits: dict[str, Exit] = field(default_factory=dict)
    epoch: int = 0
    recovering: bool = False
    pending: dict[str, _Ending] = field(default_factory=dict)
    phase_due: tuple[str, int, str] | None = None
    """(phase, progress, where the settling transition is) of an unrecorded phase change."""
    reviews_due: Reviews | None = None
    started_us: int = 0
    """``run.start``'s time; ``version_us``: configuration version 1's."""
    version_us: int = 0
    time: str = "1970-01-01T00:00:00.000000Z"
    """The time of the record being folded."""
    expect: deque[Decision | Version] = field(default_factory=deque)
    steps: int = 0
    readings: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    versions: int = 0

    # -- setup ---------------------------------------------------------------------------

    def _start(self, body: Mapping[str, Any], where: str) -> None:
        if self.plan is None:
            raise ControlError(f"{where}: run.start, but {self.member} has no tasks list")
        self.cplan = cplan = control_plan(self.plan, self.member)
        try:
            matrix = trifecta.matrix_from_object(body["capabilities"])
        except trifecta.RuleInputError as exc:
            raise ControlError(f"{where}: {exc}") from None
        sandbox = body.get("sandbox")
        profile = sandbox if isinstance(sandbox, Mapping) else None
        tasks: dict[str, list[tuple[str, Sequence[str]]]] = {}
        for spec in cplan.tasks.values():
            tasks.setdefault(spec.role, []).append((spec.adapter, list(spec.tools)))

        self.machine = Controller.under(cplan.params, tasks, matrix, profile)
        self.base = str(body["base_commit"])
        self.started_us = time_us(self.time)
        self.stage = "planning"

    def _first_version(self, kind: str, body: Mapping[str, Any], where: str) -> None:
        if kind != "config.version":
            raise ControlError(
                f"{where}: {kind} right after the plan's tasks: no configuration version 1 "
                "(config.version 1 follows the last task.planned)"
            )
        assert self.machine is not None
        initial = self.machine.initial()
        for member, value in initial.record(self.base).items():
            if body[member] != value:
                raise ControlError(
                    f"{where}: config.version records {member} {body[member]!r}; configuration "
                    f"version 1 has {value!r}"
                )
        self.chain = Chain(1, initial.sha256, initial.document)
        self.version_us = time_us(self.time)
        self.stage = "phase"

    def _first_phase(self, kind: str, body: Mapping[str, Any], where: str) -> None:
        if kind != "control.phase":
            raise ControlError(
                f"{where}: {kind} right after configuration version 1, where the run's first "
                "control.phase (reason 'run start') is due"
            )
        assert self.machine is not None
        progress = self._progress()
        self.machine.settle(progress)
        self._phase_is(body, (self.machine.phase, progress, 0, "run start"), where)
        self.stage = "running"

    # -- the fold ------------------------------------------------------------------------

    def audit(self, record: Record, where: str) -> None:
        kind, body = record.kind, record.body
        self.time = record.time  # parsed only where a rule reads it (cheap per record)
        if self.stage == "before":
            if kind == "run.start":
                self._start(body, where)
            elif kind in CONTROL_KINDS:
                raise ControlError(f"{where}: {kind} in a run without run.start")
            return
        if self.stage == "planning":
            if kind in PLANNING:
                return  # a planned task is not settled: progress needs no record of it
            self._first_version(kind, body, where)
            return
        if self.stage == "phase":
            self._first_phase(kind, body, where)
            return
        if self._due(kind, body, where):
            return
        if kind == "control.sensor":
            self._sensor(body, where)
        elif kind == "control.decision":
            raise ControlError(
                f"{where}: control.decision {decision_key(body)} of {body['key']} at step "
                f"{body['step']} has no trigger: the rules decide nothing there"
            )
        elif kind == "config.version":
            assert self.chain is not None and self.machine is not None
            check_version(body, self.chain, self.machine.steps, where)
            raise ControlError(
                f"{where}: config.version {body['version']} was produced by no decision"
            )
        elif kind == "control.phase":
            assert self.machine is not None
            raise ControlError(
                f"{where}: control.phase {body['phase']!r} without a phase change: progress "
                f"{self._progress()} per-mille keeps the run in {self.machine.phase!r}"
            )
        elif kind == "control.verdict":
            assert self.machine is not None
            problem = self.machine.judge(str(body["alert"]), str(body["verdict"]))
            if problem is not None:
                raise ControlError(f"{where}: control.verdict refused by the rule: {problem}")
        elif kind == "control.review":
            raise ControlError(
                f"{where}: control.review of point {body['point']} without a settling "
                "transition that passes it"
            )
        else:
            self._evidence(kind, body, where)

    def _due(self, kind: str, body: Mapping[str, Any], where: str) -> bool:
        """The record a phase change or the last step made due; True when it was one."""
        assert self.machine is not None
        if self.phase_due is not None:
            phase, progress, at = self.phase_due
            if kind != "control.phase":
                raise ControlError(
                    f"{where}: missing phase: progress {progress} per-mille moved the run into "
                    f"{phase!r} at {at}, but {kind} comes before its control.phase"
                )
            self._phase_is(body, (phase, progress, self.machine.steps, "progress"), where)
            self.phase_due = None
            return True
        if self.reviews_due is not None:
            if check_review(kind, body, self.reviews_due, self.machine, self._times(), where):
                self.reviews_due = None
            return True
        if not self.expect:
            return False
        due = self.expect[0]
        if isinstance(due, Decision):
            if kind != "control.decision":
                raise ControlError(
                    f"{where}: missing decision: {describe(due)} and nothing was decided "
                    f"({due.layer}/{due.rule} -> {due.action} is due, the record is {kind})"
                )
            check_decision(body, due, where)
            key = decision_key(body)
            self.decisions[key] = self.decisions.get(key, 0) + 1
        else:
            if kind != "config.version":
                raise ControlError(
                    f"{where}: the decision at step {due.step} produced configuration version "
                    f"{due.version}, which is not recorded (the record is {kind})"
                )
            assert self.chain is not None
            check_version(body, self.chain, self.machine.steps, where)
            check_expected_version(body, due, where)
            self.chain = Chain(due.version, due.sha256, due.document)
            self.versions += 1
        self.expect.popleft()
        return True

    def _times(self) -> tuple[int, int, int]:
        return self.started_us, self.version_us, time_us(self.time)

    def _phase_is(
        self, body: Mapping[str, Any], expected: tuple[str, int, int, str], where: str
    ) -> None:
        members = ("phase", "progress_pm", "step", "reason")
        for member, value in zip(members, expected, strict=True):
            if body[member] != value:
                raise ControlError(
                    f"{where}: control.phase records {member} {body[member]!r}, the rule gives "
                    f"{value!r} (phase {expected[0]!r} at {expected[1]} per-mille of settled "
                    f"tasks, step {expected[2]})"
                )

    # -- the evidence around the steps ---------------------------------------------------

    def _task(self, name: str) -> AttemptFacts:
        return self.facts.setdefault(name, AttemptFacts())

    def _evidence(self, kind: str, body: Mapping[str, Any], where: str) -> None:
        if kind == "task.planned":
            raise ControlError(f"{where}: task.planned after configuration version 1")
        if kind == "run.status":
            if body["epoch"] != self.epoch:  # a continue: attempts count per epoch
                self.epoch = body["epoch"]
                for facts in self.facts.values():
                    facts.attempt = 0
            self.recovering = body["status"] == "starting"
        elif kind == "agent.spawn":
            self._spawn(body, where)
        elif kind == "agent.exit":
            self.exits[str(body["batch"])] = exit_of(body)
        elif kind == "gate.result":
            gates = self._task(str(body["task"])).gates
            sensor = gate_sensor(str(body["gate"]))
            gates[sensor] = gates.get(sensor, 0) + (0 if body["passed"] else 1)
        elif kind == "round.end":
            self._task(str(body["task"])).outcome = str(body["outcome"])
        elif kind == "attempt.failed":
            self._ending(
                str(body["task"]), int(body["attempt"]), str(body["anomaly"]), where, "failure"
            )
        elif kind == "task.transition":
            self._transition(body, where)
        elif kind == "run.end" and self.pending:
            name, ending = sorted(self.pending.items())[0]
            raise self._missing(name, ending, f"run.end at {where}")

    def _spawn(self, body: Mapping[str, Any], where: str) -> None:
        assert self.machine is not None
        for name in body["tasks"]:
            ending = self.pending.get(name)
            if ending is not None:
                raise self._missing(name, ending, f"its next agent.spawn at {where}")
            facts = self._task(name)
            facts.attempt += 1
            facts.batch = str(body["batch"])
            facts.gates = {}
            facts.outcome = None
        if body["config"] != self.machine.version:
            raise ControlError(
                f"{where}: batch {body['batch']!r} loads configuration version "
                f"{body['config']}, the latest is version {self.machine.version}"
            )

    def _transition(self, body: Mapping[str, Any], where: str) -> None:
        assert self.machine is not None
        name, target = str(body["task"]), str(body["to"])
        if target in phases.SETTLED:  # settled states are final: counted once, O(1)
            self.settled.add(name)
            spec = self.cplan.tasks.get(name) if self.cplan is not None else None
            if target == "done" and spec is not None:
                self.covered.update(spec.requirements)
            previous, progress = self.machine.progress, self._progress()
            if self.machine.settle(progress) is not None:
                self.phase_due = (self.machine.phase, progress, where)
            points = meta.progress_reviews(previous, progress)
            if points:
                settled = time_us(self.time)
                self.reviews_due = Reviews(previous, progress, points, settled, where)
        if self.recovering:
            return  # the runtime records no step for what its crash recovery settles
        facts = self._task(name)
        if target == "done":
            self._ending(name, facts.attempt, None, where, "landing")
        elif (body["from"], target) == ("in_progress", "blocked"):
            if facts.outcome not in strategy.ROUND_CLASSES:
                raise ControlError(
                    f"{where}: task {name!r} is suspended (in_progress -> blocked) without a "
                    "round.end of its attempt that ends incomplete or blocked"
                )
            self._ending(name, facts.attempt, facts.outcome, where, "suspension")

    def _ending(self, name: str, attempt: int, cls: str | None, where: str, what: str) -> None:
        earlier = self.pending.get(name)
        if earlier is not None:
            raise self._missing(name, earlier, f"its {what} at {where}")
        self.pending[name] = _Ending(attempt, cls, self.recovering, where, what)

    def _missing(self, name: str, ending: _Ending, before: str) -> ControlError:
        return ControlError(
            f"{ending.where}: missing step: the {ending.what} of task {name!r} (attempt "
            f"{ending.attempt}) has no control.sensor before {before}"
        )

    def _progress(self) -> int:
        assert self.cplan is not None
        return phases.progress_pm(len(self.settled), len(self.cplan.tasks))

    def _coverage(self) -> int | None:
        assert self.cplan is not None
        wanted = self.cplan.requirements
        return len(self.covered) * 1000 // len(wanted) if wanted else None

    # -- one step ------------------------------------------------------------------------

    def _sensor(self, body: Mapping[str, Any], where: str) -> None:
        machine, cplan = self.machine, self.cplan
        assert machine is not None and cplan is not None
        label = f"{where}: control.sensor step {body['step']}"
        if body["step"] != machine.steps + 1:
            raise ControlError(f"{label} follows step {machine.steps}: steps count by one")
        name = str(body["task"])
        spec = cplan.tasks.get(name)
        if spec is None:
            raise ControlError(f"{label} names task {name!r}, which is not in the plan member")
        ending = self.pending.pop(name, None)
        if ending is None:
            raise ControlError(
                f"{label}: step without an attempt ending: task {name!r} has no attempt.failed, "
                "landing or rounds suspension since its last step"
            )
        expected = {
            "agent": spec.role,
            "subtree": subtree_of(spec.scope),
            "attempt": ending.attempt,
            "class": ending.cls,
            "phase": machine.phase,
        }
        for member, value in expected.items():
            if body[member] != value:
                raise ControlError(
                    f"{label} records {member} {body[member]!r}, the evidence gives {value!r} "
                    f"(the {ending.what} of task {name!r} at {ending.where})"
                )
        step, readings = step_of(body)
        facts = self._task(name)
        recovered = ending.recovered
        check_tier1(
            readings,
            cls=ending.cls,
            attempt=ending.attempt,
            gates={} if recovered else facts.gates,
            coverage=self._coverage(),
            label=label,
        )
        batch = facts.batch
        exit_facts = None if recovered or batch is None else self.exits.get(batch)
        check_pace(readings, exit_facts, label)
        check_readings(readings, machine.readings(step), label)
        observed = machine.observe(step, readings)
        self.expect.extend(observed.decisions)
        self.expect.extend(observed.versions)
        self.steps += 1
        self.readings += len(readings)

    # -- the other stores, the end -------------------------------------------------------

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        """Nothing left due: version 1 and the first phase, a phase change, a decision or
        version of the last step, a step of an ended attempt."""
        if self.stage == "before":
            return
        if self.stage != "running":
            raise ControlError(
                f"run {self.run!r}: no configuration version 1 and first control.phase after "
                "its tasks (every format-2 run records them)"
            )
        if self.phase_due is not None:
            phase, progress, at = self.phase_due
            raise ControlError(
                f"{at}: missing phase: progress {progress} per-mille moved the run into "
                f"{phase!r}, and the records end without its control.phase"
            )
        if self.reviews_due is not None:
            raise ControlError(
                f"{self.reviews_due.where}: missing review: the records end before the "
                "control.review of the review points this settlement passes"
            )
        if self.expect:
            due = self.expect[0]
            if isinstance(due, Decision):
                raise ControlError(
                    f"run {self.run!r}: missing decision: {describe(due)} and nothing was "
                    "decided before the records end"
                )
            raise ControlError(
                f"run {self.run!r}: the decision at step {due.step} produced configuration "
                f"version {due.version}, which is not recorded"
            )
        if self.pending:
            name, ending = sorted(self.pending.items())[0]
            raise self._missing(name, ending, "the end of the records")

    def summary(self) -> ControlSummary | None:
        """What was re-decided (None for a run without ``run.start``)."""
        if self.stage == "before":
            return None
        return ControlSummary(
            self.run, self.steps, self.readings, dict(sorted(self.decisions.items())), self.versions
        )


def control_check(run: str, plan: bytes | None) -> ControlCheck:
    return ControlCheck(run, plan_object(plan), plan_member(run))
