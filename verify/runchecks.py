"""The per-run folds that ``harness.verify.semantics`` runs beside its own lifecycle check.

Each check sees a run's audit records in store order, then its control records, then (if
it is an ``EventsReader``) its events records, then its lineage records, then (if it is a
``ReplayReader``) its replay records (the bundle's member order), then ``finish``; it raises a
``VerificationError`` subclass naming the record (``where``) and the reason. One module per
concern (write locks, budgets, attempts, ...) keeps ``semantics`` small; this
registry is the one place that lists them, in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from .canonical import parse_canonical
from .errors import VerificationError
from .records import Record


class RunCheck(Protocol):
    """A fold over one run's records; raises on the first record that breaks its rule."""

    def audit(self, record: Record, where: str) -> None: ...

    def control(self, record: Record, where: str) -> None: ...

    def lineage(self, record: Record, where: str) -> None: ...

    def finish(self) -> None: ...


@runtime_checkable
class EventsReader(Protocol):
    """A run check that also reads the run's events store (after its control records, before
    its lineage records): the bus check. Others need not implement it."""

    def events(self, record: Record, where: str) -> None: ...


@runtime_checkable
class ReplayReader(Protocol):
    """A run check that also reads the run's replay store (last: after its lineage records):
    the exchanges check. Others need not implement it."""

    def replay(self, record: Record, where: str) -> None: ...


RunCheckFactory = Callable[[str, bytes | None], RunCheck]
"""``(run id, plan member bytes or None) -> RunCheck``."""


def plan_object(plan: bytes | None) -> dict[str, Any] | None:
    """The decoded plan member when it is an object with a ``tasks`` list, else None (no plan
    member, or one whose shape the policy check refuses with its own message)."""
    if plan is None:
        return None
    try:
        obj = parse_canonical(plan)
    except VerificationError:
        return None
    if type(obj) is not dict or type(obj.get("tasks")) is not list:
        return None
    return obj


def run_checks(
    run: str, plan: bytes | None, members: Mapping[str, bytes] | None = None
) -> list[RunCheck]:
    """A fresh instance of every run check, in the order they see each record. ``members``
    are the run's members read before its stores, by name (the rounds check takes its texts
    from them; None: none).

    Imports are local so that check modules may import ``RunCheck`` from here.
    """
    from .attemptcheck import attempt_check
    from .budgetcheck import budget_check
    from .commandcheck import command_check
    from .controlcheck import control_check
    from .eventcheck import event_check
    from .exchangecheck import exchange_check
    from .lifecyclecheck import lifecycle_check
    from .lockcheck import lock_check
    from .reviewcheck import review_check
    from .roundcheck import round_check
    from .supervisecheck import supervision_check

    makers: list[RunCheckFactory] = [
        attempt_check,
        budget_check,
        lock_check,
        supervision_check,
        command_check,
        lifecycle_check,
        lambda run, plan: round_check(run, plan, members),
        review_check,
        control_check,
        event_check,
        exchange_check,
    ]
    return [make(run, plan) for make in makers]
