"""The verifier re-decides every audited round (issue 12 §6), end to end.

Runs are recorded with the project's own writers (``RunRecorder``, ``export_bundle``) and
verified with ``verify_bundle``. The lawful run has one rounds task over three rounds: a step
the auditor finds incomplete, a step whose report needs its one format repair and is then
complete, and a plan that ends the task with ``Next: done``; an operator instruction (a
command with its receipt) comes in between. Every other test breaks one rule in one record or
member and is refused by the semantics check with a message naming the member, the record and
the reason. The header table (``tests/vectors/headers.json``) goes through the verifier: one
report per row, recorded as the runtime would, verifies; recorded with a wrong value, not.

The builder lives in tests/rounds_evidence.py (shared with the command and lifecycle tests).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.verify.layout import round_text_member
from harness.verify.policy import TrustPolicy
from harness.verify.roundcheck import RoundCheck
from harness.verify.rules.header import REPLACEMENT, Header

from .evidence_helpers import make_keys
from .rounds_evidence import (
    AUDIT,
    BASE,
    C1,
    C2,
    COMPLETE,
    HERE,
    INCOMPLETE,
    RUN,
    TREE,
    TREE2,
    Body,
    Evidence,
    command,
    edit,
    fold,
    lawful,
    make_plan,
    move,
    receipt,
    refused,
    status,
    verify,
)


def test_lawful_rounds_verify(tmp_path: Path) -> None:
    report = verify(tmp_path, lawful())
    assert report.status.value == "verified", report.failure


def test_bundle_carries_every_round_text(tmp_path: Path) -> None:
    from harness.verify.bundle import verify_bundle_contents

    ev = lawful()
    verify(tmp_path, ev)
    kept = verify_bundle_contents(
        tmp_path / "bundle.tar",
        keep=lambda name: "/rounds/" in name,
        pins=TrustPolicy(frozenset({make_keys().key_id}), "test"),
    ).members
    assert kept == {round_text_member(RUN, d): data for d, data in ev.texts.items()}


# ---- texts and members ----------------------------------------------------------------------
def test_missing_round_text_member_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    digest = next(iter(ev.texts))
    del ev.texts[digest]
    refused(
        verify(tmp_path, ev), AUDIT, "round.plan", f"has no member {round_text_member(RUN, digest)}"
    )


def test_extra_round_text_member_is_refused(tmp_path: Path) -> None:
    stray = b"nobody cites me\n"
    name = f"{hashlib.sha256(stray).hexdigest()}.txt"
    reason = refused(verify(tmp_path, lawful(), {name: stray}), "no round record names")
    assert round_text_member(RUN, name[:-4]) in reason


def test_altered_round_text_member_is_refused(tmp_path: Path) -> None:
    """A text whose bytes no longer hash to its name: the exporter refuses to carry it, and a
    bundle that carries it anyway (a name a record cites, other bytes) is refused."""
    from harness.receipts.bundle import ExportError

    ev = lawful()
    plan_digest = next(b["text"] for _, k, b in ev.records if k == "round.plan")
    ev.texts[plan_digest] = b"Next: done\n"
    with pytest.raises(ExportError, match="do not hash to its name"):
        verify(tmp_path, ev)
    check = RoundCheck(RUN, dict(ev.texts))
    fold(check, ev, expect="its bytes do not hash to its name")


def test_round_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    records = list(ev.records)
    index = next(i for i, (_, k, _b) in enumerate(records) if k == "round.plan")
    bad = ev.text(b"Next: cli\n\xff\n")
    records[index] = ("audit", "round.plan", {**records[index][2], "text": bad})
    old = ev.records[index][2]["text"]
    ev.records = records
    del ev.texts[old]
    refused(verify(tmp_path, ev), "round.plan", "is not UTF-8")


# ---- plans ------------------------------------------------------------------------------------
def test_plan_next_must_be_the_parsed_next_line(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.plan", lambda b: b.update(next="gui"))
    refused(
        verify(tmp_path, ev),
        "round.plan of task 't1' round 1",
        "records next 'gui'",
        "gives next 'cli'",
    )


def test_done_without_a_complete_audit_must_be_recorded_invalid(tmp_path: Path) -> None:
    """Round 1 plans ``Next: done`` before any audit: ``accept_done`` refuses it, so the plan is
    invalid (next null) and the round a failing one; recording it as a valid done is refused."""
    ev = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
    ev.plan_("t1", 1, "Next: done\n", "done").end("t1", 1, "done", 0, BASE)
    refused(verify(tmp_path, ev), "round.plan of task 't1' round 1", "'done' refused")
    honest = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
    honest.plan_("t1", 1, "Next: done\n", None, valid=False).end("t1", 1, "continue", 1, BASE)
    assert verify(tmp_path / "honest", honest).status.value == "verified"


def test_plan_cites_must_be_the_parsed_cites_line(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.plan", lambda b: b.update(cites=[]), nth=1)
    refused(verify(tmp_path, ev), "round 2", "records cites []", "cites [1]")


def test_rounds_are_numbered_from_one(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.plan", lambda b: b.update(round=3), nth=1)
    refused(verify(tmp_path, ev), "round.plan of task 't1' round 3", "expected round 2")


def test_round_in_another_epoch_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.step", lambda b: b.update(epoch=1))
    refused(verify(tmp_path, ev), "round.step of task 't1'", "epoch 1", "the run is in epoch 0")


def test_round_before_its_roles_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    ev.records = [r for r in ev.records if r[1] != "round.roles"]
    refused(verify(tmp_path, ev), "before the task's round.roles of epoch 0")


def test_role_policy_that_differs_from_the_role_rule_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("harness.verify.rules.roles")

    def allow_shell(body: Body) -> None:
        body["roles"] = {**body["roles"], "manager": {**body["roles"]["manager"], "denied": []}}

    refused(
        verify(tmp_path, edit(lawful(), "round.roles", allow_shell)),
        "round.roles of task 't1'",
        "the manager is denied []",
    )


# ---- steps and audits ---------------------------------------------------------------------------
def test_changed_must_follow_the_commits_and_paths(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.step", lambda b: b.update(changed=False))
    refused(verify(tmp_path, ev), "round.step of task 't1' round 1", "records changed false")


def test_step_must_start_from_the_verified_progress(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.step", lambda b: b.update(commit_before=BASE), nth=1)
    refused(verify(tmp_path, ev), "round 2", "not from the verified progress of round 1")


def test_ghost_success_not_applied_is_refused(tmp_path: Path) -> None:
    """The executor claims success, nothing changed, the auditor says complete: the round is
    a ghost and incomplete. Recording ghost false (so effective complete) is refused, and so
    is ghost true with effective complete."""

    def ghost_run(**override: Any) -> Evidence:
        ev = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
        ev.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, BASE)
        return ev.audit("t1", 1, COMPLETE, **{"ghost": True, **override})

    honest = ghost_run().end("t1", 1, "continue", 1, BASE)
    assert verify(tmp_path / "honest", honest).status.value == "verified"
    lying = ghost_run(ghost=False, effective="complete").end("t1", 1, "continue", 0, BASE)
    refused(
        verify(tmp_path / "a", lying),
        "round.audit of task 't1' round 1",
        "records ghost false",
        "gives true",
    )
    half = ghost_run(effective="complete").end("t1", 1, "continue", 0, BASE)
    refused(verify(tmp_path / "b", half), "records effective 'complete'", "'incomplete'")


def test_header_must_be_the_parsed_header(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.audit", lambda b: b.update(status="complete", effective="complete"))
    refused(
        verify(tmp_path, ev),
        "round.audit of task 't1' round 1",
        "records header_valid/status/integrity/contract true/complete/clean/aligned",
        "gives true/incomplete/clean/aligned",
    )


def test_an_unrepaired_invalid_header_is_replaced(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.audit", lambda b: b.update(repair=None), nth=1)
    refused(verify(tmp_path, ev), "round 2", "gives false/blocked/suspect/unknown")


def test_a_repair_of_a_valid_header_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    repair = ev.text(COMPLETE)
    refused(
        verify(tmp_path, edit(ev, "round.audit", lambda b: b.update(repair=repair))),
        "round 1",
        "a repair of a report whose header is valid",
    )


def test_an_auditor_that_changed_the_tree_is_a_violation_and_never_merged(tmp_path: Path) -> None:
    def violation() -> Evidence:
        ev = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
        ev.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
        return ev.audit("t1", 1, COMPLETE, tree_after=TREE2).end("t1", 1, "violation", 1, C1)

    honest = violation().add(move("t1", "in_progress", "failed"))
    assert verify(tmp_path / "honest", honest).status.value == "verified"
    hidden = violation()
    hidden.records = [
        (
            s,
            k,
            {
                **b,
                "tree_after": TREE,
                "integrity": "violation",
                "status": "blocked",
                "contract": "unknown",
            }
            if k == "round.audit"
            else b,
        )
        for s, k, b in hidden.records
    ]
    refused(verify(tmp_path / "a", hidden), "round.audit", "gives true/complete/clean/aligned")
    merged = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
    merged.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    merged.audit("t1", 1, COMPLETE, tree_after=TREE2).end("t1", 1, "violation", 1, C1)
    merged.plan_("t1", 2, "Next: done\n", None, valid=False).end("t1", 2, "continue", 2, C1)
    integrity = {
        "batch": "b0001",
        "tasks": ["t1"],
        "commit": C1,
        "tree": TREE[:40],
        "head": C1,
        "head_tree": TREE[:40],
        "clean_before": True,
        "clean_after": True,
        "intact": True,
        "reason": "unchanged",
    }
    merged.add(
        ("audit", "gate.integrity", integrity),
        (
            "audit",
            "merge.result",
            {
                "task": "t1",
                "branch": f"harness/{RUN}/b0001",
                "merged": True,
                "commit": C1,
                "reason": "clean",
            },
        ),
    )
    # the gate check would refuse the merge too (no gate result): the rounds check comes first
    reason = refused(verify(tmp_path / "b", merged))
    assert "task 't1' is merged after its round ended 'violation'" in reason, reason
    check = RoundCheck(RUN, dict(merged.texts))
    fold(check, merged, expect="merged after its round ended 'violation'")


# ---- round ends ---------------------------------------------------------------------------------
def test_failing_count_must_be_the_rules(tmp_path: Path) -> None:
    ev = edit(lawful(), "round.end", lambda b: b.update(failing=0))
    refused(
        verify(tmp_path, ev),
        "round.end of task 't1' round 1",
        "records outcome 'continue' failing 0",
        "failing 1",
    )


def test_three_failing_rounds_open_the_gate_and_approve_resets_the_count(tmp_path: Path) -> None:
    ev = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
    for n, outcome in ((1, "continue"), (2, "continue"), (3, "gate")):
        ev.plan_("t1", n, f"Try {n}.\nNext: cli\n", "cli").step("t1", n, BASE, BASE, claims=False)
        ev.audit("t1", n, INCOMPLETE).end("t1", n, outcome, n, BASE)
    ev.add(
        (
            "audit",
            "round.gate",
            {"task": "t1", "round": 3, "epoch": 0, "reason": "3 failing", "question": None},
        )
    )
    ev.add(command("a1", "approve", args={"task": "t1"}), receipt("a1", "approve", 0))
    ev.input("t1", 3, "a1", "approve", "go on\n")
    ev.plan_("t1", 4, "Next: cli\n", "cli").step("t1", 4, BASE, BASE, claims=False)
    ev.audit("t1", 4, INCOMPLETE).end("t1", 4, "continue", 1, BASE)
    assert verify(tmp_path / "ok", ev).status.value == "verified"
    no_reset = edit(ev, "round.end", lambda b: b.update(outcome="gate", failing=4), nth=3)
    refused(verify(tmp_path / "a", no_reset), "round 4", "the rule gives 'continue' failing 1")
    no_gate = Evidence(ev.plan, [r for r in ev.records if r[1] != "round.gate"], dict(ev.texts))
    refused(verify(tmp_path / "b", no_gate), "round.input (approve)", "before the round.gate")
    unclosed = Evidence(
        ev.plan, [r for r in ev.records if r[1] not in ("round.input",)], dict(ev.texts)
    )
    del unclosed.texts[hashlib.sha256(b"go on\n").hexdigest()]
    refused(
        verify(tmp_path / "c", unclosed),
        "round.plan of task 't1' round 4",
        "the gate of round 3 was not closed",
    )


def test_done_is_followed_by_gating_and_incomplete_by_blocked(tmp_path: Path) -> None:
    ev = lawful()
    gating = next(i for i, r in enumerate(ev.records) if r == move("t1", "in_progress", "gating"))
    ev.records[gating] = move("t1", "in_progress", "failed")
    refused(
        verify(tmp_path / "a", ev), "moves in_progress -> failed", "demands in_progress -> gating"
    )
    short = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1", max_rounds=1)
    short.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    short.audit("t1", 1, INCOMPLETE).end("t1", 1, "incomplete", 1, C1)
    short.add(move("t1", "in_progress", "blocked"))
    assert verify(tmp_path / "ok", short).status.value == "verified"
    gated = Evidence(
        short.plan, [*short.records[:-1], move("t1", "in_progress", "gating")], dict(short.texts)
    )
    refused(verify(tmp_path / "b", gated), "demands in_progress -> blocked")


def test_gating_without_a_done_round_is_refused(tmp_path: Path) -> None:
    ev = Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1")
    ev.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    ev.audit("t1", 1, COMPLETE).end("t1", 1, "continue", 0, C1).merge("t1", C1)
    refused(
        verify(tmp_path, ev),
        "rounds task 't1' moves in_progress -> gating",
        "without a round that ended 'done'",
    )


def test_unfinished_round_is_allowed_only_before_a_crash(tmp_path: Path) -> None:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1").plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    crashed = Evidence(ev.plan, list(ev.records), dict(ev.texts))
    crashed.add(status("starting"), status("running"))
    crashed.plan_("t1", 1, "Again.\nNext: cli\n", "cli").step("t1", 1, C1, C2)
    crashed.audit("t1", 1, COMPLETE).end("t1", 1, "continue", 0, C2)
    assert verify(tmp_path / "ok", crashed).status.value == "verified"
    ended = Evidence(ev.plan, list(ev.records), dict(ev.texts))
    ended.add(("audit", "lock.release", {"batch": "b0001", "reason": "retired"}))
    ended.add(status("failed"), ("audit", "run.end", {"outcome": "failed"}))
    refused(verify(tmp_path / "a", ended), "while round 1 of task 't1' is unfinished")
    skipped = Evidence(ev.plan, list(ev.records), dict(ev.texts))
    skipped.add(status("starting"), status("running")).plan_("t1", 2, "Next: cli\n", "cli")
    refused(verify(tmp_path / "b", skipped), "round.plan of task 't1' round 2", "expected round 1")


# ---- the header table through the verifier ------------------------------------------------------
def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((HERE / "headers.json").read_text("utf-8"))["headers"]
    for row in rows:
        if "repeat" in row:
            unit, times = row["repeat"]
            row["text"] = row["text"] + unit * times
    return rows


def _table_run(rows: list[dict[str, Any]], wrong: int | None = None) -> Evidence:
    """One rounds task per row, one round each (max_rounds 1): the report is the row's text,
    the audit records the table's expected header (or REPLACEMENT) as the runtime would."""
    names = [f"h{i:02d}" for i in range(len(rows))]
    ev = Evidence(make_plan(names)).start()
    for i, (name, row) in enumerate(zip(names, rows, strict=True)):
        header = (
            Header(row["status"], row["integrity"], row["contract"])
            if row["valid"]
            else (REPLACEMENT)
        )
        if i == wrong:  # a value the runtime would not have recorded
            header = Header(
                "blocked" if header.status != "blocked" else "complete",
                header.integrity,
                header.contract,
            )
        complete = (header.status, header.integrity, header.contract) == (
            "complete",
            "clean",
            "aligned",
        )
        effective = (
            "blocked" if header.status == "blocked" else ("complete" if complete else "incomplete")
        )
        ev.roles(name, max_rounds=1).plan_(name, 1, "Next: cli\n", "cli")
        ev.step(name, 1, BASE, C1)
        ev.audit(
            name,
            1,
            row["text"],
            header_valid=row["valid"],
            status=header.status,
            integrity=header.integrity,
            contract=header.contract,
            effective=effective,
        )
        outcome = "blocked" if effective == "blocked" else "incomplete"
        if header.integrity == "violation":  # the auditor's own verdict: nothing is merged
            outcome = "violation"
        ev.end(name, 1, outcome, 0 if effective == "complete" else 1, C1)
    return ev


