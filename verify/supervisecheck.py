"""Run check "supervision": every agent has its place in the supervision tree, its limits are
the plan's, and an orphan is reaped only as the agent it was.

Folding a run's audit records in order (docs/spec/runtime.md §3.4, §16, §20):

* ``task.planned`` gives each task its role;
* ``agent.spawn``: ``supervisor`` is ``role:<role>`` of its tasks (all of one role);
  ``lifetime_ms`` is ``min(timeout_ms, the plan's lifetime, 1800 s)``; ``idle_ms`` is the
  smallest idle limit that applies to its tasks (a task's own, else the plan's), or null when
  none does; a batch id is spawned once;
* ``agent.started``: names a spawned batch, once, before its exit;
* ``agent.exit``: names a spawned batch, once; ``anomaly`` is null or one of the supervisor's
  classes;
* ``orphan.reaped``: names a batch that was started and has no exit, with exactly the identity
  its ``agent.started`` recorded (pid, pgid, start_ticks, boot_id), and an outcome of
  ``killed``, ``gone`` or ``reused``; once per batch.

The limits are read from the plan member (``lifetime_ms``, ``idle_ms`` of the plan and of each
task); without a readable plan member those two comparisons are skipped (the policy check
refuses such a run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .layout import plan_member
from .records import Record
from .runchecks import plan_object

LIFETIME_CAP_MS: Final = 1_800_000
ANOMALIES: Final = frozenset({"timeout", "hung", "lifetime", "budget", "stop", "crash"})
OUTCOMES: Final = frozenset({"killed", "gone", "reused"})
_IDENTITY: Final = ("pid", "pgid", "start_ticks", "boot_id")


class SupervisionError(VerificationError):
    """An agent outside the supervision tree, limits that are not the plan's, or an orphan
    reaped under another identity."""


@dataclass(frozen=True)
class _PlanLimits:
    lifetime_ms: int
    idle_ms: int | None
    task_idle_ms: Mapping[str, int | None]


@dataclass(eq=False, repr=False)
class _Batch:
    started: Mapping[str, Any] | None = None
    exited: bool = False
    reaped: bool = False


@dataclass(eq=False, repr=False)
class SupervisionCheck:
    run: str
    plan: _PlanLimits | None
    roles: dict[str, str] = field(default_factory=dict)
    batches: dict[str, _Batch] = field(default_factory=dict)

    def audit(self, record: Record, where: str) -> None:
        body = record.body
        kind = record.kind
        if kind == "task.planned":
            self.roles[body["task"]] = body["role"]
        elif kind == "agent.spawn":
            self._spawn(body, where)
        elif kind in ("agent.started", "agent.exit", "orphan.reaped"):
            batch = self.batches.get(body["batch"])
            if batch is None:
                raise SupervisionError(f"{where}: {kind} of batch {body['batch']!r}, never spawned")
            if kind == "agent.started":
                if batch.started is not None or batch.exited:
                    raise SupervisionError(f"{where}: batch {body['batch']!r} started twice")
                batch.started = body
            elif kind == "agent.exit":
                self._exit(batch, body, where)
            else:
                self._reaped(batch, body, where)

    def _spawn(self, body: Mapping[str, Any], where: str) -> None:
        name = body["batch"]
        if name in self.batches:
            raise SupervisionError(f"{where}: batch {name!r} is spawned twice")
        self.batches[name] = _Batch()
        roles = {self.roles.get(task) for task in body["tasks"]}
        if len(roles) != 1 or None in roles:
            raise SupervisionError(f"{where}: batch {name!r} has tasks of no single known role")
        expected = f"role:{roles.pop()}"
        if body["supervisor"] != expected:
            raise SupervisionError(
                f"{where}: batch {name!r} names supervisor {body['supervisor']!r}, its tasks' "
                f"role supervisor is {expected!r}"
            )
        if self.plan is None:
            return
        lifetime = min(body["timeout_ms"], self.plan.lifetime_ms, LIFETIME_CAP_MS)
        if body["lifetime_ms"] != lifetime:
            raise SupervisionError(
                f"{where}: batch {name!r} records lifetime_ms {body['lifetime_ms']}, the plan "
                f"gives {lifetime}"
            )
        limits = [
            limit
            for limit in (
                self.plan.task_idle_ms.get(task, self.plan.idle_ms) for task in body["tasks"]
            )
            if limit is not None
        ]
        idle = min(limits) if limits else None
        if body["idle_ms"] != idle:
            raise SupervisionError(
                f"{where}: batch {name!r} records idle_ms {body['idle_ms']}, the plan gives {idle}"
            )

    def _exit(self, batch: _Batch, body: Mapping[str, Any], where: str) -> None:
        if batch.exited:
            raise SupervisionError(f"{where}: batch {body['batch']!r} exits twice")
        if batch.reaped:
            raise SupervisionError(f"{where}: batch {body['batch']!r} exits after it was reaped")
        batch.exited = True
        anomaly = body["anomaly"]
        if anomaly is not None and anomaly not in ANOMALIES:
            raise SupervisionError(f"{where}: unknown anomaly {anomaly!r}")

    def _reaped(self, batch: _Batch, body: Mapping[str, Any], where: str) -> None:
        name = body["batch"]
        if batch.started is None or batch.exited or batch.reaped:
            raise SupervisionError(
                f"{where}: batch {name!r} is reaped as an orphan but was not running "
                "(no agent.started, already exited, or already reaped)"
            )
        for key in _IDENTITY:
            if body[key] != batch.started[key]:
                raise SupervisionError(
                    f"{where}: batch {name!r} reaped with {key} {body[key]!r}, its agent.started "
                    f"recorded {batch.started[key]!r}"
                )
        if body["outcome"] not in OUTCOMES:
            raise SupervisionError(f"{where}: unknown orphan outcome {body['outcome']!r}")
        batch.reaped = True

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        return None


def _ms(value: object, what: str, member: str, *, null: bool) -> int | None:
    if value is None and null:
        return None
    if type(value) is not int or value < 1:
        raise SupervisionError(f"{member}: {what} must be a positive integer of milliseconds")
    return value


def plan_limits(plan: bytes | None, member: str = "plan member") -> _PlanLimits | None:
    """The supervision limits from the plan member; None without a readable one."""
    obj = plan_object(plan)
    if obj is None:
        return None
    lifetime = _ms(obj.get("lifetime_ms", LIFETIME_CAP_MS), "lifetime_ms", member, null=False)
    assert lifetime is not None
    idle = _ms(obj.get("idle_ms"), "idle_ms", member, null=True)
    tasks: dict[str, int | None] = {}
    for item in obj["tasks"]:
        if type(item) is not dict or type(item.get("id")) is not str:
            return None
        own = _ms(item.get("idle_ms"), f"task {item['id']!r} idle_ms", member, null=True)
        tasks[item["id"]] = idle if own is None else own
    return _PlanLimits(lifetime, idle, tasks)


def supervision_check(run: str, plan: bytes | None) -> SupervisionCheck:
    return SupervisionCheck(run, plan_limits(plan, plan_member(run)))
