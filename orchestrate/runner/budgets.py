"""Budgets enforced outside the agent: the run's ledger, the spawn-time and the live checks.

The ledger is the rule ``harness.verify.rules.budget.Ledger``, folded over the same facts the
verifier folds over (each batch's ``agent.exit`` duration and usage, charged at retirement in
batch order), so the runtime and the verifier hold the same ledger at every record. Two
decisions come from it:

* at spawn, a batch one of whose budgets is already exhausted (``used >= limit``) is not
  started: ``budget.exceeded`` with decision ``deny``, its tasks denied;
* while an agent runs, its live usage (wall-clock since its start, tokens and cost as its
  adapter's stream reports them, ``harness.orchestrate.usage``) is checked at every step;
  the first breach (``used + live > limit``) kills it, recorded at its retirement as
  ``budget.exceeded`` with decision ``kill`` before its ``agent.exit``.

Live checks see what was charged before plus this batch's own usage (batches in flight
together are charged when each retires). At retirement the batch's final usage is checked once
more against the ledger (``exit_breach``): a breach the live checks missed — an agent that
finished between two checks, or batches in flight together that share a role or run budget —
is recorded as a ``kill`` decision before the exit, and the batch fails with anomaly
``budget`` (never merged), which is what the verifier's budget check demands.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.verify.rules import budget as rule

from ..model import Batch, TaskSpec
from ..usage import UsageMeter
from ..usage import meter_for as adapter_meter

if TYPE_CHECKING:
    from .core import RunCore
    from .job import BatchJob


def ledger(run: RunCore) -> rule.Ledger:
    """The run's ledger, made from the plan's limits on first use."""
    if run.ledger is None:
        limits, roles, tasks = run.plan.budget_ledger_limits()
        run.ledger = rule.Ledger(limits, roles, tasks)
    return run.ledger


def budget_of(run: RunCore, tasks: Sequence[TaskSpec]) -> dict[str, int | None]:
    """``agent.spawn.budget``: the batch's task-level limits (per resource the smallest)."""
    task_limits = {task.id: task.budget for task in tasks}
    return rule.batch_limits([task.id for task in tasks], task_limits).as_record()


def meter_for(run: RunCore, job: BatchJob) -> UsageMeter | None:
    """A usage meter for the batch's adapter (None when the adapter reports no usage)."""
    return adapter_meter(job.batch.adapter)


def _record(breach: rule.Breach, batch: str, decision: str) -> dict[str, Any]:
    return {
        "batch": batch,
        "scope": breach.scope,
        "name": breach.name,
        "resource": breach.resource,
        "limit": breach.limit,
        "used": breach.used,
        "decision": decision,
    }


def usage_of(run: RunCore, job: BatchJob) -> dict[str, Any] | None:
    """``agent.exit.usage``: what the agent's adapter reported (None when nothing)."""
    meter: UsageMeter | None = job.meter
    if meter is None:
        return None
    meter.close()
    usage = meter.usage()
    return usage.record() if usage is not None else None


def _spent(usage: Mapping[str, Any] | None, duration_ms: int) -> rule.Usage:
    tokens = 0
    cost = 0
    if usage is not None:
        tokens = int(usage["input_tokens"]) + int(usage["output_tokens"])
        cost = int(usage["cost_micros"] or 0)
    return rule.Usage(wall_ms=duration_ms, tokens=tokens, cost_micros=cost)


def exit_breach(
    run: RunCore, job: BatchJob, usage: Mapping[str, Any] | None, duration_ms: int
) -> Mapping[str, Any] | None:
    """At retirement, before ``agent.exit``: the ``kill`` decision for a batch whose final
    usage breaks a budget the live checks did not catch (None when within every budget)."""
    spent = _spent(usage, duration_ms)
    breach = ledger(run).breach([task.id for task in job.tasks], job.batch.role, spent)
    return _record(breach, job.batch.id, "kill") if breach is not None else None


def charge(run: RunCore, job: BatchJob, usage: Mapping[str, Any] | None, duration_ms: int) -> None:
    """Charge a retired batch to its tasks, its role and the run (as the verifier will)."""
    spent = _spent(usage, duration_ms)
    ledger(run).charge([task.id for task in job.tasks], job.batch.role, spent)


def live_breach(run: RunCore, job: BatchJob) -> Mapping[str, Any] | None:
    """The ``budget.exceeded`` body (decision ``kill``) if the running agent has broken a
    budget with what it used so far, else None."""
    started = getattr(job, "started_at", None)
    if started is None:
        return None
    wall_ms = int((time.monotonic() - started) * 1000)
    tokens = cost = 0
    meter: UsageMeter | None = job.meter
    if meter is not None:
        usage = meter.usage()
        if usage is not None:
            tokens, cost = usage.tokens, usage.cost_micros or 0
    live = rule.Usage(wall_ms=wall_ms, tokens=tokens, cost_micros=cost)
    breach = ledger(run).breach([task.id for task in job.tasks], job.batch.role, live)
    return _record(breach, job.batch.id, "kill") if breach is not None else None


def spawn_exhausted(
    run: RunCore, batch: Batch, tasks: Sequence[TaskSpec]
) -> Mapping[str, Any] | None:
    """The ``budget.exceeded`` body (decision ``deny``) if a budget of the batch has nothing
    left, else None."""
    breach = ledger(run).exhausted([task.id for task in tasks], batch.role)
    return _record(breach, batch.id, "deny") if breach is not None else None
