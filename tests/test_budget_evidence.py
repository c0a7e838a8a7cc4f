"""The verifier's budget check, end to end: runs recorded with the project's own writers.

A lawful run (docs/spec/runtime.md, "Budgets") has every kind of budget decision: a task
within its token budget, a batch of a role with a wall-clock budget, a batch killed live for
the run's cost budget (recorded before its exit, anomaly ``budget``), and a spawn denied
because the run's cost budget is exhausted. Each other test breaks one rule in one record and
is refused by the semantics check, naming the batch and the rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, matrix_object
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes, plan_document
from harness.verify.canonical import canonical_bytes

from .test_rules_evidence import _verify as verify_records

RUN = "r1"
BASE = "1" * 40
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
PLAN = parse_plan(
    {
        "plan": {"name": "p", "budget": {"cost_usd": 0.5, "role": {"coder": {"wall_s": 10}}}},
        "task": [
            {"id": "t1", "role": "coder", "prompt": "a", "budget": {"tokens": 100}},
            {"id": "t2", "role": "coder", "prompt": "b"},
            {"id": "t3", "role": "tester", "prompt": "c"},
            {"id": "t4", "role": "tester", "prompt": "d"},
        ],
    }
)
NO_LIMIT = {"wall_ms": None, "tokens": None, "cost_micros": None}
Body = dict[str, Any]
Records = list[tuple[str, str, Body]]


def _move(task: str, a: str, b: str) -> tuple[str, str, Body]:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": "r"})


def _spawn(batch: str, task: str, role: str, budget: Body | None = None) -> tuple[str, str, Body]:
    body = {
        "batch": batch,
        "tasks": [task],
        "adapter": "scripted",
        "branch": f"harness/{RUN}/{batch}",
        "worktree": "/w",
        "timeout_ms": 1000,
        "sandbox": NO_SANDBOX,
        "env": ["PATH"],
        "supervisor": f"role:{role}",
        "attempt": 1,
        "idle_ms": None,
        "lifetime_ms": 1000,
        "grace_ms": 2000,
        "lock": ["**"],
        "budget": budget or NO_LIMIT,
        "config": 1,
    }
    return ("audit", "agent.spawn", body)


def _exit(
    batch: str, duration_ms: int, usage: Body | None, anomaly: str | None = None
) -> tuple[str, str, Body]:
    body = {
        "batch": batch,
        "exit_code": 0 if anomaly is None else None,
        "signal": None if anomaly is None else "SIGTERM",
        "timed_out": False,
        "duration_ms": duration_ms,
        "anomaly": anomaly,
        "usage": usage,
    }
    return ("audit", "agent.exit", body)


def _usage(tokens_in: int, tokens_out: int, cost: int | None) -> Body:
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_micros": cost}


def _exceeded(batch: str, scope: str, name: str, resource: str, limit: int, used: int,
              decision: str) -> tuple[str, str, Body]:  # fmt: skip
    body = {"batch": batch, "scope": scope, "name": name, "resource": resource,
            "limit": limit, "used": used, "decision": decision}  # fmt: skip
    return ("audit", "budget.exceeded", body)


def _run(task: str, role: str, batch: str, budget: Body | None, *middle: Any) -> Records:
    return [
        _move(task, "planned", "open"),
        _move(task, "open", "claimed"),
        ("audit", "lock.acquire", {"batch": batch, "globs": ["**"]}),
        _spawn(batch, task, role, budget),
        _move(task, "claimed", "in_progress"),
        *middle,
        _move(task, "in_progress", "failed"),
        ("audit", "lock.release", {"batch": batch, "reason": "retired"}),
    ]


def lawful(plan: bytes | None = None) -> Records:
    start = {
        "plan": "p",
        "plan_sha256": hashlib.sha256(plan or plan_bytes(PLAN)).hexdigest(),
        "producer": "harness test",
        "harness_version": "0",
        "base_commit": BASE,
        "repository_roots": [BASE],
        "capabilities": matrix_object(DEFAULT_MATRIX),
        "capsule": None,
        "sandbox": NO_SANDBOX,
    }
    planned = [
        ("audit", "task.planned", {"task": t.id, "role": t.role, "priority": t.priority,
         "depends": list(t.depends), "adapter": t.adapter, "tools": list(t.tools)})
        for t in PLAN.tasks
    ]  # fmt: skip
    t1_budget = {**NO_LIMIT, "tokens": 100}
    return [
        ("audit", "run.start", start),
        *planned,
        # t1: 60 of its 100 tokens, 1 s of the coder role's 10 s, 0.1 of the run's 0.5 USD
        *_run("t1", "coder", "b0001", t1_budget, _exit("b0001", 1000, _usage(40, 20, 100_000))),
        # t2: no usage reported (wall-clock only): coder at 3 s
        *_run("t2", "coder", "b0002", None, _exit("b0002", 2000, None)),
        # t3: killed live when the run's cost reached 0.6 USD (0.1 charged + 0.5 live)
        *_run(
            "t3",
            "tester",
            "b0003",
            None,
            _exceeded("b0003", "run", "run", "cost_micros", 500_000, 600_000, "kill"),
            _exit("b0003", 500, _usage(1, 1, 500_000), anomaly="budget"),
        ),
        # t4: the run's cost budget is exhausted: the spawn is denied
        _move("t4", "planned", "open"),
        _move("t4", "open", "claimed"),
        _exceeded("b0004", "run", "run", "cost_micros", 500_000, 600_000, "deny"),
        _move("t4", "claimed", "denied"),
        ("audit", "run.end", {"outcome": "completed"}),
    ]


def _verify(tmp_path: Path, records: Records, plan: bytes | None = None) -> Any:
    """Record, export and verify (the rules-evidence writer) with this file's plan."""
    return verify_records(tmp_path, records, plan if plan is not None else plan_bytes(PLAN))


