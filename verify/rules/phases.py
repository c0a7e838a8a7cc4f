"""Phase profiles: how much the controller watches and allows, by how far the run has come.

The seed's four phases, each a fixed profile (``PROFILES``):

=========  ==========  ===========  ===========  ========  ========  ========
phase      checkpoint  sensors      review       window K  switches  topology
=========  ==========  ===========  ===========  ========  ========  ========
explore    30 min      basic        loose        20        4         2
implement  10 min      standard     normal       12        3         1
integrate  3 min       full         strict       6         2         1
converge   5 min       full         strictest    4         2         0
=========  ==========  ===========  ===========  ========  ========  ========

* checkpoint: the longest time between two seals of the evidence (progressive sealing's
  time bound, ``[plan] seal_every_s`` when that is shorter);
* sensors: which tier-2 sensors run without a trigger (``sensors.activate``);
* review: the action review gate's strictness;
* window K: the I layer's bucket window (``bucket``): wide while exploring, where failures
  are expected, narrow when converging, where a short burst already matters;
* switches / topology: restructuring bounds per agent (config switches: template, toolchain,
  scope; topology changes: a split), and at least 10 % of the run's steps so far between two
  topology changes of the run (``topology_spaced``); beyond them the controller escalates
  to a human goal review.

The phase follows progress: the per-mille of the plan's tasks in a settled state (done,
failed, cancelled, denied), against three bounds (``DEFAULT_BOUNDS``: explore below 25 %,
implement below 75 %, integrate below 90 %, converge from there). A bound of 1001 is never
reached, so a plan can hold a phase for the whole run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

ORDER: Final = ("explore", "implement", "integrate", "converge")
LEVELS: Final = ("basic", "standard", "full")
STRICTNESS: Final = ("loose", "normal", "strict", "strictest")
SETTLED: Final = frozenset({"done", "failed", "cancelled", "denied"})
"""Task states that count as progress."""
DEFAULT_BOUNDS: Final = (250, 750, 900)
MAX_BOUND: Final = 1001
TOPOLOGY_SPACING_PM: Final = 100
"""At least 100 per-mille (10 %) of the run's steps between two topology changes."""
MAX_WINDOW: Final = 20
"""The widest window any profile uses (what a key's history keeps)."""
HEIGHTENED_FROM_S: Final = 4 * 3600
HEIGHTENED_UNTIL_S: Final = 6 * 3600
"""Hours 4 to 6 of a run, where the seed asks for heightened checks."""


@dataclass(frozen=True)
class Profile:
    name: str
    checkpoint_min: int
    sensor_level: str
    review: str
    window: int
    config_switches: int
    topology_changes: int


PROFILES: Final = {
    "explore": Profile("explore", 30, "basic", "loose", 20, 4, 2),
    "implement": Profile("implement", 10, "standard", "normal", 12, 3, 1),
    "integrate": Profile("integrate", 3, "full", "strict", 6, 2, 1),
    "converge": Profile("converge", 5, "full", "strictest", 4, 2, 0),
}


def bounds_error(bounds: Sequence[int]) -> str | None:
    """Why ``bounds`` cannot be a plan's phase bounds (None when they can): three integers,
    non-decreasing, each 0..1001."""
    if len(bounds) != 3 or any(type(b) is not int or not 0 <= b <= MAX_BOUND for b in bounds):
        return f"three integers between 0 and {MAX_BOUND} (per-mille of settled tasks)"
    if list(bounds) != sorted(bounds):
        return "non-decreasing bounds"
    return None


def progress_pm(settled: int, total: int) -> int:
    """Per-mille of the plan's tasks that are settled (1000 for a plan without tasks)."""
    return 1000 if total <= 0 else settled * 1000 // total


def phase_for(progress: int, bounds: Sequence[int] = DEFAULT_BOUNDS) -> str:
    """The phase for ``progress`` per-mille: the number of bounds at or below it picks it."""
    return ORDER[sum(1 for bound in bounds if bound <= progress)]


def topology_spaced(last_step: int | None, step: int) -> bool:
    """True when a topology change at ``step`` keeps 10 % of the run's steps so far since the
    last one (steps, the retired attempts, are the controller's clock: replay gives the same
    answer, which wall time would not)."""
    if last_step is None:
        return True
    return (step - last_step) * 1000 >= step * TOPOLOGY_SPACING_PM


def heightened(start_us: int, now_us: int) -> bool:
    """True in hours 4 to 6 of a run (the meta layer's heightened checks)."""
    elapsed_s = (now_us - start_us) // 1_000_000
    return HEIGHTENED_FROM_S <= elapsed_s < HEIGHTENED_UNTIL_S
