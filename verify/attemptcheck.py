"""Run check "attempts": every retry is one the P-layer rule allows, and only after a failure.

Folding a run's audit records in order (docs/spec/runtime.md, "Attempts"):

* ``agent.spawn``: each of its tasks starts one more attempt; no task has more attempts than
  its limit (the task's ``max_attempts`` in the plan member, else the plan's) within one resume
  epoch (a ``run.status`` with a new epoch starts the count over: a continue is the operator's
  decision to go on); the record's ``attempt`` is the largest attempt number among its tasks;
* ``attempt.failed``: names a task of the batch that task was last spawned in, with that
  attempt's number; its ``anomaly`` is a known class; ``retry`` is exactly what
  ``harness.verify.rules.attempts.decide`` says for that class, attempt and limit; a retry
  carries the digest of the feedback given to the next attempt, a final failure none;
* a task goes ``in_progress``/``gating`` -> ``open`` only right after an ``attempt.failed``
  for it that decided a retry, and an ``attempt.failed`` that decided a retry is followed by
  exactly that transition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .layout import plan_member
from .records import Record
from .rules import attempts as rule
from .runchecks import plan_object

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


class AttemptError(VerificationError):
    """A retry the rule does not allow, or an attempt record that disagrees with the run."""


@dataclass(eq=False, repr=False)
class _Task:
    attempts: int = 0
    batch: str | None = None
    retry_pending: bool = False


@dataclass(eq=False, repr=False)
class AttemptCheck:
    run: str
    plan_limits: Mapping[str, int] | None
    """Attempt limit per task id, from the plan member (None: no plan member, no limit check)."""
    tasks: dict[str, _Task] = field(default_factory=dict)
    epoch: int = 0
    """The run's resume epoch (``run.status``): attempts are counted within one epoch."""

    def _task(self, name: str) -> _Task:
        return self.tasks.setdefault(name, _Task())

    def _limit(self, name: str, where: str) -> int | None:
        if self.plan_limits is None:
            return None
        limit = self.plan_limits.get(name)
        if limit is None:
            raise AttemptError(f"{where}: task {name!r} is not in the plan member")
        return limit

    def audit(self, record: Record, where: str) -> None:
        body = record.body
        kind = record.kind
        if kind == "agent.spawn":
            numbers = []
            for name in body["tasks"]:
                task = self._task(name)
                task.attempts += 1
                task.batch = body["batch"]
                task.retry_pending = False
                limit = self._limit(name, where)
                if limit is not None and task.attempts > limit:
                    raise AttemptError(
                        f"{where}: task {name!r} starts attempt {task.attempts} but may have "
                        f"{limit}"
                    )
                numbers.append(task.attempts)
            if body["attempt"] != max(numbers, default=1):
                raise AttemptError(
                    f"{where}: batch {body['batch']!r} records attempt {body['attempt']}, its "
                    f"tasks are at attempt {max(numbers, default=1)}"
                )
        elif kind == "run.status":
            if body["epoch"] != self.epoch:  # a continue: attempt limits count per epoch
                self.epoch = body["epoch"]
                for task in self.tasks.values():
                    task.attempts = 0
        elif kind == "attempt.failed":
            self._failed(body, where)
        elif kind == "task.transition":
            task = self._task(body["task"])
            retried = body["to"] == "open" and body["from"] in ("in_progress", "gating")
            if retried and not task.retry_pending:
                raise AttemptError(
                    f"{where}: task {body['task']!r} is retried without an attempt.failed "
                    "that decided a retry"
                )
            if task.retry_pending and not retried:
                raise AttemptError(
                    f"{where}: attempt.failed decided a retry of task {body['task']!r}, but it "
                    f"moves {body['from']} -> {body['to']}"
                )
            task.retry_pending = False

    def _failed(self, body: Mapping[str, Any], where: str) -> None:
        name = body["task"]
        task = self._task(name)
        if task.attempts == 0 or task.batch != body["batch"]:
            raise AttemptError(
                f"{where}: attempt.failed names batch {body['batch']!r}, task {name!r} was "
                f"last spawned in {task.batch!r}"
            )
        if body["attempt"] != task.attempts:
            raise AttemptError(
                f"{where}: attempt.failed names attempt {body['attempt']} of task {name!r}, "
                f"which is at attempt {task.attempts}"
            )
        anomaly = body["anomaly"]
        if anomaly not in rule.CLASSES:
            raise AttemptError(f"{where}: unknown anomaly class {anomaly!r}")
        limit = self._limit(name, where)
        if limit is not None:
            expected = rule.decide(anomaly, task.attempts, limit)
            if body["retry"] != expected:
                raise AttemptError(
                    f"{where}: attempt {task.attempts} of {limit} of task {name!r} failed "
                    f"({anomaly}): the rule says retry={expected}, the record "
                    f"retry={body['retry']}"
                )
        digest = body["feedback_sha256"]
        if body["retry"] != (digest is not None) or (
            digest is not None and not _HEX64.fullmatch(digest)
        ):
            raise AttemptError(
                f"{where}: a retry carries its feedback's SHA-256 (64 hex digits), a final "
                "failure none"
            )
        task.retry_pending = bool(body["retry"])

    def control(self, record: Record, where: str) -> None:
        return None

    def lineage(self, record: Record, where: str) -> None:
        return None

    def finish(self) -> None:
        return None


def attempt_limits(plan: bytes | None, member: str = "plan member") -> dict[str, int] | None:
    """Attempt limit per task id from the plan member (its ``max_attempts``, else the plan's);
    None without a plan member. Shape problems are left to the policy check, except the two
    members read here, which must be integers 1..10 (a task's may be null)."""
    obj = plan_object(plan)
    if obj is None:
        return None
    default = obj.get("max_attempts", 1)
    if type(default) is not int or not 1 <= default <= rule.MAX_ATTEMPTS:
        raise AttemptError(f"{member}: max_attempts must be an integer 1..10")
    limits: dict[str, int] = {}
    for item in obj["tasks"]:
        if type(item) is not dict or type(item.get("id")) is not str:
            return None
        own = item.get("max_attempts")
        if own is not None and (type(own) is not int or not 1 <= own <= rule.MAX_ATTEMPTS):
            raise AttemptError(f"{member}: task {item['id']!r} max_attempts must be 1..10")
        limits[item["id"]] = default if own is None else own
    return limits


def attempt_check(run: str, plan: bytes | None) -> AttemptCheck:
    return AttemptCheck(run, attempt_limits(plan, plan_member(run)))
