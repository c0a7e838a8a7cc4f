"""Sensors: what the controller reads at every step, and which tier-2 sensors a step turns on.

A *step* is one retired attempt of one task (docs/spec/control.md). Tier 1 is always on and
cheap, read from facts the runtime has anyway:

* ``outcome``: 0 when the attempt landed, 1 when it failed (any anomaly class);
* ``restarts``: the attempt number minus 1 (how often the P layer restarted this task);
* ``tests``, ``types``, ``build``, ``lint``: failing gates of that kind, one reading per kind
  among the gates that ran (``attempts.gate_kind``);
* ``coverage``: per-mille of the plan's requirement ids carried by tasks that are done (only
  when the plan names requirements).

Tier 2 is read when a condition of the seed holds, or when the phase's sensor level turns it
on (``activate``); each reading records what activated it (``trigger``):

* ``pace_ms``, ``pace_tokens`` (time and tokens of the step; tokens only where the adapter
  reports usage): on a tier-1 anomaly (``anomaly``), or from level standard (``level``);
* ``backtrack`` (paths this step changes that the agent's earlier landed steps changed): when
  the pace jumps (``pace-jump``: more than twice the agent's previous ``pace_ms``), or at
  level full;
* ``loop`` (the most times one identical tool or model call repeats in the step): on a tier-1
  anomaly, or at level full;
* ``modules`` (top-level entries the step's changed paths span): when they span two or more
  (``cross-module``), or at level full;
* ``contract`` (changed paths another agent changed within the run's last steps): when there
  is one (``shared-boundary``), or at level full.

A condition trigger wins over ``level`` when both hold. ``anomalous`` flags a reading; a step
is anomalous for the I layer when its attempt failed or any tier-2 reading is flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

TIER1: Final = ("outcome", "restarts", "tests", "types", "build", "lint", "coverage")
TIER2: Final = ("pace_ms", "pace_tokens", "backtrack", "loop", "modules", "contract")
GATE_SENSORS: Final = {"test": "tests", "type": "types", "build": "build", "lint": "lint"}
"""``attempts.gate_kind`` -> the tier-1 sensor counting failing gates of that kind."""
PACE: Final = ("pace_ms", "pace_tokens")
LOOP_ANOMALY: Final = 3
BACKTRACK_ANOMALY: Final = 3
MODULES_ANOMALY: Final = 4


def pace_jump(previous_ms: int | None, ms: int) -> bool:
    """More than twice the agent's previous step time (no previous step: no jump)."""
    return previous_ms is not None and ms > 2 * previous_ms


def activate(
    level: str,
    *,
    failed: bool,
    jumped: bool,
    modules: int,
    shared: int,
    tokens_known: bool,
) -> dict[str, str]:
    """The tier-2 sensors a step reads, each with its trigger, in ``TIER2`` order.

    ``jumped`` is ``pace_jump`` of this step (only meaningful when ``pace_ms`` is read);
    ``modules``/``shared`` are the values those sensors would read.
    """
    full = level == "full"
    paced = level in ("standard", "full")
    out: dict[str, str] = {}
    pace_trigger = "anomaly" if failed else ("level" if paced else None)
    if pace_trigger is not None:
        out["pace_ms"] = pace_trigger
        if tokens_known:
            out["pace_tokens"] = pace_trigger
    if "pace_ms" in out and jumped:
        out["backtrack"] = "pace-jump"
    elif full:
        out["backtrack"] = "level"
    if failed:
        out["loop"] = "anomaly"
    elif full:
        out["loop"] = "level"
    if modules >= 2:
        out["modules"] = "cross-module"
    elif full:
        out["modules"] = "level"
    if shared >= 1:
        out["contract"] = "shared-boundary"
    elif full:
        out["contract"] = "level"
    return out


def anomalous(sensor: str, value: int) -> bool:
    """Whether one reading is an anomaly (pace is judged by its trend, the D layer)."""
    if sensor == "outcome":
        return value != 0
    if sensor in ("tests", "types", "build", "lint", "contract"):
        return value > 0
    if sensor == "loop":
        return value >= LOOP_ANOMALY
    if sensor == "backtrack":
        return value >= BACKTRACK_ANOMALY
    if sensor == "modules":
        return value >= MODULES_ANOMALY
    return False


def modules_of(paths: Mapping[str, object] | list[str] | tuple[str, ...]) -> int:
    """Distinct top-level entries among repository-relative ``paths``."""
    return len({path.split("/", 1)[0] for path in paths})
