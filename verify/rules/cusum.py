"""The D layer's change-point detector: a one-sided upper CUSUM on a sensor series, integers.

For readings x_1, x_2, ... of one series (an agent's time or tokens per step):

* the first ``warmup`` readings set the reference ``ref = sum // warmup`` (integer floor) and
  raise no alarm;
* then, with ``k = ref * k_pm // 1000`` (the allowance) and ``h = max(1, ref * h_pm // 1000)``
  (the decision threshold), ``S = max(0, S + x - ref - k)``; an alarm is raised when
  ``S >= h`` (reaching h, as a bucket crossing is reaching M), and S starts again from 0
  (the alarm is the early warning; the next one needs new evidence).

k and h are per-mille of the reference, so one parameter set fits series of any unit: the
defaults (k = 0.5 ref, h = 2 ref) alarm when an agent's steps run persistently above 1.5x
its early pace — one step at 3.5x, or three at 2.2x — and never on a flat series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

DEFAULT_WARMUP: Final = 3
DEFAULT_K_PM: Final = 500
DEFAULT_H_PM: Final = 2000
MAX_WARMUP: Final = 100
MAX_PM: Final = 100_000


@dataclass(frozen=True)
class CusumParams:
    warmup: int = DEFAULT_WARMUP
    k_pm: int = DEFAULT_K_PM
    h_pm: int = DEFAULT_H_PM


class CusumState(NamedTuple):
    """One series' detector state (a tuple: made once per reading, so cheap to make)."""

    n: int = 0
    """Readings seen."""
    total: int = 0
    """Sum of the warm-up readings."""
    s: int = 0
    """The cumulative sum."""


class CusumStep(NamedTuple):
    """What one reading did (a tuple, like the state)."""

    state: CusumState
    alarm: bool
    statistic: int
    """S after this reading, before the reset an alarm causes (0 during warm-up)."""
    threshold: int
    """h for this reading (0 during warm-up)."""


def update(params: CusumParams, state: CusumState, x: int) -> CusumStep:
    """One reading: the next state, whether it alarms, and S and h as the alarm saw them."""
    if state.n < params.warmup:
        return CusumStep(CusumState(state.n + 1, state.total + x, 0), False, 0, 0)
    ref = state.total // params.warmup
    k = ref * params.k_pm // 1000
    h = max(1, ref * params.h_pm // 1000)
    s = max(0, state.s + x - ref - k)
    alarm = s >= h
    return CusumStep(CusumState(state.n + 1, state.total, 0 if alarm else s), alarm, s, h)
