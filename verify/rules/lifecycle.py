"""The run lifecycle: run states, their legal transitions and the run's terminal status.

Issue 12 §4. A run's ``run.status`` records walk this table; the runtime refuses any step not
in it and the verifier replays every record against it. Resume comes in one form here:
*continue* (``epoch_step`` True) reopens a blocked or incomplete run, or a crashed active one,
at epoch + 1; a crash resume in the same epoch restarts an active run. *Retry* is a new run and
so starts again at ``None -> creating`` (docs/spec/rounds.md "Run lifecycle").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

ACTIVE: Final = ("creating", "starting", "running", "waiting_approval", "stopping")
TERMINAL: Final = ("completed", "failed", "cancelled", "blocked", "incomplete")
STATES: Final = ACTIVE + TERMINAL
ALIASES: Final = {
    "complete": "completed",
    "done": "completed",
    "success": "completed",
    "finished": "completed",
    "canceled": "cancelled",
}
CONTINUABLE: Final = ("blocked", "incomplete")
SUSPENSIONS: Final = ("blocked", "incomplete")
"""What a rounds task may be suspended with (its last round's outcome)."""

_ASCII_SPACE: Final = " \t\r\n\f\v"
_UPPER_TO_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Same-epoch steps (epoch_step False), besides "any active state -> starting" (crash resume).
_STEPS: Final[dict[str | None, frozenset[str]]] = {
    None: frozenset({"creating"}),
    "creating": frozenset({"starting"}),
    "starting": frozenset({"running"}),
    "running": frozenset({"waiting_approval", "stopping", *TERMINAL}),
    "waiting_approval": frozenset({"running", "stopping", *TERMINAL}),
    "stopping": frozenset({"cancelled"}),
}


def normalise_status(text: str) -> str | None:
    """The run status a text names: ASCII whitespace stripped, ASCII case folded, aliases
    mapped (``done`` -> ``completed``, ``canceled`` -> ``cancelled``, ...); None if unknown."""
    folded = text.strip(_ASCII_SPACE).translate(_UPPER_TO_LOWER)
    if folded in STATES:
        return folded
    return ALIASES.get(folded)


def may_continue(status: str) -> bool:
    """Whether a run in ``status`` may be reopened by *continue*: blocked or incomplete."""
    return status in CONTINUABLE


def legal_run_transition(current: str | None, target: str, *, epoch_step: bool) -> bool:
    """Whether a run may go from ``current`` (None: the run does not exist yet) to ``target``.

    Same epoch: the table ``_STEPS``, plus a crash resume from any active state to
    ``starting``. With ``epoch_step`` (continue, epoch + 1): only to ``starting``, from
    blocked, incomplete or any active state. Unknown states are never legal.
    """
    # Unknown states fall out below: no table row or vocabulary names them.
    if epoch_step:
        return (
            target == "starting"
            and current is not None
            and (current in CONTINUABLE or current in ACTIVE)
        )
    if target == "starting" and current in ACTIVE:
        return True
    return target in _STEPS.get(current, frozenset())


def terminal_status(
    task_states: Mapping[str, str],
    suspended: Mapping[str, str],
    *,
    stopped: bool,
    aborted: bool,
) -> str:
    """The status a run ends with, by priority: stopped -> cancelled; aborted -> failed; a task
    suspended blocked -> blocked; a task suspended incomplete -> incomplete; every task (at
    least one) ``done`` -> completed; otherwise failed.

    ``task_states`` maps task id -> task FSM state, ``suspended`` task id -> blocked |
    incomplete (ValueError for anything else). A run with no task did not complete: failed.
    """
    for task, why in suspended.items():
        if why not in SUSPENSIONS:
            raise ValueError(
                f"task {task!r}: suspension must be blocked or incomplete, got {why!r}"
            )
    if stopped:
        return "cancelled"
    if aborted:
        return "failed"
    reasons = set(suspended.values())
    if "blocked" in reasons:
        return "blocked"
    if "incomplete" in reasons:
        return "incomplete"
    if task_states and all(state == "done" for state in task_states.values()):
        return "completed"
    return "failed"


def completed_by_exit(exit_code: int | None, *, completion_evidence: bool) -> bool:
    """Whether a process exit counts as completion: exit 0 *and* completion evidence (a clean
    exit alone proves nothing, issue 12 §4). A missing exit code (killed, never ran) is not."""
    if isinstance(exit_code, bool):
        raise ValueError("exit_code must be an integer or None, not a bool")
    return exit_code == 0 and completion_evidence
