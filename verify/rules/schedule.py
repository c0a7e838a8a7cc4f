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
* Write locks (``rules.locks``): a batch's lock is the sorted union of its tasks' scope globs.
  A task whose scope intersects a lock in ``held`` (batches in flight) is skipped, and so is
  a task whose scope intersects the lock of a batch already chosen in this call other than the
  batch it would join (tasks of one batch share a worktree and may overlap each other). A
  skipped task takes no room and no batch slot; it stays OPEN for a later call. So the locks of
  the batches in flight and of the batches chosen are pairwise disjoint.

Which tasks are *ready* (OPEN, every dependency DONE) is the caller's snapshot; this rule
only orders and groups them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from .locks import globs_intersect

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
    @property
    def scope(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class BatchChoice:
    id: str
    role: str
    adapter: str
    tasks: tuple[str, ...]
    lock: tuple[str, ...] = ()
    """The sorted union of the tasks' scope globs (``agent.spawn.lock``)."""


def priority_key(task: Candidate) -> tuple[int, int, str]:
    """Sort key: higher priority first, then plan order, then id."""
    return (-task.priority, task.order, task.id)


class _Locks:
    """The locks a call must respect: ``held`` (owner < 0) and the chosen batches' (owner =
    batch index), as (glob, owner) in the order added, with a per-scope cache of the owners a
    scope conflicts with so far. Tasks usually share a few scopes, so a task costs one dict
    lookup plus the globs added since its scope was last looked at."""

    __slots__ = ("_cache", "_owners")

    def __init__(self, held: Sequence[Sequence[str]]) -> None:
        self._owners: list[tuple[str, int]] = [
            (glob, -1 - n) for n, lock in enumerate(held) for glob in lock
        ]
        self._cache: dict[tuple[str, ...], tuple[int, frozenset[int]]] = {}

    def conflicts(self, scope: tuple[str, ...]) -> frozenset[int]:
        """Owners whose lock intersects ``scope``."""
        seen, hits = self._cache.get(scope, (0, frozenset()))
        owners = self._owners
        if seen < len(owners):
            found = set(hits)
            for glob, owner in owners[seen:]:
                if owner not in found:
                    for mine in scope:
                        if globs_intersect(mine, glob):
                            found.add(owner)
                            break
            hits = frozenset(found)
            self._cache[scope] = (len(owners), hits)
        return hits

    def add(self, owner: int, globs: Iterable[str]) -> None:
        self._owners.extend((glob, owner) for glob in globs)


def choose_batches(
    ready: Iterable[Candidate],
    *,
    max_batch: int,
    limits: Mapping[str, int],
    in_flight: Mapping[str, int],
    next_batch_number: int,
    held: Sequence[Sequence[str]] = (),
) -> list[BatchChoice]:
    """The batches to start now (rules in the module docstring); [] when nothing can start.

    ``held`` is the lock (glob list) of each batch in flight."""
    if not 1 <= max_batch <= MAX_BATCH_LIMIT:
        raise ValueError(f"max_batch must be 1..{MAX_BATCH_LIMIT}, got {max_batch}")
    ordered = sorted(ready, key=priority_key)
    locks = _Locks(held)
    room: dict[str, int] = {}
    filling: dict[tuple[str, str], int] = {}
    opened: list[tuple[str, str, list[str], set[str]]] = []
    for task in ordered:
        role = task.role
        key = (role, task.adapter)
        join = filling.get(key)
        left = 0
        if join is None:  # it would open a batch: is there room? (cheaper than the locks)
            got = room.get(role)
            left = limits.get(role, 1) - in_flight.get(role, 0) if got is None else got
            if left <= 0:
                room[role] = 0
                continue
        raw = task.scope
        scope = raw if isinstance(raw, tuple) else tuple(raw)
        conflicts = locks.conflicts(scope)
        if conflicts and (len(conflicts) > 1 or join not in conflicts):
            continue  # overlaps a batch in flight or another batch of this call
        if join is not None:
            _, _, members, lock = opened[join]
            members.append(task.id)
            locks.add(join, [glob for glob in scope if glob not in lock])
            lock.update(scope)
            if len(members) >= max_batch:
                del filling[key]
            continue
        room[role] = left - 1
        index = len(opened)
        opened.append((role, task.adapter, [task.id], set(scope)))
        locks.add(index, dict.fromkeys(scope))
        if max_batch > 1:
            filling[key] = index
    return [
        BatchChoice(f"b{next_batch_number + i:04d}", role, adapter, tuple(ids), tuple(sorted(lock)))
        for i, (role, adapter, ids, lock) in enumerate(opened)
    ]
