"""The runtime's side of budgets: one run's ledger and the record bodies of its decisions.

``RunBudget`` wraps ``harness.verify.rules.budget.Ledger`` with the plan's limits so that the
tick loop needs one call per decision point (docs/spec/runtime.md §17), and builds exactly the
record bodies the verifier's budget check expects:

* ``spawn_budget(tasks)`` -> ``agent.spawn.budget``;
* ``exhausted(batch, tasks)`` -> a ``budget.exceeded`` body with decision ``deny`` (record it,
  spawn nothing, the tasks end ``denied``), or ``None``;
* ``live(batch, tasks, elapsed_ms, usage)`` -> a ``budget.exceeded`` body with decision
  ``kill`` (kill the agent as ``budget``, record the body before its ``agent.exit``), or
  ``None``; ask it on every meter feed and tick, and once more with the final figures before
  writing ``agent.exit`` (an agent that reported everything at the end);
* ``charge(tasks, usage, duration_ms)`` right when ``agent.exit`` is written, in record order.

No I/O, no clock: the caller passes the elapsed time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.verify.rules.budget import Breach, Ledger, Usage, batch_limits

from .model import Plan, TaskSpec
from .usage import Usage as Metered


def _body(batch: str, breach: Breach, decision: str) -> dict[str, Any]:
    return {
        "batch": batch,
        "scope": breach.scope,
        "name": breach.name,
        "resource": breach.resource,
        "limit": breach.limit,
        "used": breach.used,
        "decision": decision,
    }


def _ids(tasks: Sequence[TaskSpec]) -> tuple[str, ...]:
    return tuple(task.id for task in tasks)


def _role(tasks: Sequence[TaskSpec]) -> str:
    roles = {task.role for task in tasks}
    if len(roles) != 1:
        raise ValueError(f"a batch has one role, these tasks have {sorted(roles)}")
    return roles.pop()


class RunBudget:
    """A run's budgets: the plan's limits and what has been charged so far."""

    def __init__(self, plan: Plan) -> None:
        run, roles, tasks = plan.budget_ledger_limits()
        self._tasks = dict(tasks)
        self.ledger = Ledger(run, roles, tasks)

    def spawn_budget(self, tasks: Sequence[TaskSpec]) -> dict[str, int | None]:
        """``agent.spawn.budget``: per resource the smallest limit of the batch's tasks."""
        return batch_limits(_ids(tasks), self._tasks).as_record()

    def exhausted(self, batch: str, tasks: Sequence[TaskSpec]) -> dict[str, Any] | None:
        """The ``deny`` body when a budget of the batch has nothing left, else ``None``."""
        breach = self.ledger.exhausted(_ids(tasks), _role(tasks))
        return None if breach is None else _body(batch, breach, "deny")

    def live(
        self, batch: str, tasks: Sequence[TaskSpec], elapsed_ms: int, usage: Metered | None
    ) -> dict[str, Any] | None:
        """The ``kill`` body when the running batch has broken a budget, else ``None``."""
        live = usage.charge(elapsed_ms) if usage is not None else Usage(wall_ms=elapsed_ms)
        breach = self.ledger.breach(_ids(tasks), _role(tasks), live)
        return None if breach is None else _body(batch, breach, "kill")

    def charge(
        self, tasks: Sequence[TaskSpec], usage: Mapping[str, Any] | None, duration_ms: int
    ) -> None:
        """Charge a finished batch (``usage`` is the ``agent.exit.usage`` body or ``None``)."""
        tokens = cost = 0
        if usage is not None:
            tokens = int(usage["input_tokens"]) + int(usage["output_tokens"])
            cost = int(usage["cost_micros"] or 0)
        self.ledger.charge(_ids(tasks), _role(tasks), Usage(duration_ms, tokens, cost))
