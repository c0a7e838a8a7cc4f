"""Scheduler benchmark: scheduling decisions per second over a large queue.

Prints one JSON line. Run: ``python bench/scheduler.py --tasks 10000``.

A seeded plan of ``--tasks`` tasks (5 roles with concurrency limits 4/3/2/1/1, two adapters
per role, priorities 0..99, each task depending on 0..3 tasks among the 200 before it, each
scoped to ``src/m<k>/**`` for one of ``--modules`` modules, or to ``**`` with ``--modules 0``)
starts all PLANNED. Write locks apply: batches chosen in one call have disjoint scopes, so with
``--modules 0`` every call yields one batch (a plan of ``**`` scopes cannot run in parallel).
Each tick: ``promotions`` (applied), then ``choose_batches`` with nothing in flight; every
batched task then completes instantly (DONE). The loop runs until every task is batched.
``decisions_per_s`` = tasks placed into batches / seconds spent inside
``promotions`` + ``choose_batches`` with the snapshot kept as a ``TaskTable`` (what the
runtime uses); ``set_state_s`` is the time spent applying transitions to it (not counted).
``list_decisions_per_s`` repeats the run with a plain list snapshot (O(n) per call), and the
run aborts if the two schedules differ.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence

from harness.orchestrate.model import Plan, TaskSpec, TaskView
from harness.orchestrate.scheduler import TaskTable, choose_batches, promotions
from harness.verify.fsm import TaskState

ROLES = {"coder": 4, "tester": 3, "reviewer": 2, "docs": 1, "ops": 1}
ADAPTERS = ("scripted", "claude")
TARGET_PER_S = 10_000


def make_plan(count: int, seed: int, modules: int = 64) -> Plan:
    rng = random.Random(seed)
    roles = list(ROLES)
    tasks = []
    for i in range(count):
        window = range(max(0, i - 200), i)
        deps = rng.sample(window, min(len(window), rng.randint(0, 3)))
        tasks.append(
            TaskSpec(
                id=f"t{i}",
                role=rng.choice(roles),
                prompt="bench",
                priority=rng.randrange(100),
                adapter=rng.choice(ADAPTERS),
                depends=tuple(f"t{d}" for d in sorted(deps)),
                scope=(f"src/m{rng.randrange(modules)}/**",) if modules else ("**",),
                order=i,
            )
        )
    return Plan(name="bench", tasks=tuple(tasks), max_batch=3, concurrency=dict(ROLES))


def _simulate(plan: Plan, indexed: bool) -> dict[str, float]:
    """Tick until every task is batched; times the scheduler calls and the state updates."""
    table = TaskTable.from_plan(plan)
    views = [TaskView(spec, TaskState.PLANNED) for spec in plan.tasks]
    position = {spec.id: i for i, spec in enumerate(plan.tasks)}
    snapshot: Sequence[TaskView] = table if indexed else views

    def apply(task_id: str, state: TaskState) -> None:
        if indexed:
            table.set_state(task_id, state)
        else:
            i = position[task_id]
            views[i] = TaskView(views[i].spec, state)

    placed = ticks = batches = 0
    spent_promotions = spent_choose = spent_apply = 0.0
    while placed < len(plan.tasks):
        t0 = time.perf_counter()
        changes = promotions(snapshot)
        t1 = time.perf_counter()
        for task_id, state, _reason in changes:
            apply(task_id, state)
        t2 = time.perf_counter()
        chosen = choose_batches(snapshot, in_flight={}, plan=plan, next_batch_number=batches + 1)
        t3 = time.perf_counter()
        for batch in chosen:
            batches += 1
            for task_id in batch.tasks:
                apply(task_id, TaskState.DONE)  # the batch completes instantly
                placed += 1
        t4 = time.perf_counter()
        spent_promotions += t1 - t0
        spent_choose += t3 - t2
        spent_apply += (t2 - t1) + (t4 - t3)
        ticks += 1
        if not changes and not chosen:
            raise SystemExit(f"scheduler stalled at tick {ticks} with {placed} tasks placed")
    spent = spent_promotions + spent_choose
    return {
        "placed": placed,
        "ticks": ticks,
        "batches": batches,
        "decisions_per_s": placed / spent,
        "promotions_s": spent_promotions,
        "choose_batches_s": spent_choose,
        "apply_s": spent_apply,
    }


def run(plan: Plan, *, with_list: bool) -> dict[str, object]:
    table = _simulate(plan, indexed=True)
    out: dict[str, object] = {
        "bench": "scheduler",
        "tasks": len(plan.tasks),
        "modules": len({spec.scope for spec in plan.tasks}),
        "ticks": table["ticks"],
        "batches": table["batches"],
        "decisions_per_s": round(table["decisions_per_s"]),
        "promotions_s": round(table["promotions_s"], 4),
        "choose_batches_s": round(table["choose_batches_s"], 4),
        "set_state_s": round(table["apply_s"], 4),
        "target_per_s": TARGET_PER_S,
        "ok": table["decisions_per_s"] >= TARGET_PER_S,
    }
    if with_list:
        plain = _simulate(plan, indexed=False)
        if (plain["ticks"], plain["batches"]) != (table["ticks"], table["batches"]):
            raise SystemExit("TaskTable and plain-list snapshots scheduled differently")
        out["list_decisions_per_s"] = round(plain["decisions_per_s"])
    out["python"] = sys.version.split()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modules", type=int, default=64, help="0: every scope is **")
    parser.add_argument(
        "--no-list", action="store_true", help="skip the plain-list snapshot comparison run"
    )
    args = parser.parse_args()
    plan = make_plan(args.tasks, args.seed, args.modules)
    print(json.dumps(run(plan, with_list=not args.no_list)))


if __name__ == "__main__":
    main()
