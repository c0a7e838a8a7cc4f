"""The runtime's budget keeper (harness.orchestrate.budgeting) writes evidence the verifier's
budget check accepts, whatever the usage: runs are simulated from random usage, recorded with
the project's writers, exported and verified; and the keeper's decisions are the rule's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.orchestrate.budgeting import RunBudget
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.orchestrate.usage import Usage as Metered

from .test_budget_evidence import (
    Records,
    _exceeded,
    _exit,
    _move,
    _spawn,
    _usage,
    _verify,
    lawful,
)

PLAN = parse_plan(
    {
        "plan": {"name": "p", "budget": {"cost_usd": 0.5, "role": {"coder": {"wall_s": 10},
                                                             "tester": {"tokens": 150}}}},
        "task": [
            {"id": "t1", "role": "coder", "prompt": "a", "budget": {"tokens": 100},
             "scope": ["a/**"]},
            {"id": "t2", "role": "coder", "prompt": "b", "scope": ["a/**"]},
            {"id": "t3", "role": "tester", "prompt": "c", "scope": ["b/**"]},
            {"id": "t4", "role": "tester", "prompt": "d", "scope": ["b/**"]},
        ],
    }
)  # fmt: skip
"""The plan of test_budget_evidence with disjoint scopes, so that two batches (and their
write locks) can be in flight at once, and a token budget for the tester role, charged by t3
and then spent by t4."""
PLAN_BYTES = plan_bytes(PLAN)
TASKS = {task.id: task for task in PLAN.tasks}
step = st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 200_000))
agent = st.lists(step, min_size=1, max_size=4)


def _simulate(agents: list[list[tuple[int, int, int]]]) -> tuple[Records, list[str]]:
    """Two waves of two batches each (spawned together, retired in order), t1..t4."""
    keeper = RunBudget(PLAN)
    records: Records = [r for r in lawful(PLAN_BYTES) if r[1] in ("run.start", "task.planned")]
    outcomes: list[str] = []
    waves = [[("b0001", "t1", "coder"), ("b0002", "t3", "tester")],
             [("b0003", "t2", "coder"), ("b0004", "t4", "tester")]]  # fmt: skip
    usage_of = dict(zip(["t1", "t3", "t2", "t4"], agents, strict=True))
    for wave in waves:
        running = []
        for batch, task, role in wave:
            tasks = [TASKS[task]]
            records += [_move(task, "planned", "open"), _move(task, "open", "claimed")]
            deny = keeper.exhausted(batch, tasks)
            if deny is not None:
                records += [("audit", "budget.exceeded", deny), _move(task, "claimed", "denied")]
                outcomes.append("deny")
                continue
            scope = list(TASKS[task].scope)
            spawn = _spawn(batch, task, role, keeper.spawn_budget(tasks))
            records += [
                ("audit", "lock.acquire", {"batch": batch, "globs": scope}),
                (spawn[0], spawn[1], {**spawn[2], "lock": scope}),
                _move(task, "claimed", "in_progress"),
            ]
            running.append((batch, task, tasks))
        for batch, task, tasks in running:  # retire in batch order
            tokens_in = tokens_out = cost = elapsed = 0
            kill = None
            for i, (a, b, c) in enumerate(usage_of[task]):
                tokens_in, tokens_out, cost, elapsed = (
                    tokens_in + a, tokens_out + b, cost + c, elapsed + 100 * (i + 1))  # fmt: skip
                kill = keeper.live(batch, tasks, elapsed, Metered(tokens_in, tokens_out, cost))
                if kill is not None:
                    break
            final = _usage(tokens_in, tokens_out, cost)
            if kill is not None:
                records.append(("audit", "budget.exceeded", kill))
            records += [
                _exit(batch, elapsed, final, anomaly="budget" if kill else None),
                _move(task, "in_progress", "failed"),
                ("audit", "lock.release", {"batch": batch, "reason": "retired"}),
            ]
            keeper.charge(tasks, final, elapsed)
            outcomes.append("kill" if kill else "ok")
    records.append(("audit", "run.end", {"outcome": "completed"}))
    return records, outcomes


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(agent, min_size=4, max_size=4))
def test_keeper_evidence_always_verifies(
    tmp_path_factory: Any, agents: list[list[tuple[int, int, int]]]
) -> None:
    records, _ = _simulate(agents)
    report = _verify(tmp_path_factory.mktemp("run"), records, plan=PLAN_BYTES)
    assert report.status.value == "verified", report.failure


def test_keeper_kills_denies_and_passes(tmp_path: Path) -> None:
    """t1 breaks its 100-token budget (killed); t3 spends the run's 0.5 USD (killed at
    0.6); so t2 and t4 are denied at spawn: the run's cost budget is exhausted."""
    agents = [
        [(30, 30, 0), (30, 30, 0)],
        [(1, 1, 300_000), (1, 1, 300_000)],
        [(1, 1, 0)],
        [(1, 1, 0)],
    ]
    records, outcomes = _simulate(agents)
    assert outcomes == ["kill", "kill", "deny", "deny"]
    kills = [r[2] for r in records if r[1] == "budget.exceeded"]
    assert kills[0] == _exceeded("b0001", "task", "t1", "tokens", 100, 120, "kill")[2]
    assert kills[1] == _exceeded("b0002", "run", "run", "cost_micros", 500_000, 600_000,
                                 "kill")[2]  # fmt: skip
    assert kills[2]["decision"] == "deny" and kills[2]["batch"] == "b0003"
    assert _verify(tmp_path, records, plan=PLAN_BYTES).status.value == "verified"


def test_keeper_without_usage_charges_wall_clock() -> None:
    keeper = RunBudget(PLAN)
    coder = [TASKS["t2"]]
    assert keeper.spawn_budget(coder) == {"wall_ms": None, "tokens": None, "cost_micros": None}
    assert keeper.spawn_budget([TASKS["t1"]])["tokens"] == 100
    assert keeper.live("b1", coder, 10_000, None) is None  # the coder role's 10 s, not over
    assert keeper.live("b1", coder, 10_001, None) == {
        "batch": "b1", "scope": "role", "name": "coder", "resource": "wall_ms",
        "limit": 10_000, "used": 10_001, "decision": "kill",
    }  # fmt: skip
    keeper.charge(coder, None, 10_000)
    assert keeper.exhausted("b2", [TASKS["t1"]]) == {
        "batch": "b2", "scope": "role", "name": "coder", "resource": "wall_ms",
        "limit": 10_000, "used": 10_000, "decision": "deny",
    }  # fmt: skip
    assert keeper.exhausted("b2", [TASKS["t3"]]) is None  # another role