def _index(records: Records, kind: str, batch: str) -> int:
    return next(i for i, r in enumerate(records) if r[1] == kind and r[2].get("batch") == batch)


def _change(kind: str, batch: str, change: Callable[[Body], Body]) -> Callable[[Records], Records]:
    def apply(records: Records) -> Records:
        at = _index(records, kind, batch)
        store, k, body = records[at]
        records[at] = (store, k, change(dict(body)))
        return records

    return apply


def _drop(kind: str, batch: str) -> Callable[[Records], Records]:
    def apply(records: Records) -> Records:
        del records[_index(records, kind, batch)]
        return records

    return apply


def _move_after(kind: str, batch: str, after: str) -> Callable[[Records], Records]:
    def apply(records: Records) -> Records:
        record = records.pop(_index(records, kind, batch))
        records.insert(_index(records, after, batch) + 1, record)
        return records

    return apply


def _insert_after(kind: str, batch: str, record: Any) -> Callable[[Records], Records]:
    def apply(records: Records) -> Records:
        records.insert(_index(records, kind, batch) + 1, record)
        return records

    return apply


def _spawn_denied(records: Records) -> Records:
    """b0004 is spawned (and exits) instead of being denied."""
    at = _index(records, "budget.exceeded", "b0004")
    records[at : at + 2] = [
        ("audit", "lock.acquire", {"batch": "b0004", "globs": ["**"]}),
        _spawn("b0004", "t4", "tester"),
        _move("t4", "claimed", "in_progress"),
        _exit("b0004", 10, None),
        _move("t4", "in_progress", "failed"),
        ("audit", "lock.release", {"batch": "b0004", "reason": "retired"}),
    ]
    return records


def _spawn_after_deny(records: Records) -> Records:
    at = _index(records, "budget.exceeded", "b0004")
    records[at + 1 : at + 2] = [
        ("audit", "lock.acquire", {"batch": "b0004", "globs": ["**"]}),
        _spawn("b0004", "t4", "tester"),
        _move("t4", "claimed", "in_progress"),
        _exit("b0004", 10, None),
        _move("t4", "in_progress", "failed"),
        ("audit", "lock.release", {"batch": "b0004", "reason": "retired"}),
    ]
    return records


def _usage_of(batch: str, usage: Any) -> Callable[[Records], Records]:
    return _change("agent.exit", batch, lambda b: {**b, "usage": usage})


