"""Bundle check "semantics": what the records say happened must be a lawful history.

Per run, over the audit and lineage stores (already verified record by record):
* every ``task.transition`` follows the lifecycle table (harness.verify.fsm) from the task's
  declared start (``task.planned``), and its ``from`` is the task's state at that point;
* a ``task.refused`` record names a transition the table does forbid, and changes nothing;
* a task denied by the capability matrix (``capability.denied``) ends ``denied`` and is never
  part of a spawned batch;
* a task reaches ``done`` only after at least one ``gate.result`` for it, all of them passed,
  and a ``merge.result`` that merged, all since its latest attempt started (a retried task,
  ``in_progress``/``gating`` -> ``open``, starts over: only the last attempt can be final);
* every lineage record names a declared task that was part of a spawned batch.

Runs without ``task.planned`` records (no runtime involved) have nothing to check here.
Format-2 runtime runs start with ``run.start``; their recorded decisions are re-decided from
the recorded policy by ``harness.verify.policycheck`` in the same pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import VerificationError
from .fsm import INITIAL, TaskState, is_legal
from .layout import plan_member
from .policycheck import PolicyCheck
from .records import Record
from .runchecks import EventsReader, ReplayReader, RunCheck, run_checks


class SemanticsError(VerificationError):
    """The records are each valid, but together they describe an impossible history."""


@dataclass(eq=False, repr=False)
class _Task:
    state: TaskState = INITIAL
    spawned: bool = False
    denied_by_capability: bool = False
    gates: list[bool] = field(default_factory=list)
    merged: bool = False


@dataclass
class RunSemantics:
    """Folds one run's audit records (in order), then its lineage records."""

    run: str
    tasks: dict[str, _Task] = field(default_factory=dict)
    declared: bool = False
    policy: PolicyCheck | None = None
    checks: list[RunCheck] = field(default_factory=list)
    """Further folds over the same records (``harness.verify.runchecks``: locks, budgets…)."""
    _sorted: tuple[int, list[EventsReader], list[ReplayReader]] | None = None

    def _task(self, name: str, where: str) -> _Task:
        task = self.tasks.get(name)
        if task is None:
            raise SemanticsError(f"{where}: task {name!r} was never declared (task.planned)")
        return task

    def audit(self, record: Record, where: str) -> None:
        if self.policy is not None:
            self.policy.audit(record, where)
        for check in self.checks:
            check.audit(record, where)
        body = record.body
        kind = record.kind
        if kind == "task.planned":
            if body["task"] in self.tasks:
                raise SemanticsError(f"{where}: task {body['task']!r} declared twice")
            self.tasks[body["task"]] = _Task()
            self.declared = True
        elif kind == "task.transition":
            task = self._task(body["task"], where)
            if body["from"] != task.state:
                raise SemanticsError(
                    f"{where}: task {body['task']!r} moves from {body['from']!r} but is "
                    f"{task.state.value!r}"
                )
            if not is_legal(body["from"], body["to"]):
                raise SemanticsError(
                    f"{where}: {body['from']} -> {body['to']} is not a legal transition "
                    f"(task {body['task']!r})"
                )
            target = TaskState(body["to"])
            if target is TaskState.DONE and not (task.gates and all(task.gates) and task.merged):
                raise SemanticsError(
                    f"{where}: task {body['task']!r} is done without passed gates and a merge"
                )
            if task.denied_by_capability and target is not TaskState.DENIED:
                raise SemanticsError(
                    f"{where}: task {body['task']!r} was denied by the capability matrix but "
                    f"moves to {target.value!r}"
                )
            if target is TaskState.OPEN and body["from"] in (
                TaskState.IN_PROGRESS,
                TaskState.GATING,
            ):  # a retried attempt: the next attempt is judged by its own gates and merge
                task.gates.clear()
                task.merged = False
            task.state = target
        elif kind == "task.refused":
            task = self._task(body["task"], where)
            if is_legal(body["from"], body["to"]):
                raise SemanticsError(
                    f"{where}: a legal transition {body['from']} -> {body['to']} was refused"
                )
        elif kind == "capability.denied":
            task = self._task(body["task"], where)
            if task.spawned:
                raise SemanticsError(f"{where}: task {body['task']!r} denied after it ran")
            task.denied_by_capability = True
        elif kind == "agent.spawn":
            for name in body["tasks"]:
                task = self._task(name, where)
                if task.denied_by_capability:
                    raise SemanticsError(
                        f"{where}: batch {body['batch']!r} spawned denied task {name!r}"
                    )
                task.spawned = True
        elif kind == "gate.result":
            self._task(body["task"], where).gates.append(bool(body["passed"]))
        elif kind == "merge.result":
            task = self._task(body["task"], where)
            if body["merged"] and not (task.gates and all(task.gates)):
                raise SemanticsError(
                    f"{where}: task {body['task']!r} merged without passing all its gates"
                )
            task.merged = task.merged or bool(body["merged"])

    def control(self, record: Record, where: str) -> None:
        """A control store record: only the run checks read them (commands and receipts)."""
        for check in self.checks:
            check.control(record, where)

    def events(self, record: Record, where: str) -> None:
        """An events store record: only the checks that read the bus see them."""
        for check in self._readers()[0]:
            check.events(record, where)

    def replay(self, record: Record, where: str) -> None:
        """A replay store record: only the checks that read it see them (model exchanges)."""
        for check in self._readers()[1]:
            check.replay(record, where)

    def _readers(self) -> tuple[list[EventsReader], list[ReplayReader]]:
        """The checks that read the events and the replay store, sorted out once: an
        ``isinstance`` against a runtime-checkable protocol per record per check cost a fifth
        of a large bundle's verification."""
        cached = self._sorted
        if cached is None or cached[0] != len(self.checks):
            events: list[EventsReader] = [c for c in self.checks if isinstance(c, EventsReader)]
            replay: list[ReplayReader] = [c for c in self.checks if isinstance(c, ReplayReader)]
            cached = (len(self.checks), events, replay)
            self._sorted = cached
        return cached[1], cached[2]

    def lineage(self, record: Record, where: str) -> None:
        if self.policy is not None:
            self.policy.lineage(record, where)
        for check in self.checks:
            check.lineage(record, where)
        if not self.declared or record.kind not in ("artifact.write", "artifact.delete"):
            return
        task = self._task(str(record.body["task"]), where)
        if not task.spawned:
            raise SemanticsError(
                f"{where}: artifact {record.body['path']!r} is attributed to task "
                f"{record.body['task']!r}, which never ran"
            )

    def finish(self) -> None:
        if self.policy is not None:
            self.policy.finish()
        for check in self.checks:
            check.finish()
        if self.declared and (self.policy is None or not self.policy.started):
            raise SemanticsError(f"run {self.run!r} declares tasks but has no run.start record")
        for name, task in self.tasks.items():
            if task.denied_by_capability and task.state is not TaskState.DENIED:
                raise SemanticsError(f"task {name!r} was denied but ends {task.state.value!r}")


