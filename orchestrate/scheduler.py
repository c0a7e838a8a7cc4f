"""The scheduler: pure functions from a task snapshot to decisions.

No I/O, no clock, no randomness: the same snapshot always gives the same decisions, so a run's
coordination can be replayed and audited. The runtime calls, once per tick:

1. ``promotions(tasks)`` and applies each returned transition (through the FSM);
2. ``choose_batches(tasks, in_flight=..., plan=..., next_batch_number=...)`` on the new
   snapshot and starts one agent per returned batch;
3. ``is_quiescent(tasks, in_flight)`` to count settle ticks.

Rules (docs/spec/plan.md, "Scheduling"):

* A task is *ready* when it is OPEN and every dependency is DONE. A dependency id missing from
  the snapshot is never DONE.
The ordering and grouping below is the rule ``harness.verify.rules.schedule`` (one definition,
DESIGN §9); this module finds the ready tasks and applies promotions.

* Ready tasks are taken in order of descending ``priority``, then ascending ``order`` (position
  in the plan file), then ``id``.
* In that order each task joins the still-filling batch of its (role, adapter) pair, or opens a
  new batch when its role may start another one. A batch holds up to ``plan.max_batch`` tasks
  and never mixes roles or adapters.
* A role may have at most ``plan.concurrency.get(role, 1)`` batches in flight; ``in_flight``
  counts those already running, so a role at its limit gets no new batch this tick.
* Batch ids are ``b{n:04d}`` for n = ``next_batch_number``, ``next_batch_number + 1``, ... in
  the order the batches were opened (``b9999``, then ``b10000``).
* Write locks: a task whose scope intersects ``held`` (the locks of batches in flight) or the
  lock of a batch already chosen in this call, other than the one it joins, waits (OPEN).

Snapshots. Any ``Sequence[TaskView]`` works; each call then costs O(n log n) in the snapshot
size plus O(dependencies), with every dependency lookup through a dict built once per call.
For large plans the runtime keeps a ``TaskTable``: a ``Sequence[TaskView]`` that maintains,
as states change, per-state id sets, a dependents index and each task's count of dependencies
not yet DONE. Given a ``TaskTable`` the functions read those indexes, so a tick costs in
proportion to the tasks that are ready or changing, not to the plan size. Both paths return
identical results (the tests hold them to it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Final, overload

from harness.verify.fsm import TaskState
from harness.verify.rules import schedule

from .model import Batch, Plan, TaskSpec, TaskView

_PLANNED: Final = TaskState.PLANNED
_OPEN: Final = TaskState.OPEN
_DONE: Final = TaskState.DONE
_BLOCKED: Final = TaskState.BLOCKED
_DOOMING: Final[Mapping[str, str]] = {
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "was cancelled",
    TaskState.DENIED: "was denied",
}
"""Terminal states that block every dependent task, with the verb used in the reason."""
_ROOTS: Final = (TaskState.FAILED, TaskState.CANCELLED, TaskState.DENIED, _BLOCKED)
_ACTIVE: Final = (TaskState.CLAIMED, TaskState.IN_PROGRESS, TaskState.GATING)
_SPEC: Final = attrgetter("spec")
_ID: Final = attrgetter("spec.id")
_STATE: Final = attrgetter("state")
_DEPENDS: Final = attrgetter("depends")

Promotion = tuple[str, TaskState, str]
"""(task id, new state, reason)."""


class TaskTable(Sequence[TaskView]):
    """A task snapshot with incremental indexes; update it with ``set_state``.

    As a ``Sequence[TaskView]`` it reads like the plain list of views in plan order. Task ids
    must be unique. The indexes: ids per state, the dependents of each id, and for each task
    the number of its dependencies (counted per occurrence) that are not DONE (a missing
    dependency never is); the ids of PLANNED and OPEN tasks whose count is zero.
    """

    __slots__ = ("_by_state", "_dependents", "_pos", "_unmet", "_views", "_zero")

    def __init__(self, views: Iterable[TaskView]) -> None:
        self._views = [TaskView(view.spec, TaskState(view.state)) for view in views]
        self._pos: dict[str, int] = {}
        for i, view in enumerate(self._views):
            if view.spec.id in self._pos:
                raise ValueError(f"duplicate task id {view.spec.id!r}")
            self._pos[view.spec.id] = i
        self._dependents: dict[str, list[str]] = {}
        self._by_state: dict[TaskState, set[str]] = {state: set() for state in TaskState}
        self._unmet: dict[str, int] = {}
        self._zero: dict[TaskState, set[str]] = {_PLANNED: set(), _OPEN: set()}
        for view in self._views:
            spec = view.spec
            self._by_state[view.state].add(spec.id)
            unmet = 0
            for dep in spec.depends:
                self._dependents.setdefault(dep, []).append(spec.id)
                if self.state_of(dep) is not _DONE:
                    unmet += 1
            self._unmet[spec.id] = unmet
            self._refresh(spec.id, view.state)

    @classmethod
    def from_plan(cls, plan: Plan) -> TaskTable:
        """Every task of the plan, PLANNED."""
        return cls(TaskView(spec, _PLANNED) for spec in plan.tasks)

    def __len__(self) -> int:
        return len(self._views)

    @overload
    def __getitem__(self, index: int) -> TaskView: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TaskView]: ...
    def __getitem__(self, index: int | slice) -> TaskView | Sequence[TaskView]:
        return self._views[index]

    def __iter__(self) -> Iterator[TaskView]:
        return iter(self._views)

    def view(self, task_id: str) -> TaskView:
        return self._views[self._pos[task_id]]

    def state_of(self, task_id: str) -> TaskState | None:
        pos = self._pos.get(task_id)
        return None if pos is None else self._views[pos].state

    def ids_in(self, state: TaskState) -> Collection[str]:
        """Ids of the tasks in ``state`` (unordered, read-only by contract)."""
        return self._by_state[state]

    def position(self, task_id: str) -> int:
        return self._pos[task_id]

    def dependents(self, task_id: str) -> Sequence[str]:
        return self._dependents.get(task_id, ())

    def set_state(self, task_id: str, state: TaskState) -> None:
        """Record a new state for a task (no FSM check here: the runtime applies the FSM)."""
        state = TaskState(state)
        pos = self._pos[task_id]
        old = self._views[pos]
        if old.state is state:
            return
        self._views[pos] = TaskView(old.spec, state)
        self._by_state[old.state].discard(task_id)
        self._by_state[state].add(task_id)
        self._refresh(task_id, state)
        if (old.state is _DONE) != (state is _DONE):
            delta = -1 if state is _DONE else 1
            for dependent in self._dependents.get(task_id, ()):
                self._unmet[dependent] += delta
                self._refresh(dependent, self._views[self._pos[dependent]].state)

    def _refresh(self, task_id: str, state: TaskState) -> None:
        ready = self._unmet[task_id] == 0
        for kind, members in self._zero.items():
            if ready and kind is state:
                members.add(task_id)
            else:
                members.discard(task_id)

    def ready_ids(self, state: TaskState) -> Collection[str]:
        """PLANNED or OPEN ids whose dependencies are all DONE (unordered)."""
        return self._zero[state]

    def ready_specs(self, state: TaskState) -> list[TaskSpec]:
        """The specs of ``ready_ids(state)`` (unordered; one list per tick, so no method call
        per task)."""
        views, pos = self._views, self._pos
        return [views[pos[task_id]].spec for task_id in self._zero[state]]


# ---------------------------------------------------------------------------------------------
# Ready tasks


def _ready(tasks: Sequence[TaskView]) -> list[TaskSpec]:
    """OPEN tasks whose dependencies are all DONE (in no particular order)."""
    if isinstance(tasks, TaskTable):
        return tasks.ready_specs(_OPEN)
    states = list(map(_STATE, tasks))
    ready = list(map(_SPEC, compress(tasks, map(eq, states, repeat(_OPEN)))))
    if not ready or not any(map(_DEPENDS, ready)):
        return ready
    done = set(compress(map(_ID, tasks), map(eq, states, repeat(_DONE))))
    return list(compress(ready, map(done.issuperset, map(_DEPENDS, ready))))


def choose_batches(
    tasks: Sequence[TaskView],
    *,
    in_flight: Mapping[str, int],
    plan: Plan,
    next_batch_number: int,
    held: Sequence[Sequence[str]] = (),
) -> list[Batch]:
    """The batches to start now: the ready tasks of the snapshot, ordered and grouped by the
    rule ``harness.verify.rules.schedule.choose_batches``; [] when nothing can start.

    ``held`` is the write lock (glob list, ``agent.spawn.lock``) of each batch in flight: a
    task whose scope intersects one waits, and the batches returned have pairwise disjoint
    locks (each batch's lock is ``harness.verify.rules.locks.lock_of`` of its tasks' scopes)."""
    max_batch = plan.max_batch
    if not 1 <= max_batch <= 3:
        raise ValueError(f"plan.max_batch must be 1..3, got {max_batch}")
    ready = _ready(tasks)
    if not ready:
        return []
    chosen = schedule.choose_batches(
        ready,
        max_batch=max_batch,
        limits=plan.concurrency,
        in_flight=in_flight,
        next_batch_number=next_batch_number,
        held=held,
    )
    return [Batch(id=c.id, role=c.role, adapter=c.adapter, tasks=c.tasks) for c in chosen]


# ---------------------------------------------------------------------------------------------
# Promotions


def promotions(tasks: Sequence[TaskView]) -> list[Promotion]:
    """Transitions the snapshot calls for, as (task id, new state, reason), in snapshot order.

    * PLANNED or OPEN, a dependency FAILED, CANCELLED, DENIED or BLOCKED -> BLOCKED; and so,
      transitively and in the same call, every PLANNED/OPEN task that depends on a task being
      blocked. The reason names the first such dependency in ``depends`` order and the root
      cause: ``dependency t1 failed``, ``dependency t2 is blocked (t1 failed)``.
    * Otherwise PLANNED with every dependency DONE (or none) -> OPEN, reason
      ``no dependencies`` or ``dependencies done``.

    BLOCKED tasks are never reopened here (their blocker is terminal).
    """
    if isinstance(tasks, TaskTable):
        return _promotions_table(tasks)
    states = list(map(_STATE, tasks))
    present = set(states)
    if _PLANNED not in present and _OPEN not in present:
        return []
    ids = list(map(_ID, tasks))
    blocked: dict[str, str] = {}
    if not present.isdisjoint(_ROOTS):
        state_of = dict(zip(ids, states, strict=True))
        pending = [view.spec for view in tasks if view.state in (_PLANNED, _OPEN)]
        dependents: dict[str, list[str]] = {}
        for spec in pending:
            for dep in spec.depends:
                dependents.setdefault(dep, []).append(spec.id)
        roots = [task_id for task_id, state in state_of.items() if state in _ROOTS]
        spec_of = {spec.id: spec for spec in pending}
        blocked = _blocked(
            roots,
            is_pending=spec_of.__contains__,
            spec_of=spec_of.__getitem__,
            state_of=state_of.get,
            dependents_of=lambda task_id: dependents.get(task_id, ()),
            position={spec.id: i for i, spec in enumerate(pending)}.__getitem__,
        )
    planned = list(map(_SPEC, compress(tasks, map(eq, states, repeat(_PLANNED)))))
    opening: list[TaskSpec] = planned
    if any(map(_DEPENDS, planned)):
        done = set(compress(ids, map(eq, states, repeat(_DONE))))
        opening = list(compress(planned, map(done.issuperset, map(_DEPENDS, planned))))
    if not blocked:
        return [_open(spec) for spec in opening]
    out: dict[str, Promotion] = {spec.id: _open(spec) for spec in opening}
    out.update((task_id, (task_id, _BLOCKED, reason)) for task_id, reason in blocked.items())
    return [out[task_id] for task_id in ids if task_id in out]


def _open(spec: TaskSpec) -> Promotion:
    return (spec.id, _OPEN, "dependencies done" if spec.depends else "no dependencies")


def _promotions_table(table: TaskTable) -> list[Promotion]:
    roots = [task_id for state in _ROOTS for task_id in table.ids_in(state)]
    blocked: dict[str, str] = {}
    if roots:

        def is_pending(task_id: str) -> bool:
            return table.state_of(task_id) in (_PLANNED, _OPEN)

        blocked = _blocked(
            roots,
            is_pending=is_pending,
            spec_of=lambda task_id: table.view(task_id).spec,
            state_of=table.state_of,
            dependents_of=table.dependents,
            position=table.position,
        )
    out = {
        task_id: _open(table.view(task_id).spec)
        for task_id in table.ready_ids(_PLANNED)
        if task_id not in blocked
    }
    out.update((task_id, (task_id, _BLOCKED, reason)) for task_id, reason in blocked.items())
    return [out[task_id] for task_id in sorted(out, key=table.position)]


def _blocked(
    roots: Iterable[str],
    *,
    is_pending: Callable[[str], bool],
    spec_of: Callable[[str], TaskSpec],
    state_of: Callable[[str], TaskState | None],
    dependents_of: Callable[[str], Iterable[str]],
    position: Callable[[str], int],
) -> dict[str, str]:
    """Reasons for the pending tasks that must be blocked.

    The doomed set is every pending task reachable from a FAILED/CANCELLED/DENIED/BLOCKED
    task through pending dependents; each doomed task's reason comes from a memoized
    iterative DFS over its dependencies (in ``depends`` order), doomed tasks taken in
    snapshot order.
    """
    doomed: set[str] = set()
    frontier = list(roots)
    while frontier:
        step: list[str] = []
        for task_id in frontier:
            for dependent in dependents_of(task_id):
                if dependent not in doomed and is_pending(dependent):
                    doomed.add(dependent)
                    step.append(dependent)
        frontier = step
    if not doomed:
        return {}
    result: dict[str, tuple[str, str] | None] = {}  # id -> (reason, root cause)
    for start in sorted(doomed, key=position):
        if start in result:
            continue
        nodes = [start]
        indexes = [0]
        on_stack = {start}
        while nodes:
            node = nodes[-1]
            index = indexes[-1]
            deps = spec_of(node).depends
            verdict: tuple[str, str] | None = None
            child: str | None = None
            while index < len(deps):
                dep = deps[index]
                state = state_of(dep)
                if state is not None and state in _DOOMING:
                    cause = f"{dep} {_DOOMING[state]}"
                    verdict = (f"dependency {cause}", cause)
                    break
                if state == _BLOCKED:
                    cause = f"{dep} is blocked"
                    verdict = (f"dependency {cause}", cause)
                    break
                if dep in doomed and dep not in on_stack:
                    if dep not in result:
                        child = dep  # resolve it first, then look at this dependency again
                        break
                    sub = result[dep]
                    if sub is not None:
                        verdict = (f"dependency {dep} is blocked ({sub[1]})", sub[1])
                        break
                index += 1
            if child is not None:
                indexes[-1] = index
                nodes.append(child)
                indexes.append(0)
                on_stack.add(child)
                continue
            result[node] = verdict
            nodes.pop()
            indexes.pop()
            on_stack.discard(node)
    return {task_id: hit[0] for task_id, hit in result.items() if hit is not None}


def is_quiescent(tasks: Sequence[TaskView], in_flight: Mapping[str, int]) -> bool:
    """True when nothing runs and nothing can start: no batch in flight, no task CLAIMED,
    IN_PROGRESS or GATING, no promotion pending and no ready task."""
    if any(count > 0 for count in in_flight.values()):
        return False
    if isinstance(tasks, TaskTable):
        if any(tasks.ids_in(state) for state in _ACTIVE):
            return False
    elif any(view.state in _ACTIVE for view in tasks):
        return False
    if promotions(tasks):
        return False
    return not _ready(tasks)