REFUSALS: list[tuple[str, Callable[[Records], Records], str, str]] = [
    # (a) a breach with no kill recorded before the exit
    (
        "breach-without-kill",
        _drop("budget.exceeded", "b0003"),
        "b0003",
        "run 'run' used 600000 of its 500000 cost_micros with no budget.exceeded kill",
    ),
    (
        "kill-after-the-exit",
        _move_after("budget.exceeded", "b0003", "agent.exit"),
        "b0003",
        "with no budget.exceeded kill recorded before this exit",
    ),
    (
        "task-tokens-over-without-kill",
        _usage_of("b0001", _usage(80, 30, 100_000)),
        "b0001",
        "task 't1' used 110 of its 100 tokens",
    ),
    (
        "role-wall-over-without-kill",
        _change("agent.exit", "b0002", lambda b: {**b, "duration_ms": 9001}),
        "b0002",
        "role 'coder' used 10001 of its 10000 wall_ms",
    ),
    (
        "kill-with-another-anomaly",
        _change("agent.exit", "b0003", lambda b: {**b, "anomaly": "crash"}),
        "b0003",
        "killed for a budget but its anomaly is 'crash'",
    ),
    # (b) budget.exceeded disagreeing with the ledger or the plan
    (
        "kill-limit-not-the-plans",
        _change("budget.exceeded", "b0003", lambda b: {**b, "limit": 400_000}),
        "b0003",
        "run 'run' cost_micros limit is 500000, recorded 400000",
    ),
    (
        "kill-used-more-than-charged",
        _change("budget.exceeded", "b0003", lambda b: {**b, "used": 600_001}),
        "b0003",
        "records run 'run' cost_micros used 600001, more than the 600000 the ledger holds",
    ),
    (
        "kill-used-not-over",
        _change("budget.exceeded", "b0003", lambda b: {**b, "used": 500_000}),
        "b0003",
        "which is not over its limit 500000",
    ),
    (
        "kill-of-another-batchs-scope",
        _change(
            "budget.exceeded",
            "b0003",
            lambda b: {
                **b,
                "scope": "role",
                "name": "coder",
                "resource": "wall_ms",
                "limit": 10_000,
                "used": 10_001,
            },
        ),
        "b0003",
        "role 'coder' is not a budget of this batch",
    ),
    (
        "kill-of-unlimited-resource",
        _change("budget.exceeded", "b0003", lambda b: {**b, "resource": "tokens"}),
        "b0003",
        "run 'run' tokens limit is None, recorded 500000",
    ),
    (
        "unknown-decision",
        _change("budget.exceeded", "b0003", lambda b: {**b, "decision": "warn"}),
        "b0003",
        "unknown decision 'warn'",
    ),
    (
        "deny-used-not-the-ledgers",
        _change("budget.exceeded", "b0004", lambda b: {**b, "used": 700_000}),
        "b0004",
        "denied with run 'run' cost_micros used 700000; the ledger holds 600000 of 500000",
    ),
    (
        "deny-of-a-spawned-batch",
        _change("budget.exceeded", "b0003", lambda b: {**b, "decision": "deny"}),
        "b0003",
        "a spawn is denied after the batch was spawned",
    ),
    (
        "deny-though-not-exhausted",
        _insert_after(
            "agent.exit", "b0001", _exceeded("b0009", "task", "t1", "tokens", 100, 60, "deny")
        ),
        "b0009",
        "denied with task 't1' tokens used 60; the ledger holds 60 of 100",
    ),
    (
        "second-kill",
        _insert_after(
            "budget.exceeded",
            "b0003",
            _exceeded("b0003", "run", "run", "cost_micros", 500_000, 600_000, "kill"),
        ),
        "b0003",
        "a second kill (the first at runs/r1/stores/audit.jsonl line",
    ),
    (
        "kill-of-a-batch-not-running",
        _change("budget.exceeded", "b0003", lambda b: {**b, "batch": "b0099"}),
        "b0099",
        "a kill for a batch that is not running",
    ),
    (
        "run-scope-misnamed",
        _change("budget.exceeded", "b0003", lambda b: {**b, "name": "all"}),
        "b0003",
        "the run scope is named 'run', not 'all'",
    ),
    (
        "unknown-scope",
        _change("budget.exceeded", "b0003", lambda b: {**b, "scope": "team"}),
        "b0003",
        "unknown scope 'team' or resource 'cost_micros'",
    ),
    (
        "unknown-resource",
        _change("budget.exceeded", "b0003", lambda b: {**b, "resource": "gpu_ms"}),
        "b0003",
        "unknown scope 'run' or resource 'gpu_ms'",
    ),
    (
        "exit-twice",
        _insert_after("agent.exit", "b0002", _exit("b0002", 1, None)),
        "b0002",
        "an exit of a batch that is not running",
    ),
    (
        "spawn-of-mixed-roles",
        _change("agent.spawn", "b0001", lambda b: {**b, "tasks": ["t1", "t3"]}),
        "b0001",
        "its tasks have roles ['coder', 'tester'], not one role",
    ),
    (
        "spawn-budget-malformed",
        _change("agent.spawn", "b0001", lambda b: {**b, "budget": {"tokens": 100}}),
        "b0001",
        "budget must be an object with exactly wall_ms, tokens, cost_micros",
    ),
    # (c) a spawn though a budget is exhausted
    (
        "spawn-though-exhausted",
        _spawn_denied,
        "b0004",
        "spawned though run 'run' has used 600000 of its 500000 cost_micros",
    ),
    (
        "spawn-after-deny",
        _spawn_after_deny,
        "b0004",
        "spawned after its spawn was denied for a budget",
    ),
    # (d) agent.spawn.budget disagreeing with the plan
    (
        "spawn-budget-not-the-plans",
        _change("agent.spawn", "b0001", lambda b: {**b, "budget": {**NO_LIMIT, "tokens": 1000}}),
        "b0001",
        "spawn budget {wall_ms: None, tokens: 1000, cost_micros: None} is not the plan's "
        "{wall_ms: None, tokens: 100, cost_micros: None} for its tasks",
    ),
    (
        "spawn-budget-invented",
        _change("agent.spawn", "b0002", lambda b: {**b, "budget": {**NO_LIMIT, "tokens": 100}}),
        "b0002",
        "is not the plan's {wall_ms: None, tokens: None, cost_micros: None}",
    ),
    # usage that is not the record shape
    (
        "usage-extra-member",
        _usage_of("b0001", {**_usage(40, 20, 100_000), "cached_tokens": 5}),
        "b0001",
        "usage must be null or an object with exactly cost_micros, input_tokens, output_tokens",
    ),
    (
        "usage-negative",
        _usage_of("b0001", _usage(-40, 20, 100_000)),
        "b0001",
        "usage.input_tokens must be an integer >= 0",
    ),
    (
        "usage-cost-float-string",
        _usage_of("b0001", _usage(40, 20, "0.1")),  # type: ignore[arg-type]
        "b0001",
        "usage.cost_micros must be an integer >= 0 or null",
    ),
]


