"""The I layer's leaky bucket, in tenths: +1.0 per anomalous step, -0.1 per normal one.

The seed's bucket (+1 per anomaly, -0.1 per normal step, floor 0, threshold M) in fixed point:
a level of 10 is 1.0. The level is a fold over a *window*, the key's last K steps since its
last strategy change (K by phase, ``phases.Profile.window``): older steps no longer count, so
a long healthy past cannot hide a fresh burst and a long bad past cannot keep the bucket full
after things improved (anti-windup). Crossing the threshold (below before the step, at or
above after it) is what triggers a strategy change; the key's window then starts empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

ANOMALY: Final = 10
"""What one anomalous step adds (1.0 in tenths)."""
NORMAL: Final = 1
"""What one normal step drains (0.1 in tenths)."""
DEFAULT_THRESHOLD: Final = 30
"""M when the plan gives none: three anomalies in a row (3.0)."""
MAX_THRESHOLD: Final = 1000


def level(window: Iterable[bool]) -> int:
    """The bucket's level after the steps of ``window`` in order (True: anomalous), from 0."""
    value = 0
    for anomalous in window:
        value = value + ANOMALY if anomalous else max(0, value - NORMAL)
    return value


def delta(anomalous: bool) -> int:
    """What one step does to the level before the floor: +ANOMALY or -NORMAL."""
    return ANOMALY if anomalous else -NORMAL


def window_level(sums: Sequence[int], k: int) -> int:
    """``level`` of the last ``k`` steps, from the running sums of their ``delta``s.

    ``sums`` holds s_0, s_1, ..., s_n: s_0 any integer (where the key's window starts), s_i
    = s_(i-1) + delta(step i). A fold from 0 with floor 0 (Lindley's recursion) ends at
    s_n - min(s_j, j in its span); over the last k steps the span is j = n-k .. n. The
    controller keeps these sums per key, so each step costs one C-level ``min`` over at
    most k+1 integers instead of a fold in Python; ``level`` stays the definition, and a
    property test holds the two equal.
    """
    return sums[-1] - min(sums[-k - 1 :])


def crossed(before: int, after: int, threshold: int) -> bool:
    """True when a step took the level from below ``threshold`` to at least it."""
    return before < threshold <= after
