"""The meta layer (issue 13 §4): the controller watching itself, as pure integer rules.

The I and D layers decide from sensors; the meta layer asks whether those decisions can be
trusted: do the sensors still see what they should, does the operator keep ignoring them, do
the constraints fit the tasks, do the controller's changes help, and is the controller keeping
up. Each answer is a function of recorded facts (steps, decisions, the operator's responses,
envelope times), so the verifier recomputes it like every other rule (DESIGN §9). Integers
only: rates in per-mille, times in microseconds, the clock is the step count.

* **Self-test** (``selftest_due``, ``selftest_probe``, ``selftest_problem``): every ``every``-th
  step (1-based; ``every`` 0 turns it off) the controller injects one synthetic anomaly, a
  known anomalous reading taken in turn from ``PROBES``. It must be flagged by the real rule
  (``sensors.anomalous``), so a sensor threshold that drifted is caught, and it must join only
  its *shadow* bucket key ``selftest:<agent>`` (``shadow_key``), never a real key (``agent:``,
  ``subtree:``, ``run``): a synthetic step never changes a real outcome. A probe that is not
  flagged, or that reached a real key, is a meta alert.
* **False alarms** (``false_alarm_pm``, ``cries_wolf``): an *alert* is a control decision whose
  action is ``warn`` or ``escalate`` (``is_alert``); the operator's response to it is
  ``confirmed``, ``ignored`` or ``overridden``. The rate is the per-mille of the last N alerts
  (default 20) that were ignored or overridden; above the threshold (default 500) with at
  least ``MIN_SAMPLE`` alerts judged, the sensors cry wolf: a meta alert.
* **Reviews at 25 %, 50 % and 75 % progress** (``progress_reviews``, ``review``): a progress
  step that passes a review point runs one review per point passed. *Constraint-task fit*: the
  per-mille of failed steps whose class is a policy refusal (``REFUSALS``: scope, capsule,
  integrity, budget); above its threshold (default 300) the constraints do not fit the tasks.
  *Controllability*: the per-mille of strategy changes (I or D decisions whose action is a
  strategy) followed by a landed step of the same agent within K steps; below its threshold
  (default 500) the controller's changes do not help. Both need ``MIN_SAMPLE`` cases. In hours
  4 to 6 of a run (``phases.heightened``) the thresholds tighten (``thresholds``): the fit
  threshold halves, the controllability threshold moves halfway to 1000.
* **Watchdog** (``watchdog_late``): the aggregator (the controller) is late when a retired
  attempt waited longer than the limit (default 60 s) for its step (``control.sensor``).

The parameters (``MetaParams``, ``parse_meta``) are meant for the plan's ``[plan.control]``
table; docs/spec/control-layers.md §8 gives their ranges.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import sensors, strategy

SHADOW_PREFIX: Final = "selftest:"
REAL_PREFIXES: Final = ("agent:", "subtree:")
PROBES: Final = (
    ("outcome", 1),
    ("tests", 1),
    ("loop", sensors.LOOP_ANOMALY),
    ("backtrack", sensors.BACKTRACK_ANOMALY),
    ("modules", sensors.MODULES_ANOMALY),
    ("contract", 1),
)
"""The synthetic anomalies, injected in turn: each is the smallest value its sensor flags."""
OUTCOMES: Final = ("confirmed", "ignored", "overridden")
FALSE: Final = frozenset({"ignored", "overridden"})
ALERT_ACTIONS: Final = frozenset({strategy.WARN, strategy.ESCALATE})
REFUSALS: Final = frozenset({"scope", "capsule", "integrity", "budget"})
"""Failure classes that are policy refusals: the constraint, not the agent, stopped the step."""
REVIEW_POINTS: Final = (250, 500, 750)
MIN_SAMPLE: Final = 3
"""Fewest cases (alerts, failed steps, strategy changes) a rate needs to raise a meta alert."""


@dataclass(frozen=True)
class MetaParams:
    selftest_every: int = 0
    alert_window: int = 20
    false_alarm_pm: int = 500
    fit_pm: int = 300
    controllability_pm: int = 500
    watchdog_s: int = 60

    def record(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in META_RANGES}


META_RANGES: Final = {
    "selftest_every": (0, 1000),
    "alert_window": (1, 1000),
    "false_alarm_pm": (0, 1000),
    "fit_pm": (0, 1000),
    "controllability_pm": (0, 1000),
    "watchdog_s": (1, 86_400),
}


def parse_meta(table: Mapping[str, Any] | None) -> MetaParams | str:
    """The meta layer's members of a table as parameters, or the reason they are not valid."""
    if table is None:
        return MetaParams()
    for name in table:
        if name not in META_RANGES:
            return f"unknown member {name!r} (known: {', '.join(sorted(META_RANGES))})"
    values: dict[str, int] = {}
    default = MetaParams().record()
    for name, (low, high) in META_RANGES.items():
        value = table.get(name, default[name])
        if type(value) is not int or not low <= value <= high:
            return f"{name}: an integer between {low} and {high}"
        values[name] = value
    return MetaParams(**values)