def test_lawful_run_verifies(tmp_path: Path) -> None:
    report = _verify(tmp_path, lawful())
    assert report.status.value == "verified", report.failure


@pytest.mark.parametrize(
    ("mutate", "batch", "reason"),
    [pytest.param(m, b, r, id=case) for case, m, b, r in REFUSALS],
)
def test_refused(
    tmp_path: Path, mutate: Callable[[Records], Records], batch: str, reason: str
) -> None:
    report = _verify(tmp_path, mutate(lawful()))
    assert report.status.value == "invalid", report
    assert report.failure.check == "semantics", report.failure
    text = report.failure.reason
    assert f"batch {batch!r} breaks rule budget" in text, text
    assert reason in text, text


def _plan_with(change: Callable[[dict[str, Any]], None]) -> bytes:
    document = plan_document(PLAN)
    change(document)
    return canonical_bytes(document)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda d: d["budget"].update(tokens=0),
            "runs/r1/plan.json: budget.tokens must be an integer",
        ),
        (lambda d: d["budget"].pop("tokens"), "runs/r1/plan.json: budget must be an object with"),
        (lambda d: d.update(role_budgets=[]), "runs/r1/plan.json: role_budgets must be an object"),
        (
            lambda d: d["tasks"][0]["budget"].update(wall_ms="1500"),
            "runs/r1/plan.json: tasks[0].budget.wall_ms must be an integer >= 1 or null",
        ),
    ],
)
def test_plan_member_budget_shape_is_checked(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    plan = _plan_with(change)
    report = _verify(tmp_path, lawful(plan), plan=plan)
    assert report.status.value == "invalid" and report.failure.check == "semantics"
    assert reason in report.failure.reason, report.failure.reason


def test_limits_are_read_from_the_plan_member(tmp_path: Path) -> None:
    """The same records under a plan with a larger run budget need no kill and no denial:
    the check reads the limits the run bound, not constants."""
    plan = _plan_with(lambda d: d["budget"].update(cost_micros=10**7))
    records = lawful(plan)
    records = _drop("budget.exceeded", "b0003")(records)
    records = _change("agent.exit", "b0003", lambda b: {**b, "anomaly": None})(records)
    records = _spawn_denied(records)
    assert _verify(tmp_path, records, plan=plan).status.value == "verified"
    report = _verify(tmp_path / "again", lawful(plan), plan=plan)  # the kill is now baseless
    assert report.status.value == "invalid"
    assert "run 'run' cost_micros limit is 10000000, recorded 500000" in report.failure.reason
