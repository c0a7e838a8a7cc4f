"""The P layer's rule: what a failed attempt was, and whether the task gets another one.

A failed attempt is classified into one anomaly class from facts the evidence records (the
agent's exit, its supervisor's verdict, the failing gates' names, the merge check), and the
retry decision is a function of that class, the attempt number and the task's attempt limit.
The runtime calls :func:`classify` and :func:`decide` at retirement and records both
(``attempt.failed``: ``anomaly``, ``attempt``, ``retry``); the verifier calls them again on the
recorded facts and refuses a record that disagrees, a retry beyond the limit, or a retry of a
class that is never retried (docs/spec/runtime.md, "Attempts").

Classes, in the order :func:`classify` tries them:

* ``budget``, ``hung``, ``timeout``, ``lifetime``, ``stop``: the supervisor ended the agent
  (``agent.exit.anomaly``; ``killed:<why>`` counts as ``<why>``);
* ``crash``: the agent died from a signal, or its worker was lost;
* ``agent``: the agent exited non-zero or its adapter reported failure;
* ``scope``, ``capsule``, ``integrity``: the landing checks refused the attempt;
* ``type``, ``lint``, ``build``, ``test``: the first failing gate's kind, from its name (a
  gate named ``mypy``/``pyright``/``type…`` is ``type``; ``ruff``/``flake8``/``lint…``
  ``lint``; ``build…``/``compile…`` ``build``; anything else ``test``);
* ``conflict``: the merge check found a conflict with work retired before it.

Never retried: ``budget`` (spending more is what the budget forbids), ``stop`` (the operator
said so), ``scope``, ``capsule`` and ``integrity`` (policy refusals: a retry would retry the
violation). Every other class is retried while ``attempt < max_attempts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

CLASSES: Final = frozenset(
    {
        "budget",
        "hung",
        "timeout",
        "lifetime",
        "stop",
        "crash",
        "agent",
        "scope",
        "capsule",
        "integrity",
        "type",
        "lint",
        "build",
        "test",
        "conflict",
    }
)
"""Every anomaly class an ``attempt.failed`` record may name."""

NEVER_RETRIED: Final = frozenset({"budget", "stop", "scope", "capsule", "integrity"})
SUPERVISOR: Final = frozenset({"budget", "hung", "timeout", "lifetime", "stop", "crash"})
"""Classes the agent's supervisor (or executor) reports in ``agent.exit.anomaly``."""

MAX_ATTEMPTS: Final = 10
"""The plan's ceiling for ``max_attempts``."""

_TYPE: Final = ("mypy", "pyright", "pytype", "type", "tsc")
_LINT: Final = ("ruff", "flake8", "pylint", "eslint", "lint")
_BUILD: Final = ("build", "compile", "make")


def gate_kind(name: str) -> str:
    """The anomaly class of a failing gate, from its name (case-insensitive prefix)."""
    low = name.lower()
    for prefixes, kind in ((_TYPE, "type"), (_LINT, "lint"), (_BUILD, "build")):
        if low.startswith(prefixes):
            return kind
    return "test"


def supervisor_class(anomaly: str | None) -> str | None:
    """``agent.exit.anomaly`` as a class: ``killed:<why>`` is ``<why>``; None stays None.

    An anomaly outside the supervisor classes is returned unchanged (so the caller's
    membership check in :data:`CLASSES` refuses it).
    """
    if anomaly is None:
        return None
    return anomaly.removeprefix("killed:")


def classify(
    *,
    exit_anomaly: str | None,
    signal: str | None,
    agent_ok: bool,
    refusal: str | None,
    failed_gates: Sequence[str],
    conflict: bool,
) -> str:
    """The class of a failed attempt (see the module docstring for the order).

    ``refusal`` is ``"scope"``, ``"capsule"`` or ``"integrity"`` when a landing check refused
    the attempt; ``failed_gates`` the names of the failing gates in run order; ``conflict``
    whether the merge check conflicted. Raises ``ValueError`` when nothing failed.
    """
    supervised = supervisor_class(exit_anomaly)
    if supervised is not None:
        return supervised
    if signal is not None:
        return "crash"
    if not agent_ok:
        return "agent"
    if refusal is not None:
        return refusal
    if failed_gates:
        return gate_kind(failed_gates[0])
    if conflict:
        return "conflict"
    raise ValueError("classify: the attempt did not fail")


def decide(anomaly: str, attempt: int, max_attempts: int) -> bool:
    """Whether a task whose attempt ``attempt`` failed with ``anomaly`` is tried again."""
    if anomaly not in CLASSES:
        raise ValueError(f"unknown anomaly class {anomaly!r}")
    if attempt < 1 or not 1 <= max_attempts <= MAX_ATTEMPTS:
        raise ValueError("attempt must be >= 1 and max_attempts 1..10")
    return anomaly not in NEVER_RETRIED and attempt < max_attempts


def next_spacing(current: int, base: int, succeeded: bool) -> int:
    """Adaptive checkpoint spacing (records between signed checkpoints): doubled after a
    success up to ``base``'s 4x, halved after a failure down to ``base``'s quarter (at least
    1). Wider when things go well, narrower when they do not, as the seed's P layer asks."""
    if base < 1 or current < 1:
        raise ValueError("spacing must be >= 1")
    if succeeded:
        return min(current * 2, base * 4)
    return max(current // 2, base // 4, 1)
