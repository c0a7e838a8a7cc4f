"""The I layer's toolbox: which strategy change a crossing (or an early D alarm) takes.

Strategies, cheapest first: ``template`` (the agent's prompt template: default -> focused ->
stepwise), ``toolchain`` (the agent may run the task's gates itself: tool ``shell`` and the
gate commands in its prompt; an expansion), ``scope`` (narrower permissions: every tool that
carries a risk tag is dropped; a contraction), ``split`` (a topology change: the task is
handed back for restructuring). The first three are config switches; ``split`` is a
topology change. Which ones fit depends on what failed (``ORDERS``): a failing gate asks for
a different approach or the means to check one's work; a hung, crashed or failing process
for a different approach or fewer moving parts; a merge conflict for a narrower footprint.
Policy refusals (budget, stop, scope, capsule, integrity) are never strategy problems.

``choose`` takes the first strategy in the class's order that the agent has not tried yet,
that applies to its configuration now (``available``: computed by ``configchain``) and that
its phase's restructuring bounds still allow; when none is left it answers ``escalate``: a
human decides.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

STRATEGIES: Final = ("template", "toolchain", "scope", "split")
SWITCHES: Final = frozenset({"template", "toolchain", "scope"})
TOPOLOGY: Final = frozenset({"split"})
ESCALATE: Final = "escalate"
WARN: Final = "warn"
GATE_CLASSES: Final = frozenset({"type", "lint", "build", "test"})
PROCESS_CLASSES: Final = frozenset({"hung", "timeout", "lifetime", "crash", "agent"})
ROUND_CLASSES: Final = frozenset({"incomplete", "blocked"})
"""A rounds task that ended suspended (its step's class)."""
ORDERS: Final = {
    **{cls: ("template", "toolchain", "split") for cls in GATE_CLASSES},
    **{cls: ("template", "scope", "split") for cls in PROCESS_CLASSES},
    "conflict": ("scope", "split"),
    **{cls: ("template", "split") for cls in ROUND_CLASSES},
}


def choose(
    cls: str | None,
    *,
    tried: Collection[str],
    available: Collection[str],
    switches_left: int,
    topology_left: int,
    spaced: bool,
) -> str:
    """The strategy for an agent whose latest anomaly class is ``cls`` (None: none known,
    ordered as a process anomaly), or ``escalate``."""
    order = ORDERS.get(cls, ()) if cls is not None else ORDERS["agent"]
    for strategy in order:
        if strategy in tried:
            continue
        if strategy in TOPOLOGY:
            if topology_left > 0 and spaced:
                return strategy
        elif strategy in available and switches_left > 0:
            return strategy
    return ESCALATE


def aggregate_strategy(cls: str) -> str:
    """The same anomaly class in many agents points at the shared template or toolchain."""
    return "toolchain" if cls in GATE_CLASSES else "template"
