"""The round outcome rule (verify/rules/rounds.py, docs/spec/rounds.md "Round outcome").

Every branch of decide_round has a test that names it; the edges (the gate at exactly
GATE_AFTER, the budget at exactly max_rounds, the ceiling) are pinned on both sides; and
hypothesis runs random sequences of rounds against a small reference model written from the
spec's table, not from the code.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.rules.header import INTEGRITIES, NEXT_ACTIONS, STATUSES
from harness.verify.rules.rounds import (
    DEFAULT_MAX_ROUNDS,
    GATE_AFTER,
    MAX_EPOCH,
    MAX_ROUNDS_CEILING,
    OUTCOMES,
    RoundDecision,
    decide_round,
    is_ghost,
)


def decide(**kw: Any) -> tuple[str, int]:
    args: dict[str, Any] = {
        "round": 1,
        "max_rounds": 25,
        "failing_before": 0,
        "plan_valid": True,
        "next_action": "gui",
        "effective": "complete",
        "integrity": "clean",
    }
    args.update(kw)
    got = decide_round(**args)
    return got.outcome, got.failing


def test_constants() -> None:
    assert (GATE_AFTER, DEFAULT_MAX_ROUNDS, MAX_ROUNDS_CEILING, MAX_EPOCH) == (3, 25, 1000, 10000)
    assert OUTCOMES == ("continue", "done", "incomplete", "blocked", "gate", "violation")


def test_decision_is_frozen() -> None:
    got = decide_round(
        round=1,
        max_rounds=1,
        failing_before=0,
        plan_valid=True,
        next_action="done",
        effective=None,
        integrity=None,
    )
    assert got == RoundDecision("done", 0)
    with pytest.raises(FrozenInstanceError):
        got.outcome = "continue"  # type: ignore[misc]


def test_ghost() -> None:
    assert is_ghost(claims_success=True, changed=False)
    assert not is_ghost(claims_success=True, changed=True)
    assert not is_ghost(claims_success=False, changed=False)
    assert not is_ghost(claims_success=False, changed=True)


# ---- invalid plan -----------------------------------------------------------------------


def test_invalid_plan_counts_as_failing_and_continues() -> None:
    assert decide(plan_valid=False, next_action=None, failing_before=0) == ("continue", 1)
    assert decide(plan_valid=False, next_action=None, failing_before=1) == ("continue", 2)


def test_invalid_plan_opens_the_gate_at_exactly_gate_after() -> None:
    assert decide(plan_valid=False, next_action=None, failing_before=GATE_AFTER - 1) == (
        "gate",
        GATE_AFTER,
    )
    assert decide(plan_valid=False, next_action=None, failing_before=GATE_AFTER) == (
        "gate",
        GATE_AFTER + 1,
    )


def test_invalid_plan_at_the_round_budget_is_incomplete() -> None:
    assert decide(plan_valid=False, next_action=None, round=25, max_rounds=25) == (
        "incomplete",
        1,
    )
    assert decide(plan_valid=False, next_action=None, round=24, max_rounds=25) == ("continue", 1)
    # the gate wins over the budget
    assert decide(
        plan_valid=False, next_action=None, round=25, max_rounds=25, failing_before=2
    ) == ("gate", 3)


def test_refused_done_is_an_invalid_plan() -> None:
    """accept_done refused: the caller passes plan_valid False with next done."""
    assert decide(plan_valid=False, next_action="done", failing_before=0) == ("continue", 1)
    assert decide(plan_valid=False, next_action="done", failing_before=2) == ("gate", 3)
    for action in NEXT_ACTIONS:
        assert decide(plan_valid=False, next_action=action, effective=None, integrity=None) == (
            "continue",
            1,
        )


# ---- done / blocked / ask -----------------------------------------------------------------


def test_done_resets_failing() -> None:
    assert decide(next_action="done", failing_before=5, effective=None, integrity=None) == (
        "done",
        0,
    )
    assert decide(next_action="done", round=25, max_rounds=25) == ("done", 0)


def test_blocked_plan_keeps_failing() -> None:
    assert decide(next_action="blocked", failing_before=2, effective=None, integrity=None) == (
        "blocked",
        2,
    )
    assert decide(next_action="blocked", failing_before=0) == ("blocked", 0)


def test_ask_waits_at_the_gate_and_keeps_failing() -> None:
    assert decide(next_action="ask", failing_before=1, effective=None, integrity=None) == (
        "gate",
        1,
    )
    assert decide(next_action="ask", round=25, max_rounds=25) == ("gate", 0)


# ---- gui / cli: executor and auditor ran ----------------------------------------------------


@pytest.mark.parametrize("action", ["gui", "cli"])
def test_violation_wins(action: str) -> None:
    for effective in STATUSES:
        assert decide(
            next_action=action, effective=effective, integrity="violation", failing_before=4
        ) == ("violation", 5)
    assert decide(next_action=action, effective="blocked", integrity="violation") == (
        "violation",
        1,
    )


@pytest.mark.parametrize("action", ["gui", "cli"])
def test_complete_round_resets_failing(action: str) -> None:
    assert decide(next_action=action, failing_before=2) == ("continue", 0)
    assert decide(next_action=action, failing_before=2, round=25, max_rounds=25) == (
        "incomplete",
        0,
    )
    assert decide(next_action=action, round=24, max_rounds=25) == ("continue", 0)
    assert decide(next_action=action, round=26, max_rounds=25) == ("incomplete", 0)


@pytest.mark.parametrize("action", ["gui", "cli"])
def test_blocked_audit_blocks_and_counts(action: str) -> None:
    assert decide(next_action=action, effective="blocked", integrity="suspect") == ("blocked", 1)
    assert decide(next_action=action, effective="blocked", integrity="clean", failing_before=2) == (
        "blocked",
        3,
    )


@pytest.mark.parametrize("action", ["gui", "cli"])
def test_incomplete_audit_fails_like_an_invalid_plan(action: str) -> None:
    for integrity in ("clean", "suspect"):
        kw: dict[str, Any] = {"next_action": action, "effective": "incomplete"}
        kw["integrity"] = integrity
        assert decide(**kw) == ("continue", 1)
        assert decide(**kw, failing_before=1) == ("continue", 2)
        assert decide(**kw, failing_before=2) == ("gate", 3)
        assert decide(**kw, round=25, max_rounds=25) == ("incomplete", 1)
        assert decide(**kw, round=25, max_rounds=25, failing_before=2) == ("gate", 3)


def test_max_rounds_one() -> None:
    assert decide(max_rounds=1) == ("incomplete", 0)
    assert decide(max_rounds=1, effective="incomplete") == ("incomplete", 1)


# ---- argument checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"round": 0}, "round must be an integer >= 1, got 0"),
        ({"round": -1}, "round must be an integer >= 1, got -1"),
        ({"round": True}, "round must be an integer >= 1, got True"),
        ({"round": 1.0}, "round must be an integer >= 1, got 1.0"),
        ({"max_rounds": 0}, "max_rounds must be 1..1000, got 0"),
        ({"max_rounds": MAX_ROUNDS_CEILING + 1}, "max_rounds must be 1..1000, got 1001"),
        ({"max_rounds": True}, "max_rounds must be 1..1000, got True"),
        ({"max_rounds": "25"}, "max_rounds must be 1..1000, got '25'"),
        ({"failing_before": -1}, "failing_before must be an integer >= 0, got -1"),
        ({"failing_before": False}, "failing_before must be an integer >= 0, got False"),
        ({"failing_before": 0.0}, "failing_before must be an integer >= 0, got 0.0"),
        ({"next_action": "GUI"}, "unknown next action 'GUI'"),
        ({"next_action": "continue"}, "unknown next action 'continue'"),
        ({"effective": "done"}, "unknown effective status 'done'"),
        ({"effective": "Complete"}, "unknown effective status 'Complete'"),
        ({"integrity": "ok"}, "unknown integrity 'ok'"),
        ({"integrity": "needs_revision"}, "unknown integrity 'needs_revision'"),
        ({"plan_valid": True, "next_action": None}, "a valid plan has a next action"),
        (
            {"next_action": "gui", "effective": None},
            "a gui round needs the audit's effective status and integrity",
        ),
        (
            {"next_action": "cli", "integrity": None},
            "a cli round needs the audit's effective status and integrity",
        ),
        (
            {"next_action": "cli", "effective": None, "integrity": None},
            "a cli round needs the audit's effective status and integrity",
        ),
    ],
)
def test_argument_checks(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        decide(**bad)
    assert str(raised.value) == message


def test_argument_edges_accepted() -> None:
    assert decide(max_rounds=MAX_ROUNDS_CEILING, round=MAX_ROUNDS_CEILING) == ("incomplete", 0)
    assert decide(max_rounds=1, round=1, failing_before=0) == ("incomplete", 0)
    assert decide(round=10**6, max_rounds=MAX_ROUNDS_CEILING) == ("incomplete", 0)
    for action in ("done", "blocked", "ask"):
        for effective in (*STATUSES, None):
            for integrity in (*INTEGRITIES, None):
                decide(next_action=action, effective=effective, integrity=integrity)


# ---- the reference model ----------------------------------------------------------------------


def model(
    rnd: int, max_rounds: int, failing: int, valid: bool, nxt: str | None, eff: str, integ: str
) -> tuple[str, int]:
    """The spec's table, read row by row (rounds.md "Round outcome")."""
    table_direct = {"done": ("done", 0), "blocked": ("blocked", failing), "ask": ("gate", failing)}
    if valid and nxt in table_direct:
        return table_direct[str(nxt)]
    if valid and integ == "violation":
        return ("violation", failing + 1)
    if valid and eff == "blocked":
        return ("blocked", failing + 1)
    succeeded = valid and eff == "complete"
    after = 0 if succeeded else failing + 1
    if not succeeded and after >= 3:
        return ("gate", after)
    return ("incomplete" if rnd >= max_rounds else "continue", after)


