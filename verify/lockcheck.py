"""Run check "locks": batches whose scopes intersect never ran at once, and every write fell
under the lock of a batch that held its task.

Folding a run's audit records in store order (docs/spec/runtime.md, "Write locks"), with a
table of the locks currently held (batch -> globs):

* ``lock.acquire {batch, globs}``: ``globs`` are valid scope globs, sorted and without
  repeats; the batch holds no lock already (a batch acquires twice only with a release in
  between); no glob intersects a glob of a lock held by another batch
  (``harness.verify.rules.locks.globs_intersect``: some valid path matches both);
* ``agent.spawn``: its batch holds a lock, and the record's ``lock`` is exactly the acquired
  globs; with a plan member, the lock is also the sorted union of the scopes its tasks have in
  the plan (``rules.locks.lock_of``);
* ``lock.release {batch, reason}``: the batch holds a lock (which it then no longer does);
* ``run.end``: no lock is held (the runtime retires every batch before it ends a run). A run
  whose audit store ends without ``run.end`` — a crash — may leave locks held; the runtime
  that resumes it releases them (reason ``runtime crash``) before it starts anything.

Then, over the lineage records: an ``artifact.write``/``artifact.delete`` whose task was part
of a spawned batch has a path matched by the lock of at least one batch that contained the
task (attempts may differ in batch; the semantics check already refuses writes of tasks that
never ran, so those are left to it). Each refusal names the record and the batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import VerificationError
from .layout import plan_member
from .policycheck import parse_plan_document
from .records import Record
from .rules.locks import globs_intersect, lock_of
from .rules.scope import check_glob, in_scope


class LockError(VerificationError):
    """Two batches held intersecting locks at once, a lock record breaks the protocol, or a
    write fell outside every lock its task was spawned under."""


def _intersection(mine: Sequence[str], theirs: Sequence[str]) -> tuple[str, str] | None:
    for a in mine:
        for b in theirs:
            if globs_intersect(a, b):
                return a, b
    return None


@dataclass(eq=False, repr=False)
class LockCheck:
    run: str
    plan_scopes: Mapping[str, tuple[str, ...]] | None
    """Scope globs per task id, from the plan member (None: no plan member to bind to)."""
    held: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    """batch -> (globs, where the lock was acquired)."""
    task_locks: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    """task -> (batch, lock) of every batch spawned with it, in spawn order."""

    def audit(self, record: Record, where: str) -> None:
        kind = record.kind
        body = record.body
        if kind == "lock.acquire":
            self._acquire(str(body["batch"]), list(body["globs"]), where)
        elif kind == "agent.spawn":
            self._spawn(str(body["batch"]), list(body["tasks"]), list(body["lock"]), where)
        elif kind == "lock.release":
            batch = str(body["batch"])
            if self.held.pop(batch, None) is None:
                raise LockError(f"{where}: batch {batch!r} releases a lock it does not hold")
        elif kind == "run.end" and self.held:
            names = ", ".join(
                f"{batch!r} (acquired at {at})" for batch, (_, at) in sorted(self.held.items())
            )
            raise LockError(f"{where}: the run ends while batches still hold locks: {names}")

    def _acquire(self, batch: str, globs: list[str], where: str) -> None:
        for glob in globs:
            problem = check_glob(glob)
            if problem is not None:
                raise LockError(f"{where}: batch {batch!r} locks a bad glob {glob!r}: {problem}")
        if globs != sorted(set(globs)):
            raise LockError(
                f"{where}: batch {batch!r} lock globs must be sorted without repeats, got {globs}"
            )
        previous = self.held.get(batch)
        if previous is not None:
            raise LockError(
                f"{where}: batch {batch!r} acquires a lock again without releasing the one it "
                f"acquired at {previous[1]}"
            )
        for other, (theirs, at) in sorted(self.held.items()):
            pair = _intersection(globs, theirs)
            if pair is not None:
                raise LockError(
                    f"{where}: batch {batch!r} acquires a lock that intersects the lock batch "
                    f"{other!r} holds (acquired at {at}): {pair[0]!r} and {pair[1]!r} match a "
                    "common path"
                )
        self.held[batch] = (tuple(globs), where)

    def _spawn(self, batch: str, tasks: list[str], lock: list[str], where: str) -> None:
        entry = self.held.get(batch)
        if entry is None:
            raise LockError(f"{where}: batch {batch!r} is spawned without holding its lock")
        globs, at = entry
        if tuple(lock) != globs:
            raise LockError(
                f"{where}: batch {batch!r} is spawned with lock {lock} but acquired "
                f"{list(globs)} at {at}"
            )
        if self.plan_scopes is not None:
            scopes = []
            for name in tasks:
                scope = self.plan_scopes.get(name)
                if scope is None:
                    raise LockError(
                        f"{where}: batch {batch!r} spawns task {name!r}, which is not in the "
                        "plan member"
                    )
                scopes.append(scope)
            expected = list(lock_of(scopes))
            if lock != expected:
                raise LockError(
                    f"{where}: batch {batch!r} locks {lock}, but the union of its tasks' "
                    f"scopes in the plan is {expected}"
                )
        for name in tasks:
            self.task_locks.setdefault(name, []).append((batch, globs))

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        if record.kind not in ("artifact.write", "artifact.delete"):
            return
        task = str(record.body["task"])
        spawned = self.task_locks.get(task)
        if not spawned:
            return  # the semantics check refuses a write by a task that never ran
        path = str(record.body["path"])
        if not any(in_scope(path, globs) for _, globs in spawned):
            batches = ", ".join(f"{batch!r} {list(globs)}" for batch, globs in spawned)
            raise LockError(
                f"{where}: artifact {path!r} of task {task!r} is outside the lock of every "
                f"batch the task ran in: {batches}"
            )

    def finish(self) -> None:
        """Locks still held at the end of the records are a crashed run's (no ``run.end``
        after them, or ``audit`` would have refused): nothing to refuse."""


def plan_scopes(run: str, plan: bytes | None) -> Mapping[str, tuple[str, ...]] | None:
    """Scope per task id from the plan member; None without one, or with one the policy check
    refuses (it names the problem)."""
    if plan is None:
        return None
    try:
        _, _, tasks = parse_plan_document(plan, plan_member(run))
    except VerificationError:
        return None
    return {name: task.scope for name, task in tasks.items()}


def lock_check(run: str, plan: bytes | None) -> LockCheck:
    return LockCheck(run, plan_scopes(run, plan))