# ---- self-test -------------------------------------------------------------------------------


def selftest_due(step: int, every: int) -> bool:
    """True when a synthetic anomaly is injected at ``step`` (1-based): every ``every``-th
    step; ``every`` 0 is off."""
    return every > 0 and step > 0 and step % every == 0


def selftest_probe(step: int, every: int) -> tuple[str, int]:
    """The synthetic reading injected at a due ``step``: the probes in turn (the first
    injection takes ``PROBES[0]``)."""
    return PROBES[(step // every - 1) % len(PROBES)]


def shadow_key(agent: str) -> str:
    return SHADOW_PREFIX + agent


def is_real_key(key: str) -> bool:
    """A key whose bucket can change a real outcome (an agent's, a subtree's, the run's)."""
    return key == "run" or key.startswith(REAL_PREFIXES)


def selftest_problem(
    sensor: str, value: int, *, flagged: bool, keys: Collection[str], agent: str
) -> str | None:
    """Why an injected probe failed the self-test (None: detected and contained).

    ``flagged`` is what the controller flagged the reading as, ``keys`` the bucket keys the
    synthetic step joined."""
    if not sensors.anomalous(sensor, value):
        return f"probe {sensor}={value} is not an anomaly under the sensor rule"
    if not flagged:
        return f"probe {sensor}={value} was not flagged anomalous"
    real = sorted(key for key in keys if is_real_key(key))
    if real:
        return f"synthetic step joined real keys {real}"
    if set(keys) != {shadow_key(agent)}:
        return f"synthetic step must join exactly {shadow_key(agent)!r}, joined {sorted(keys)}"
    return None


def selftest_detected(
    sensor: str, value: int, *, flagged: bool, keys: Collection[str], agent: str
) -> bool:
    return selftest_problem(sensor, value, flagged=flagged, keys=keys, agent=agent) is None


# ---- false alarms ----------------------------------------------------------------------------


def is_alert(action: str) -> bool:
    """A control decision the operator is asked to look at."""
    return action in ALERT_ACTIONS


def false_alarm_pm(outcomes: Sequence[str], last: int = 20) -> int:
    """Per-mille of the last ``last`` alerts that were ignored or overridden (0 without any).

    Raises ValueError for an outcome outside ``OUTCOMES`` (a rule input of the wrong shape)."""
    window = list(outcomes[-last:]) if last > 0 else []
    for outcome in window:
        if outcome not in OUTCOMES:
            raise ValueError(f"alert outcome {outcome!r} is not one of {list(OUTCOMES)}")
    if not window:
        return 0
    return sum(1 for outcome in window if outcome in FALSE) * 1000 // len(window)


def cries_wolf(outcomes: Sequence[str], last: int = 20, threshold_pm: int = 500) -> bool:
    """The meta alert: more than ``threshold_pm`` per-mille of the last alerts were false,
    judged over at least ``MIN_SAMPLE`` alerts."""
    judged = min(len(outcomes), max(0, last))
    return judged >= MIN_SAMPLE and false_alarm_pm(outcomes, last) > threshold_pm


# ---- reviews ---------------------------------------------------------------------------------


def progress_reviews(previous_pm: int, progress_pm: int) -> tuple[int, ...]:
    """The review points (250, 500, 750 per-mille) a progress step from ``previous_pm`` to
    ``progress_pm`` passes: above the old progress, at or below the new one."""
    return tuple(p for p in REVIEW_POINTS if previous_pm < p <= progress_pm)


def thresholds(fit_pm: int, controllability_pm: int, heightened: bool) -> tuple[int, int]:
    """The review thresholds in force: in hours 4 to 6 the fit threshold halves and the
    controllability threshold moves halfway to 1000 (floor divisions)."""
    if not heightened:
        return fit_pm, controllability_pm
    return fit_pm // 2, controllability_pm + (1000 - controllability_pm) // 2


def fit(classes: Iterable[str | None]) -> tuple[int, int, int]:
    """(failed steps, policy refusals among them, their per-mille; 0 without failures) over
    the classes of the run's steps (None: landed)."""
    failed = refused = 0
    for cls in classes:
        if cls is None:
            continue
        failed += 1
        refused += cls in REFUSALS
    return failed, refused, (refused * 1000 // failed if failed else 0)


def controllability(
    changes: Iterable[tuple[int, str]],
    landed: Iterable[tuple[int, str]],
    window: int,
    now: int,
) -> tuple[int, int, int]:
    """(changes judged, those followed by a landing, their per-mille; 1000 without any).

    ``changes``: (step, agent) of each strategy change; ``landed``: (step, agent) of each
    landed step; ``now``: the latest step. A change at step n is *followed* when the agent
    landed a step m with n < m <= n + window; it is judged once followed or once the window
    has passed (now >= n + window); a change still inside its window is not judged yet."""
    landings: dict[str, list[int]] = {}
    for number, agent in landed:
        landings.setdefault(agent, []).append(number)
    judged = followed = 0
    for number, agent in changes:
        hit = any(number < m <= number + window for m in landings.get(agent, ()))
        if hit or now >= number + window:
            judged += 1
            followed += hit
    return judged, followed, (followed * 1000 // judged if judged else 1000)


def is_strategy_change(layer: str, action: str) -> bool:
    """An I or D decision that changed the agent's strategy (a config switch or a split)."""
    return layer in ("I", "D") and action in strategy.STRATEGIES


@dataclass(frozen=True)
class Review:
    point: int
    failed: int
    refused: int
    fit_pm: int
    fit_alert: bool
    judged: int
    followed: int
    controllability_pm: int
    controllability_alert: bool

    def record(self) -> dict[str, Any]:
        return {
            "point": self.point,
            "failed": self.failed,
            "refused": self.refused,
            "fit_pm": self.fit_pm,
            "fit_alert": self.fit_alert,
            "judged": self.judged,
            "followed": self.followed,
            "controllability_pm": self.controllability_pm,
            "controllability_alert": self.controllability_alert,
        }


def review(
    point: int,
    *,
    classes: Iterable[str | None],
    changes: Iterable[tuple[int, str]],
    landed: Iterable[tuple[int, str]],
    window: int,
    now: int,
    params: MetaParams | None = None,
    heightened: bool = False,
) -> Review:
    """One review at ``point``: constraint-task fit and controllability, each with its alert
    (fit above its threshold, controllability below it, both over ``MIN_SAMPLE`` cases)."""
    given = params or MetaParams()
    fit_limit, control_limit = thresholds(given.fit_pm, given.controllability_pm, heightened)
    failed, refused, fit_rate = fit(classes)
    judged, followed, control_rate = controllability(changes, landed, window, now)
    return Review(
        point,
        failed,
        refused,
        fit_rate,
        failed >= MIN_SAMPLE and fit_rate > fit_limit,
        judged,
        followed,
        control_rate,
        judged >= MIN_SAMPLE and control_rate < control_limit,
    )


# ---- watchdog --------------------------------------------------------------------------------


def watchdog_late(last_step_at_us: int, now_us: int, limit_us: int) -> bool:
    """True when the aggregator is late: a retired attempt became due for its step at
    ``last_step_at_us`` (its retirement record's time) and at ``now_us`` (the time its
    ``control.sensor`` was recorded, or the clock while it is still missing) it has waited
    more than ``limit_us``."""
    return now_us - last_step_at_us > limit_us
