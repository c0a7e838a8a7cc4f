"""The task lifecycle table; the rule itself lives in ``harness.verify.rules.fsm``.

Kept as a module so existing imports (``harness.verify.fsm``) keep working: one definition,
re-exported.
"""

from __future__ import annotations

from .rules.fsm import INITIAL, TERMINAL, TRANSITIONS, TaskState, is_legal

__all__ = ["INITIAL", "TERMINAL", "TRANSITIONS", "TaskState", "is_legal"]
