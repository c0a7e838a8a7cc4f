"""Budgets enforced outside the agent: the run's ledger, spawn-time and live checks.

Placeholder wiring until the budget rule lands (issue 11 §6): no limits, no usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..model import Batch, TaskSpec

if TYPE_CHECKING:
    from .core import RunCore
    from .job import BatchJob


def budget_of(run: RunCore, tasks: Sequence[TaskSpec]) -> dict[str, int | None]:
    return {"wall_ms": None, "tokens": None, "cost_micros": None}


def meter_for(run: RunCore, job: BatchJob) -> Any:
    return None


def usage_of(run: RunCore, job: BatchJob) -> dict[str, Any] | None:
    return None


def charge(run: RunCore, job: BatchJob, usage: Mapping[str, Any] | None, duration_ms: int) -> None:
    return None


def live_breach(run: RunCore, job: BatchJob) -> Mapping[str, Any] | None:
    return None


def spawn_exhausted(
    run: RunCore, batch: Batch, tasks: Sequence[TaskSpec]
) -> Mapping[str, Any] | None:
    return None
