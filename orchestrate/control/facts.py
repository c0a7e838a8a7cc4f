"""What one retired attempt gives the sensors: tier-1 values and the tier-2 candidates.

Everything here is read from facts the runtime already holds at retirement (the agent's exit,
its usage, its gates, its changed paths, its model calls), so tier 1 costs a few dictionary
operations per step; tier-2 values are computed the same cheap way and recorded only when
the activation rule turns the sensor on.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from harness.verify.rules import attempts as attempt_rule
from harness.verify.rules import sensors

CONTRACT_STEPS: Final = 10
"""How many of the run's latest steps the ``contract`` sensor compares paths with."""


@dataclass(frozen=True)
class JobFacts:
    """The parts of a retired batch the sensors read (all optional: a crashed batch found on
    resume has none of them)."""

    duration_ms: int = 0
    usage: Mapping[str, Any] | None = None
    gates: Sequence[tuple[str, str, bool]] = ()
    """(task, gate name, passed) for every gate that ran."""
    paths: Sequence[str] = ()
    calls: Sequence[str] = ()
    """The requests of the batch's model (or tool) calls, in order."""


@dataclass
class History:
    """What the sensors remember between steps: paths each agent landed, and the paths of
    the run's latest steps per agent."""

    landed: dict[str, set[str]] = field(default_factory=dict)
    recent: deque[tuple[str, frozenset[str]]] = field(
        default_factory=lambda: deque(maxlen=CONTRACT_STEPS)
    )


def tier1(
    *,
    cls: str | None,
    attempt: int,
    task: str,
    facts: JobFacts,
    coverage: int | None,
) -> dict[str, int]:
    """The always-on readings' values (``harness.verify.rules.sensors.TIER1``)."""
    values = {"outcome": 0 if cls is None else 1, "restarts": max(0, attempt - 1)}
    for gate_task, name, passed in facts.gates:
        if gate_task != task:
            continue
        sensor = sensors.GATE_SENSORS[attempt_rule.gate_kind(name)]
        values[sensor] = values.get(sensor, 0) + (0 if passed else 1)
    if coverage is not None:
        values["coverage"] = coverage
    return {name: values[name] for name in sensors.TIER1 if name in values}


def measures(agent: str, facts: JobFacts, history: History) -> dict[str, int]:
    """The tier-2 sensors' values (``pace_tokens`` only when usage is known)."""
    paths = set(facts.paths)
    out = {
        "pace_ms": facts.duration_ms,
        "backtrack": len(paths & history.landed.get(agent, set())),
        "loop": _loop(facts.calls),
        "modules": sensors.modules_of(sorted(paths)),
        "contract": len(paths & _others(agent, history.recent)),
    }
    usage = facts.usage
    if usage is not None:
        tokens = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
        out["pace_tokens"] = int(tokens)
    return out


def remember(agent: str, facts: JobFacts, landed: bool, history: History) -> None:
    paths = frozenset(facts.paths)
    history.recent.append((agent, paths))
    if landed:
        history.landed.setdefault(agent, set()).update(paths)


def _others(agent: str, recent: Iterable[tuple[str, frozenset[str]]]) -> set[str]:
    out: set[str] = set()
    for other, paths in recent:
        if other != agent:
            out |= paths
    return out


def _loop(calls: Sequence[str]) -> int:
    """The most times one identical call repeats (0 without calls)."""
    return max(Counter(calls).values(), default=0)
