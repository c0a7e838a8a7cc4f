"""The verifier's run lifecycle check (issue 12 §4, §6), end to end.

Bundles recorded with the project's own writers (tests/rounds_evidence.py). Two lawful runs
verify: ``lawful()`` (creating, starting, running, completed) and a *continued* run — epoch 0
ends ``incomplete`` after its one allowed round, the operator's ``resume`` is applied, epoch 1
starts (naming the resume), re-records its roles and finishes the task over two more rounds.
Each other test breaks one rule once (a skipped state, an epoch jump, a step without a resume,
a wrong terminal status, records after the end, a non-canonical status) and is refused by the
semantics check naming the record and the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.verify.lifecyclecheck import LifecycleCheck, LifecycleError
from harness.verify.records import Record
from harness.verify.rules.rounds import MAX_EPOCH

from .rounds_evidence import (
    BASE,
    C1,
    C2,
    COMPLETE,
    INCOMPLETE,
    Evidence,
    command,
    edit,
    lawful,
    make_plan,
    move,
    receipt,
    refused,
    status,
    verify,
)

END = ("audit", "run.end", {"outcome": "x"})
ACQUIRE = ("audit", "lock.acquire", {"batch": "b0001", "globs": ["src/**"]})
RELEASE = ("audit", "lock.release", {"batch": "b0001", "reason": "retired"})


def continued() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1", max_rounds=1).plan_("t1", 1, "Next: cli\n", "cli")
    ev.step("t1", 1, BASE, C1).audit("t1", 1, INCOMPLETE).end("t1", 1, "incomplete", 1, C1)
    ev.add(move("t1", "in_progress", "blocked"), RELEASE, status("incomplete"), END)
    ev.add(command("u1", "resume"), receipt("u1", "resume", 0))
    ev.add(status("starting", 1, "u1"), status("running", 1))
    ev.add(move("t1", "blocked", "open"), move("t1", "open", "claimed"))
    ev.add(move("t1", "claimed", "in_progress"), ACQUIRE)
    ev.roles("t1", epoch=1, max_rounds=3).plan_("t1", 2, "Next: cli\n", "cli", epoch=1)
    ev.step("t1", 2, C1, C2, epoch=1).audit("t1", 2, COMPLETE, epoch=1)
    ev.end("t1", 2, "continue", 0, C2, epoch=1)
    ev.plan_("t1", 3, "Next: done\n", "done", epoch=1).end("t1", 3, "done", 0, C2, epoch=1)
    ev.merge("t1", C2).add(status("completed", 1), END)
    return ev


def test_lawful_lifecycle_verifies(tmp_path: Path) -> None:
    assert verify(tmp_path, lawful()).status.value == "verified"


def test_continued_run_verifies_with_epoch_one(tmp_path: Path) -> None:
    report = verify(tmp_path, continued())
    assert report.status.value == "verified", report.failure


def test_a_skipped_state_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    ev.records = [r for r in ev.records if r != status("starting")]
    refused(verify(tmp_path, ev), "run status creating -> running is not a legal step")


def test_epoch_jump_is_refused(tmp_path: Path) -> None:
    ev = edit(continued(), "run.status", lambda b: b.update(epoch=2), nth=4)
    refused(verify(tmp_path, ev), "the epoch moves 0 -> 2 at 'starting'", "only by +1")


def test_epoch_step_without_resume_receipt_is_refused(tmp_path: Path) -> None:
    ev = edit(continued(), "run.status", lambda b: b.update(command=None), nth=4)
    ev.records = [r for r in ev.records if r[1] != "command.receipt"]
    refused(verify(tmp_path, ev), "run.status after the run ended")
    crash = lawful()  # no run.end: a crash resume may not step the epoch by itself
    index = crash.records.index(status("running"))
    crash.records.insert(index + 1, status("starting", 1))
    refused(verify(tmp_path / "a", crash), "epoch 1 starts without an applied resume receipt")


def test_epoch_step_must_name_its_resume(tmp_path: Path) -> None:
    ev = edit(continued(), "run.status", lambda b: b.update(command=None), nth=4)
    refused(verify(tmp_path, ev), "epoch 1 starts by command None, the applied resume is 'u1'")


def test_applied_resume_must_start_the_next_epoch(tmp_path: Path) -> None:
    ev = edit(continued(), "run.status", lambda b: b.update(status="running", epoch=0), nth=4)
    refused(verify(tmp_path, ev), "the resume applied at", "moves the run to 'starting'")


def test_first_status_in_a_later_epoch_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "run.status", lambda b: b.update(epoch=1), nth=0)
    refused(verify(tmp_path, ev), "the run's first run.status is in epoch 1, not 0")


def test_terminal_status_must_be_the_rules(tmp_path: Path) -> None:
    ev = edit(continued(), "run.status", lambda b: b.update(status="completed"), nth=3)
    refused(
        verify(tmp_path, ev),
        "the run ends 'completed', the rule gives 'incomplete'",
        "suspended: t1 incomplete",
    )
    failed = edit(lawful(), "run.status", lambda b: b.update(status="failed"), nth=3)
    refused(verify(tmp_path / "a", failed), "the run ends 'failed', the rule gives 'completed'")


def test_an_applied_stop_ends_cancelled(tmp_path: Path) -> None:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.add(command("s1", "stop"), receipt("s1", "stop", 0), status("stopping", command="s1"))
    honest = Evidence(ev.plan, list(ev.records), {}).add(status("cancelled"), END)
    assert verify(tmp_path / "ok", honest).status.value == "verified"
    lying = Evidence(ev.plan, ev.records[:-1], {}).add(status("failed"), END)
    refused(verify(tmp_path / "a", lying), "the run ends 'failed', the rule gives 'cancelled'")


def test_run_ending_while_active_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    ev.records = [r for r in ev.records if r != status("completed")]
    refused(verify(tmp_path, ev), "the run ends in the active status 'running'")


def test_records_after_run_end_other_than_a_resume_are_refused(tmp_path: Path) -> None:
    ev = lawful().add(("audit", "event", {"name": "late", "data": {}}))
    refused(verify(tmp_path, ev), "event after the run ended at", "only a resume or abandon")


def test_an_abandon_after_the_end_keeps_the_run_verifiable(tmp_path: Path) -> None:
    ev = lawful().add(command("x1", "abandon"), receipt("x1", "abandon", 1))
    assert verify(tmp_path, ev).status.value == "verified"
    late = lawful().add(command("x1", "stop"), receipt("x1", "stop", 1))
    refused(verify(tmp_path / "a", late), "command.receipt after the run ended")


def test_non_canonical_status_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "run.status", lambda b: b.update(status="done"), nth=3)
    refused(verify(tmp_path, ev), "run.status 'done' is not a run status")


def test_epoch_never_exceeds_the_ceiling() -> None:
    check = LifecycleCheck("r1", status="incomplete", epoch=MAX_EPOCH, resume=("u1", "A"))
    time = "2026-01-01T00:00:00.000000Z"
    body = {"status": "starting", "epoch": MAX_EPOCH + 1, "reason": "r", "command": "u1"}
    with pytest.raises(LifecycleError, match=f"epoch {MAX_EPOCH + 1} is above {MAX_EPOCH}"):
        check.audit(Record("audit", "r1", 9, time, "run.status", body, "0" * 64), "A seq 9")
    below = LifecycleCheck("r1", status="incomplete", epoch=MAX_EPOCH - 1, resume=("u1", "A"))
    body = {**body, "epoch": MAX_EPOCH}
    below.audit(Record("audit", "r1", 9, time, "run.status", body, "0" * 64), "A seq 9")
    assert below.epoch == MAX_EPOCH
