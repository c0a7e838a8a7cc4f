"""Budgets: how much wall-clock time, tokens and money a task, a role and a run may use.

One definition for the runtime and the verifier (DESIGN §9; docs/spec/runtime.md,
"Budgets"). Integers only: wall-clock in milliseconds, cost in micro-dollars.

* ``Limits`` are what the plan allows one scope (``None``: no limit on that resource).
* ``Usage`` is what an agent used: its ``duration_ms``, its tokens (input + output as its
  adapter reports them) and its cost (0 when the adapter reports none).
* A ``Ledger`` is folded over the ``agent.exit`` records in store order: ``charge`` adds a
  batch's usage to **every** task of the batch (conservative: a batch's tasks share one
  process, so no split is provable) and **once** to its role and once to the run.
* ``breach(tasks, role, live)``: a running batch has broken a budget when, for some scope of
  the batch, ``used + live > limit``. ``exhausted(tasks, role)``: a batch must not be spawned
  when ``used >= limit`` for some scope of it (nothing left to spend).

Both return the *first* offending (scope, resource) in a fixed order, so the runtime and the
verifier name the same one: the batch's task ids ascending, then its role, then the run; within
a scope ``wall_ms``, ``tokens``, ``cost_micros``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

RESOURCES: Final = ("wall_ms", "tokens", "cost_micros")
"""The budgeted resources, in the order breaches are looked for."""
SCOPES: Final = ("task", "role", "run")
RUN_NAME: Final = "run"
"""The ``name`` of the run scope in a ``Breach`` (and in a ``budget.exceeded`` record)."""

Scope = Literal["task", "role", "run"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one scope may use; ``None`` means that resource is not limited.

    The plan's ``budget = {wall_s, tokens, cost_usd}`` tables become these (seconds times
    1000, dollars times 10^6), and ``agent.spawn.budget`` records one as an object.
    """

    wall_ms: int | None = None
    tokens: int | None = None
    cost_micros: int | None = None

    def get(self, resource: str) -> int | None:
        """The limit on ``resource`` (one of ``RESOURCES``)."""
        value: int | None = getattr(self, resource)
        return value

    def as_record(self) -> dict[str, int | None]:
        """The record form: ``{"wall_ms": .., "tokens": .., "cost_micros": ..}``."""
        return {name: self.get(name) for name in RESOURCES}


NO_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class Usage:
    """What was used (all integers >= 0)."""

    wall_ms: int = 0
    tokens: int = 0
    cost_micros: int = 0

    def __post_init__(self) -> None:
        for name in RESOURCES:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"usage {name} must be an integer >= 0, got {value!r}")

    def get(self, resource: str) -> int:
        """The amount of ``resource`` used."""
        value: int = getattr(self, resource)
        return value

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.wall_ms + other.wall_ms,
            self.tokens + other.tokens,
            self.cost_micros + other.cost_micros,
        )


ZERO: Final = Usage()


@dataclass(frozen=True, slots=True)
class Breach:
    """A budget that is broken (``used > limit``) or exhausted (``used >= limit``)."""

    scope: Scope
    name: str
    """The task id, the role, or ``"run"``."""
    resource: str
    limit: int
    used: int


def batch_limits(tasks: Iterable[str], task_limits: Mapping[str, Limits]) -> Limits:
    """The task-level limits of a batch, as ``agent.spawn.budget`` records them: per resource
    the smallest limit of the batch's tasks (``None`` when none of them has one)."""
    chosen: dict[str, int | None] = dict.fromkeys(RESOURCES)
    for task in tasks:
        limits = task_limits.get(task, NO_LIMITS)
        for name in RESOURCES:
            value = limits.get(name)
            current = chosen[name]
            if value is not None and (current is None or value < current):
                chosen[name] = value
    return Limits(chosen["wall_ms"], chosen["tokens"], chosen["cost_micros"])


class Ledger:
    """Usage charged so far per scope, against the plan's limits.

    Deterministic and free of I/O; the only state is what ``charge`` added. The runtime charges
    when it writes a batch's ``agent.exit`` record and the verifier when it reads one, so both
    hold the same ledger at every record.
    """

    __slots__ = ("_limits", "_used")

    def __init__(
        self,
        run: Limits = NO_LIMITS,
        roles: Mapping[str, Limits] | None = None,
        tasks: Mapping[str, Limits] | None = None,
    ) -> None:
        self._limits: dict[tuple[Scope, str], Limits] = {("run", RUN_NAME): run}
        for role, limits in (roles or {}).items():
            self._limits[("role", role)] = limits
        for task, limits in (tasks or {}).items():
            self._limits[("task", task)] = limits
        self._used: dict[tuple[Scope, str], Usage] = {}

    def limits(self, scope: Scope, name: str) -> Limits:
        """The plan's limits of one scope (``NO_LIMITS`` when it has none)."""
        return self._limits.get((scope, name), NO_LIMITS)

    def used(self, scope: Scope, name: str) -> Usage:
        """What has been charged to one scope so far."""
        return self._used.get((scope, name), ZERO)

    @staticmethod
    def scopes(tasks: Sequence[str], role: str) -> Iterator[tuple[Scope, str]]:
        """The scopes a batch is charged to, in breach order (distinct task ids ascending,
        then the role, then the run)."""
        for task in sorted(set(tasks)):
            yield "task", task
        yield "role", role
        yield "run", RUN_NAME

    def charge(self, tasks: Sequence[str], role: str, usage: Usage) -> None:
        """Add a finished batch's usage to each of its tasks, its role and the run."""
        for key in self.scopes(tasks, role):
            self._used[key] = self._used.get(key, ZERO) + usage

    def _first(self, tasks: Sequence[str], role: str, live: Usage, strict: bool) -> Breach | None:
        for scope, name in self.scopes(tasks, role):
            limits = self.limits(scope, name)
            used = self.used(scope, name)
            for resource in RESOURCES:
                limit = limits.get(resource)
                if limit is None:
                    continue
                total = used.get(resource) + live.get(resource)
                if total > limit or (not strict and total >= limit):
                    return Breach(scope, name, resource, limit, total)
        return None

    def breach(self, tasks: Sequence[str], role: str, live: Usage) -> Breach | None:
        """The first budget a running batch has broken with ``live`` usage so far (its own,
        not yet charged): ``used + live > limit``; ``None`` when within every budget."""
        return self._first(tasks, role, live, strict=True)

    def exhausted(self, tasks: Sequence[str], role: str) -> Breach | None:
        """The first budget with nothing left for a batch about to be spawned:
        ``used >= limit``; ``None`` when it may be spawned."""
        return self._first(tasks, role, ZERO, strict=False)
