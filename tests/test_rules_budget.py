"""The budget rule (harness.verify.rules.budget): ledger folding, breach and exhaustion.

Property tests compare the ledger with a brute-force reference written from the spec
(docs/spec/runtime.md, "Budgets"); table tests pin the boundary (``>`` for a breach, ``>=``
for exhaustion), the fixed order, and conservative charging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.rules.budget import (
    RESOURCES,
    RUN_NAME,
    Breach,
    Ledger,
    Limits,
    Usage,
    batch_limits,
)

TASKS = ("a", "b", "c")
ROLES = ("coder", "tester")

small = st.integers(0, 50)
limit = st.one_of(st.none(), st.integers(1, 60))
limits = st.builds(Limits, wall_ms=limit, tokens=limit, cost_micros=limit)
usages = st.builds(Usage, wall_ms=small, tokens=small, cost_micros=small)
batch_tasks = st.lists(st.sampled_from(TASKS), min_size=1, max_size=3)
charges = st.lists(st.tuples(batch_tasks, st.sampled_from(ROLES), usages), max_size=6)


def _reference(
    run: Limits,
    roles: Mapping[str, Limits],
    tasks: Mapping[str, Limits],
    history: Sequence[tuple[Sequence[str], str, Usage]],
    batch: Sequence[str],
    role: str,
    live: Usage,
    strict: bool,
) -> Breach | None:
    """The spec, literally: sum every past batch that touched the scope, add ``live``."""
    scopes: list[tuple[str, str, Limits]] = [
        ("task", t, tasks.get(t, Limits())) for t in sorted(set(batch))
    ]
    scopes += [("role", role, roles.get(role, Limits())), ("run", RUN_NAME, run)]
    for scope, name, lim in scopes:
        for resource in RESOURCES:
            cap = getattr(lim, resource)
            if cap is None:
                continue
            used = getattr(live, resource)
            for past_tasks, past_role, usage in history:
                touched = (
                    (scope == "task" and name in past_tasks)
                    or (scope == "role" and name == past_role)
                    or scope == "run"
                )
                if touched:
                    used += getattr(usage, resource)
            if used > cap or (not strict and used >= cap):
                return Breach(scope, name, resource, cap, used)  # type: ignore[arg-type]
    return None


@settings(max_examples=300, deadline=None)
@given(
    limits,
    st.dictionaries(st.sampled_from(ROLES), limits),
    st.dictionaries(st.sampled_from(TASKS), limits),
    charges,
    batch_tasks,
    st.sampled_from(ROLES),
    usages,
)
def test_ledger_agrees_with_the_reference(
    run: Limits,
    roles: dict[str, Limits],
    tasks: dict[str, Limits],
    history: list[tuple[list[str], str, Usage]],
    batch: list[str],
    role: str,
    live: Usage,
) -> None:
    ledger = Ledger(run, roles, tasks)
    for past_tasks, past_role, usage in history:
        ledger.charge(past_tasks, past_role, usage)
    assert ledger.breach(batch, role, live) == _reference(
        run, roles, tasks, history, batch, role, live, strict=True
    )
    assert ledger.exhausted(batch, role) == _reference(
        run, roles, tasks, history, batch, role, Usage(), strict=False
    )


@settings(max_examples=200, deadline=None)
@given(limits, charges, usages, usages)
def test_more_usage_never_clears_a_breach(
    run: Limits, history: list[tuple[list[str], str, Usage]], live: Usage, extra: Usage
) -> None:
    ledger = Ledger(run)
    for past_tasks, past_role, usage in history:
        ledger.charge(past_tasks, past_role, usage)
    if ledger.breach(["a"], "coder", live) is not None:
        assert ledger.breach(["a"], "coder", live + extra) is not None
        ledger.charge(["b"], "tester", extra)
        assert ledger.breach(["a"], "coder", live) is not None
    if ledger.breach(["a"], "coder", Usage()) is not None:
        assert ledger.exhausted(["a"], "coder") is not None


def test_breach_is_strictly_over_and_exhaustion_is_at_the_limit() -> None:
    ledger = Ledger(tasks={"a": Limits(tokens=100)})
    assert ledger.breach(["a"], "r", Usage(tokens=100)) is None
    assert ledger.breach(["a"], "r", Usage(tokens=101)) == Breach("task", "a", "tokens", 100, 101)
    ledger.charge(["a"], "r", Usage(tokens=99))
    assert ledger.exhausted(["a"], "r") is None
    ledger.charge(["a"], "r", Usage(tokens=1))
    assert ledger.exhausted(["a"], "r") == Breach("task", "a", "tokens", 100, 100)
    assert ledger.breach(["a"], "r", Usage()) is None
    assert ledger.breach(["a"], "r", Usage(tokens=1)) == Breach("task", "a", "tokens", 100, 101)


def test_batch_usage_is_charged_to_every_task_and_once_to_role_and_run() -> None:
    ledger = Ledger(
        run=Limits(wall_ms=1000),
        roles={"coder": Limits(wall_ms=1000)},
        tasks={"a": Limits(wall_ms=1000), "b": Limits(wall_ms=1000)},
    )
    ledger.charge(["b", "a", "a"], "coder", Usage(wall_ms=300, tokens=5, cost_micros=7))
    for scope, name in (("task", "a"), ("task", "b"), ("role", "coder"), ("run", RUN_NAME)):
        assert ledger.used(scope, name) == Usage(300, 5, 7)  # type: ignore[arg-type]
    assert ledger.used("task", "c") == Usage()
    assert ledger.used("role", "tester") == Usage()
    ledger.charge(["c"], "tester", Usage(wall_ms=800))
    assert ledger.used("run", RUN_NAME) == Usage(1100, 5, 7)
    assert ledger.used("task", "a") == Usage(300, 5, 7)
    # the run is over its wall budget: every batch, of any task or role, is exhausted
    assert ledger.exhausted(["a"], "coder") == Breach("run", RUN_NAME, "wall_ms", 1000, 1100)


def test_first_breach_order_tasks_then_role_then_run_then_resource() -> None:
    over = Limits(wall_ms=1, tokens=1, cost_micros=1)
    ledger = Ledger(run=over, roles={"r": over}, tasks={"a": over, "b": over})
    live = Usage(5, 5, 5)
    assert ledger.breach(["b", "a"], "r", live) == Breach("task", "a", "wall_ms", 1, 5)
    ledger = Ledger(run=over, roles={"r": over}, tasks={"b": Limits(cost_micros=1)})
    assert ledger.breach(["b", "a"], "r", live) == Breach("task", "b", "cost_micros", 1, 5)
    ledger = Ledger(run=over, roles={"r": Limits(tokens=2)})
    assert ledger.breach(["b", "a"], "r", live) == Breach("role", "r", "tokens", 2, 5)
    ledger = Ledger(run=Limits(tokens=9, cost_micros=4))
    assert ledger.breach(["b", "a"], "r", live) == Breach("run", RUN_NAME, "cost_micros", 4, 5)


def test_no_limits_never_breach() -> None:
    ledger = Ledger()
    ledger.charge(["a"], "r", Usage(10**15, 10**15, 10**15))
    assert ledger.breach(["a"], "r", Usage(10**15, 10**15, 10**15)) is None
    assert ledger.exhausted(["a"], "r") is None


def test_batch_limits_take_the_smallest_per_resource() -> None:
    task_limits = {
        "a": Limits(wall_ms=500, tokens=None, cost_micros=9),
        "b": Limits(wall_ms=700, tokens=40, cost_micros=None),
    }
    assert batch_limits(["a", "b"], task_limits) == Limits(500, 40, 9)
    assert batch_limits(["b"], task_limits) == Limits(700, 40, None)
    assert batch_limits(["c"], task_limits) == Limits()
    assert Limits(500, 40, 9).as_record() == {"wall_ms": 500, "tokens": 40, "cost_micros": 9}


@pytest.mark.parametrize("bad", [-1, True, 1.5, None, "3"])
def test_usage_is_integers_at_least_zero(bad: object) -> None:
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        Usage(tokens=bad)  # type: ignore[arg-type]
