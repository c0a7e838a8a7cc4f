"""The scheduler's batch choice: which ready tasks start now, grouped how.

Rules (docs/spec/plan.md, "Scheduling"):

* Ready tasks are taken in order of descending ``priority``, then ascending ``order``
  (position in the plan file), then ``id``.
* In that order each task joins the still-filling batch of its (role, adapter) pair, or opens
  a new batch when its role may start another one. A batch holds up to ``max_batch`` tasks
  and never mixes roles or adapters.
* A role may have at most ``limits.get(role, 1)`` batches in flight; ``in_flight`` counts
  those already running, so a role at its limit gets no new batch.
* Batch ids are ``b{n:04d}`` for n = ``next_batch_number``, ``next_batch_number + 1``, ... in
  the order the batches were opened (``b9999``, then ``b10000``).

Which tasks are *ready* (OPEN, every dependency DONE) is the caller's snapshot; this rule
only orders and groups them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

MAX_BATCH_LIMIT: Final = 3


class Candidate(Protocol):
    """A ready task as the rule sees it (orchestrate's TaskSpec fits)."""

    @property
    def id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def adapter(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def order(self) -> int: ...


@dataclass(frozen=True)
class BatchChoice:
    id: str
    role: str
    adapter: str
    tasks: tuple[str, ...]


def priority_key(task: Candidate) -> tuple[int, int, str]:
    """Sort key: higher priority first, then plan order, then id."""
    return (-task.priority, task.order, task.id)


def choose_batches(
    ready: Iterable[Candidate],
    *,
    max_batch: int,
    limits: Mapping[str, int],
    in_flight: Mapping[str, int],
    next_batch_number: int,
) -> list[BatchChoice]:
    """The batches to start now (rules in the module docstring); [] when nothing can start."""
    if not 1 <= max_batch <= MAX_BATCH_LIMIT:
        raise ValueError(f"max_batch must be 1..{MAX_BATCH_LIMIT}, got {max_batch}")
    ordered = sorted(ready, key=priority_key)
    room: dict[str, int] = {}
    filling: dict[tuple[str, str], list[str]] = {}
    opened: list[tuple[str, str, list[str]]] = []
    for task in ordered:
        role = task.role
        key = (role, task.adapter)
        members = filling.get(key)
        if members is not None:
            members.append(task.id)
            if len(members) >= max_batch:
                del filling[key]
            continue
        left = room.get(role)
        if left is None:
            left = limits.get(role, 1) - in_flight.get(role, 0)
        if left <= 0:
            room[role] = 0
            continue
        room[role] = left - 1
        members = [task.id]
        opened.append((role, task.adapter, members))
        if max_batch > 1:
            filling[key] = members
    return [
        BatchChoice(f"b{next_batch_number + i:04d}", role, adapter, tuple(ids))
        for i, (role, adapter, ids) in enumerate(opened)
    ]
