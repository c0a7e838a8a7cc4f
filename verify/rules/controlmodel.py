"""The controller's data: its parameters (``[plan.control]``), one step's facts and readings,
its decisions and configuration versions, and the record form of each.

Split from ``controller`` (the state machine) so each stays small; ``controller`` re-exports
every name here, which is where the runtime, the verifier and the tests import them from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from . import bucket, cusum, meta, phases

VERDICTS: Final = ("confirmed", "overridden")
"""What an operator can say of an alert (``harness judge``); ``ignored`` is no verdict."""
MAX_RATE_WINDOW: Final = 1000
MAX_AGGREGATE: Final = 1000
RATE_MINIMUM: Final = 3


@dataclass(frozen=True)
class Params:
    threshold: int = bucket.DEFAULT_THRESHOLD
    cusum: cusum.CusumParams = field(default_factory=cusum.CusumParams)
    aggregate_agents: int = 3
    rate_window: int = 10
    bounds: tuple[int, int, int] = phases.DEFAULT_BOUNDS
    meta: meta.MetaParams = field(default_factory=meta.MetaParams)

    def record(self) -> dict[str, Any]:
        """The plan document's ``[plan.control]`` table for these parameters."""
        return {
            "threshold": self.threshold,
            "cusum_warmup": self.cusum.warmup,
            "cusum_k_pm": self.cusum.k_pm,
            "cusum_h_pm": self.cusum.h_pm,
            "aggregate_agents": self.aggregate_agents,
            "rate_window": self.rate_window,
            "phase_bounds": list(self.bounds),
            **self.meta.record(),
        }


PARAM_RANGES: Final = {
    "threshold": (1, bucket.MAX_THRESHOLD),
    "cusum_warmup": (1, cusum.MAX_WARMUP),
    "cusum_k_pm": (0, cusum.MAX_PM),
    "cusum_h_pm": (1, cusum.MAX_PM),
    "aggregate_agents": (2, MAX_AGGREGATE),
    "rate_window": (2, MAX_RATE_WINDOW),
}


def parse_params(table: Mapping[str, Any] | None) -> Params | str:
    """``[plan.control]`` as parameters, or the reason it is not a valid table."""
    if table is None:
        return Params()
    known = set(PARAM_RANGES) | {"phase_bounds"} | set(meta.META_RANGES)
    for name in table:
        if name not in known:
            return f"unknown member {name!r} (known: {', '.join(sorted(known))})"
    values: dict[str, int] = {}
    default = Params().record()
    for name, (low, high) in PARAM_RANGES.items():
        value = table.get(name, default[name])
        if type(value) is not int or not low <= value <= high:
            return f"{name}: an integer between {low} and {high}"
        values[name] = value
    bounds = table.get("phase_bounds", default["phase_bounds"])
    problem = phases.bounds_error(bounds) if type(bounds) is list else "a list of three integers"
    if problem is not None:
        return f"phase_bounds: {problem}"
    meta_params = meta.parse_meta({k: v for k, v in table.items() if k in meta.META_RANGES})
    if isinstance(meta_params, str):
        return meta_params
    return Params(
        threshold=values["threshold"],
        cusum=cusum.CusumParams(values["cusum_warmup"], values["cusum_k_pm"], values["cusum_h_pm"]),
        aggregate_agents=values["aggregate_agents"],
        rate_window=values["rate_window"],
        bounds=(bounds[0], bounds[1], bounds[2]),
        meta=meta_params,
    )


def subtree_of(scope: Sequence[str]) -> str:
    """A task's subtree: the first segment of its first scope glob, when that segment has no
    wildcard; else the repository root ``.``."""
    if not scope:
        return "."
    head = scope[0].split("/", 1)[0]
    return "." if any(ch in head for ch in "*?[") else head


class Reading(NamedTuple):
    """One sensor reading. A tuple (immutable, compared in C): the controller makes several
    per step, and a frozen dataclass costs about four times as much to make."""

    sensor: str
    tier: int
    value: int
    anomaly: bool
    trigger: str | None

    def record(self) -> dict[str, Any]:
        return {
            "sensor": self.sensor,
            "tier": self.tier,
            "value": self.value,
            "anomaly": self.anomaly,
            "trigger": self.trigger,
        }


@dataclass(frozen=True)
class Step:
    """The facts of one step: tier-1 values, and the values tier-2 sensors would read
    (``pace_tokens`` present only where usage is known)."""

    task: str
    agent: str
    subtree: str
    attempt: int
    cls: str | None
    tier1: Mapping[str, int]
    measures: Mapping[str, int]


@dataclass(frozen=True)
class Decision:
    step: int
    layer: str
    rule: str
    key: str
    level: int
    threshold: int
    cls: str | None
    action: str
    config: int | None

    def record(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "layer": self.layer,
            "rule": self.rule,
            "key": self.key,
            "level": self.level,
            "threshold": self.threshold,
            "class": self.cls,
            "action": self.action,
            "config": self.config,
        }


@dataclass(frozen=True)
class Version:
    version: int
    parent: str | None
    sha256: str
    document: Mapping[str, Any]
    change: str
    channel: str
    step: int | None
    impact: tuple[str, ...]

    def record(self, snapshot: str) -> dict[str, Any]:
        return {
            "version": self.version,
            "parent": self.parent,
            "sha256": self.sha256,
            "document": dict(self.document),
            "change": self.change,
            "channel": self.channel,
            "step": self.step,
            "impact": list(self.impact),
            "snapshot": snapshot,
        }


class Observed(NamedTuple):
    """What one step did (a tuple: one is made per step)."""

    step: int
    readings: tuple[Reading, ...]
    decisions: tuple[Decision, ...]
    versions: tuple[Version, ...]


def step_of(body: Mapping[str, Any]) -> tuple[Step, tuple[Reading, ...]]:
    """A ``control.sensor`` body (already checked against its record schema) as the step it
    records and its readings: what the verifier, and a resumed runtime, feed ``observe``.
    Tier-2 values stand in for the candidates; a sensor that was off counts as 0."""
    readings = tuple(
        Reading(r["sensor"], r["tier"], r["value"], r["anomaly"], r["trigger"])
        for r in body["readings"]
    )
    step = Step(
        task=body["task"],
        agent=body["agent"],
        subtree=body["subtree"],
        attempt=body["attempt"],
        cls=body["class"],
        tier1={r.sensor: r.value for r in readings if r.tier == 1},
        measures={r.sensor: r.value for r in readings if r.tier == 2},
    )
    return step, readings
