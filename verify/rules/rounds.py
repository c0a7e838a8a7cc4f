"""The outcome of one audited round and the failing-round count (issue 12 §1).

After each round the runtime records ``round.end`` {outcome, failing}; the verifier re-decides
both from the round's recorded plan and audit with ``decide_round``. The rule is small, but it
is the one place that says when a task is done, when it is blocked, when the human gate opens
(``GATE_AFTER`` consecutive failing rounds) and when the round budget is spent, so the runtime
and the verifier cannot drift apart on it (docs/spec/rounds.md "Round outcome").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .header import INTEGRITIES, NEXT_ACTIONS, STATUSES

GATE_AFTER: Final = 3
"""Consecutive failing rounds that open the human gate."""
DEFAULT_MAX_ROUNDS: Final = 25
MAX_ROUNDS_CEILING: Final = 1000
MAX_EPOCH: Final = 10000
OUTCOMES: Final = ("continue", "done", "incomplete", "blocked", "gate", "violation")

__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "GATE_AFTER",
    "MAX_EPOCH",
    "MAX_ROUNDS_CEILING",
    "OUTCOMES",
    "RoundDecision",
    "decide_round",
    "is_ghost",
]


@dataclass(frozen=True)
class RoundDecision:
    """What a round ends with, and the consecutive failing-round count after it."""

    outcome: str
    failing: int


def is_ghost(*, claims_success: bool, changed: bool) -> bool:
    """Ghost success: the executor claims success and the round changed nothing."""
    return claims_success and not changed


def _failed(round: int, max_rounds: int, failing: int) -> RoundDecision:
    """A failing round: the gate once GATE_AFTER rounds in a row failed, else the budget."""
    if failing >= GATE_AFTER:
        return RoundDecision("gate", failing)
    if round >= max_rounds:
        return RoundDecision("incomplete", failing)
    return RoundDecision("continue", failing)


def decide_round(
    *,
    round: int,
    max_rounds: int,
    failing_before: int,
    plan_valid: bool,
    next_action: str | None,
    effective: str | None,
    integrity: str | None,
) -> RoundDecision:
    """The outcome of round ``round`` (rounds.md "Round outcome").

    ``plan_valid`` False covers a ``done`` refused by ``accept_done``. ``effective`` and
    ``integrity`` are the audit's (None when no executor/auditor ran). Raises ValueError on
    arguments outside their ranges or vocabularies, and on inconsistent ones: a valid plan
    without a next action, or a gui/cli round without the audit's effective status and
    integrity (the auditor always runs after an executor step; a missing report is replaced,
    never absent).
    """
    if isinstance(round, bool) or not isinstance(round, int) or round < 1:
        raise ValueError(f"round must be an integer >= 1, got {round!r}")
    if (
        isinstance(max_rounds, bool)
        or not isinstance(max_rounds, int)
        or not 1 <= max_rounds <= MAX_ROUNDS_CEILING
    ):
        raise ValueError(f"max_rounds must be 1..{MAX_ROUNDS_CEILING}, got {max_rounds!r}")
    if (
        isinstance(failing_before, bool)
        or not isinstance(failing_before, int)
        or failing_before < 0
    ):
        raise ValueError(f"failing_before must be an integer >= 0, got {failing_before!r}")
    if next_action is not None and next_action not in NEXT_ACTIONS:
        raise ValueError(f"unknown next action {next_action!r}")
    if effective is not None and effective not in STATUSES:
        raise ValueError(f"unknown effective status {effective!r}")
    if integrity is not None and integrity not in INTEGRITIES:
        raise ValueError(f"unknown integrity {integrity!r}")
    if plan_valid and next_action is None:
        raise ValueError("a valid plan has a next action")
    if plan_valid and next_action in ("gui", "cli") and (effective is None or integrity is None):
        raise ValueError(f"a {next_action} round needs the audit's effective status and integrity")
    if not plan_valid:
        return _failed(round, max_rounds, failing_before + 1)
    if next_action == "done":
        return RoundDecision("done", 0)
    if next_action == "blocked":
        return RoundDecision("blocked", failing_before)
    if next_action == "ask":
        return RoundDecision("gate", failing_before)
    # gui / cli: the executor and the auditor ran
    if integrity == "violation":
        return RoundDecision("violation", failing_before + 1)
    if effective == "complete":
        return RoundDecision("incomplete" if round >= max_rounds else "continue", 0)
    if effective == "blocked":
        return RoundDecision("blocked", failing_before + 1)
    return _failed(round, max_rounds, failing_before + 1)
