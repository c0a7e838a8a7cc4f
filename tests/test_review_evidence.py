"""The verifier's review check (verify/reviewcheck.py), end to end on recorded runs.

A lawful run is recorded with the project's own writers (``RunRecorder``), exported and
verified; it has every kind of review: a read, an in-scope write, a write outside the scope,
a write to a path another batch in flight has locked, an irreversible call denied for want of
an approval, the same approved by an operator command (its receipt before it), an approved
egress and a later one to the now-known host. Each other test tampers with one record (or
adds one) and is refused by the check, with the reason named. The real runtime's reviews are
tested in tests/test_review_gate.py, which also verifies its bundles.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, matrix_object
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy
from harness.verify.recordkinds import BODY_SPECS
from harness.verify.records import Record
from harness.verify.reviewcheck import ReviewCheck, ReviewError, capsule_egress, review_check
from harness.verify.rules import review as rv
from harness.verify.runchecks import run_checks

from .evidence_helpers import make_keys, with_control

RUN = "r1"
BASE = "1" * 40
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
NO_LIMIT = {"wall_ms": None, "tokens": None, "cost_micros": None}


def _plan(bounds: list[int]) -> Any:
    """The plan, held in one phase for the whole run by its phase bounds (the control check
    derives the phase in force from progress)."""
    return parse_plan(
        {
            "plan": {"name": "p", "concurrency": {"coder": 2}, "control": {"phase_bounds": bounds}},
            "task": [
                {"id": "t1", "role": "coder", "prompt": "a", "scope": ["src/**"]},
                {"id": "t2", "role": "coder", "prompt": "b", "scope": ["docs/**"]},
            ],
        }
    )


PLAN = _plan([0, 1001, 1001])  # implement
LOCKS = {"b0001": ["src/**"], "b0002": ["docs/**"]}
TASK_OF = {"b0001": "t1", "b0002": "t2"}
Row = tuple[str, str, dict[str, Any]]
SHA = "ab" * 32


def _move(task: str, a: str, b: str) -> Row:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": "r"})


def _start(batch: str, pid: int) -> list[Row]:
    task = TASK_OF[batch]
    spawn: dict[str, Any] = {
        "batch": batch, "tasks": [task], "adapter": "claude", "branch": f"harness/{RUN}/{batch}",
        "worktree": "/w", "timeout_ms": 1000, "sandbox": NO_SANDBOX, "env": ["PATH"],
        "supervisor": "role:coder", "attempt": 1, "idle_ms": None, "lifetime_ms": 1000,
        "grace_ms": 2000, "lock": LOCKS[batch], "budget": NO_LIMIT,
    }  # fmt: skip
    if "config" in BODY_SPECS["audit"]["agent.spawn"]:
        spawn["config"] = 1
    started = {"batch": batch, "pid": pid, "pgid": pid, "start_ticks": 1, "boot_id": "b"}
    return [
        _move(task, "open", "claimed"),
        ("audit", "lock.acquire", {"batch": batch, "globs": LOCKS[batch]}),
        ("audit", "agent.spawn", spawn),
        _move(task, "claimed", "in_progress"),
        ("audit", "agent.started", started),
    ]


def _end(batch: str) -> list[Row]:
    exit_body = {"batch": batch, "exit_code": 0, "signal": None, "timed_out": False,
                 "duration_ms": 10, "anomaly": None, "usage": None}  # fmt: skip
    return [
        ("audit", "agent.exit", exit_body),
        _move(TASK_OF[batch], "in_progress", "failed"),
        ("audit", "lock.release", {"batch": batch, "reason": "retired"}),
    ]


def review(
    n: int, tool: str, target: str, decision: str, reason: str, *, cls: str | None = None,
    approval: str | None = None, batch: str = "b0001", phase: str = "implement",
) -> Row:  # fmt: skip
    body = {
        "task": TASK_OF[batch], "batch": batch, "review": n, "tool": tool, "input_sha256": SHA,
        "target": target, "class": cls or rv.classify(tool, target), "phase": phase,
        "decision": decision, "reason": reason, "approval": approval,
    }  # fmt: skip
    return ("audit", "action.review", body)


def _command(seq: int, command_id: str, label: str, name: str = "approve") -> list[Row]:
    command = {"operator": "op", "command": name, "args": {"review": label}, "id": command_id,
               "revision": 0}  # fmt: skip
    receipt = {"id": command_id, "command": name, "control_seq": seq, "outcome": "applied",
               "reason": f"approves review {label}"}  # fmt: skip
    return [("control", "command", command), ("audit", "command.receipt", receipt)]


def lawful() -> list[Row]:
    start = {
        "plan": "p", "plan_sha256": hashlib.sha256(plan_bytes(PLAN)).hexdigest(),
        "producer": "harness test", "harness_version": "0", "base_commit": BASE,
        "repository_roots": [BASE], "capabilities": matrix_object(DEFAULT_MATRIX),
        "capsule": None, "sandbox": NO_SANDBOX,
    }  # fmt: skip
    planned = [
        ("audit", "task.planned", {"task": t.id, "role": t.role, "priority": t.priority,
         "depends": list(t.depends), "adapter": t.adapter, "tools": list(t.tools)})
        for t in PLAN.tasks
    ]  # fmt: skip
    return [
        ("audit", "run.start", start),
        *planned,
        *[_move(t.id, "planned", "open") for t in PLAN.tasks],
        *_start("b0001", 100),
        *_start("b0002", 200),
        review(1, "Read", "src/a.py", "allow", rv.R_READ),
        review(2, "Write", "src/a.py", "allow", rv.R_WRITE),
        review(10, "Bash", "python -m pytest -q", "allow", rv.R_WRITE),  # a write, not a path
        review(3, "Edit", "README.md", "deny", rv.R_OUT),
        review(4, "Write", "docs/x.md", "deny", rv.R_LOCKED),  # b0002 holds docs/**
        review(5, "Bash", "git push origin main", "deny", rv.R_UNAPPROVED),
        *_command(0, "c1", "b0001/6"),
        review(6, "Bash", "git push origin main", "allow", rv.R_APPROVED, approval="c1"),
        *_command(1, "c2", "b0001/7"),
        review(7, "WebFetch", "pypi.org", "allow", rv.R_APPROVED, approval="c2"),
        review(8, "WebFetch", "pypi.org", "allow", rv.R_KNOWN_HOST),
        review(11, "WebFetch", "evil.example", "deny", rv.R_UNAPPROVED),
        review(12, "WebFetch", "evil.example", "deny", rv.R_UNAPPROVED),  # denied: not known
        review(1, "Write", "docs/x.md", "allow", rv.R_WRITE, batch="b0002"),
        *_end("b0002"),
        review(9, "Write", "docs/x.md", "deny", rv.R_OUT),  # no longer locked: only out of scope
        *_end("b0001"),
        ("audit", "run.end", {"outcome": "completed"}),
    ]


def _verify(tmp_path: Path, rows: list[Row], plan: Any = PLAN) -> Any:
    keys = make_keys()
    state = tmp_path / "state"
    document = plan_bytes(plan)
    if rows and rows[0][1] == "run.start":  # bind the plan it runs under
        rows = [(*rows[0][:2], {**rows[0][2], "plan_sha256": hashlib.sha256(document).hexdigest()}),
                *rows[1:]]  # fmt: skip
    with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(document)
        for store, kind, body in with_control(rows, document):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def _at(rows: list[Row], batch: str, n: int) -> int:
    return next(
        i for i, (_, kind, body) in enumerate(rows)
        if kind == "action.review" and body["batch"] == batch and body["review"] == n
    )  # fmt: skip


def _edit(batch: str, n: int, **changes: Any) -> Callable[[list[Row]], list[Row]]:
    def change(rows: list[Row]) -> list[Row]:
        i = _at(rows, batch, n)
        store, kind, body = rows[i]
        rows[i] = (store, kind, {**body, **changes})
        return rows

    return change


def test_lawful_reviews_verify(tmp_path: Path) -> None:
    report = _verify(tmp_path, lawful())
    assert report.status.value == "verified", report.failure


def test_the_review_check_is_registered() -> None:
    assert any(isinstance(check, ReviewCheck) for check in run_checks(RUN, None))


TAMPERED: list[tuple[str, Callable[[list[Row]], list[Row]], str]] = [
    # wrong class (the decision alone would still be the rule's for that class)
    (
        "wrong class",
        _edit("b0001", 5, **{"class": "write"}, decision="allow", reason=rv.R_WRITE),
        "classifies Bash 'git push origin main' as 'write'; the rule says 'irreversible'",
    ),
    (
        "read called write",
        _edit("b0001", 1, **{"class": "write"}, reason=rv.R_WRITE),
        "as 'write'; the rule says 'read'",
    ),
    ("unknown class", _edit("b0001", 1, **{"class": "delete"}), "unknown class 'delete'"),
    ("unknown decision", _edit("b0001", 1, decision="ask"), "unknown decision 'ask'"),
    # wrong decision or reason
    (
        "out of scope allowed",
        _edit("b0001", 3, decision="allow", reason=rv.R_WRITE),
        "decides 'allow'",
    ),
    ("locked write allowed", _edit("b0001", 4, decision="allow", reason=rv.R_WRITE), "locked True"),
    (
        "reason changed",
        _edit("b0001", 2, reason="looks fine"),
        "review b0001/2 decides 'allow' ('looks fine'); the rule decides 'allow' "
        '("write: inside the task\'s scope") for class write, normal review, in scope True, '
        "locked False, approved False, known host False",
    ),
    (
        "approved call denied",
        _edit("b0001", 6, decision="deny", reason=rv.R_UNAPPROVED),
        "the rule decides 'allow' ('irreversible: approved by the operator') for class "
        "irreversible, normal review, in scope True, locked False, approved True",
    ),
    ("allowed read denied", _edit("b0001", 1, decision="deny"), "decides 'deny'"),
    # an allow of an irreversible action without approval
    (
        "allow without approval",
        _edit("b0001", 5, decision="allow", reason=rv.R_APPROVED),
        "allows an irreversible action without approval",
    ),
    (
        "approval dropped",
        _edit("b0001", 6, approval=None),
        "allows an irreversible action without approval",
    ),
    # approvals that do not stand
    (
        "approval without receipt",
        _edit("b0001", 6, approval="c9"),
        "names approval 'c9', which has no command.receipt before it",
    ),
    (
        "approval reused",
        _edit("b0001", 7, approval="c1"),
        "reuses approval 'c1', already given to b0001/6 (runs/r1/stores/audit.jsonl line ",
    ),
    (
        "phase not in force",
        _edit("b0001", 2, phase="explore"),
        "records phase 'explore', but the phase in force is 'implement'",
    ),
    # numbering and placement
    ("number twice", _edit("b0001", 3, review=2), "numbered twice or below 1"),
    ("number zero", _edit("b0001", 1, review=0), "numbered twice or below 1"),
    ("gap", _edit("b0001", 9, review=13), "the numbers must be 1..12, [9] missing"),
    ("foreign task", _edit("b0001", 2, task="t2"), "names task 't2', not one of the batch's"),
]


@pytest.mark.parametrize(("why", "tamper", "message"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_review_is_refused(
    tmp_path: Path, why: str, tamper: Callable[[list[Row]], list[Row]], message: str
) -> None:
    report = _verify(tmp_path, tamper(lawful()))
    assert report.status.value == "invalid", why
    assert message in report.failure.reason, report.failure
    assert "runs/r1/stores/audit.jsonl line " in report.failure.reason  # located


def _receipt_outcome(outcome: str) -> Callable[[list[Row]], list[Row]]:
    def change(rows: list[Row]) -> list[Row]:
        i = next(i for i, r in enumerate(rows) if r[1] == "command.receipt" and r[2]["id"] == "c1")
        rows[i] = (rows[i][0], rows[i][1], {**rows[i][2], "outcome": outcome, "reason": "no"})
        return rows

    return change


def test_an_approval_whose_receipt_was_rejected_is_refused(tmp_path: Path) -> None:
    report = _verify(tmp_path, _receipt_outcome("rejected")(lawful()))
    assert report.status.value == "invalid"
    assert "whose receipt" in report.failure.reason and "is 'rejected', not 'applied'" in str(
        report.failure
    ), report.failure


def test_an_approval_on_a_call_that_needs_none_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    i = _at(rows, "b0001", 9)
    rows[i:i] = _command(2, "c3", "b0001/9")
    rows[_at(rows, "b0001", 9)][2]["approval"] = "c3"
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "carries approval 'c3', but a write call in normal review needs none" in (
        report.failure.reason
    ), report.failure


def test_an_approval_of_an_egress_to_a_known_host_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    i = _at(rows, "b0001", 8)  # pypi.org is known after review 7: normal review needs none
    rows[i:i] = _command(2, "c3", "b0001/8")
    rows[_at(rows, "b0001", 8)][2].update(approval="c3", reason=rv.R_KNOWN_HOST)
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "carries approval 'c3', but a irreversible call in normal review needs none" in (
        report.failure.reason
    ), report.failure


def test_an_approval_after_the_review_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    i = _at(rows, "b0001", 6)
    receipt = rows.pop(i - 1)  # the receipt of c1, right before the review
    rows.insert(i, receipt)
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "has no command.receipt before it" in report.failure.reason, report.failure


def test_an_approval_of_another_review_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    i = next(i for i, r in enumerate(rows) if r[1] == "command" and r[2]["id"] == "c1")
    rows[i] = ("control", "command", {**rows[i][2], "args": {"review": "b0001/5"}})
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "is the 'approve' command" in report.failure.reason
    assert "with review 'b0001/5', not an approve of b0001/6" in report.failure.reason


def test_a_review_before_its_agent_started_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    started = next(
        i for i, r in enumerate(rows) if r[1] == "agent.started" and r[2]["batch"] == "b0002"
    )
    rows.insert(started, review(1, "Read", "docs/a", "allow", rv.R_READ, batch="b0002"))
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "review b0002/1 comes before its batch's agent.started" in report.failure.reason


def test_a_review_after_its_agent_exit_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    end = next(i for i, r in enumerate(rows) if r[1] == "agent.exit" and r[2]["batch"] == "b0002")
    rows.insert(end + 1, review(2, "Read", "docs/a", "allow", rv.R_READ, batch="b0002"))
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "review b0002/2 comes after its batch's agent.exit" in report.failure.reason


def test_a_review_of_a_batch_never_spawned_is_refused(tmp_path: Path) -> None:
    rows = lawful()
    rows.insert(-1, review(1, "Read", "x", "allow", rv.R_READ, batch="b0001"))
    rows[-2][2]["batch"] = "b0009"
    report = _verify(tmp_path, rows)
    assert report.status.value == "invalid"
    assert "review b0009/1 comes before its batch's agent.started" in report.failure.reason


def test_strictness_follows_the_recorded_phase(tmp_path: Path) -> None:
    """In converge (strictest) an approved irreversible call is still denied and may carry
    no approval; in explore (loose) a write outside the scope passes."""
    rows = lawful()
    for i, (store, kind, body) in enumerate(rows):
        if kind == "action.review":
            rows[i] = (store, kind, {**body, "phase": "explore"})
    rows[_at(rows, "b0001", 3)][2].update(decision="allow", reason=rv.R_OUT_LOOSE)
    rows[_at(rows, "b0001", 9)][2].update(decision="allow", reason=rv.R_OUT_LOOSE)
    report = _verify(tmp_path / "explore", rows, _plan([1001, 1001, 1001]))
    assert report.status.value == "verified", report.failure

    strictest = lawful()
    for i, (store, kind, body) in enumerate(strictest):
        if kind == "action.review":
            strictest[i] = (store, kind, {**body, "phase": "converge"})
    for n in (5, 7, 8, 11, 12):
        strictest[_at(strictest, "b0001", n)][2].update(
            decision="deny", reason=rv.R_STRICTEST, approval=None
        )
    report = _verify(tmp_path / "converge", strictest, _plan([0, 0, 0]))
    assert report.status.value == "invalid"  # review 6 still carries its approval
    assert "carries approval 'c1', but a irreversible call in strictest review needs none" in (
        report.failure.reason
    ), report.failure
    strictest[_at(strictest, "b0001", 6)][2].update(
        decision="deny", reason=rv.R_STRICTEST, approval=None
    )
    report = _verify(tmp_path / "converge2", strictest, _plan([0, 0, 0]))
    assert report.status.value == "verified", report.failure


def test_an_unknown_phase_is_refused() -> None:
    """No lawful control.phase names an unknown phase (the control check refuses one first),
    so the review check is folded on its own."""
    rows = lawful()
    rows.insert(_at(rows, "b0001", 1), ("audit", "control.phase", {"phase": "ship"}))
    for i, (store, kind, body) in enumerate(rows):
        if kind == "action.review":
            rows[i] = (store, kind, {**body, "phase": "ship"})
    check = review_check(RUN, plan_bytes(PLAN))
    with pytest.raises(ReviewError, match="review b0001/1: unknown phase 'ship'"):
        for i, (store, kind, body) in enumerate(rows):
            record = Record(store, RUN, i, "2026-01-01T00:00:00.000000Z", kind, body, "0" * 64)
            getattr(check, store)(record, f"{store} {i}")


def test_the_check_knows_the_plan_capsule_egress_hosts() -> None:
    from harness.orchestrate.plandoc import plan_bytes as document_of

    plan = parse_plan(
        {
            "plan": {"name": "p"},
            "capsule": {"goal": "g", "egress": ["pypi.org", "files.example"]},
            "task": [{"id": "t1", "role": "coder", "prompt": "a"}],
        }
    )
    assert review_check(RUN, document_of(plan)).egress == {"files.example", "pypi.org"}
    assert review_check(RUN, None).egress == frozenset()


def test_capsule_egress_hosts_are_known() -> None:
    document = b'{"capsule":{"egress":["pypi.org",7]},"tasks":[]}'
    assert capsule_egress(document) == frozenset({"pypi.org"})
    assert capsule_egress(b'{"capsule":null,"tasks":[]}') == frozenset()
    assert capsule_egress(b'{"capsule":{"egress":"x"},"tasks":[]}') == frozenset()
    assert capsule_egress(None) == frozenset()


# ---- the fold on its own (what other checks refuse first in a bundle) ----------------------


def _record(kind: str, body: dict[str, Any], store: str = "audit") -> Any:
    from harness.verify.records import Record

    return Record(store, RUN, 0, "2026-01-01T00:00:00.000000Z", kind, body, "")


def _fold(rows: list[Row]) -> ReviewCheck:
    check = ReviewCheck(frozenset())
    for store, kind, body in rows:
        if store == "audit":
            check.audit(_record(kind, body), f"{kind}@")
    for store, kind, body in rows:
        if store == "control":
            check.control(_record(kind, body, "control"), f"{kind}@")
    return check


def test_the_fold_ignores_a_release_of_a_lock_not_held() -> None:
    check = _fold([("audit", "lock.release", {"batch": "b0042", "reason": "retired"})])
    assert check.held == {}
    check.finish()


def test_the_fold_refuses_an_approval_naming_no_control_command() -> None:
    from harness.verify.reviewcheck import ReviewError

    rows = [r for r in lawful() if r[0] != "control"]
    check = _fold(rows)
    with pytest.raises(ReviewError) as caught:
        check.finish()
    assert str(caught.value) == (
        "action.review@: approval 'c1' of review b0001/6 names no command of the control store"
    )
