"""The scheduler (harness.orchestrate.scheduler): batches, promotions, quiescence."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.orchestrate.model import Batch, Plan, TaskSpec, TaskView
from harness.orchestrate.scheduler import (
    TaskTable,
    choose_batches,
    is_quiescent,
    promotions,
)
from harness.verify.fsm import TaskState, is_legal
from harness.verify.rules import schedule
from harness.verify.rules.locks import lock_of, scopes_intersect

S = TaskState


def spec(
    task_id: str,
    *,
    role: str = "coder",
    adapter: str = "scripted",
    priority: int = 0,
    depends: Sequence[str] = (),
    order: int | None = None,
    scope: Sequence[str] | None = None,
) -> TaskSpec:
    """A task; its scope defaults to a folder of its own, so write locks never hold it up."""
    return TaskSpec(
        id=task_id,
        role=role,
        prompt="p",
        priority=priority,
        adapter=adapter,
        scope=(f"{task_id}/**",) if scope is None else tuple(scope),
        depends=tuple(depends),
        order=int(task_id.lstrip("t")) if order is None else order,
    )


def views(*pairs: tuple[TaskSpec, TaskState]) -> list[TaskView]:
    return [TaskView(s, state) for s, state in pairs]


def plan_of(
    specs: Sequence[TaskSpec] = (), *, max_batch: int = 3, concurrency: dict[str, int] | None = None
) -> Plan:
    return Plan(name="p", tasks=tuple(specs), max_batch=max_batch, concurrency=concurrency or {})


def both(tasks: list[TaskView]) -> list[Sequence[TaskView]]:
    """The same snapshot as a plain list and as a TaskTable: every check runs on both."""
    return [tasks, TaskTable(tasks)]


def choose(
    tasks: list[TaskView],
    plan: Plan,
    in_flight: dict[str, int] | None = None,
    start: int = 1,
    held: Sequence[Sequence[str]] = (),
) -> list[Batch]:
    results = [
        choose_batches(
            snap, in_flight=in_flight or {}, plan=plan, next_batch_number=start, held=held
        )
        for snap in both(tasks)
    ]
    assert results[0] == results[1]
    return results[0]


def promote(tasks: list[TaskView]) -> list[tuple[str, TaskState, str]]:
    results = [promotions(snap) for snap in both(tasks)]
    assert results[0] == results[1]
    return results[0]


def quiescent(tasks: list[TaskView], in_flight: dict[str, int] | None = None) -> bool:
    results = [is_quiescent(snap, in_flight or {}) for snap in both(tasks)]
    assert results[0] == results[1]
    return results[0]


# --- choose_batches -------------------------------------------------------------------------


def test_priority_then_creation_order() -> None:
    tasks = views(
        (spec("t0", priority=1), S.OPEN),
        (spec("t1", priority=5), S.OPEN),
        (spec("t2", priority=5), S.OPEN),
        (spec("t3", priority=9), S.OPEN),
        (spec("t4", priority=1), S.OPEN),
    )
    batches = choose(tasks, plan_of(max_batch=1, concurrency={"coder": 10}))
    assert [b.tasks for b in batches] == [("t3",), ("t1",), ("t2",), ("t0",), ("t4",)]
    assert [b.id for b in batches] == ["b0001", "b0002", "b0003", "b0004", "b0005"]


def test_snapshot_order_does_not_matter() -> None:
    tasks = views(*[(spec(f"t{i}", priority=i % 3), S.OPEN) for i in range(9)])
    plan = plan_of(max_batch=2, concurrency={"coder": 3})
    expected = choose(tasks, plan)
    shuffled = list(tasks)
    random.Random(7).shuffle(shuffled)
    assert choose(shuffled, plan) == expected


def test_batch_size_and_grouping() -> None:
    tasks = views(*[(spec(f"t{i}"), S.OPEN) for i in range(5)])
    assert [b.tasks for b in choose(tasks, plan_of(max_batch=2, concurrency={"coder": 3}))] == [
        ("t0", "t1"),
        ("t2", "t3"),
        ("t4",),
    ]
    assert [b.tasks for b in choose(tasks, plan_of(max_batch=3, concurrency={"coder": 3}))] == [
        ("t0", "t1", "t2"),
        ("t3", "t4"),
    ]
    assert [b.tasks for b in choose(tasks, plan_of(max_batch=1, concurrency={"coder": 3}))] == [
        ("t0",),
        ("t1",),
        ("t2",),
    ]


@pytest.mark.parametrize("max_batch", [0, 4])
def test_max_batch_out_of_range_is_refused(max_batch: int) -> None:
    tasks = views((spec("t0"), S.OPEN))
    with pytest.raises(ValueError, match="max_batch"):
        choose_batches(tasks, in_flight={}, plan=plan_of(max_batch=max_batch), next_batch_number=1)


def test_batches_never_mix_roles_or_adapters() -> None:
    tasks = views(
        (spec("t0", role="coder", adapter="scripted", priority=9), S.OPEN),
        (spec("t1", role="tester", adapter="scripted", priority=8), S.OPEN),
        (spec("t2", role="coder", adapter="claude", priority=7), S.OPEN),
        (spec("t3", role="coder", adapter="scripted", priority=6), S.OPEN),
        (spec("t4", role="tester", adapter="scripted", priority=5), S.OPEN),
    )
    batches = choose(tasks, plan_of(concurrency={"coder": 2, "tester": 1}))
    assert batches == [
        Batch("b0001", "coder", "scripted", ("t0", "t3")),
        Batch("b0002", "tester", "scripted", ("t1", "t4")),
        Batch("b0003", "coder", "claude", ("t2",)),
    ]


def test_per_role_concurrency() -> None:
    tasks = views(
        *[(spec(f"t{i}", adapter=f"a{i}"), S.OPEN) for i in range(4)],
        (spec("t4", role="tester"), S.OPEN),
    )
    # default limit: one batch per role
    assert [b.tasks for b in choose(tasks, plan_of())] == [("t0",), ("t4",)]
    assert [b.tasks for b in choose(tasks, plan_of(concurrency={"coder": 3}))] == [
        ("t0",),
        ("t1",),
        ("t2",),
        ("t4",),
    ]
    # batches already running count against the limit
    running = {"coder": 2, "tester": 1}
    assert [b.tasks for b in choose(tasks, plan_of(concurrency={"coder": 3}), running)] == [("t0",)]
    assert choose(tasks, plan_of(concurrency={"coder": 3}), {"coder": 5, "tester": 1}) == []


def test_a_full_role_does_not_stop_other_roles() -> None:
    tasks = views(
        (spec("t0", priority=9), S.OPEN),
        (spec("t1", priority=8, adapter="claude"), S.OPEN),
        (spec("t2", role="docs", priority=1), S.OPEN),
    )
    batches = choose(tasks, plan_of(), {"coder": 0})
    assert [b.tasks for b in batches] == [("t0",), ("t2",)]


def test_dependencies_must_be_done() -> None:
    tasks = views(
        (spec("t0"), S.IN_PROGRESS),
        (spec("t1"), S.DONE),
        (spec("t2", depends=["t0"]), S.OPEN),  # inconsistent but possible: dep not done
        (spec("t3", depends=["t1"]), S.OPEN),
        (spec("t4", depends=["missing"]), S.OPEN),
        (spec("t5"), S.PLANNED),
        (spec("t6"), S.BLOCKED),
    )
    assert [b.tasks for b in choose(tasks, plan_of())] == [("t3",)]


def test_batch_numbering() -> None:
    tasks = views((spec("t0"), S.OPEN), (spec("t1", role="x"), S.OPEN))
    assert [b.id for b in choose(tasks, plan_of(), start=9999)] == ["b9999", "b10000"]
    assert choose([], plan_of()) == []


def test_determinism_same_input_same_output() -> None:
    rng = random.Random(3)
    tasks = views(
        *[
            (
                spec(
                    f"t{i}",
                    role=rng.choice("abc"),
                    adapter=rng.choice("xy"),
                    priority=rng.randrange(4),
                ),
                rng.choice([S.OPEN, S.OPEN, S.PLANNED, S.DONE]),
            )
            for i in range(60)
        ]
    )
    plan = plan_of(concurrency={"a": 2, "b": 3})
    first = choose(tasks, plan, {"a": 1})
    assert first
    for _ in range(3):
        assert choose(list(tasks), plan, {"a": 1}) == first


# --- promotions ------------------------------------------------------------------------------


def test_promotions_open_and_block() -> None:
    tasks = views(
        (spec("t0"), S.PLANNED),
        (spec("t1"), S.DONE),
        (spec("t2", depends=["t1"]), S.PLANNED),
        (spec("t3", depends=["t1", "t0"]), S.PLANNED),
        (spec("t4"), S.FAILED),
        (spec("t5", depends=["t1", "t4"]), S.PLANNED),
        (spec("t6"), S.CANCELLED),
        (spec("t7", depends=["t6"]), S.OPEN),
        (spec("t8"), S.DENIED),
        (spec("t9", depends=["t0", "t8", "t4"]), S.PLANNED),
        (spec("t10"), S.BLOCKED),
        (spec("t11", depends=["t10"]), S.PLANNED),
        (spec("t12", depends=["t5"]), S.PLANNED),
        (spec("t13", depends=["t12", "t7"]), S.OPEN),
        (spec("t14"), S.OPEN),
        (spec("t15", depends=["nope"]), S.PLANNED),
    )
    assert promote(tasks) == [
        ("t0", S.OPEN, "no dependencies"),
        ("t2", S.OPEN, "dependencies done"),
        ("t5", S.BLOCKED, "dependency t4 failed"),
        ("t7", S.BLOCKED, "dependency t6 was cancelled"),
        ("t9", S.BLOCKED, "dependency t8 was denied"),
        ("t11", S.BLOCKED, "dependency t10 is blocked"),
        ("t12", S.BLOCKED, "dependency t5 is blocked (t4 failed)"),
        ("t13", S.BLOCKED, "dependency t12 is blocked (t4 failed)"),
    ]


def test_promotions_are_legal_transitions() -> None:
    tasks = views(
        (spec("t0"), S.PLANNED), (spec("t1"), S.FAILED), (spec("t2", depends=["t1"]), S.OPEN)
    )
    by_id = {v.spec.id: v.state for v in tasks}
    for task_id, state, _ in promote(tasks):
        assert is_legal(by_id[task_id], state)


def test_promotions_nothing_to_do() -> None:
    assert promote([]) == []
    assert promote(views((spec("t0"), S.DONE), (spec("t1"), S.OPEN))) == []
    assert (
        promote(views((spec("t0"), S.IN_PROGRESS), (spec("t1", depends=["t0"]), S.PLANNED))) == []
    )


def test_blocking_follows_a_long_chain_in_one_call() -> None:
    chain = [(spec("t0"), S.FAILED)] + [
        (spec(f"t{i}", depends=[f"t{i - 1}"]), S.PLANNED) for i in range(1, 3000)
    ]
    result = promote(views(*reversed(chain)))
    assert len(result) == 2999
    assert all(state == S.BLOCKED for _, state, _ in result)
    assert result[0] == ("t2999", S.BLOCKED, "dependency t2998 is blocked (t0 failed)")


# --- quiescence ------------------------------------------------------------------------------


def test_is_quiescent() -> None:
    assert quiescent([])
    assert quiescent(views((spec("t0"), S.DONE), (spec("t1"), S.FAILED), (spec("t2"), S.BLOCKED)))
    assert not quiescent(views((spec("t0"), S.DONE)), {"coder": 1})
    assert quiescent(views((spec("t0"), S.DONE)), {"coder": 0})
    assert not quiescent(views((spec("t0"), S.GATING)))
    assert not quiescent(views((spec("t0"), S.CLAIMED)))
    assert not quiescent(views((spec("t0"), S.PLANNED)))  # a promotion is pending
    assert not quiescent(views((spec("t0"), S.OPEN)))  # ready
    # an OPEN task whose dependency can never be DONE is stuck, not runnable
    assert quiescent(views((spec("t0", depends=["gone"]), S.OPEN)))


# --- TaskTable -------------------------------------------------------------------------------


def test_task_table_behaves_like_the_list() -> None:
    tasks = views((spec("t0"), S.PLANNED), (spec("t1", depends=["t0"]), S.PLANNED))
    table = TaskTable(tasks)
    assert len(table) == 2
    assert list(table) == tasks
    assert table[1] == tasks[1]
    assert table[-1:] == tasks[-1:]
    assert table.ready_ids(S.PLANNED) == {"t0"}
    table.set_state("t0", S.DONE)
    assert table.ready_ids(S.PLANNED) == {"t1"}
    assert table.view("t0").state is S.DONE
    table.set_state("t0", S.DONE)  # no change
    table.set_state("t1", S.OPEN)
    assert table.ready_ids(S.OPEN) == {"t1"} and table.ready_ids(S.PLANNED) == set()
    table.set_state("t0", S.FAILED)  # not an FSM move, but the indexes still follow
    assert table.ready_ids(S.OPEN) == set()
    assert table.ids_in(S.FAILED) == {"t0"}
    assert TaskTable.from_plan(plan_of([spec("t0")]))[0].state is S.PLANNED


def test_task_table_refuses_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="duplicate task id 't0'"):
        TaskTable(views((spec("t0"), S.PLANNED), (spec("t0"), S.OPEN)))


# --- write locks -----------------------------------------------------------------------------


def test_a_task_overlapping_a_held_lock_waits_and_takes_no_room() -> None:
    tasks = views(
        (spec("t0", priority=9, scope=["src/**"]), S.OPEN),
        (spec("t1", scope=["docs/a.md"]), S.OPEN),
        (spec("t2", role="tester", scope=["src/x/*.py"]), S.OPEN),
    )
    plan = plan_of(max_batch=1, concurrency={"coder": 1, "tester": 1})
    # without locks held: t0 takes the coder slot, t2 (tester) meets t0's src/** and waits
    assert [b.tasks for b in choose(tasks, plan)] == [("t0",)]
    # t0 (src/**) and t2 (src/x/*.py) both meet src/x/a.py; t1 gets the coder's only slot
    batches = choose(tasks, plan, held=[["lib/**", "src/x/a.py"]])
    assert [(b.id, b.tasks) for b in batches] == [("b0001", ("t1",))]
    # each held lock counts: t0 meets src/y/**, t1 meets docs/**, so only t2 starts
    assert [b.tasks for b in choose(tasks, plan, held=[["src/y/**"], ["docs/**"]])] == [("t2",)]
    # a lock that meets nothing ready holds nobody up
    assert [b.tasks for b in choose(tasks, plan, held=[["lib/**"]])] == [("t0",)]


def test_batches_of_one_call_never_overlap_but_tasks_of_one_batch_may() -> None:
    tasks = views(
        (spec("t0", priority=5, scope=["src/**"]), S.OPEN),
        (spec("t1", priority=4, scope=["src/a.py"]), S.OPEN),  # joins t0's batch: overlap ok
        (spec("t2", priority=3, role="tester", scope=["src/b.py"]), S.OPEN),  # meets b0001
        (spec("t3", priority=2, role="tester", scope=["tests/**"]), S.OPEN),
        (spec("t4", priority=1, adapter="claude", scope=["docs/*.md"]), S.OPEN),
    )
    plan = plan_of(max_batch=3, concurrency={"coder": 2, "tester": 1})
    batches = choose(tasks, plan)
    assert [(b.id, b.role, b.adapter, b.tasks) for b in batches] == [
        ("b0001", "coder", "scripted", ("t0", "t1")),
        ("b0002", "tester", "scripted", ("t3",)),
        ("b0003", "coder", "claude", ("t4",)),
    ]


def test_a_task_cannot_join_its_batch_across_another_batchs_lock() -> None:
    tasks = views(
        (spec("t0", priority=5, scope=["a/**"]), S.OPEN),
        (spec("t1", priority=4, role="tester", scope=["b/**"]), S.OPEN),
        (spec("t2", priority=3, scope=["a/x", "b/y"]), S.OPEN),  # would join b0001, meets b0002
        (spec("t3", priority=2, scope=["a/z"]), S.OPEN),  # joins b0001 instead
    )
    plan = plan_of(max_batch=2, concurrency={"coder": 2, "tester": 1})
    assert [b.tasks for b in choose(tasks, plan)] == [("t0", "t3"), ("t1",)]


def test_rule_reports_each_batch_lock() -> None:
    specs = [
        spec("t0", priority=2, scope=["src/**", "b.md"]),
        spec("t1", priority=1, scope=["a.md", "src/**"]),
        spec("t2", role="tester", scope=["tests/test_*.py"]),
    ]
    chosen = schedule.choose_batches(
        specs, max_batch=3, limits={"tester": 1}, in_flight={}, next_batch_number=1
    )
    assert [(c.tasks, c.lock) for c in chosen] == [
        (("t0", "t1"), ("a.md", "b.md", "src/**")),
        (("t2",), ("tests/test_*.py",)),
    ]
    assert lock_of(s.scope for s in specs[:2]) == chosen[0].lock


# --- properties ------------------------------------------------------------------------------

ROLES = ("coder", "tester", "docs")
ADAPTERS = ("scripted", "claude")
STATES = list(TaskState)
SCOPES = (
    None,  # a folder of the task's own
    ("src/**",),
    ("src/a/*.py",),
    ("docs/**", "README.md"),
    ("**/*.md",),
    ("src/?/x.py", "tests/**"),
    ("**",),
)
HELD = st.lists(st.sampled_from([s for s in SCOPES if s is not None]), max_size=2)


@st.composite
def dag_specs(draw: st.DrawFn, max_tasks: int = 24) -> list[TaskSpec]:
    count = draw(st.integers(min_value=0, max_value=max_tasks))
    specs = []
    for i in range(count):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        specs.append(
            spec(
                f"t{i}",
                role=draw(st.sampled_from(ROLES)),
                adapter=draw(st.sampled_from(ADAPTERS)),
                priority=draw(st.integers(-2, 2)),
                depends=[f"t{d}" for d in deps],
                scope=draw(st.sampled_from(SCOPES)),
            )
        )
    order = draw(st.permutations(range(count)))
    return [specs[i] for i in order]  # snapshot order differs from creation order


@settings(max_examples=200, deadline=None)
@given(
    specs=dag_specs(),
    data=st.data(),
    max_batch=st.integers(1, 3),
    limits=st.dictionaries(st.sampled_from(ROLES), st.integers(1, 3)),
)
def test_list_and_table_snapshots_agree(
    specs: list[TaskSpec], data: st.DataObject, max_batch: int, limits: dict[str, int]
) -> None:
    states = data.draw(st.lists(st.sampled_from(STATES), min_size=len(specs), max_size=len(specs)))
    tasks = [TaskView(s, state) for s, state in zip(specs, states, strict=True)]
    in_flight = data.draw(st.dictionaries(st.sampled_from(ROLES), st.integers(0, 3)))
    plan = plan_of(specs, max_batch=max_batch, concurrency=limits)
    choose(tasks, plan, in_flight, held=data.draw(HELD))
    promote(tasks)
    quiescent(tasks, in_flight)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=dag_specs(),
    data=st.data(),
    max_batch=st.integers(1, 3),
    limits=st.dictionaries(st.sampled_from(ROLES), st.integers(1, 3)),
    indexed=st.booleans(),
)
def test_simulated_run_properties(
    specs: list[TaskSpec],
    data: st.DataObject,
    max_batch: int,
    limits: dict[str, int],
    indexed: bool,
) -> None:
    """A run: every task batched at most once, never before its dependencies are DONE;
    batches within size, homogeneous, within concurrency, with locks (given to the scheduler
    as ``held``) that never intersect another running batch's; legal transitions only; it
    ends."""
    plan = plan_of(specs, max_batch=max_batch, concurrency=limits)
    start = [TaskView(s, S.PLANNED) for s in specs]
    table = TaskTable(start)
    plain = list(start)
    position = {s.id: i for i, s in enumerate(specs)}
    by_id = {s.id: s for s in specs}

    def state(task_id: str) -> TaskState:
        return table.view(task_id).state

    def move(task_id: str, target: TaskState) -> None:
        assert is_legal(state(task_id), target), (task_id, state(task_id), target)
        table.set_state(task_id, target)
        i = position[task_id]
        plain[i] = TaskView(plain[i].spec, target)

    batched: set[str] = set()
    running: list[Batch] = []
    started: dict[str, int] = {}
    next_number = 1
    for tick in range(10 * len(specs) + 10):
        snapshot: Sequence[TaskView] = table if indexed else plain
        # finish some running batches (each task done or failed); none runs past 3 ticks
        keep: list[Batch] = []
        for batch in running:
            started[batch.id] = started.get(batch.id, tick)
            if tick - started[batch.id] >= 3 or data.draw(st.booleans()):
                for task_id in batch.tasks:
                    move(task_id, S.GATING)
                    move(task_id, S.DONE if data.draw(st.integers(0, 4)) else S.FAILED)
            else:
                keep.append(batch)
        running = keep
        for task_id, target, _ in promotions(snapshot):
            move(task_id, target)
        in_flight: dict[str, int] = {}
        for batch in running:
            in_flight[batch.role] = in_flight.get(batch.role, 0) + 1
        if is_quiescent(snapshot, in_flight):
            break
        locks = {b.id: lock_of(by_id[t].scope for t in b.tasks) for b in running}
        chosen = choose_batches(
            snapshot,
            in_flight=in_flight,
            plan=plan,
            next_batch_number=next_number,
            held=list(locks.values()),
        )
        for batch in chosen:
            lock = lock_of(by_id[t].scope for t in batch.tasks)
            for other, theirs in locks.items():
                assert not scopes_intersect(lock, theirs), (batch, other, lock, theirs)
            locks[batch.id] = lock
            assert batch.id == f"b{next_number:04d}"
            next_number += 1
            assert 1 <= len(batch.tasks) <= max_batch
            for task_id in batch.tasks:
                assert task_id not in batched, f"{task_id} batched twice"
                batched.add(task_id)
                task = by_id[task_id]
                assert (task.role, task.adapter) == (batch.role, batch.adapter)
                assert all(state(dep) is S.DONE for dep in task.depends)
                move(task_id, S.CLAIMED)
                move(task_id, S.IN_PROGRESS)
            in_flight[batch.role] = in_flight.get(batch.role, 0) + 1
            assert in_flight[batch.role] <= limits.get(batch.role, 1)
            running.append(batch)
    else:
        pytest.fail("the run did not settle")
    assert not running
    for s in specs:
        final = state(s.id)
        assert final in (S.DONE, S.FAILED, S.BLOCKED), (s.id, final)
        assert (final is S.BLOCKED) == (s.id not in batched)
