"""The control check (verify/controlcheck.py) folded directly over hand-built histories.

``lawful()`` is a run of three tasks whose control records are made by the runtime's own
controller and sensor code (``with_control``): t1 fails its gate twice (the coder's bucket
crosses 20: the template strategy, configuration version 2) and lands on its third attempt;
t2 lands with usage (pace in tokens) and covers the plan's one requirement; t3 lands so slowly
that the coder's CUSUM alarms (a warning); the firing rate over the first four steps escalates;
t3's landing moves the run into converge. Each other test changes one thing and names the
refusal. Milliseconds per fold, so these are the mutation tests of the check
(``python -m tests.mutation verify/controlcheck.py verify/controlfacts.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, matrix_object
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.controlcheck import ControlCheck, control_check
from harness.verify.controlfacts import ControlError, describe, exit_of
from harness.verify.records import Record
from harness.verify.report import ControlSummary
from harness.verify.rules import configchain
from harness.verify.rules.controller import Decision

from .evidence_helpers import control_prologue, with_control

RUN = "r1"
BASE = "1" * 40
TIME = "2026-01-01T00:00:00.000000Z"
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
Body = dict[str, Any]
Row = tuple[str, str, Body]
GATES = {"t1": "pytest", "t2": "ruff", "t3": "pytest", "t4": "pytest"}
ROLES = {"t1": "coder", "t2": "writer", "t3": "coder", "t4": "planner"}


def _plan(control: Body | None = None) -> Any:
    params = {"threshold": 20, "cusum_warmup": 2, "rate_window": 4, "phase_bounds": [0, 750, 900]}
    return parse_plan(
        {
            "plan": {"name": "p", "max_attempts": 3, "control": control or params},
            "task": [
                {
                    "id": "t1",
                    "role": "coder",
                    "prompt": "p",
                    "scope": ["src/**"],
                    "gates": [{"name": "pytest", "command": ["true"]}],
                },
                {
                    "id": "t2",
                    "role": "writer",
                    "prompt": "p",
                    "scope": ["docs/**"],
                    "requirements": ["R1"],
                    "gates": [{"name": "ruff", "command": ["true"]}],
                },
                {
                    "id": "t3",
                    "role": "coder",
                    "prompt": "p",
                    "scope": ["src/b.py"],
                    "gates": [{"name": "pytest", "command": ["true"]}],
                },
            ],
        }
    )


PLAN = _plan()
PLAN_BYTES = plan_bytes(PLAN)


def move(task: str, a: str, b: str) -> Row:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": "r"})


def status(name: str, epoch: int = 0) -> Row:
    return ("audit", "run.status", {"status": name, "epoch": epoch, "reason": "r", "command": None})


def spawn(task: str, batch: str, attempt: int = 1) -> Row:
    return (
        "audit",
        "agent.spawn",
        {"batch": batch, "tasks": [task], "attempt": attempt, "config": 1},
    )


def exit_(batch: str, ms: int, usage: Body | None = None) -> Row:
    return ("audit", "agent.exit", {"batch": batch, "duration_ms": ms, "usage": usage})


def gate(task: str, passed: bool) -> Row:
    return ("audit", "gate.result", {"task": task, "gate": GATES[task], "passed": passed})


def attempt(
    task: str, batch: str, ms: int, attempt: int, ok: bool, usage: Body | None = None
) -> list[Row]:
    """One attempt from claim to its end: landed (``ok``) or its gate failed (retried)."""
    rows = [
        move(task, "open", "claimed"),
        spawn(task, batch, attempt),
        move(task, "claimed", "in_progress"),
        exit_(batch, ms, usage),
        move(task, "in_progress", "gating"),
        gate(task, ok),
    ]
    if ok:
        rows += [
            ("audit", "merge.result", {"task": task, "merged": True}),
            move(task, "gating", "done"),
        ]
    else:
        rows += [
            (
                "audit",
                "attempt.failed",
                {
                    "task": task,
                    "batch": batch,
                    "attempt": attempt,
                    "anomaly": "test",
                    "retry": True,
                },
            ),
            move(task, "gating", "open"),
        ]
    return [*rows, ("audit", "lock.release", {"batch": batch, "reason": "retired"})]


def start(plan: Any = PLAN) -> list[Row]:
    body = {
        "plan": "p",
        "base_commit": BASE,
        "capabilities": matrix_object(DEFAULT_MATRIX),
        "sandbox": NO_SANDBOX,
    }
    planned = [("audit", "task.planned", {"task": t.id, "role": t.role}) for t in plan.tasks]
    return [
        ("audit", "run.start", body),
        *planned,
        status("creating"),
        status("starting"),
        status("running"),
        *[move(t.id, "planned", "open") for t in plan.tasks],
    ]


def raw() -> list[Row]:
    return [
        *start(),
        *attempt("t1", "b1", 100, 1, False),
        *attempt("t1", "b2", 100, 2, False),
        *attempt("t1", "b3", 100, 3, True),
        *attempt(
            "t2", "b4", 50, 1, True, {"input_tokens": 10, "output_tokens": 20, "cost_micros": None}
        ),
        *attempt("t3", "b5", 1000, 1, True),
        status("completed"),
        ("audit", "run.end", {"outcome": "completed"}),
    ]


def lawful() -> list[Row]:
    return with_control(raw(), PLAN_BYTES)


def fold(rows: list[Row], plan: bytes | None = PLAN_BYTES) -> ControlCheck:
    check = control_check(RUN, plan)
    for i, (store, kind, body) in enumerate(rows):
        if store != "events":  # the bus records with_control adds: another check's
            record = Record(store, RUN, i, TIME, kind, body, "0" * 64)
            getattr(check, store)(record, f"a{i}")
    check.finish()
    return check


def refused(rows: list[Row], *words: str, plan: bytes | None = PLAN_BYTES) -> str:
    with pytest.raises(ControlError) as caught:
        fold(rows, plan)
    reason = str(caught.value)
    for word in words:
        assert word in reason, reason
    return reason


def at(rows: list[Row], kind: str, nth: int = 0, **match: Any) -> int:
    found = [
        i
        for i, (_, k, body) in enumerate(rows)
        if k == kind and all(body.get(key) == value for key, value in match.items())
    ]
    return found[nth]


def changed(rows: list[Row], index: int, change: Callable[[Body], None]) -> list[Row]:
    out = copy.deepcopy(rows)
    change(out[index][2])
    return out


def without(rows: list[Row], *indexes: int) -> list[Row]:
    return [row for i, row in enumerate(rows) if i not in indexes]


def reading(body: Body, sensor: str) -> Body:
    return next(r for r in body["readings"] if r["sensor"] == sensor)


# -- the lawful history ---------------------------------------------------------------------


def test_the_lawful_history_passes_and_is_summarised() -> None:
    rows = lawful()
    kinds = [kind for _, kind, _ in rows]
    assert kinds.count("control.sensor") == 5 and kinds.count("config.version") == 2
    check = fold(rows)
    assert check.summary() == ControlSummary(
        RUN,
        steps=5,
        readings=sum(len(b["readings"]) for _, k, b in rows if k == "control.sensor"),
        decisions={"D/cusum/warn": 1, "D/rate/escalate": 1, "I/bucket/template": 1},
        versions=1,
    )
    sensors = [b for _, k, b in rows if k == "control.sensor"]
    assert [b["phase"] for b in sensors] == ["implement"] * 4 + ["converge"]
    assert reading(sensors[3], "pace_tokens")["value"] == 30
    assert reading(sensors[3], "coverage")["value"] == 1000
    assert reading(sensors[3], "lint")["value"] == 0
    assert rows[at(rows, "agent.spawn", 2)][2]["config"] == 2


def test_a_run_without_run_start_is_not_checked_but_control_records_are_refused() -> None:
    rows = [row for row in raw() if row[1] not in ("run.start",)]
    assert fold(rows).summary() is None
    version = control_prologue(BASE)[0]
    refused([version, *rows], "config.version in a run without run.start")


# -- the prologue ---------------------------------------------------------------------------


def test_version_one_must_follow_the_tasks() -> None:
    rows = lawful()
    first = at(rows, "config.version")
    refused(
        without(rows, first),
        "a4: control.phase right after the plan's tasks: no configuration version 1",
    )
    refused(rows[:first], "no configuration version 1 and first control.phase")
    for member, value in (("snapshot", "2" * 40), ("parent", "ab" * 32), ("step", 1)):
        reason = refused(
            changed(rows, first, lambda b, m=member, v=value: b.update({m: v})), member
        )
        assert "configuration version 1 has" in reason
    refused(without(rows, first + 1), "where the run's first control.phase (reason 'run start')")
    refused(rows[: first + 1], "no configuration version 1 and first control.phase")


def test_the_first_phase_is_the_progress_then() -> None:
    rows = lawful()
    first = at(rows, "control.phase")
    for member, value in (
        ("phase", "explore"),
        ("progress_pm", 1),
        ("step", 1),
        ("reason", "progress"),
    ):
        refused(
            changed(rows, first, lambda b, m=member, v=value: b.update({m: v})),
            f"control.phase records {member} {value!r}",
        )
    late = [
        *rows[: first + 1],
        ("audit", "task.planned", {"task": "t9", "role": "r"}),
        *rows[first + 1 :],
    ]
    refused(late, "task.planned after configuration version 1")


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"format": "harness-verify/plan", "version": 1, "name": "p"}, "has no tasks list"),
        ({"tasks": [], "name": "p"}, "control must be the plan's [plan.control] table"),
        ({"tasks": [], "control": {"threshold": 0}}, "control: threshold: an integer between"),
        ({"tasks": [7], "control": {}}, "tasks[0] must be an object"),
        (
            {
                "tasks": [{"id": "t1", "role": "r", "adapter": "a", "tools": [], "scope": []}],
                "control": {},
            },
            "tasks[0] needs string id, role, adapter",
        ),
        (
            {
                "tasks": [
                    {
                        "id": "t1",
                        "role": 1,
                        "adapter": "a",
                        "tools": [],
                        "scope": [],
                        "requirements": [],
                    }
                ],
                "control": {},
            },
            "needs string id",
        ),
    ],
)
def test_the_plan_member_must_carry_the_control_inputs(document: Body, words: str) -> None:
    refused(lawful(), words, plan=canonical_bytes(document))


def test_no_plan_member_and_a_bad_matrix_are_refused() -> None:
    refused(lawful(), "run.start, but runs/r1/plan.json has no tasks list", plan=None)
    rows = changed(lawful(), 0, lambda b: b.update(capabilities={"tools": 1}))
    refused(rows, "a0: ")


# -- steps -----------------------------------------------------------------------------------


def test_a_step_is_numbered_named_and_placed_by_the_evidence() -> None:
    rows = lawful()
    first = at(rows, "control.sensor")
    cases = [
        ("step", 2, "follows step 0: steps count by one"),
        ("task", "t9", "names task 't9', which is not in the plan member"),
        ("task", "t2", "step without an attempt ending: task 't2'"),
        ("agent", "writer", "records agent 'writer', the evidence gives 'coder'"),
        ("subtree", ".", "records subtree '.', the evidence gives 'src'"),
        ("attempt", 2, "records attempt 2, the evidence gives 1"),
        ("class", "lint", "records class 'lint', the evidence gives 'test'"),
        ("phase", "explore", "records phase 'explore', the evidence gives 'implement'"),
    ]
    for member, value, words in cases:
        reason = refused(changed(rows, first, lambda b, m=member, v=value: b.update({m: v})), words)
        assert reason.startswith(f"a{first}: control.sensor step "), reason
    assert "the failure of task 't1' at a" in refused(
        changed(rows, first, lambda b: b.update(agent="x")), "records agent"
    )


def test_tier_one_values_are_what_the_evidence_gives() -> None:
    rows = lawful()
    first = at(rows, "control.sensor")
    landing = at(rows, "control.sensor", 2)
    paid = at(rows, "control.sensor", 3)

    def value(index: int, sensor: str, new: int) -> list[Row]:
        return changed(rows, index, lambda b: reading(b, sensor).update(value=new))

    refused(
        value(first, "outcome", 0),
        "tier-1 sensor outcome reads 0, the evidence gives 1 (the attempt failed (test))",
    )
    refused(
        value(landing, "outcome", 1), "outcome reads 1, the evidence gives 0 (the attempt landed)"
    )
    refused(value(landing, "restarts", 0), "restarts reads 0, the evidence gives 2 (attempt 3)")
    refused(
        value(first, "tests", 0),
        "tests reads 0, the evidence gives 1 (the attempt's "
        "failing gate.result records of that kind)",
    )
    refused(value(paid, "coverage", 0), "coverage reads 0, the evidence gives 1000 (per-mille")
    gone = changed(rows, paid, lambda b: b["readings"].remove(reading(b, "lint")))
    refused(gone, "tier-1 sensor lint reads nothing, the evidence gives 0")
    extra = changed(
        rows,
        first,
        lambda b: b["readings"].insert(
            3, {"sensor": "types", "tier": 1, "value": 0, "anomaly": False, "trigger": None}
        ),
    )
    refused(extra, "tier-1 sensor types reads 0, the evidence gives nothing")


def test_pace_is_what_the_batch_exit_gives() -> None:
    rows = lawful()
    paid = at(rows, "control.sensor", 3)
    refused(
        changed(rows, paid, lambda b: reading(b, "pace_ms").update(value=51)),
        "pace_ms reads 51, the batch's agent.exit took 50 ms",
    )
    refused(
        changed(rows, paid, lambda b: reading(b, "pace_tokens").update(value=31)),
        "pace_tokens reads 31, the batch's agent.exit usage gives 30",
    )
    refused(
        changed(rows, paid, lambda b: b["readings"].remove(reading(b, "pace_tokens"))),
        "pace_tokens reads nothing, the batch's agent.exit usage gives 30",
    )
    first = at(rows, "control.sensor")
    tokens = {
        "sensor": "pace_tokens",
        "tier": 2,
        "value": 5,
        "anomaly": False,
        "trigger": "anomaly",
    }
    refused(
        changed(rows, first, lambda b: b["readings"].insert(4, tokens)),
        "pace_tokens reads 5, the batch's agent.exit usage gives nothing",
    )
    refused(
        changed(rows, first, lambda b: b["readings"].remove(reading(b, "pace_ms"))),
        "(loop) has sensor 'loop', the rule gives 'pace_ms'",
    )
    alone = changed(rows, first, lambda b: b["readings"].remove(reading(b, "pace_ms")))
    alone = changed(alone, first, lambda b: b["readings"].insert(3, tokens))
    refused(alone, "pace_tokens is read without pace_ms")


def test_the_readings_are_exactly_the_rules() -> None:
    rows = lawful()
    first = at(rows, "control.sensor")
    refused(
        changed(rows, first, lambda b: reading(b, "outcome").update(anomaly=False)),
        "reading 1 (outcome) has anomaly False, the rule gives True",
    )
    refused(
        changed(rows, first, lambda b: reading(b, "loop").update(trigger="level")),
        "(loop) has trigger 'level', the rule gives 'anomaly'",
    )
    refused(
        changed(rows, first, lambda b: reading(b, "loop").update(tier=1)),
        "(loop) has tier 1, the rule gives 2",
    )
    swapped = changed(rows, first, lambda b: b["readings"].reverse())
    refused(swapped, "reading 1 (loop) has sensor 'loop', the rule gives 'outcome'")
    extra = {"sensor": "modules", "tier": 2, "value": 1, "anomaly": False, "trigger": "level"}
    refused(
        changed(rows, first, lambda b: b["readings"].append(extra)),
        "7 readings recorded, the rule reads 6: outcome, restarts, tests, coverage, pace_ms, loop",
    )
    refused(
        changed(rows, first, lambda b: b["readings"].remove(reading(b, "loop"))),
        "5 readings recorded, the rule reads 6",
    )


# -- decisions and versions ------------------------------------------------------------------


def test_a_decision_that_differs_is_refused_naming_the_member() -> None:
    rows = lawful()
    first = at(rows, "control.decision")
    for member, value in (
        ("action", "scope"),
        ("level", 21),
        ("key", "agent:writer"),
        ("config", None),
        ("step", 1),
        ("threshold", 30),
        ("class", None),
        ("layer", "D"),
        ("rule", "cusum"),
    ):
        reason = refused(
            changed(rows, first, lambda b, m=member, v=value: b.update({m: v})),
            f"control.decision at step 2 records {member} {value!r}",
        )
        assert "the bucket of agent:coder crossed 20 at step 2 (level 20)" in reason


def test_a_missing_decision_is_refused() -> None:
    rows = lawful()
    first = at(rows, "control.decision")
    refused(
        without(rows, first),
        f"a{first}: missing decision: the bucket of agent:coder "
        "crossed 20 at step 2 (level 20) and nothing was decided (I/bucket -> template is "
        "due, the record is config.version)",
    )
    rate = at(rows, "control.decision", 1)
    refused(
        without(rows, rate),
        "missing decision: 3 firings in the window ending at step 4 (at least 3)",
    )
    warn = at(rows, "control.decision", 2)
    refused(
        without(rows, warn),
        "missing decision: the CUSUM of agent:coder:pace_ms reached 850 (h 200) at step 5",
    )
    refused(
        rows[:warn],
        "missing decision: the CUSUM of agent:coder:pace_ms reached 850 (h 200) "
        "at step 5 and nothing was decided before the records end",
    )


def test_an_unprovoked_decision_is_refused() -> None:
    rows = lawful()
    first = at(rows, "control.sensor")
    forged = Decision(1, "I", "bucket", "agent:coder", 10, 20, "test", "template", None)
    rows.insert(first + 1, ("audit", "control.decision", forged.record()))
    refused(
        rows,
        f"a{first + 1}: control.decision I/bucket/template of agent:coder at step 1 "
        "has no trigger: the rules decide nothing there",
    )


def test_a_missing_version_is_refused() -> None:
    rows = lawful()
    second = at(rows, "config.version", 1)
    refused(
        without(rows, second),
        "the decision at step 2 produced configuration version 2, "
        "which is not recorded (the record is lock.release)",
    )
    refused(
        rows[:second],
        "the decision at step 2 produced configuration version 2, which is not recorded",
    )


def test_a_version_must_chain_and_be_the_rules() -> None:
    rows = lawful()
    second = at(rows, "config.version", 1)
    sha1 = rows[at(rows, "config.version")][2]["sha256"]
    cases: list[tuple[Callable[[Body], None], str]] = [
        (lambda b: b.update(version=3), "config.version 3 follows version 1: versions count"),
        (lambda b: b.update(parent="ab" * 32), f"is not the SHA-256 of version 1 ({sha1})"),
        (
            lambda b: b.update(document={"format": "x", "agents": {}}),
            "the document is not a control configuration: format",
        ),
        (lambda b: b.update(sha256="ab" * 32), "sha256 " + "ab" * 32 + " is not its document's"),
        (lambda b: b.update(change="expand"), "records change 'expand', the rule gives 'neutral'"),
        (lambda b: b.update(channel="fast"), "records channel 'fast', the rule gives 'slow'"),
        (lambda b: b.update(impact=[]), "records impact [], the rule gives ['coder']"),
        (lambda b: b.update(step=1), "records step 1, the rule gives 2"),
    ]
    for change, words in cases:
        refused(changed(rows, second, change), words)

    def other(body: Body) -> None:  # a valid, chained version of another strategy
        document = configchain.apply(body["document"], "coder", "template", [], lambda _: False)
        assert document is not None
        body.update(document=document, sha256=configchain.document_sha256(document))

    refused(changed(rows, second, other), "config.version 2 records sha256")
    refused(changed(rows, second, other), "the decision at step 2 produces")


def test_a_version_no_decision_produced_is_refused() -> None:
    rows = lawful()
    second = at(rows, "config.version", 1)
    body = rows[second][2]
    document = configchain.apply(body["document"], "writer", "template", [], lambda _: False)
    assert document is not None
    third = {
        **body,
        "version": 3,
        "parent": body["sha256"],
        "document": document,
        "sha256": configchain.document_sha256(document),
        "impact": ["writer"],
        "step": 2,
    }
    rows.insert(second + 1, ("audit", "config.version", third))
    refused(rows, f"a{second + 1}: config.version 3 was produced by no decision")
    copied = lawful()
    copied.insert(second + 1, copied[second])
    refused(copied, "config.version 2 follows version 2: versions count by one")


def test_a_spawn_loads_the_latest_version() -> None:
    rows = lawful()
    stale = at(rows, "agent.spawn", 2)
    refused(
        changed(rows, stale, lambda b: b.update(config=1)),
        f"a{stale}: batch 'b3' loads configuration version 1, the latest is version 2",
    )
    refused(
        changed(rows, 0 + at(rows, "agent.spawn"), lambda b: b.update(config=2)),
        "loads configuration version 2, the latest is version 1",
    )


# -- coverage of the endings -----------------------------------------------------------------


def test_every_ending_has_exactly_one_step() -> None:
    rows = lawful()
    first = at(rows, "control.sensor")
    failed = at(rows, "attempt.failed")
    refused(
        without(rows, first),
        f"a{failed}: missing step: the failure of task 't1' (attempt 1) "
        "has no control.sensor before its next agent.spawn at a",
    )
    last = at(rows, "control.sensor", 4)
    landed = last - 1
    while rows[landed][1] != "task.transition":
        landed -= 1
    refused(
        without(rows, last, last + 1),
        f"a{landed}: missing step: the landing of task 't3' "
        "(attempt 1) has no control.sensor before run.end at a",
    )
    cut = without(rows, last, last + 1)
    refused(cut[: at(cut, "run.status", 3)], "has no control.sensor before the end of the records")
    again = copy.deepcopy(rows)
    again.insert(first + 1, again[first])
    refused(again, "follows step 1: steps count by one")
    twice = copy.deepcopy(rows)
    twice.insert(failed + 1, twice[failed])
    refused(
        twice,
        f"a{failed}: missing step: the failure of task 't1' (attempt 1) has no "
        f"control.sensor before its failure at a{failed + 1}",
    )


def test_a_rounds_suspension_is_a_step_of_its_round_outcome() -> None:
    rows = raw()
    end = at(rows, "run.end") - 1
    t3 = at(rows, "agent.spawn", 4)
    suspended = [move("t3", "in_progress", "blocked")]
    base = [
        *rows[: t3 + 2],
        ("audit", "round.end", {"task": "t3", "outcome": "incomplete"}),
        *suspended,
        *rows[end:],
    ]
    check = fold(with_control(base, PLAN_BYTES))
    assert check.steps == 5
    sensors = [b for _, k, b in with_control(base, PLAN_BYTES) if k == "control.sensor"]
    assert sensors[-1]["class"] == "incomplete"
    bare = [*rows[: t3 + 2], *suspended, *rows[end:]]
    refused(
        with_control(bare, PLAN_BYTES),
        "task 't3' is suspended (in_progress -> blocked) "
        "without a round.end of its attempt that ends incomplete or blocked",
    )
    done = [
        *rows[: t3 + 2],
        ("audit", "round.end", {"task": "t3", "outcome": "done"}),
        *suspended,
        *rows[end:],
    ]
    refused(with_control(done, PLAN_BYTES), "without a round.end of its attempt")


def test_a_crash_recovery_steps_only_its_crashed_attempts() -> None:
    """After ``run.status starting``: a crashed attempt is a step without facts (pace 0, no
    gates); a landing recorded by the recovery is none; the next epoch counts attempts anew."""
    rows = raw()
    t3 = at(rows, "agent.spawn", 4)
    exited = t3 + 2
    crash = [
        status("starting"),
        (
            "audit",
            "attempt.failed",
            {"task": "t3", "batch": "b5", "attempt": 1, "anomaly": "crash", "retry": True},
        ),
        move("t3", "in_progress", "open"),
        status("running"),
        *attempt("t3", "b6", 70, 2, True),
    ]
    crashed = [*rows[: exited + 1], *crash, *rows[at(rows, "run.end") - 1 :]]
    lawful_crash = with_control(crashed, PLAN_BYTES)
    check = fold(lawful_crash)
    sensors = [b for _, k, b in lawful_crash if k == "control.sensor"]
    assert sensors[4]["class"] == "crash" and reading(sensors[4], "pace_ms")["value"] == 0
    assert check.steps == 6
    paced = at(lawful_crash, "control.sensor", 4)
    refused(
        changed(lawful_crash, paced, lambda b: reading(b, "pace_ms").update(value=1000)),
        "pace_ms reads 1000, the batch's agent.exit took 0 ms",
    )
    merged = [
        *rows[: exited + 1],
        move("t3", "in_progress", "gating"),
        status("starting"),
        move("t3", "gating", "done"),
        status("running"),
        *rows[at(rows, "run.end") - 1 :],
    ]
    assert fold(with_control(merged, PLAN_BYTES)).steps == 4
    continued = [
        *rows[: t3 - 1],
        status("paused"),
        status("starting", 1),
        status("running", 1),
        *rows[t3 - 1 :],
    ]
    continued = [
        r
        if r[1] != "agent.spawn" or r[2]["batch"] != "b5"
        else ("audit", "agent.spawn", {**r[2], "attempt": 1})
        for r in continued
    ]
    assert fold(with_control(continued, PLAN_BYTES)).steps == 5
    wrong = with_control(continued, PLAN_BYTES)
    refused(
        changed(
            wrong, at(wrong, "control.sensor", 4), lambda b: reading(b, "restarts").update(value=1)
        ),
        "restarts reads 1",
    )


# -- phases ----------------------------------------------------------------------------------


def test_a_phase_change_is_recorded_at_once_and_only_then() -> None:
    rows = lawful()
    change = at(rows, "control.phase", 1)
    assert rows[change][2] == {
        "phase": "converge",
        "progress_pm": 1000,
        "step": 4,
        "reason": "progress",
    }
    refused(
        without(rows, change),
        f"a{change}: missing phase: progress 1000 per-mille moved the "
        f"run into 'converge' at a{change - 1}, but control.review comes before its "
        "control.phase",
    )
    refused(
        rows[:change],
        f"a{change - 1}: missing phase: progress 1000 per-mille moved the run "
        "into 'converge', and the records end without its control.phase",
    )
    for member, value in (
        ("phase", "integrate"),
        ("progress_pm", 999),
        ("step", 5),
        ("reason", "run start"),
    ):
        refused(
            changed(rows, change, lambda b, m=member, v=value: b.update({m: v})),
            f"control.phase records {member} {value!r}",
        )
    extra = copy.deepcopy(rows)
    extra.insert(change - 1, extra[change])
    refused(
        extra,
        f"a{change - 1}: control.phase 'converge' without a phase change: progress "
        "666 per-mille keeps the run in 'implement'",
    )


def test_a_sensor_reads_in_the_phase_in_force() -> None:
    rows = lawful()
    last = at(rows, "control.sensor", 4)
    refused(
        changed(rows, last, lambda b: b.update(phase="implement")),
        "records phase 'implement', the evidence gives 'converge'",
    )


# -- the helpers themselves ------------------------------------------------------------------


def test_describe_names_each_trigger() -> None:
    aggregate = Decision(7, "I", "aggregate", "run", 3, 3, "lint", "toolchain", 4)
    assert describe(aggregate) == ("class lint showed in 3 agents' windows (at least 3) at step 7")
    assert exit_of({"duration_ms": 5, "usage": None}).tokens is None
    assert exit_of({"duration_ms": 5, "usage": {"input_tokens": 1, "output_tokens": 2}}).tokens == 3


def test_with_control_leaves_controlled_rows_alone_and_the_check_reads_other_stores() -> None:
    rows = lawful()
    assert with_control(rows, PLAN_BYTES) == rows
    lineage = ("lineage", "artifact.write", {"path": "src/a.py"})
    control = ("control", "command", {"id": "c1"})
    check = fold([*rows, lineage, control])
    assert check.steps == 5
    assert parse_canonical(PLAN_BYTES)["control"]["threshold"] == 20


# -- the meta layer's reviews ----------------------------------------------------------------


def test_each_review_point_passed_has_its_review() -> None:
    rows = lawful()
    reviews = [i for i, (_, k, _) in enumerate(rows) if k == "control.review"]
    assert [rows[i][2]["point"] for i in reviews] == [250, 500, 750]
    assert rows[reviews[0]][2]["step"] == 2 and rows[reviews[0]][2]["progress_pm"] == 333
    first = reviews[0]
    refused(
        without(rows, first),
        f"a{first}: missing review: progress 0 -> 333 per-mille at "
        f"a{first - 1} passes the 250 per-mille review point, and control.sensor comes",
    )
    last = reviews[-1]
    refused(rows[:last], "missing review: the records end before the control.review")
    for member, value in (
        ("step", 3),
        ("progress_pm", 334),
        ("failed", 3),
        ("fit_pm", 1),
        ("fit_alert", True),
        ("judged", 9),
        ("point", 500),
    ):
        refused(
            changed(rows, first, lambda b, m=member, v=value: b.update({m: v})),
            f"control.review of point 250 records {member} {value!r}, the rule gives",
        )
    extra = copy.deepcopy(rows)
    extra.insert(first + 1, extra[first])
    refused(extra, f"a{first + 1}: control.review of point 250 without a settling transition")


def test_a_review_is_timed_by_the_records_and_heightened_only_in_hours_four_to_six() -> None:
    rows = lawful()
    first = at(rows, "control.review")
    refused(
        changed(rows, first, lambda b: b.update(elapsed_s=1)),
        "records elapsed_s 1: the settlement at a",
    )
    refused(
        changed(rows, first, lambda b: b.update(heightened=True)),
        "records heightened True at 0 s; hours 4 to 6 of the run give False",
    )
    check = control_check(RUN, PLAN_BYTES)
    late = "2026-01-01T05:00:00.000000Z"  # five hours in: heightened
    with pytest.raises(ControlError, match="records heightened False at 18000 s"):
        for i, (store, kind, body) in enumerate(rows[: first + 1]):
            if store == "audit":
                when, review = (late, {**body, "elapsed_s": 18000}) if i == first else (TIME, body)
                check.audit(Record(store, RUN, i, when, kind, review, "0" * 64), f"a{i}")


# -- strategies that depend on the recorded matrix and sandbox ------------------------------

OFFLINE = {"kind": "bwrap", "network": False, "private_mounts": False, "opt_out": False}
TOOLBOX = parse_plan(
    {
        "plan": {
            "name": "p",
            "max_attempts": 10,
            "control": {"threshold": 20, "phase_bounds": [0, 1001, 1001]},
        },
        "task": [
            {"id": "t4", "role": "planner", "prompt": "p", "adapter": "claude",
             "scope": ["plans/**"], "gates": [{"name": "pytest", "command": ["true"]}]},
            {"id": "t5", "role": "browser", "prompt": "p", "scope": ["web/**"], "tools": ["web"]},
        ],
    }
)  # fmt: skip
TOOLBOX_BYTES = plan_bytes(TOOLBOX)


def _agent_failure(task: str, batch: str, n: int) -> list[Row]:
    return [move(task, "open", "claimed"), spawn(task, batch, n),
            move(task, "claimed", "in_progress"), exit_(batch, 10),
            ("audit", "attempt.failed", {"task": task, "batch": batch, "attempt": n,
                                         "anomaly": "agent", "retry": True}),
            move(task, "in_progress", "open"),
            ("audit", "lock.release", {"batch": batch, "reason": "retired"})]  # fmt: skip


def toolbox() -> list[Row]:
    """t4 (claude, lowered by the recorded offline sandbox) fails its gate four times: the
    template, then the toolchain (``shell`` added: consistent only because the sandbox lowers
    claude's tags); t5 (``web``, a risky tool) fails as an agent four times: the template,
    then the scope (``web`` dropped: a contraction, the fast channel)."""
    rows = start(TOOLBOX)
    rows[0][2]["sandbox"] = OFFLINE
    for n in range(1, 5):
        rows += attempt("t4", f"b{n}", 10, n, False)
    for n in range(1, 5):
        rows += _agent_failure("t5", f"c{n}", n)
    return with_control([*rows, status("failed"), ("audit", "run.end", {})], TOOLBOX_BYTES)


def test_strategies_follow_the_recorded_matrix_and_sandbox() -> None:
    rows = toolbox()
    decisions = [b for _, k, b in rows if k == "control.decision"]
    versions = [b for _, k, b in rows if k == "config.version"]
    assert [(d["key"], d["action"]) for d in decisions if d["rule"] == "bucket"] == [
        ("agent:planner", "template"), ("agent:planner", "toolchain"),
        ("agent:browser", "template"), ("agent:browser", "scope"),
    ]  # fmt: skip
    assert [(v["change"], v["channel"]) for v in versions] == [
        ("initial", "initial"), ("neutral", "slow"), ("expand", "slow"), ("neutral", "slow"),
        ("contract", "fast"),
    ]  # fmt: skip
    check = fold(rows, TOOLBOX_BYTES)
    summary = check.summary()
    assert summary is not None and summary.versions == 4
    assert summary.decisions["I/bucket/template"] == 2
    # under no sandbox claude carries every tag: the toolchain would complete the trifecta
    bare = copy.deepcopy(rows)
    bare[0][2]["sandbox"] = None
    refused(bare, "records action 'template', the rule decides 'split'", plan=TOOLBOX_BYTES)
    contract = at(rows, "config.version", 4)
    refused(changed(rows, contract, lambda b: b.update(channel="slow")),
            f"a{contract}: config.version 5 records channel 'slow', the rule gives 'fast'",
            plan=TOOLBOX_BYTES)  # fmt: skip


# -- where a refusal is located, and its words ----------------------------------------------


def test_each_refusal_names_its_record_and_reason() -> None:
    rows = lawful()
    first = at(rows, "control.phase")
    refused(changed(rows, first, lambda b: b.update(step=1)),
            f"a{first}: control.phase records step 1, the rule gives 0 (phase 'implement' at 0 "
            "per-mille of settled tasks, step 0)")  # fmt: skip
    change = at(rows, "control.phase", 1)
    refused(changed(rows, change, lambda b: b.update(step=1)), f"a{change}: control.phase")
    decision = at(rows, "control.decision")
    refused(changed(rows, decision, lambda b: b.update(level=1)), f"a{decision}: control.decision")
    second = at(rows, "config.version", 1)
    refused(changed(rows, second, lambda b: b.update(parent=None)), f"a{second}: config.version")
    refused(changed(rows, second, lambda b: b.update(snapshot=None)),
            f"a{second}: config.version 2 records snapshot None, the decision at step 2 "
            "produces")  # fmt: skip
    copied = copy.deepcopy(rows)
    copied.insert(second + 1, copied[second])
    refused(copied, f"a{second + 1}: config.version 2 follows version 2")
    sensor = at(rows, "control.sensor")
    for change_reading, words in (
        (lambda b: reading(b, "pace_ms").update(value=1), "pace_ms reads 1"),
        (lambda b: reading(b, "loop").update(anomaly=True), "reading 6 (loop) has anomaly True"),
        (lambda b: reading(b, "outcome").update(value=0), "tier-1 sensor outcome reads 0"),
    ):
        refused(changed(rows, sensor, change_reading), f"a{sensor}: control.sensor step 1: {words}")
    refused(without(rows, at(rows, "config.version")), "(config.version 1 follows the last "
            "task.planned)")  # fmt: skip
    refused(rows[: at(rows, "config.version")], f"run {RUN!r}: no configuration version 1 and "
            "first control.phase after its tasks (every format-2 run records them)")  # fmt: skip
    stray = copy.deepcopy(rows)
    stray.insert(sensor + 1, copy.deepcopy(stray[sensor]))
    stray[sensor + 1][2]["step"] = 2
    refused(stray, f"a{sensor + 1}: control.sensor step 2: step without an attempt ending: "
            "task 't1' has no attempt.failed, landing or rounds suspension since its last "
            "step")  # fmt: skip
    empty = changed(rows, sensor, lambda b: b.update(readings=[]))
    refused(empty, "tier-1 sensor outcome reads nothing")
    document = canonical_bytes({"tasks": [{"id": "t1", "role": "r", "adapter": "a", "tools": [],
                                           "scope": []}], "control": {}})  # fmt: skip
    refused(rows, "runs/r1/plan.json: tasks[0] needs string id, role, adapter and string lists "
            "tools, scope, requirements", plan=document)  # fmt: skip


def test_gates_count_per_kind_and_a_recovered_step_has_none() -> None:
    rows = raw()
    failed = at(rows, "gate.result")
    rows.insert(failed + 1, ("audit", "gate.result", {"task": "t1", "gate": "pytest-slow",
                                                      "passed": False}))  # fmt: skip
    lawful_rows = with_control(rows, PLAN_BYTES)
    first = lawful_rows[at(lawful_rows, "control.sensor")][2]
    assert reading(first, "tests")["value"] == 2
    fold(lawful_rows)
    # a crash recovery's step reads no gates, though its batch recorded one
    base = raw()
    t3 = at(base, "agent.spawn", 4)
    crash = [exit_("b5", 900), gate("t3", False), status("starting"),
             ("audit", "attempt.failed", {"task": "t3", "batch": "b5", "attempt": 1,
                                          "anomaly": "crash", "retry": True}),
             move("t3", "in_progress", "open"), status("running"),
             *attempt("t3", "b6", 70, 2, True)]  # fmt: skip
    crashed = with_control([*base[: t3 + 2], *crash, *base[at(base, "run.end") - 1 :]], PLAN_BYTES)
    fold(crashed)
    step = at(crashed, "control.sensor", 4)
    assert "tests" not in [r["sensor"] for r in crashed[step][2]["readings"]]
    tests = {"sensor": "tests", "tier": 1, "value": 1, "anomaly": True, "trigger": None}
    refused(changed(crashed, step, lambda b: b["readings"].insert(2, tests)),
            "tier-1 sensor tests reads 1, the evidence gives nothing")  # fmt: skip


def test_a_missing_suspension_step_and_a_late_one_name_their_task() -> None:
    rows = raw()
    end = at(rows, "run.end") - 1
    t3 = at(rows, "agent.spawn", 4)
    outcome = ("audit", "round.end", {"task": "t3", "outcome": "blocked"})
    suspended = with_control(
        [*rows[: t3 + 2], outcome, move("t3", "in_progress", "blocked"), *rows[end:]], PLAN_BYTES
    )
    sensor = at(suspended, "control.sensor", 4)
    assert suspended[sensor][2]["class"] == "blocked"
    refused(without(suspended, sensor), "missing step: the suspension of task 't3' (attempt 1)")
    cut = without(
        rows_ := lawful(), at(rows_, "control.sensor", 4), at(rows_, "control.decision", 2)
    )
    refused(cut[: at(cut, "run.status", 3)], "the landing of task 't3' (attempt 1) has no "
            "control.sensor before the end of the records")  # fmt: skip


def test_a_continued_epoch_counts_attempts_anew() -> None:
    rows = raw()
    t3 = at(rows, "agent.spawn", 4)
    continued = [*rows[: t3 - 1], status("paused"), status("starting", 1), status("running", 1),
                 *rows[t3 - 1 : t3 + 1], status("running", 1), *rows[t3 + 1 :]]  # fmt: skip
    fold(with_control(continued, PLAN_BYTES))
    refused([("audit", "control.phase", {})], "control.phase in a run without run.start")


def _timed(rows: list[Row], times: dict[int, str], last: int) -> None:
    """Fold ``rows[: last + 1]`` with the given record times (others at ``TIME``)."""
    check = control_check(RUN, PLAN_BYTES)
    for i, (store, kind, body) in enumerate(rows[: last + 1]):
        if store == "audit":
            record = Record(store, RUN, i, times.get(i, TIME), kind, body, "0" * 64)
            check.audit(record, f"a{i}")


def test_elapsed_seconds_are_floored_between_the_record_times() -> None:
    rows = lawful()
    review = at(rows, "control.review")
    settling = review - 1
    later = {i: "2026-01-01T00:00:01.500000Z" for i in range(settling, review + 1)}
    _timed(changed(rows, review, lambda b: b.update(elapsed_s=1)), later, review)  # 1.5 s: 1
    exact = {i: "2026-01-01T00:00:01.000000Z" for i in range(settling, review + 1)}
    with pytest.raises(ControlError, match="records elapsed_s 0: the settlement at a"):
        _timed(rows, exact, review)  # a whole second since version 1: at least 1
    for elapsed, heightened in ((14400, True), (21599, True), (21600, False)):
        hours = {i: "2026-01-01T06:00:00.000000Z" for i in range(settling, review + 1)}
        body = {"elapsed_s": elapsed, "heightened": heightened}
        timed = changed(rows, review, lambda b, u=body: b.update(u))
        try:
            _timed(timed, hours, review)
        except ControlError as exc:  # the review's values at these thresholds differ: fine
            assert "records heightened" not in str(exc), exc


def test_a_verdict_must_judge_a_waiting_alert() -> None:
    rows = lawful()
    warn = rows[at(rows, "control.decision", 1)][2]  # the rate escalation at step 4: an alert
    alert = f"{warn['step']}:{warn['key']}"
    after = at(rows, "control.decision", 1) + 1
    verdict = ("audit", "control.verdict", {"alert": alert, "verdict": "overridden"})
    fold([*rows[:after], verdict, *rows[after:]])
    twice = [*rows[:after], verdict, verdict, *rows[after:]]
    refused(twice, f"a{after + 1}: control.verdict refused by the rule: alert {alert!r} is not "
            "waiting for a verdict")  # fmt: skip
    wrong = ("audit", "control.verdict", {"alert": alert, "verdict": "maybe"})
    refused([*rows[:after], wrong, *rows[after:]], "verdict 'maybe' is not one of")
