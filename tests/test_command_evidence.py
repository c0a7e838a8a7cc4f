"""The verifier's command check (issue 12 §5, §6): a receipt is the only terminal authority.

Bundles recorded with the project's own writers (tests/rounds_evidence.py). The lawful run has
one operator instruction: the control store's command ``c1`` (revision 0), its ``applied``
receipt, then its effect (``round.input``). Each other test breaks one rule once — a command
with no receipt after ``run.end``, an effect before its receipt or of a rejected command, two
receipts, a receipt naming a missing or another command, two commands with one id, a stale
revision answered wrongly — and is refused by the semantics check naming the record, the
command id and the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.verify.commandcheck import CommandCheck, CommandError
from harness.verify.records import Record

from .rounds_evidence import (
    Evidence,
    Row,
    command,
    edit,
    lawful,
    make_plan,
    receipt,
    refused,
    status,
    verify,
)

CONTROL = "runs/r1/stores/control.jsonl"


def _without(ev: Evidence, kind: str) -> Evidence:
    return Evidence(ev.plan, [r for r in ev.records if r[1] != kind], dict(ev.texts))


def _insert_before(ev: Evidence, kind: str, row: Row) -> Evidence:
    index = next(i for i, r in enumerate(ev.records) if r[1] == kind)
    return Evidence(ev.plan, [*ev.records[:index], row, *ev.records[index:]], dict(ev.texts))


def test_lawful_commands_verify(tmp_path: Path) -> None:
    assert verify(tmp_path, lawful()).status.value == "verified"


def test_command_without_receipt_after_run_end_is_refused(tmp_path: Path) -> None:
    ev = lawful().add(command("c2", "stop"))
    refused(
        verify(tmp_path, ev),
        f"{CONTROL} line 2 (seq 1)",
        "command 'c2' (stop, control seq 1) has no receipt, and the run has ended",
    )


def test_command_without_receipt_in_a_running_run_verifies(tmp_path: Path) -> None:
    """No run.end yet (a run still going, or crashed): the receipt may still come."""
    ev = lawful()
    ev.records = [r for r in ev.records if r[1] != "run.end"]
    ev.add(command("c2", "stop"))
    assert verify(tmp_path, ev).status.value == "verified"


def test_effect_before_its_receipt_is_refused(tmp_path: Path) -> None:
    ev = lawful()
    receipt_row = next(r for r in ev.records if r[1] == "command.receipt")
    moved = _insert_before(_without(ev, "command.receipt"), "round.plan", receipt_row)
    # the receipt now comes before round 1 (fine), so move the effect before the receipt instead
    effect = next(r for r in ev.records if r[1] == "round.input")
    early = _insert_before(_without(ev, "round.input"), "command.receipt", effect)
    assert verify(tmp_path / "ok", moved).status.value == "verified"
    refused(
        verify(tmp_path / "a", early),
        "round.input is an effect of command 'c1', which has no receipt before it",
    )


def test_effect_of_a_command_not_applied_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "command.receipt", lambda b: b.update(outcome="rejected", reason="no"))
    refused(verify(tmp_path, ev), "round.input is an effect of command 'c1'", "'rejected'")


def test_run_status_effect_needs_its_receipt(tmp_path: Path) -> None:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.add(command("s1", "stop"), status("stopping", command="s1"))
    refused(verify(tmp_path, ev), "run.status is an effect of command 's1', which has no receipt")


def test_two_receipts_for_one_command_are_refused(tmp_path: Path) -> None:
    ev = lawful().add(receipt("c1", "instruct", 0))
    refused(verify(tmp_path, ev), "a second receipt for command 'c1'", "the first is at")


def test_receipt_naming_a_missing_command_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "command.receipt", lambda b: b.update(control_seq=5))
    refused(
        verify(tmp_path, ev),
        "the receipt of command 'c1' names control seq 5, which is no command",
    )


def test_receipt_naming_another_command_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "command.receipt", lambda b: b.update(command="approve"))
    refused(verify(tmp_path, ev), "which is command 'c1' (instruct)")


def test_two_commands_with_one_id_are_refused(tmp_path: Path) -> None:
    ev = lawful().add(command("c1", "stop"))
    refused(
        verify(tmp_path, ev),
        f"{CONTROL} line 2 (seq 1)",
        "a second command with id 'c1' (the first is control seq 0)",
    )


def test_unknown_receipt_outcome_is_refused(tmp_path: Path) -> None:
    ev = edit(lawful(), "command.receipt", lambda b: b.update(outcome="done"))
    refused(verify(tmp_path, ev), "has outcome 'done', not one of")


def test_stale_revision_is_rejected_exactly_when_stale(tmp_path: Path) -> None:
    """Revision 1 in epoch 0 is stale: its receipt must be ``rejected`` / ``stale revision``
    (and then it has no effect); a current revision must not be rejected as stale."""
    base = Evidence(make_plan(["t1"])).start()
    base.add(status("creating"), status("starting"), status("running"))
    honest = Evidence(base.plan, list(base.records), dict(base.texts))
    honest.add(
        command("s1", "stop", revision=1), receipt("s1", "stop", 0, "rejected", "stale revision")
    )
    assert verify(tmp_path / "ok", honest).status.value == "verified"
    applied = Evidence(base.plan, list(base.records), dict(base.texts))
    applied.add(command("s1", "stop", revision=1), receipt("s1", "stop", 0))
    refused(
        verify(tmp_path / "a", applied),
        "command 's1' targets revision 1 in epoch 0",
        "must be 'rejected' with reason 'stale revision'",
    )
    current = Evidence(base.plan, list(base.records), dict(base.texts))
    current.add(command("s1", "stop"), receipt("s1", "stop", 0, "rejected", "stale revision"))
    refused(verify(tmp_path / "b", current), "must not be 'rejected' with reason 'stale revision'")


def test_runs_before_the_command_protocol_are_exempt_from_receipts(tmp_path: Path) -> None:
    """Format-2 evidence before issue 12: a stop command, no run.status, no receipt, run.end."""
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(("audit", "run.end", {"outcome": "completed"}), command("s1", "stop"))
    assert verify(tmp_path, ev).status.value == "verified"
    protocol = Evidence(ev.plan, list(ev.records), dict(ev.texts))
    protocol.records.insert(-2, status("creating"))
    protocol.records.insert(-2, status("starting"))
    protocol.records.insert(-2, status("running"))
    protocol.records.insert(-2, status("failed"))
    refused(verify(tmp_path / "a", protocol), "command 's1' (stop, control seq 0) has no receipt")


def test_the_fold_compares_receipts_only_after_the_control_store() -> None:
    """Receipts are in the audit store, commands in the control store folded after it: the
    binding is checked at ``finish``, with the receipt's location."""
    check = CommandCheck("r1")
    body = {"id": "c1", "command": "stop", "control_seq": 0, "outcome": "applied", "reason": "ok"}
    time = "2026-01-01T00:00:00.000000Z"
    check.audit(Record("audit", "r1", 0, time, "command.receipt", body, "0" * 64), "A seq 0")
    cmd = {"operator": "op", "command": "stop", "args": {}, "id": "c1", "revision": 0}
    check.control(Record("control", "r1", 0, time, "command", cmd, "0" * 64), "C seq 0")
    check.finish()
    other = CommandCheck("r1")
    other.audit(Record("audit", "r1", 0, time, "command.receipt", body, "0" * 64), "A seq 0")
    with pytest.raises(
        CommandError, match=r"^A seq 0: the receipt of command 'c1' names control seq 0"
    ):
        other.finish()
