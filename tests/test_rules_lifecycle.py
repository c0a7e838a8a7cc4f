"""The run lifecycle rule (verify/rules/lifecycle.py, docs/spec/rounds.md "Run lifecycle").

Every (current, target, epoch_step) triple is checked against a table written out here from
the spec, so adding or dropping one transition in the code fails a named case.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.verify.rules.lifecycle import (
    ACTIVE,
    ALIASES,
    TERMINAL,
    completed_by_exit,
    legal_run_transition,
    may_continue,
    normalise_status,
    terminal_status,
)

STATES = (*ACTIVE, *TERMINAL)
TERMINALS = {"completed", "failed", "cancelled", "blocked", "incomplete"}

# The spec's table, same epoch (epoch_step False).
SAME_EPOCH: set[tuple[str | None, str]] = {
    (None, "creating"),
    ("creating", "starting"),
    ("starting", "running"),
    ("running", "waiting_approval"),
    ("waiting_approval", "running"),
    ("running", "stopping"),
    ("waiting_approval", "stopping"),
    ("stopping", "cancelled"),
    # crash resume: any active state -> starting
    ("creating", "starting"),
    ("starting", "starting"),
    ("running", "starting"),
    ("waiting_approval", "starting"),
    ("stopping", "starting"),
}
SAME_EPOCH |= {(s, t) for s in ("running", "waiting_approval") for t in TERMINALS}
# continue (epoch_step True)
NEXT_EPOCH: set[tuple[str | None, str]] = {
    ("blocked", "starting"),
    ("incomplete", "starting"),
    *((s, "starting") for s in ACTIVE),
}


def test_vocabularies() -> None:
    assert ACTIVE == ("creating", "starting", "running", "waiting_approval", "stopping")
    assert TERMINAL == ("completed", "failed", "cancelled", "blocked", "incomplete")
    assert ALIASES == {
        "complete": "completed",
        "done": "completed",
        "success": "completed",
        "finished": "completed",
        "canceled": "cancelled",
    }


@pytest.mark.parametrize("epoch_step", [False, True])
def test_every_pair_against_the_table(epoch_step: bool) -> None:
    table = NEXT_EPOCH if epoch_step else SAME_EPOCH
    wrong = [
        (current, target)
        for current, target in itertools.product((None, *STATES), STATES)
        if legal_run_transition(current, target, epoch_step=epoch_step)
        != ((current, target) in table)
    ]
    assert wrong == []


def test_named_edges() -> None:
    assert legal_run_transition(None, "creating", epoch_step=False)
    assert not legal_run_transition(None, "starting", epoch_step=False)
    assert not legal_run_transition(None, "starting", epoch_step=True)
    assert not legal_run_transition("stopping", "completed", epoch_step=False)
    assert legal_run_transition("stopping", "cancelled", epoch_step=False)
    assert not legal_run_transition("starting", "failed", epoch_step=False)
    assert not legal_run_transition("completed", "starting", epoch_step=True)
    assert not legal_run_transition("failed", "starting", epoch_step=True)
    assert not legal_run_transition("cancelled", "starting", epoch_step=True)
    assert not legal_run_transition("blocked", "starting", epoch_step=False)
    assert not legal_run_transition("blocked", "running", epoch_step=True)
    assert not legal_run_transition("running", "running", epoch_step=False)


def test_unknown_states_are_never_legal() -> None:
    for epoch_step in (False, True):
        for state in ("Running", "done", "complete", "", "canceled"):
            assert not legal_run_transition(state, "starting", epoch_step=epoch_step)
            assert not legal_run_transition("running", state, epoch_step=epoch_step)
            assert not legal_run_transition(None, state, epoch_step=epoch_step)


def test_normalise_status() -> None:
    for state in STATES:
        assert normalise_status(state) == state
        assert normalise_status(f"  {state.upper()}\n") == state
    for alias, state in ALIASES.items():
        assert normalise_status(alias) == state
        assert normalise_status(f"\t{alias.title()} ") == state
    for junk in ("", " ", "completedd", "waiting approval", "cancel", "ok", "RUNNİNG", "stopped"):
        assert normalise_status(junk) is None
    assert normalise_status("\u00a0running") is None  # ASCII whitespace only


@given(st.text(max_size=30))
def test_normalise_status_is_total(text: str) -> None:
    got = normalise_status(text)
    assert got is None or got in STATES


def test_may_continue() -> None:
    assert [s for s in STATES if may_continue(s)] == ["blocked", "incomplete"]
    assert not may_continue("Blocked") and not may_continue("")


def test_terminal_status_priorities() -> None:
    done = {"a": "done", "b": "done"}
    susp_b = {"a": "blocked"}
    susp_i = {"b": "incomplete"}
    both = {"a": "blocked", "b": "incomplete"}
    assert terminal_status(done, both, stopped=True, aborted=True) == "cancelled"
    assert terminal_status(done, {}, stopped=True, aborted=False) == "cancelled"
    assert terminal_status(done, both, stopped=False, aborted=True) == "failed"
    assert terminal_status(done, both, stopped=False, aborted=False) == "blocked"
    assert terminal_status(done, susp_b, stopped=False, aborted=False) == "blocked"
    assert terminal_status(done, susp_i, stopped=False, aborted=False) == "incomplete"
    assert terminal_status(done, {}, stopped=False, aborted=False) == "completed"
    assert terminal_status({"a": "done", "b": "failed"}, {}, stopped=False, aborted=False) == (
        "failed"
    )
    assert terminal_status({"a": "done", "b": "cancelled"}, {}, stopped=False, aborted=False) == (
        "failed"
    )
    assert terminal_status({}, {}, stopped=False, aborted=False) == "failed"
    assert terminal_status({"a": "blocked"}, susp_i, stopped=False, aborted=False) == "incomplete"


def test_terminal_status_rejects_unknown_suspensions() -> None:
    for why in ("done", "Blocked", "", "failed"):
        with pytest.raises(ValueError, match="suspension"):
            terminal_status({}, {"a": why}, stopped=True, aborted=False)


def test_completed_by_exit() -> None:
    assert completed_by_exit(0, completion_evidence=True)
    assert not completed_by_exit(0, completion_evidence=False)
    assert not completed_by_exit(1, completion_evidence=True)
    assert not completed_by_exit(-9, completion_evidence=True)
    assert not completed_by_exit(None, completion_evidence=True)
    for flag in (False, True):
        with pytest.raises(ValueError) as raised:
            completed_by_exit(flag, completion_evidence=True)
        assert str(raised.value) == "exit_code must be an integer or None, not a bool"
