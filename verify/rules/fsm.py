"""The task lifecycle: states and the legal transitions between them.

One table, shared (a rule of DESIGN §9): the runtime refuses (and records) any transition
not in it, and the verifier's semantic check replays every ``task.transition`` record
against it. A task starts
in ``planned``; ``done``, ``failed``, ``cancelled`` and ``denied`` are terminal.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class TaskState(StrEnum):
    PLANNED = "planned"
    """Declared by the plan; dependencies not yet satisfied or not yet looked at."""
    OPEN = "open"
    """Ready to be picked by the scheduler."""
    BLOCKED = "blocked"
    """A dependency failed or was cancelled/denied: cannot run until unblocked. Also a rounds
    task suspended ``incomplete`` or ``blocked`` (in_progress -> blocked): only a ``resume``
    (continue) of its run reopens it (docs/spec/rounds.md)."""
    CLAIMED = "claimed"
    """Put in a batch; its agent has not started yet."""
    IN_PROGRESS = "in_progress"
    """Its agent process is running in the batch's worktree."""
    GATING = "gating"
    """The agent exited; quality gates run on its worktree."""
    DONE = "done"
    """Gates passed and the change merged."""
    FAILED = "failed"
    """Agent error, time-out, a failed gate, a merge conflict, or capsule drift."""
    CANCELLED = "cancelled"
    """Stopped by the operator."""
    DENIED = "denied"
    """Refused before any process started (capability trifecta, capsule)."""


S = TaskState
TRANSITIONS: Final[dict[TaskState, frozenset[TaskState]]] = {
    S.PLANNED: frozenset({S.OPEN, S.BLOCKED, S.CANCELLED, S.DENIED}),
    S.OPEN: frozenset({S.CLAIMED, S.BLOCKED, S.CANCELLED, S.DENIED}),
    S.BLOCKED: frozenset({S.OPEN, S.CANCELLED}),
    S.CLAIMED: frozenset({S.IN_PROGRESS, S.OPEN, S.CANCELLED, S.DENIED}),
    S.IN_PROGRESS: frozenset({S.GATING, S.FAILED, S.CANCELLED, S.OPEN, S.BLOCKED}),
    S.GATING: frozenset({S.DONE, S.FAILED, S.CANCELLED, S.OPEN}),
    S.DONE: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.DENIED: frozenset(),
}
TERMINAL: Final = frozenset(state for state, targets in TRANSITIONS.items() if not targets)
INITIAL: Final = TaskState.PLANNED


def is_legal(current: str, target: str) -> bool:
    """Whether ``current -> target`` is a legal transition (unknown states are not)."""
    try:
        return TaskState(target) in TRANSITIONS[TaskState(current)]
    except ValueError:
        return False
