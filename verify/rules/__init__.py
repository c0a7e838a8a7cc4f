"""The decision rules: one definition per rule, used by the runtime and by the verifier.

DESIGN §9: every decision the runtime takes is a pure function here — integers and strings
only, no I/O, no clock, no randomness, nothing imported from outside ``harness.verify``. The
runtime calls a rule to decide and records the rule's inputs and its decision; the verifier
calls the same rule on the recorded inputs and refuses evidence whose recorded decision
differs. Times are compared as the fixed-width RFC 3339 strings the records carry
(``YYYY-MM-DDTHH:MM:SS.ffffffZ``), which order correctly as strings.

Modules: ``fsm`` (task lifecycle), ``trifecta`` (capability denial, sandbox lowering),
``scope`` (globs, paths, times), ``capsule`` (intent-capsule conformance), ``schedule``
(batch choice), ``integrity`` (gates leave the worktree unchanged), ``attempts`` (the P
layer: anomaly classes and retries), ``budget`` (the budget ledger: charges, breaches,
exhaustion), ``roles`` (the tool classes each round role is denied), ``header`` (the
auditor's control header, the Manager's Next and Cites lines), ``rounds`` (a round's outcome,
the failing streak, ghost success), ``lifecycle`` (run states, transitions, terminal status).
"""

from __future__ import annotations

from . import (
    attempts,
    budget,
    capsule,
    fsm,
    header,
    integrity,
    lifecycle,
    roles,
    rounds,
    schedule,
    scope,
    trifecta,
)

__all__ = [
    "attempts",
    "budget",
    "capsule",
    "fsm",
    "header",
    "integrity",
    "lifecycle",
    "roles",
    "rounds",
    "schedule",
    "scope",
    "trifecta",
]
