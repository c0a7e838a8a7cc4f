"""Run check "budget": no agent used more than its budgets allow without a recorded decision.

The limits come from the plan member (``budget``, ``role_budgets`` and each task's
``budget``: docs/spec/bundle.md §8.7); the usage from ``agent.exit`` (``duration_ms`` and
``usage``). Folding a run's audit records in store order with the same ledger the runtime
keeps (``harness.verify.rules.budget``; docs/spec/runtime.md, "Budgets"):

* ``agent.spawn``: its ``budget`` is the batch's task-level limits as the rule computes them
  from the plan (``batch_limits``), and no budget of the batch (its tasks, its role, the run)
  is already exhausted (``Ledger.exhausted``);
* ``budget.exceeded``: ``limit`` is the plan's for that scope, name and resource. Decision
  ``deny`` is a spawn-time refusal: the batch was never spawned and is not spawned later,
  ``used`` is exactly the ledger's and at least the limit. Decision ``kill`` is a live breach
  of a running batch: the scope is one of the batch's, ``used`` is over the limit and (checked
  at the batch's exit) at most what the ledger holds once the batch's own usage is charged;
  one per batch. (A lower bound is implied: the spawn passed ``exhausted``, so the ledger
  then held less than the limit, and ``used`` is over it);
* ``agent.exit``: ``usage`` is null or ``{input_tokens, output_tokens, cost_micros}``; the
  batch is charged; if a budget of the batch is then over its limit, a ``kill`` for that
  batch must have been recorded before this record (and the exit's ``anomaly`` is
  ``budget``); a batch with a ``kill`` ends with anomaly ``budget`` either way.

Each refusal names the record, the batch and the rule. Without a plan member the check reads
nothing (the policy check refuses a run that should have one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .layout import plan_member
from .records import Record
from .rules.budget import (
    NO_LIMITS,
    RESOURCES,
    RUN_NAME,
    SCOPES,
    Ledger,
    Limits,
    Scope,
    Usage,
    batch_limits,
)
from .runchecks import plan_object

DECISIONS: Final = ("kill", "deny")
"""``budget.exceeded`` decisions: ``kill`` a running batch, ``deny`` a spawn."""
USAGE_KEYS: Final = frozenset({"input_tokens", "output_tokens", "cost_micros"})


class BudgetError(VerificationError):
    """A budget passed without a recorded decision, or a budget record the ledger denies."""


def _refuse(where: str, batch: object, detail: str) -> BudgetError:
    return BudgetError(f"{where}: batch {batch!r} breaks rule budget: {detail}")


def _limits(value: object, where: str) -> Limits:
    """A budget object ``{"wall_ms", "tokens", "cost_micros"}``: each an integer >= 1 or null."""
    if type(value) is not dict or set(value) != set(RESOURCES):
        raise BudgetError(f"{where} must be an object with exactly {', '.join(RESOURCES)}")
    for name in RESOURCES:
        item = value[name]
        if item is not None and (type(item) is not int or item < 1):
            raise BudgetError(f"{where}.{name} must be an integer >= 1 or null")
    return Limits(value["wall_ms"], value["tokens"], value["cost_micros"])


@dataclass(frozen=True)
class PlanBudgets:
    """The budget part of a plan member."""

    run: Limits
    roles: Mapping[str, Limits]
    tasks: Mapping[str, Limits]
    task_roles: Mapping[str, str]


def plan_budgets(plan: bytes | None, where: str = "plan member") -> PlanBudgets | None:
    """The limits in a plan member; None without one (or one the policy check will refuse
    for its shape). An absent ``budget``/``role_budgets`` member is no limit; a present one
    must have the record shape."""
    obj = plan_object(plan)
    if obj is None:
        return None
    run = _limits(obj["budget"], f"{where}: budget") if "budget" in obj else NO_LIMITS
    roles: dict[str, Limits] = {}
    raw_roles = obj.get("role_budgets", {})
    if type(raw_roles) is not dict:
        raise BudgetError(f"{where}: role_budgets must be an object")
    for role, value in raw_roles.items():
        roles[role] = _limits(value, f"{where}: role_budgets.{role}")
    tasks: dict[str, Limits] = {}
    task_roles: dict[str, str] = {}
    for i, item in enumerate(obj["tasks"]):
        if type(item) is not dict or type(item.get("id")) is not str:
            return None
        if type(item.get("role")) is not str:
            return None
        task_roles[item["id"]] = item["role"]
        if "budget" in item:
            tasks[item["id"]] = _limits(item["budget"], f"{where}: tasks[{i}].budget")
    return PlanBudgets(run, roles, tasks, task_roles)


def _usage(value: object, where: str, batch: object) -> tuple[int, int | None]:
    """``(tokens, cost_micros)`` of an ``agent.exit.usage`` object (``(0, None)`` for null)."""
    if value is None:
        return 0, None
    if type(value) is not dict or set(value) != USAGE_KEYS:
        keys = ", ".join(sorted(USAGE_KEYS))
        raise _refuse(where, batch, f"usage must be null or an object with exactly {keys}")
    for name in ("input_tokens", "output_tokens"):
        if type(value[name]) is not int or value[name] < 0:
            raise _refuse(where, batch, f"usage.{name} must be an integer >= 0")
    cost = value["cost_micros"]
    if cost is not None and (type(cost) is not int or cost < 0):
        raise _refuse(where, batch, "usage.cost_micros must be an integer >= 0 or null")
    return value["input_tokens"] + value["output_tokens"], cost


def _show(limits: Limits) -> str:
    return "{" + ", ".join(f"{name}: {limits.get(name)}" for name in RESOURCES) + "}"


@dataclass(eq=False, repr=False)
class _Batch:
    tasks: tuple[str, ...]
    role: str
    scopes: frozenset[tuple[Scope, str]]
    kill: Mapping[str, Any] | None = None
    kill_where: str = ""
    exited: bool = False


@dataclass(eq=False, repr=False)
class BudgetCheck:
    run: str
    budgets: PlanBudgets | None
    plan_error: BudgetError | None = None
    """A plan member whose budget part has the wrong shape: raised at the first record."""
    ledger: Ledger = field(default_factory=Ledger)
    batches: dict[str, _Batch] = field(default_factory=dict)
    denied: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.budgets is not None:
            self.ledger = Ledger(self.budgets.run, self.budgets.roles, self.budgets.tasks)

    # -- records --------------------------------------------------------------------------

    def audit(self, record: Record, where: str) -> None:
        if self.plan_error is not None:
            raise self.plan_error
        if self.budgets is None:
            return
        kind = record.kind
        if kind == "agent.spawn":
            self._spawn(record.body, where)
        elif kind == "budget.exceeded":
            self._exceeded(record.body, where)
        elif kind == "agent.exit":
            self._exit(record.body, where)

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        return None

    # -- the rules ------------------------------------------------------------------------

    def _role(self, tasks: Sequence[str], batch: str, where: str) -> str:
        assert self.budgets is not None
        roles = set()
        for task in tasks:
            role = self.budgets.task_roles.get(task)
            if role is None:
                raise _refuse(where, batch, f"task {task!r} is not in the plan member")
            roles.add(role)
        if len(roles) != 1:
            raise _refuse(where, batch, f"its tasks have roles {sorted(roles)}, not one role")
        return roles.pop()

    def _spawn(self, body: Mapping[str, Any], where: str) -> None:
        assert self.budgets is not None
        batch = body["batch"]
        tasks = tuple(body["tasks"])
        if batch in self.denied:
            raise _refuse(where, batch, "spawned after its spawn was denied for a budget")
        role = self._role(tasks, batch, where)
        expected = batch_limits(tasks, self.budgets.tasks)
        try:
            recorded = _limits(body["budget"], "budget")
        except BudgetError as exc:
            raise _refuse(where, batch, str(exc)) from None
        if recorded != expected:
            raise _refuse(
                where,
                batch,
                f"spawn budget {_show(recorded)} is not the plan's {_show(expected)} for its tasks",
            )
        exhausted = self.ledger.exhausted(tasks, role)
        if exhausted is not None:
            raise _refuse(
                where,
                batch,
                f"spawned though {exhausted.scope} {exhausted.name!r} has used "
                f"{exhausted.used} of its {exhausted.limit} {exhausted.resource}",
            )
        self.batches[batch] = _Batch(tasks, role, frozenset(Ledger.scopes(tasks, role)))

    def _exceeded(self, body: Mapping[str, Any], where: str) -> None:
        batch = body["batch"]
        scope, name, resource = body["scope"], body["name"], body["resource"]
        decision, limit, used = body["decision"], body["limit"], body["used"]
        if decision not in DECISIONS:
            raise _refuse(where, batch, f"unknown decision {decision!r} (kill or deny)")
        if scope not in SCOPES or resource not in RESOURCES:
            raise _refuse(where, batch, f"unknown scope {scope!r} or resource {resource!r}")
        if scope == "run" and name != RUN_NAME:
            raise _refuse(where, batch, f"the run scope is named {RUN_NAME!r}, not {name!r}")
        planned = self.ledger.limits(scope, name).get(resource)
        if planned != limit:
            raise _refuse(
                where, batch, f"{scope} {name!r} {resource} limit is {planned}, recorded {limit}"
            )
        state = self.batches.get(batch)
        if decision == "deny":
            if state is not None:
                raise _refuse(where, batch, "a spawn is denied after the batch was spawned")
            charged = self.ledger.used(scope, name).get(resource)
            if used != charged or used < limit:
                raise _refuse(
                    where,
                    batch,
                    f"denied with {scope} {name!r} {resource} used {used}; the ledger holds "
                    f"{charged} of {limit}",
                )
            self.denied.add(batch)
            return
        if state is None or state.exited:
            raise _refuse(where, batch, "a kill for a batch that is not running")
        if state.kill is not None:
            raise _refuse(where, batch, f"a second kill (the first at {state.kill_where})")
        if (scope, name) not in state.scopes:
            raise _refuse(where, batch, f"{scope} {name!r} is not a budget of this batch")
        if used <= limit:
            raise _refuse(
                where,
                batch,
                f"killed with {scope} {name!r} {resource} used {used}, which is not over its "
                f"limit {limit}",
            )
        state.kill, state.kill_where = body, where

    def _exit(self, body: Mapping[str, Any], where: str) -> None:
        batch = body["batch"]
        state = self.batches.get(batch)
        if state is None or state.exited:
            raise _refuse(where, batch, "an exit of a batch that is not running")
        state.exited = True
        tokens, cost = _usage(body["usage"], where, batch)
        self.ledger.charge(state.tasks, state.role, Usage(body["duration_ms"], tokens, cost or 0))
        kill = state.kill
        if kill is not None:
            scope, name, resource = kill["scope"], kill["name"], kill["resource"]
            total = self.ledger.used(scope, name).get(resource)
            if kill["used"] > total:
                raise _refuse(
                    where,
                    batch,
                    f"its kill ({state.kill_where}) records {scope} {name!r} {resource} used "
                    f"{kill['used']}, more than the {total} the ledger holds with this exit",
                )
            if body["anomaly"] != "budget":
                raise _refuse(
                    where, batch, f"killed for a budget but its anomaly is {body['anomaly']!r}"
                )
            return
        breach = self.ledger.breach(state.tasks, state.role, Usage())
        if breach is not None:
            raise _refuse(
                where,
                batch,
                f"{breach.scope} {breach.name!r} used {breach.used} of its {breach.limit} "
                f"{breach.resource} with no budget.exceeded kill recorded before this exit",
            )


def budget_check(run: str, plan: bytes | None) -> BudgetCheck:
    member = plan_member(run)
    try:
        return BudgetCheck(run, plan_budgets(plan, member))
    except BudgetError as exc:
        return BudgetCheck(run, None, BudgetError(str(exc), member=member))