def run_semantics(
    run: str, plan: bytes | None, members: Mapping[str, bytes] | None = None
) -> RunSemantics:
    """A fold for one run; ``plan`` is its plan member (None when the bundle has none),
    ``members`` the run's other members read before its stores (its rounds texts)."""
    return RunSemantics(
        run,
        policy=PolicyCheck(run, plan, plan_member(run)),
        checks=run_checks(run, plan, members),
    )


def check_run_semantics(
    run: str,
    audit: Iterable[tuple[Record, str]],
    lineage: Iterable[tuple[Record, str]],
    plan: bytes | None = None,
    control: Iterable[tuple[Record, str]] = (),
    members: Mapping[str, bytes] | None = None,
    events: Iterable[tuple[Record, str]] = (),
    replay: Iterable[tuple[Record, str]] = (),
) -> RunSemantics:
    """Check one run; ``audit``/``control``/``events``/``lineage``/``replay`` yield (record,
    location) in store order, ``plan`` is the run's plan member (None when the bundle has
    none), ``members`` its rounds text members by name."""
    semantics = run_semantics(run, plan, members)
    for record, where in audit:
        semantics.audit(record, where)
    for record, where in control:
        semantics.control(record, where)
    for record, where in events:
        semantics.events(record, where)
    if semantics.declared:  # without runtime records there is nothing to attribute: skip the pass
        for record, where in lineage:
            semantics.lineage(record, where)
    for record, where in replay:
        semantics.replay(record, where)
    semantics.finish()
    return semantics
