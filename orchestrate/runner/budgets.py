"""Budgets enforced outside the agent: the run's ledger, the spawn-time and the live checks.

The ledger (``harness.orchestrate.budgeting.RunBudget`` over the rule
``harness.verify.rules.budget.Ledger``) is folded over the same facts the
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

from ..budgeting import RunBudget
from ..model import Batch, TaskSpec
from ..usage import UsageMeter
from ..usage import meter_for as adapter_meter
from .proxied import ProxiedMeter

if TYPE_CHECKING:
    from .core import RunCore
    from .job import BatchJob


def keeper(run: RunCore) -> RunBudget:
    """The run's budget keeper (``harness.orchestrate.budgeting``), made on first use."""
    if run.budget is None:
        run.budget = RunBudget(run.plan)
    return run.budget


def budget_of(run: RunCore, tasks: Sequence[TaskSpec]) -> dict[str, int | None]:
    """``agent.spawn.budget``: the batch's task-level limits (per resource the smallest)."""
    return keeper(run).spawn_budget(tasks)


def meter_for(run: RunCore, job: BatchJob) -> UsageMeter | None:
    """A usage meter for the batch's adapter (None when the adapter reports no usage).

    A proxied batch's tokens are what its proxy observed (the exchanges' usage as the API
    reported it), never the agent's own report: its meter reads the proxy, and takes only
    the cost from the adapter's output (docs/spec/runtime.md §17.1)."""
    if job.proxy is not None:
        return ProxiedMeter(job.proxy, adapter_meter(job.batch.adapter))
    return adapter_meter(job.batch.adapter)


def usage_of(run: RunCore, job: BatchJob) -> dict[str, Any] | None:
    """``agent.exit.usage``: what the agent's adapter reported (None when nothing)."""
    meter: UsageMeter | None = job.meter
    if meter is None:
        return None
    meter.close()
    usage = meter.usage()
    return usage.record() if usage is not None else None


def exit_breach(
    run: RunCore, job: BatchJob, usage: Mapping[str, Any] | None, duration_ms: int
) -> Mapping[str, Any] | None:
    """At retirement, before ``agent.exit``: the ``kill`` decision for a batch whose final
    usage breaks a budget the live checks did not catch (None when within every budget)."""
    meter: UsageMeter | None = job.meter
    final = meter.usage() if meter is not None else None
    return keeper(run).live(job.batch.id, job.tasks, duration_ms, final)


def charge(run: RunCore, job: BatchJob, usage: Mapping[str, Any] | None, duration_ms: int) -> None:
    """Charge a retired batch to its tasks, its role and the run (as the verifier will)."""
    keeper(run).charge(job.tasks, usage, duration_ms)


def live_breach(run: RunCore, job: BatchJob) -> Mapping[str, Any] | None:
    """The ``budget.exceeded`` body (decision ``kill``) if the running agent has broken a
    budget with what it used so far, else None."""
    if job.started_at is None:
        return None
    elapsed_ms = int((time.monotonic() - job.started_at) * 1000)
    meter: UsageMeter | None = job.meter
    usage = meter.usage() if meter is not None else None
    return keeper(run).live(job.batch.id, job.tasks, elapsed_ms, usage)


def spawn_exhausted(
    run: RunCore, batch: Batch, tasks: Sequence[TaskSpec]
) -> Mapping[str, Any] | None:
    """The ``budget.exceeded`` body (decision ``deny``) if a budget of the batch has nothing
    left, else None."""
    return keeper(run).exhausted(batch.id, tasks)
