"""The rounds, commands and lifecycle checks folded directly (no bundle): each case breaks one
rule of a lawful history once and must be refused with its reason; the lawful histories pass.

The same histories go through bundles in test_round_evidence.py, test_command_evidence.py and
test_lifecycle_evidence.py; these run in milliseconds, so the mutation runs (tests/mutation.py)
use them, and they cover edges the bundle tests leave out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.verify.layout import round_text_digest, round_text_member
from harness.verify.roundcheck import round_texts

from .rounds_evidence import (
    BASE,
    C1,
    C2,
    COMPLETE,
    INCOMPLETE,
    RUN,
    TREE2,
    Body,
    Evidence,
    command,
    edit,
    fold_all,
    lawful,
    make_plan,
    move,
    receipt,
    status,
)

END = ("audit", "run.end", {"outcome": "x"})
RELEASE = ("audit", "lock.release", {"batch": "b0001", "reason": "retired"})
ACQUIRE = ("audit", "lock.acquire", {"batch": "b0001", "globs": ["src/**"]})


def one(max_rounds: int = 25) -> Evidence:
    return Evidence(make_plan(["t1"])).start().spawn("t1").roles("t1", max_rounds=max_rounds)


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
    return ev.merge("t1", C2).add(status("completed", 1), END)


def gated() -> Evidence:
    ev = one()
    for n, outcome in ((1, "continue"), (2, "continue"), (3, "gate")):
        ev.plan_("t1", n, f"Try {n}.\nNext: cli\n", "cli").step("t1", n, BASE, BASE, claims=False)
        ev.audit("t1", n, INCOMPLETE).end("t1", n, outcome, n, BASE)
    ev.add(("audit", "round.gate", {"task": "t1", "round": 3, "epoch": 0, "reason": "3 failing",
                                    "question": None}))  # fmt: skip
    ev.add(command("a1", "approve"), receipt("a1", "approve", 0))
    ev.input("t1", 3, "a1", "approve", "go on\n")
    ev.plan_("t1", 4, "Next: cli\n", "cli").step("t1", 4, BASE, BASE, claims=False)
    return ev.audit("t1", 4, INCOMPLETE).end("t1", 4, "continue", 1, BASE)


def asked() -> Evidence:
    ev = one().plan_("t1", 1, "Which parser?\nNext: ask\n", "ask").end("t1", 1, "gate", 0, BASE)
    question = ev.text("Which parser?\n")
    ev.add(("audit", "round.gate", {"task": "t1", "round": 1, "epoch": 0, "reason": "ask",
                                    "question": question}))  # fmt: skip
    ev.add(command("q1", "answer"), receipt("q1", "answer", 0))
    return ev.input("t1", 1, "q1", "answer", "The new one.\n")


def blocked_plan() -> Evidence:
    return (
        one().plan_("t1", 1, "Cannot.\nNext: blocked\n", "blocked").end("t1", 1, "blocked", 0, BASE)
    )


def _set(kind: str, nth: int = 0, /, **values: object) -> Callable[[Evidence], Evidence]:
    return lambda ev: edit(ev, kind, lambda b: b.update(values), nth)


def _drop(kind: str) -> Callable[[Evidence], Evidence]:
    return lambda ev: Evidence(ev.plan, [r for r in ev.records if r[1] != kind], dict(ev.texts))


def _add(*rows: tuple[str, str, Body]) -> Callable[[Evidence], Evidence]:
    return lambda ev: Evidence(ev.plan, [*ev.records, *rows], dict(ev.texts))


def _replace(old: tuple[str, str, Body], new: tuple[str, str, Body]) -> Callable[
    [Evidence], Evidence
]:  # fmt: skip
    return lambda ev: Evidence(
        ev.plan, [new if r == old else r for r in ev.records], dict(ev.texts)
    )


def _after(row: tuple[str, str, Body], new: tuple[str, str, Body]) -> Callable[
    [Evidence], Evidence
]:  # fmt: skip
    def change(ev: Evidence) -> Evidence:
        index = ev.records.index(row) + 1
        return Evidence(ev.plan, [*ev.records[:index], new, *ev.records[index:]], dict(ev.texts))

    return change


def _drop_status(state: str) -> Callable[[Evidence], Evidence]:
    return _replace(status(state), ("audit", "event", {"name": "x", "data": {}}))


def one_round() -> Evidence:
    ev = one().plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    return ev.audit("t1", 1, COMPLETE).end("t1", 1, "continue", 0, C1)


def crashed() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1").plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    ev.add(status("starting"), status("running"))
    ev.plan_("t1", 1, "Again.\nNext: cli\n", "cli").step("t1", 1, C1, C2)
    return ev.audit("t1", 1, COMPLETE).end("t1", 1, "continue", 0, C2)


def violated() -> Evidence:
    ev = one().plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1)
    ev.audit("t1", 1, COMPLETE, tree_after=TREE2).end("t1", 1, "violation", 1, C1)
    return ev.add(move("t1", "in_progress", "failed"))


def recovered() -> Evidence:
    """The runtime's crash recovery (as ``harness resume`` records it): the interrupted task
    is suspended without a round.end, then the continue reopens it in epoch 1."""
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1").plan_("t1", 1, "Next: cli\n", "cli")
    ev.add(status("starting"), RELEASE, move("t1", "in_progress", "blocked"))
    ev.add(command("u1", "resume"), receipt("u1", "resume", 0), status("starting", 1, "u1"))
    ev.add(move("t1", "blocked", "open"), status("running", 1), move("t1", "open", "claimed"))
    ev.add(move("t1", "claimed", "in_progress"), ACQUIRE)
    ev.roles("t1", epoch=1).plan_("t1", 1, "Next: cli\n", "cli", epoch=1)
    return ev.step("t1", 1, BASE, C1, epoch=1)


def two_tasks() -> Evidence:
    """lawful() with a second task that never starts: the run cannot end completed."""
    ev = lawful()
    plan = make_plan(["t1", "t2"])
    planned = next(r for r in ev.records if r[1] == "task.planned")
    t2 = ("audit", "task.planned", {**planned[2], "task": "t2"})
    records = [r for r in ev.records if r[1] != "run.start"]
    fresh = Evidence(plan).start()
    start = fresh.records[0]
    index = records.index(planned)
    out = [start, *records[: index + 1], t2, *records[index + 1 :]]
    return Evidence(plan, out, dict(ev.texts))


def reopened_then_cancelled() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1", max_rounds=1).plan_("t1", 1, "Next: cli\n", "cli")
    ev.step("t1", 1, BASE, C1).audit("t1", 1, INCOMPLETE).end("t1", 1, "incomplete", 1, C1)
    ev.add(move("t1", "in_progress", "blocked"), RELEASE, status("incomplete"), END)
    ev.add(command("u1", "resume"), receipt("u1", "resume", 0))
    ev.add(status("starting", 1, "u1"), status("running", 1))
    ev.add(move("t1", "blocked", "open"), move("t1", "open", "cancelled"))
    return ev.add(status("failed", 1), END)


def suspended_blocked() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1").plan_("t1", 1, "Cannot.\nNext: blocked\n", "blocked")
    ev.end("t1", 1, "blocked", 0, BASE)
    return ev.add(move("t1", "in_progress", "blocked"), RELEASE, status("blocked"), END)


def stopped_mid_round() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1").plan_("t1", 1, "Next: cli\n", "cli")
    ev.add(command("s1", "stop"), receipt("s1", "stop", 0), status("stopping", command="s1"))
    return ev.add(move("t1", "in_progress", "cancelled"), RELEASE, status("cancelled"), END)


def aborted() -> Evidence:
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.add(command("x1", "abort"), receipt("x1", "abort", 0))
    return ev.add(move("t1", "planned", "cancelled"), status("failed"), END)


def done_refused() -> Evidence:
    return one().plan_("t1", 1, "Next: done\n", None, valid=False).end("t1", 1, "continue", 1, BASE)


def odd_but_lawful() -> Evidence:
    """Edges the rules allow: a step whose commit is unchanged but whose paths are not, an
    applied receipt whose reason happens to read 'stale revision', an instruction for the next
    round, max_rounds at its ceiling, a protocol run still going with a command unanswered."""
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1", max_rounds=1000)
    ev.add(command("c1", "instruct"), receipt("c1", "instruct", 0, "applied", "stale revision"))
    ev.input("t1", 1, "c1", "instruct", "Start with the parser.\n")
    ev.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, BASE, paths=["src/a.py"])
    ev.audit("t1", 1, COMPLETE).end("t1", 1, "continue", 0, BASE)
    ev.add(command("c2", "instruct"), receipt("c2", "instruct", 1))
    ev.input("t1", 2, "c2", "instruct", "Next, the tests.\n")
    return ev.add(command("c3", "stop"))


def ghost() -> Evidence:
    """The executor claims success and nothing changed: whatever the report, incomplete."""
    ev = one().plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, BASE)
    return ev.audit("t1", 1, COMPLETE, ghost=True).end("t1", 1, "continue", 1, BASE)


LAWFUL: dict[str, Callable[[], Evidence]] = {
    "ghost": ghost,
    "reopened_then_cancelled": reopened_then_cancelled,
    "suspended_blocked": suspended_blocked,
    "stopped_mid_round": stopped_mid_round,
    "aborted": aborted,
    "done_refused": done_refused,
    "odd_but_lawful": odd_but_lawful,
    "recovered": recovered,
    "one_round": one_round,
    "crashed": crashed,
    "violated": violated,
    "lawful": lawful,
    "continued": continued,
    "gated": gated,
    "asked": asked,
    "blocked_plan": blocked_plan,
}

CASES: list[tuple[str, Callable[[], Evidence], Callable[[Evidence], Evidence], str]] = [
    # rounds: plans
    ("next", lawful, _set("round.plan", next="gui"), "records next 'gui' valid true"),
    ("valid", lawful, _set("round.plan", valid=False, next=None), "gives next 'cli' valid true"),
    ("cites", lawful, _set("round.plan", 1, cites=[]), "records cites [], the plan text cites [1]"),
    ("number", lawful, _set("round.plan", 1, round=3), "round 3: expected round 2"),
    ("epoch", lawful, _set("round.plan", epoch=1), "is recorded in epoch 1, the run is in epoch 0"),
    ("plan-open", lawful, _set("round.end", round=9), "names round 9, but round 1 is open"),
    ("done-early", one, lambda ev: ev.plan_("t1", 1, "Next: done\n", "done"), "'done' refused"),
    (
        "undeclared",
        lambda: Evidence(make_plan(["t1"])).start(),
        lambda ev: ev.roles("zz"),
        "round.roles of task 'zz', which was never declared",
    ),
    ("roles-twice", one, lambda ev: ev.roles("t1"), "round.roles of task 't1' again in epoch 0"),
    ("max-rounds", lawful, _set("round.roles", max_rounds=0), "max_rounds 0 is not 1..1000"),
    ("max-rounds-high", lawful, _set("round.roles", max_rounds=1001), "max_rounds 1001"),
    ("roles-names", lawful, _set("round.roles", roles={"manager": {}}), "names roles ['manager']"),
    (
        "roles-object",
        lawful,
        _set("round.roles", roles={"manager": {}, "executor": {}, "auditor": 1}),
        "auditor is no object",
    ),
    ("no-roles", lawful, _drop("round.roles"), "before the task's round.roles of epoch 0"),
    # rounds: steps and audits
    ("changed", lawful, _set("round.step", changed=False), "records changed false"),
    ("unchanged", lawful, _set("round.step", commit_after=BASE, paths=[]), "records changed true"),
    ("paths", lawful, _set("round.step", paths=["b", "a"]), "sorted without repeats"),
    ("progress", lawful, _set("round.step", 1, commit_before=BASE), "not from the verified"),
    ("step-no-plan", blocked_plan, lambda ev: ev.step("t1", 1, BASE, C1), "no round is open"),
    (
        "header",
        lawful,
        _set("round.audit", status="complete", effective="complete"),
        "the report gives true/incomplete/clean/aligned",
    ),
    ("header-valid", lawful, _set("round.audit", header_valid=False), "records header_valid"),
    ("integrity", lawful, _set("round.audit", integrity="suspect"), "true/incomplete/suspect/"),
    ("contract", lawful, _set("round.audit", contract="unknown"), "incomplete/clean/unknown,"),
    (
        "repair-missing",
        lawful,
        _set("round.audit", 1, repair=None),
        "gives false/blocked/suspect/unknown",
    ),
    (
        "violation-hidden",
        lawful,
        _set("round.audit", tree_after=TREE2),
        "gives true/blocked/violation/unknown (the auditor's tree changed)",
    ),
    ("ghost", lawful, _set("round.audit", ghost=True), "records ghost true"),
    (
        "effective",
        lawful,
        _set("round.audit", 1, effective="incomplete"),
        "records effective 'incomplete', the rule gives 'complete'",
    ),
    (
        "audit-first",
        one,
        lambda ev: ev.plan_("t1", 1, "Next: cli\n", "cli").audit("t1", 1, COMPLETE),
        "but the round has no round.step",
    ),
    # rounds: ends
    ("failing", lawful, _set("round.end", failing=0), "the rule gives 'continue' failing 1"),
    ("outcome", lawful, _set("round.end", 2, outcome="gate"), "the rule gives 'done' failing 0"),
    ("checkpoint", lawful, _set("round.end", checkpoint=BASE), "records checkpoint 111111111111"),
    ("checkpoint-kept", lawful, _set("round.end", 2, checkpoint=C1), "verified progress is 3333"),
    (
        "end-early",
        one,
        lambda ev: ev.plan_("t1", 1, "Next: cli\n", "cli").end("t1", 1, "continue", 1, BASE),
        "before the round's step and audit",
    ),
    (
        "approve-reset",
        gated,
        _set("round.end", 3, outcome="gate", failing=4),
        "the rule gives 'continue' failing 1",
    ),
    (
        "gate-missing",
        gated,
        _drop("round.gate"),
        "round.input (approve) of task 't1' round 3 before the round.gate",
    ),
    ("gate-unclosed", gated, _drop("round.input"), "the gate of round 3 was not closed"),
    (
        "gate-stray",
        one_round,
        _add(
            (
                "audit",
                "round.gate",
                {"task": "t1", "round": 3, "epoch": 0, "reason": "x", "question": None},
            )
        ),
        "without a round that ended 'gate'",
    ),
    ("gate-question", gated, _set("round.gate", question="e" * 64), "only an ask carries"),
    ("ask-question", asked, _set("round.gate", question=None), "an ask carries its question"),
    ("input-kind", asked, _set("round.input", kind="yes"), "kind must be one of"),
    ("input-round", asked, _set("round.input", round=2), "but no gate of that round is open"),
    ("instruct-round", lawful, _set("round.input", round=5), "names the last ended round (1)"),
    (
        "input-twice",
        asked,
        lambda ev: ev.input("t1", 1, "q1", "answer", "again\n"),
        "no gate of that round is open",
    ),
    (
        "gating",
        lawful,
        _replace(move("t1", "in_progress", "gating"), move("t1", "in_progress", "failed")),
        "task 't1' moves in_progress -> failed, but its round ended at runs/r1/stores/audit.jsonl",
    ),
    (
        "blocked",
        blocked_plan,
        lambda ev: ev.add(move("t1", "in_progress", "gating")),
        "demands in_progress -> blocked",
    ),
    (
        "plan-before-move",
        blocked_plan,
        lambda ev: ev.plan_("t1", 2, "Next: cli\n", "cli"),
        "demands the task's in_progress -> blocked first",
    ),
    (
        "suspend-without",
        one,
        lambda ev: ev.add(move("t1", "in_progress", "blocked")),
        "without a round that ended 'incomplete' or 'blocked'",
    ),
    (
        "suspend-after-round",
        crashed,
        lambda ev: ev.add(move("t1", "in_progress", "blocked")),
        "without a round that ended 'incomplete' or 'blocked'",
    ),
    (
        "end-before-move",
        blocked_plan,
        lambda ev: ev.add(RELEASE, END),
        "the run ends before task 't1' moves in_progress -> blocked",
    ),
    (
        "end-open",
        one,
        lambda ev: ev.plan_("t1", 1, "Next: cli\n", "cli").add(RELEASE, END),
        "while round 1 of task 't1' is unfinished",
    ),
    (
        "end-gate-due",
        one,
        lambda ev: (
            ev.plan_("t1", 1, "Next: ask\n", "ask").end("t1", 1, "gate", 0, BASE).add(RELEASE, END)
        ),
        "before the round.gate of round 1",
    ),
    # commands
    ("receipt-twice", lawful, _add(receipt("c1", "instruct", 0)), "a second receipt"),
    ("receipt-outcome", lawful, _set("command.receipt", outcome="ok"), "has outcome 'ok'"),
    ("receipt-seq", lawful, _set("command.receipt", control_seq=3), "names control seq 3"),
    ("receipt-id", lawful, _set("command.receipt", command="answer"), "which is command 'c1'"),
    (
        "effect-rejected",
        lawful,
        _set("command.receipt", outcome="failed", reason="x"),
        "is 'failed', not 'applied'",
    ),
    ("effect-early", lawful, _set("round.input", command="zz"), "which has no receipt before it"),
    ("command-twice", lawful, _add(command("c1", "stop")), "a second command with id 'c1'"),
    ("no-receipt", lawful, _add(command("c2", "stop")), "has no receipt, and the run has ended"),
    ("stale", lawful, _set("command", revision=2), "targets revision 2 in epoch 0"),
    (
        "not-stale",
        lawful,
        lambda ev: _set("command.receipt", outcome="rejected", reason="stale revision")(
            _drop("round.input")(ev)
        ),
        "must not be 'rejected'",
    ),
    # lifecycle
    ("illegal", lawful, _set("run.status", 1, status="running"), "creating -> running"),
    ("alias", lawful, _set("run.status", 3, status="done"), "'done' is not a run status"),
    ("first-epoch", lawful, _set("run.status", 0, epoch=1), "first run.status is in epoch 1"),
    ("jump", continued, _set("run.status", 4, epoch=2), "moves 0 -> 2 at 'starting'"),
    ("step-status", continued, _set("run.status", 5, epoch=2), "moves 1 -> 2 at 'running'"),
    ("step-command", continued, _set("run.status", 4, command=None), "starts by command None"),
    (
        "resume-then",
        continued,
        _set("run.status", 4, status="running", epoch=0),
        "moves the run to 'starting' in epoch 1",
    ),
    (
        "resume-twice",
        continued,
        _after(receipt("u1", "resume", 0), receipt("u2", "resume", 1)),
        "a second applied resume",
    ),
    ("terminal", continued, _set("run.status", 3, status="failed"), "the rule gives 'incomplete'"),
    (
        "terminal-done",
        lawful,
        _set("run.status", 3, status="cancelled"),
        "the run ends 'cancelled', the rule gives 'completed'",
    ),
    ("active-end", lawful, _drop_status("completed"), "ends in the active status 'running'"),
    (
        "after-end",
        lawful,
        _add(("audit", "event", {"name": "x", "data": {}})),
        "event after the run ended",
    ),
    ("above-max", continued, _set("run.status", 4, epoch=10001), "is above 10000"),
    # second round of cases (mutation survivors)
    (
        "never-started",
        two_tasks,
        lambda ev: ev,
        "the run ends 'completed', the rule gives 'failed'",
    ),
    (
        "reopen-kept",
        reopened_then_cancelled,
        _set("run.status", 6, status="incomplete"),
        "the rule gives 'failed'",
    ),
    (
        "blocked-end",
        suspended_blocked,
        _set("run.status", 3, status="failed"),
        "the run ends 'failed', the rule gives 'blocked'",
    ),
    (
        "stop-ignored",
        stopped_mid_round,
        _replace(status("cancelled"), status("failed")),
        "not a legal step",
    ),
    ("abort-ignored", aborted, _set("run.status", 3, status="completed"), "gives 'failed'"),
    (
        "stop-then-failed",
        lambda: (
            Evidence(make_plan(["t1"]))
            .start()
            .add(
                status("creating"),
                status("starting"),
                status("running"),
                command("s1", "stop"),
                receipt("s1", "stop", 0),
            )
        ),
        lambda ev: ev.add(status("failed"), END),
        "the run ends 'failed', the rule gives 'cancelled'",
    ),
    (
        "merge-after-violation",
        violated,
        lambda ev: Evidence(ev.plan, ev.records[:-1], dict(ev.texts)).add(
            (
                "audit",
                "gate.integrity",
                {
                    "batch": "b0001",
                    "tasks": ["t1"],
                    "commit": C1,
                    "tree": "a" * 40,
                    "head": C1,
                    "head_tree": "a" * 40,
                    "clean_before": True,
                    "clean_after": True,
                    "intact": True,
                    "reason": "unchanged",
                },
            ),
            (
                "audit",
                "merge.result",
                {
                    "task": "t1",
                    "branch": "harness/r1/b0001",
                    "merged": True,
                    "commit": C1,
                    "reason": "clean",
                },
            ),
        ),
        "task 't1' is merged after its round ended 'violation'",
    ),
    (
        "stale-other-reason",
        lawful,
        lambda ev: _set("command", revision=3)(
            _set("command.receipt", outcome="rejected", reason="nope")(_drop("round.input")(ev))
        ),
        "must be 'rejected' with reason 'stale revision'",
    ),
    (
        "stale-epoch-1",
        continued,
        lambda ev: ev.add(command("c9", "instruct"), receipt("c9", "instruct", 1)),
        "command.receipt after the run ended",
    ),
    (
        "stale-at-epoch",
        lambda: Evidence(continued().plan, continued().records[:-2], dict(continued().texts)),
        lambda ev: ev.add(
            command("c9", "stop", revision=0),
            receipt("c9", "stop", 1, "rejected", "stale revision"),
            command("c8", "stop", revision=0),
            receipt("c8", "stop", 2),
        ),
        "command 'c8' targets revision 0 in epoch 1",
    ),
    (
        "receipt-protocol",
        lambda: Evidence(make_plan(["t1"])).start(),
        lambda ev: ev.add(
            command("c1", "approve"), receipt("c1", "approve", 0), END, command("c2", "stop")
        ),
        "command 'c2' (stop, control seq 1) has no receipt",
    ),
    ("status-after-end", lawful, _add(status("running")), "run.status after the run ended"),
    (
        "step-invalid-plan",
        done_refused,
        lambda ev: Evidence(ev.plan, ev.records[:-1], dict(ev.texts)).step("t1", 1, BASE, C1),
        "but the round's plan is next None",
    ),
    (
        "step-twice",
        one,
        lambda ev: (
            ev.plan_("t1", 1, "Next: cli\n", "cli").step("t1", 1, BASE, C1).step("t1", 1, C1, C2)
        ),
        "already stepped",
    ),
    (
        "audit-twice",
        one_round,
        lambda ev: Evidence(ev.plan, ev.records[:-1], dict(ev.texts)).audit("t1", 1, COMPLETE),
        "an audit already",
    ),
    ("instruct-far", lawful, _set("round.input", round=3), "names the last ended round (1)"),
    (
        "roles-denied",
        lawful,
        lambda ev: edit(
            ev,
            "round.roles",
            lambda b: b.update(
                roles={**b["roles"], "manager": {**b["roles"]["manager"], "denied": []}}
            ),
        ),
        "the manager is denied []",
    ),
    ("done-as-valid", done_refused, _set("round.plan", next="done", valid=True), "'done' refused"),
    (
        "gui-end-early",
        one,
        lambda ev: ev.plan_("t1", 1, "Next: gui\n", "gui").end("t1", 1, "continue", 1, BASE),
        "before the round's step and audit",
    ),
    (
        "gate-then-plan",
        one,
        lambda ev: (
            ev.plan_("t1", 1, "Next: ask\n", "ask")
            .end("t1", 1, "gate", 0, BASE)
            .plan_("t1", 2, "Next: cli\n", "cli")
        ),
        "round 1 ended 'gate' without its round.gate record",
    ),
    (
        "ghost-hidden",
        ghost,
        lambda ev: edit(ev, "round.audit", lambda b: b.update(ghost=False, effective="complete")),
        "records ghost false",
    ),
    (
        "ghost-complete",
        ghost,
        _set("round.audit", effective="complete"),
        "records effective 'complete', the rule gives 'incomplete'",
    ),
    (
        "abort-wins",
        lawful,
        _after(receipt("c1", "instruct", 0), receipt("x1", "abort", 1)),
        "the run ends 'completed', the rule gives 'failed'",
    ),
    ("extra-text", lawful, lambda ev: (ev.text("stray\n"), ev)[1], "a rounds member no round"),
]


@pytest.mark.parametrize("name", sorted(LAWFUL))
def test_lawful_histories_pass(name: str) -> None:
    assert fold_all(LAWFUL[name]()) is None


@pytest.mark.parametrize(
    ("build", "change", "words"),
    [pytest.param(b, c, w, id=n) for n, b, c, w in CASES if w],
)
def test_each_broken_rule_is_refused(
    build: Callable[[], Evidence], change: Callable[[Evidence], Evidence], words: str
) -> None:
    reason = fold_all(change(build()))
    assert reason is not None, "a broken history passed"
    assert words in reason, reason
    assert reason.startswith(f"runs/{RUN}/"), reason  # located: member (and line, seq)


def test_round_texts_are_the_runs_digest_members_only() -> None:
    digest = "e" * 64
    members = {
        round_text_member(RUN, digest): b"x",
        round_text_member("other", digest): b"y",
        f"runs/{RUN}/rounds/{'E' * 64}.txt": b"z",
        f"runs/{RUN}/rounds/{'e' * 63}.txt": b"z",
        f"runs/{RUN}/rounds/{digest}.md": b"z",
        f"runs/{RUN}/plan.json": b"{}",
    }
    assert round_texts(RUN, members) == {digest: b"x"}
    assert round_texts(RUN, None) == {}
    assert round_text_digest(RUN, round_text_member(RUN, digest)) == digest
    assert round_text_digest(RUN, f"runs/{RUN}/rounds/{digest}") is None


# ---- a run folder on disk -----------------------------------------------------------------------
def test_run_folder_round_texts_are_read_like_bundle_members(tmp_path: Path) -> None:
    """``folder_round_texts``: the texts of ``<run folder>/rounds`` by member name; a link, a
    FIFO (never opened, so nothing hangs) or a name that is no digest is refused."""
    import os

    from harness.verify.roundcheck import RoundError, folder_round_texts

    assert folder_round_texts(tmp_path, RUN) == {}
    rounds = tmp_path / "rounds"
    rounds.mkdir()
    data = b"Next: cli\n"
    digest = hashlib.sha256(data).hexdigest()
    (rounds / f"{digest}.txt").write_bytes(data)
    assert folder_round_texts(tmp_path, RUN) == {round_text_member(RUN, digest): data}
    for make, words in (
        (lambda p: p.symlink_to(rounds / f"{digest}.txt"), "not a regular file"),
        (lambda p: os.mkfifo(p), "not a regular file"),
    ):
        bad = rounds / f"{'e' * 64}.txt"
        make(bad)
        with pytest.raises(RoundError, match=words):
            folder_round_texts(tmp_path, RUN)
        bad.unlink()
    (rounds / "notes.txt").write_bytes(b"x")
    with pytest.raises(RoundError, match="not a round text"):
        folder_round_texts(tmp_path, RUN)


def test_run_folder_round_texts_are_capped_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.verify import roundcheck

    rounds = tmp_path / "rounds"
    rounds.mkdir()
    for data in (b"a" * 6, b"b" * 6):
        (rounds / f"{hashlib.sha256(data).hexdigest()}.txt").write_bytes(data)
    monkeypatch.setattr(roundcheck, "ROUND_TEXTS_MAX_BYTES", 12)
    assert len(roundcheck.folder_round_texts(tmp_path, RUN)) == 2
    monkeypatch.setattr(roundcheck, "ROUND_TEXTS_MAX_BYTES", 11)
    with pytest.raises(roundcheck.RoundError, match="over their size limits"):
        roundcheck.folder_round_texts(tmp_path, RUN)
    monkeypatch.setattr(roundcheck, "ROUND_TEXTS_MAX_BYTES", 12)
    monkeypatch.setattr(roundcheck, "ROUND_TEXT_MAX_BYTES", 5)
    with pytest.raises(roundcheck.RoundError, match="over their size limits"):
        roundcheck.folder_round_texts(tmp_path, RUN)