_round_input = st.tuples(
    st.booleans(),  # plan valid
    st.sampled_from(NEXT_ACTIONS),
    st.sampled_from(STATUSES),
    st.sampled_from(INTEGRITIES),
)


@given(st.integers(1, 40), st.lists(_round_input, min_size=1, max_size=60))
@settings(max_examples=300, deadline=None)
def test_random_sequences_agree_with_the_model(
    max_rounds: int, rounds: list[tuple[bool, str, str, str]]
) -> None:
    failing = 0
    for number, (valid, nxt, eff, integ) in enumerate(rounds, start=1):
        action: str | None = (
            nxt if valid or number % 2 else None
        )  # invalid plans: None or a refusal
        got = decide_round(
            round=number,
            max_rounds=max_rounds,
            failing_before=failing,
            plan_valid=valid,
            next_action=action,
            effective=eff if action in ("gui", "cli") or number % 3 else None,
            integrity=integ if action in ("gui", "cli") or number % 3 else None,
        )
        assert (got.outcome, got.failing) == model(
            number, max_rounds, failing, valid, action, eff, integ
        )
        assert got.outcome in OUTCOMES and got.failing >= 0
        if got.outcome == "gate" and not (valid and action == "ask"):
            assert got.failing >= GATE_AFTER
        if got.outcome == "continue":
            assert number < max_rounds and got.failing < GATE_AFTER
        failing = got.failing
        if got.outcome not in {"continue", "gate"}:
            break