def test_header_table_through_the_verifier(tmp_path: Path) -> None:
    rows = _rows()
    assert len(rows) >= 40
    report = verify(tmp_path / "ok", _table_run(rows))
    assert report.status.value == "verified", report.failure


@pytest.mark.parametrize("index", range(len(_rows())), ids=[r["name"] for r in _rows()])
def test_header_table_row_recorded_wrong_is_refused(index: int) -> None:
    """Each row with one wrong recorded value, through the rounds fold (the bundle path of
    the same fold is the test above and the audit tests): refused, naming the round."""
    rows = _rows()
    ev = _table_run(rows, wrong=index)
    fold(RoundCheck(RUN, dict(ev.texts)), ev, expect=f"round.audit of task 'h{index:02d}' round 1")


def test_round_text_over_its_size_limit_is_unreadable(tmp_path: Path) -> None:
    """A round text member over 1 MiB is refused before it is held in memory (exit 4), like
    any member over its kind's limit; at the limit it is read (and here refused as uncited)."""
    from harness.verify.layout import ROUND_TEXT_MAX_BYTES

    big = b"x" * (ROUND_TEXT_MAX_BYTES + 1)
    report = verify(tmp_path / "a", lawful(), {f"{hashlib.sha256(big).hexdigest()}.txt": big})
    assert report.status.value == "unreadable", report.failure
    assert report.failure.check == "archive" and "limit" in report.failure.reason
    edge = big[:-1]
    report = verify(tmp_path / "b", lawful(), {f"{hashlib.sha256(edge).hexdigest()}.txt": edge})
    refused(report, "a rounds member no round record names")
