"""The attempt and supervision checks folded over hand-made records, one rule at a time, and
their readers of the plan member (no runtime, no bundle: each case is one fold)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.verify.attemptcheck import AttemptCheck, AttemptError, attempt_limits
from harness.verify.canonical import canonical_bytes
from harness.verify.records import Record
from harness.verify.rules import attempts as rule
from harness.verify.supervisecheck import (
    LIFETIME_CAP_MS,
    SupervisionCheck,
    SupervisionError,
    plan_limits,
)

HEX = "ab" * 32
IDENTITY = {"pid": 4242, "pgid": 4242, "start_ticks": 99, "boot_id": "boot"}


def rec(kind: str, **body: Any) -> Record:
    return Record("audit", "r", 0, "2026-01-01T00:00:00.000000Z", kind, body, HEX)


def plan(**top: Any) -> bytes:
    tasks = top.pop("tasks", [{"id": "t1", "max_attempts": None, "idle_ms": None}])
    return canonical_bytes({"format": "harness-verify/plan", "version": 1, "tasks": tasks, **top})


def spawn(batch: str = "b1", tasks: tuple[str, ...] = ("t1",), **body: Any) -> Record:
    fields: dict[str, Any] = {"batch": batch, "tasks": list(tasks), "supervisor": "role:r",
                              "attempt": 1, "timeout_ms": 5000, "lifetime_ms": 5000,
                              "idle_ms": None}  # fmt: skip
    return rec("agent.spawn", **{**fields, **body})


def failed(attempt: int = 1, anomaly: str = "test", retry: bool = True, **body: Any) -> Record:
    fields: dict[str, Any] = {"task": "t1", "batch": "b1", "attempt": attempt,
                              "anomaly": anomaly, "retry": retry,
                              "feedback_sha256": HEX if retry else None}  # fmt: skip
    return rec("attempt.failed", **{**fields, **body})


def move(a: str, b: str) -> Record:
    return rec("task.transition", task="t1", **{"from": a, "to": b})


# -- plan-member readers ----------------------------------------------------------------------


def test_attempt_limits_read_the_plan_and_task_values() -> None:
    assert attempt_limits(None) is None
    assert attempt_limits(b"not json") is None
    assert attempt_limits(canonical_bytes({"tasks": "x"})) is None
    assert attempt_limits(canonical_bytes([1])) is None
    assert attempt_limits(plan()) == {"t1": 1}  # the plan's default when absent
    tasks = [{"id": "a", "max_attempts": None}, {"id": "b", "max_attempts": 7}]
    assert attempt_limits(plan(max_attempts=3, tasks=tasks)) == {"a": 3, "b": 7}
    assert attempt_limits(plan(tasks=[{"id": 5}])) is None
    for bad in (0, 11, True, "2", None):
        with pytest.raises(AttemptError, match=r"max_attempts must be an integer 1\.\.10"):
            attempt_limits(plan(max_attempts=bad))
    for bad in (0, 11, False, "3"):
        with pytest.raises(AttemptError, match="task 'a' max_attempts"):
            attempt_limits(plan(tasks=[{"id": "a", "max_attempts": bad}]))
    assert attempt_limits(plan(max_attempts=10, tasks=[{"id": "a", "max_attempts": 1}])) == {"a": 1}


def test_supervision_limits_read_the_plan_and_task_values() -> None:
    assert plan_limits(None) is None
    assert plan_limits(b"{") is None
    limits = plan_limits(plan())
    assert limits is not None
    assert (limits.lifetime_ms, limits.idle_ms, dict(limits.task_idle_ms)) == (
        LIFETIME_CAP_MS,
        None,
        {"t1": None},
    )
    tasks = [{"id": "a", "idle_ms": None}, {"id": "b", "idle_ms": 3000}]
    limits = plan_limits(plan(lifetime_ms=9000, idle_ms=1000, tasks=tasks))
    assert limits is not None
    assert (limits.lifetime_ms, limits.idle_ms) == (9000, 1000)
    assert dict(limits.task_idle_ms) == {"a": 1000, "b": 3000}
    assert plan_limits(plan(tasks=[{"id": 1}])) is None
    for bad in (0, -1, True, "9", None):
        with pytest.raises(SupervisionError, match="lifetime_ms must be a positive integer"):
            plan_limits(plan(lifetime_ms=bad))
    with pytest.raises(SupervisionError, match="idle_ms must be a positive integer"):
        plan_limits(plan(idle_ms=0))
    with pytest.raises(SupervisionError, match="task 'a' idle_ms"):
        plan_limits(plan(tasks=[{"id": "a", "idle_ms": "1"}]))


# -- the attempt check -------------------------------------------------------------------------


def fold_attempts(records: list[Record], limits: dict[str, int] | None = None) -> None:
    check = AttemptCheck("r", {"t1": 2} if limits is None else limits)
    for i, record in enumerate(records):
        check.audit(record, f"a{i}")
    check.lineage(records[0], "l0")
    check.finish()


def test_a_lawful_retry_folds() -> None:
    fold_attempts([spawn(), failed(), move("gating", "open"), spawn("b2", attempt=2),
                   failed(2, retry=False, batch="b2"), move("gating", "failed")])  # fmt: skip


@pytest.mark.parametrize(
    ("records", "words"),
    [
        ([spawn(), failed(), move("gating", "open"), spawn("b2", attempt=2), failed(2, batch="b2")],
         "the rule says retry=False"),
        ([spawn(), move("in_progress", "open")], "retried without an attempt.failed"),
        ([spawn(), failed(), move("gating", "failed")], "decided a retry of task 't1'"),
        ([spawn(), failed(batch="b9")], "names batch 'b9'"),
        ([failed()], "was last spawned in None"),
        ([spawn(), failed(anomaly="weird")], "unknown anomaly class 'weird'"),
        ([spawn(), failed(feedback_sha256="nothex")], "feedback's SHA-256"),
        ([spawn(), failed(anomaly="scope", retry=False, feedback_sha256=HEX)],
         "feedback's SHA-256"),
        ([spawn(attempt=2)], "records attempt 2, its tasks are at attempt 1"),
        ([spawn(), failed(), move("gating", "open"), spawn("b2", attempt=2), failed(2, batch="b2",
          retry=False), move("gating", "open")], "retried without"),
    ],
)  # fmt: skip
def test_each_attempt_rule_refuses(records: list[Record], words: str) -> None:
    with pytest.raises(AttemptError, match=words):
        fold_attempts(records)


def test_attempts_beyond_the_limit_and_unknown_tasks_are_refused() -> None:
    with pytest.raises(AttemptError, match="starts attempt 2 but may have 1"):
        fold_attempts([spawn(), spawn("b2", attempt=2)], {"t1": 1})
    with pytest.raises(AttemptError, match="task 't1' is not in the plan member"):
        fold_attempts([spawn()], {"other": 1})
    check = AttemptCheck("r", None)  # no plan member: no limit, the rest still applies
    for record in (spawn(), failed(), move("gating", "open"), spawn("b2", attempt=2)):
        check.audit(record, "a")


def test_attempt_limits_count_within_one_resume_epoch() -> None:
    def status(epoch: int) -> Record:
        return rec("run.status", status="starting", epoch=epoch, reason="r", command=None)

    # A continue (a new epoch) gives the suspended task its attempts again ...
    fold_attempts([status(0), spawn(), status(1), spawn("b2", attempt=1)], {"t1": 1})
    # ... a crash resume (same epoch) does not, and the recorded number follows the count.
    with pytest.raises(AttemptError, match="starts attempt 2 but may have 1"):
        fold_attempts([status(0), spawn(), status(0), spawn("b2", attempt=2)], {"t1": 1})
    with pytest.raises(AttemptError, match="records attempt 2, its tasks are at attempt 1"):
        fold_attempts([status(0), spawn(), status(1), spawn("b2", attempt=2)], {"t1": 2})


# -- the rule's edges --------------------------------------------------------------------------


def test_decide_and_spacing_refuse_nonsense() -> None:
    assert rule.decide("crash", 9, 10) and not rule.decide("crash", 10, 10)
    for attempt, limit in ((0, 2), (1, 0), (-1, 3)):
        with pytest.raises(ValueError, match="attempt must be >= 1"):
            rule.decide("test", attempt, limit)
    for current, base in ((0, 10), (10, 0)):
        with pytest.raises(ValueError, match="spacing must be >= 1"):
            rule.next_spacing(current, base, True)
    assert rule.next_spacing(3, 10, False) == 2  # base // 4
    assert rule.next_spacing(30, 10, True) == 40  # 4x the base at most
    assert rule.supervisor_class(None) is None
    assert rule.supervisor_class("killed:stop") == "stop"
    assert rule.supervisor_class("hung") == "hung"


# -- the supervision check ---------------------------------------------------------------------


def fold_supervision(records: list[Record], limits: bytes | None = None) -> None:
    check = SupervisionCheck("r", plan_limits(limits if limits is not None else plan()))
    for i, record in enumerate([rec("task.planned", task="t1", role="r"),
                                rec("task.planned", task="t2", role="q"), *records]):  # fmt: skip
        check.audit(record, f"a{i}")
    check.lineage(records[0] if records else rec("x"), "l0")
    check.finish()


STARTED = rec("agent.started", batch="b1", **IDENTITY)
REAPED = rec("orphan.reaped", batch="b1", outcome="killed", **IDENTITY)


def exit_(anomaly: str | None = None) -> Record:
    return rec("agent.exit", batch="b1", anomaly=anomaly)


def test_a_lawful_supervision_history_folds() -> None:
    fold_supervision([spawn(), STARTED, exit_("hung")])
    fold_supervision([spawn(), STARTED, REAPED])
    fold_supervision([spawn(idle_ms=1000)], plan(idle_ms=1000))
    fold_supervision([spawn(lifetime_ms=3000)], plan(lifetime_ms=3000))


@pytest.mark.parametrize(
    ("records", "words"),
    [
        ([spawn(), spawn()], "spawned twice"),
        ([spawn(tasks=("t1", "t2"))], "no single known role"),
        ([spawn(tasks=("t9",))], "no single known role"),
        ([spawn(supervisor="role:q")], "its tasks' role supervisor is 'role:r'"),
        ([spawn(lifetime_ms=4000)], "records lifetime_ms 4000, the plan gives 5000"),
        ([spawn(idle_ms=10)], "records idle_ms 10, the plan gives None"),
        ([STARTED], "agent.started of batch 'b1', never spawned"),
        ([spawn(), STARTED, STARTED], "started twice"),
        ([spawn(), exit_(), STARTED], "started twice"),
        ([spawn(), exit_(), exit_()], "exits twice"),
        ([spawn(), exit_("bored")], "unknown anomaly 'bored'"),
        ([spawn(), STARTED, REAPED, exit_()], "exits after it was reaped"),
        ([spawn(), REAPED], "was not running"),
        ([spawn(), STARTED, REAPED, REAPED], "was not running"),
        ([spawn(), STARTED, rec("orphan.reaped", batch="b1", outcome="killed",
                                **{**IDENTITY, "pid": 1})], "reaped with pid 1"),
        ([spawn(), STARTED, rec("orphan.reaped", batch="b1", outcome="maybe", **IDENTITY)],
         "unknown orphan outcome 'maybe'"),
    ],
)  # fmt: skip
def test_each_supervision_rule_refuses(records: list[Record], words: str) -> None:
    with pytest.raises(SupervisionError, match=words):
        fold_supervision(records)


def test_limits_are_skipped_without_a_plan_member_but_the_tree_is_not() -> None:
    check = SupervisionCheck("r", None)
    check.audit(rec("task.planned", task="t1", role="r"), "a0")
    check.audit(spawn(lifetime_ms=1, idle_ms=7), "a1")  # no plan: limits not compared
    with pytest.raises(SupervisionError, match="role supervisor"):
        check.audit(spawn("b2", supervisor="role:x"), "a2")


def test_idle_is_the_smallest_limit_of_the_batch() -> None:
    tasks = [{"id": "t1", "idle_ms": 4000}, {"id": "t3", "idle_ms": 2000}]
    check = SupervisionCheck("r", plan_limits(plan(idle_ms=9000, tasks=tasks)))
    check.audit(rec("task.planned", task="t1", role="r"), "a0")
    check.audit(rec("task.planned", task="t3", role="r"), "a1")
    check.audit(spawn(tasks=("t1", "t3"), idle_ms=2000), "a2")
    with pytest.raises(SupervisionError, match="idle_ms 4000, the plan gives 2000"):
        check.audit(spawn("b2", tasks=("t1", "t3"), idle_ms=4000), "a3")
    with pytest.raises(SupervisionError, match="lifetime_ms 1, the plan gives 5000"):
        check.audit(spawn("b3", lifetime_ms=1, idle_ms=4000), "a4")


def test_a_bad_plan_member_is_named_in_the_refusal() -> None:
    from harness.verify.attemptcheck import attempt_check
    from harness.verify.supervisecheck import supervision_check

    with pytest.raises(AttemptError, match=r"^runs/r1/plan\.json: max_attempts"):
        attempt_check("r1", plan(max_attempts=0))
    with pytest.raises(SupervisionError, match=r"^runs/r1/plan\.json: lifetime_ms"):
        supervision_check("r1", plan(lifetime_ms=0))
