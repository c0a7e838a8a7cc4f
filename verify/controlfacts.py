"""What the evidence says a control step must read, and how a recorded decision or
configuration version is compared with the controller's (``harness.verify.controlcheck``).

Kept apart from the fold so each half stays small: this module knows the plan member's
control inputs, the facts of one attempt that the audit store holds (its gates, its batch's
``agent.exit``, the requirements covered) and the wording of every refusal about a decision
or a version; the fold knows the record order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import VerificationError
from .rules import attempts as attempt_rule
from .rules import configchain, meta, phases, sensors
from .rules.controller import Controller, Decision, Params, Reading, Version, parse_params


class ControlError(VerificationError):
    """A control record the controller does not reproduce from the evidence: a reading,
    decision, configuration version or phase that differs, is missing or has no trigger."""


@dataclass(frozen=True)
class ControlTask:
    """What the controller needs of one plan task."""

    role: str
    adapter: str
    tools: tuple[str, ...]
    scope: tuple[str, ...]
    requirements: tuple[str, ...]


@dataclass(frozen=True)
class ControlPlan:
    params: Params
    tasks: Mapping[str, ControlTask]
    """Task id -> its control inputs, in plan order."""
    requirements: tuple[str, ...]
    """The plan's requirement ids, sorted and distinct (the ``coverage`` sensor)."""


def _strings(value: Any) -> tuple[str, ...] | None:
    if type(value) is not list or any(type(item) is not str for item in value):
        return None
    return tuple(value)


def control_plan(obj: Mapping[str, Any], member: str) -> ControlPlan:
    """The plan member's ``control`` table (``controller.parse_params``; the runtime writes
    it with every default filled) and each task's role, adapter, tools, scope and
    requirements. Anything else is bound by the plan digest but not read here."""
    table = obj.get("control")
    if type(table) is not dict:
        raise ControlError(f"{member}: control must be the plan's [plan.control] table")
    params = parse_params(table)
    if isinstance(params, str):
        raise ControlError(f"{member}: control: {params}")
    tasks: dict[str, ControlTask] = {}
    for i, item in enumerate(obj["tasks"]):
        where = f"{member}: tasks[{i}]"
        if type(item) is not dict:
            raise ControlError(f"{where} must be an object")
        names = [item.get(key) for key in ("id", "role", "adapter")]
        lists = [_strings(item.get(key)) for key in ("tools", "scope", "requirements")]
        if any(type(name) is not str for name in names) or any(v is None for v in lists):
            raise ControlError(
                f"{where} needs string id, role, adapter and string lists tools, scope, "
                "requirements"
            )
        tools, scope, requirements = (v or () for v in lists)
        tasks[str(names[0])] = ControlTask(str(names[1]), str(names[2]), tools, scope, requirements)
    wanted = sorted({r for task in tasks.values() for r in task.requirements})
    return ControlPlan(params, tasks, tuple(wanted))


@dataclass
class AttemptFacts:
    """One task's current attempt as the audit store shows it (reset at each spawn)."""

    attempt: int = 0
    batch: str | None = None
    gates: dict[str, int] = field(default_factory=dict)
    """Tier-1 gate sensor -> failing gates of that kind among the attempt's gate.result."""
    outcome: str | None = None
    """The latest ``round.end`` outcome of the attempt (a rounds task)."""


@dataclass(frozen=True)
class Exit:
    duration_ms: int
    tokens: int | None
    """input + output tokens of ``agent.exit.usage``; None when usage is null."""


def exit_of(body: Mapping[str, Any]) -> Exit:
    usage = body["usage"]
    tokens = None
    if type(usage) is dict:
        parts = [usage.get("input_tokens"), usage.get("output_tokens")]
        tokens = sum(part for part in parts if type(part) is int)
    return Exit(int(body["duration_ms"]), tokens)


def gate_sensor(name: str) -> str:
    return sensors.GATE_SENSORS[attempt_rule.gate_kind(name)]


def check_tier1(
    readings: Sequence[Reading],
    *,
    cls: str | None,
    attempt: int,
    gates: Mapping[str, int],
    coverage: int | None,
    label: str,
) -> None:
    """The tier-1 values the evidence has: ``outcome`` (0 landed, 1 failed), ``restarts``
    (attempt - 1, at least 0), the gate sensors (failing ``gate.result`` of the attempt per
    kind, one reading per kind that ran), ``coverage`` (only when the plan names
    requirements)."""
    tier1 = {r.sensor: r.value for r in readings if r.tier == 1}
    restarts = max(0, attempt - 1)  # 0 also for a task the epoch never spawned (a continue)
    expected: dict[str, int] = {"outcome": 0 if cls is None else 1, "restarts": restarts}
    expected.update(gates)
    if coverage is not None:
        expected["coverage"] = coverage
    for name in sensors.TIER1:
        if tier1.get(name) != expected.get(name):
            raise ControlError(
                f"{label}: tier-1 sensor {name} reads {_shown(tier1.get(name))}, the evidence "
                f"gives {_shown(expected.get(name))} ({_why(name, cls, attempt)})"
            )


def _shown(value: int | None) -> str:
    return "nothing" if value is None else str(value)


def _why(name: str, cls: str | None, attempt: int) -> str:
    if name == "outcome":
        return "the attempt landed" if cls is None else f"the attempt failed ({cls})"
    if name == "restarts":
        return f"attempt {attempt}"
    if name == "coverage":
        return "per-mille of the plan's requirements carried by tasks that are done"
    return "the attempt's failing gate.result records of that kind"


def check_pace(readings: Sequence[Reading], facts: Exit | None, label: str) -> None:
    """When pace is read: ``pace_ms`` is the batch's ``agent.exit.duration_ms`` (0 without
    one), ``pace_tokens`` its usage's input + output tokens, read exactly when usage is known."""
    read = {r.sensor: r.value for r in readings if r.tier == 2}
    if "pace_ms" not in read:
        if "pace_tokens" in read:
            raise ControlError(f"{label}: pace_tokens is read without pace_ms")
        return
    duration = facts.duration_ms if facts is not None else 0
    if read["pace_ms"] != duration:
        raise ControlError(
            f"{label}: pace_ms reads {read['pace_ms']}, the batch's agent.exit took {duration} ms"
        )
    tokens = facts.tokens if facts is not None else None
    if read.get("pace_tokens") != tokens:
        raise ControlError(
            f"{label}: pace_tokens reads {_shown(read.get('pace_tokens'))}, the batch's "
            f"agent.exit usage gives {_shown(tokens)}"
        )


READING_MEMBERS: Final = ("sensor", "tier", "value", "anomaly", "trigger")


def check_readings(recorded: Sequence[Reading], expected: Sequence[Reading], label: str) -> None:
    """The recorded readings are exactly the controller's for the step (order included)."""
    for index, (got, want) in enumerate(zip(recorded, expected, strict=False)):
        for member in READING_MEMBERS:
            a, b = getattr(got, member), getattr(want, member)
            if a != b:
                raise ControlError(
                    f"{label}: reading {index + 1} ({got.sensor}) has {member} {a!r}, the rule "
                    f"gives {b!r} (reading {want.sensor})"
                )
    if len(recorded) != len(expected):
        names = [r.sensor for r in expected]
        raise ControlError(
            f"{label}: {len(recorded)} readings recorded, the rule reads {len(expected)}: "
            f"{', '.join(names) or 'none'}"
        )


def describe(decision: Decision) -> str:
    """What made a decision due, in words (for a missing one)."""
    d = decision
    if d.rule == "bucket":
        return f"the bucket of {d.key} crossed {d.threshold} at step {d.step} (level {d.level})"
    if d.rule == "aggregate":
        return (
            f"class {d.cls} showed in {d.level} agents' windows (at least {d.threshold}) at "
            f"step {d.step}"
        )
    if d.rule == "cusum":
        return f"the CUSUM of {d.key} reached {d.level} (h {d.threshold}) at step {d.step}"
    return f"{d.level} firings in the window ending at step {d.step} (at least {d.threshold})"


def check_decision(body: Mapping[str, Any], expected: Decision, where: str) -> None:
    want = expected.record()
    for member, value in want.items():
        if body[member] != value:
            raise ControlError(
                f"{where}: control.decision at step {expected.step} records {member} "
                f"{body[member]!r}, the rule decides {value!r} ({describe(expected)}, "
                f"{expected.layer}/{expected.rule} -> {expected.action})"
            )


@dataclass(frozen=True)
class Chain:
    """The latest configuration version the evidence has proved."""

    version: int
    sha256: str
    document: Mapping[str, Any]


def check_version(body: Mapping[str, Any], chain: Chain, step: int, where: str) -> None:
    """A ``config.version`` after the first, on its own terms: the next number, parent the
    previous version's SHA-256, its own SHA-256 the document's, a valid document, and change,
    channel and impact as ``configchain`` gives them for the two documents."""
    label = f"{where}: config.version {body['version']}"
    if body["version"] != chain.version + 1:
        raise ControlError(f"{label} follows version {chain.version}: versions count by one")
    if body["parent"] != chain.sha256:
        raise ControlError(
            f"{label}: parent {body['parent']} is not the SHA-256 of version {chain.version} "
            f"({chain.sha256})"
        )
    document = body["document"]
    problem = configchain.document_error(document)
    if problem is not None:
        raise ControlError(f"{label}: the document is not a control configuration: {problem}")
    digest = configchain.document_sha256(document)
    if body["sha256"] != digest:
        raise ControlError(f"{label}: sha256 {body['sha256']} is not its document's ({digest})")
    change = configchain.classify(chain.document, document)
    members = {
        "change": change,
        "channel": configchain.channel(change),
        "impact": configchain.impact(chain.document, document),
        "step": step,
    }
    for member, value in members.items():
        if body[member] != value:
            raise ControlError(
                f"{label} records {member} {body[member]!r}, the rule gives {value!r}"
            )


def check_expected_version(body: Mapping[str, Any], expected: Version, where: str) -> None:
    want = expected.record(str(body["snapshot"]))
    for member, value in want.items():
        if body[member] != value:
            raise ControlError(
                f"{where}: config.version {expected.version} records {member} {body[member]!r}, "
                f"the decision at step {expected.step} produces {value!r}"
            )


def decision_key(body: Mapping[str, Any]) -> str:
    """``layer/rule/action``: how the summary counts decisions."""
    return f"{body['layer']}/{body['rule']}/{body['action']}"


@dataclass
class Reviews:
    """The meta layer's reviews a settling transition made due (review points passed)."""

    previous: int
    progress: int
    points: tuple[int, ...]
    settled_us: int
    where: str
    expected: list[meta.Review] | None = None
    elapsed: tuple[int, bool] | None = None


def check_review(
    kind: str,
    body: Mapping[str, Any],
    due: Reviews,
    machine: Controller,
    times: tuple[int, int, int],
    where: str,
) -> bool:
    """The next due ``control.review``: ``Controller.reviews`` for the settlement, at the
    step count and progress then; ``elapsed_s`` between the settlement's time since version 1
    and the review's own time since ``run.start`` (whole seconds; the runtime reads its clock
    in between), one value per settlement, and ``heightened`` exactly for hours 4 to 6 of it.
    ``times``: (run.start, configuration version 1, this record) in microseconds. True once
    the settlement's last review was checked."""
    started_us, version_us, now_us = times
    done = 0 if due.expected is None else len(due.points) - len(due.expected)
    if kind != "control.review":
        raise ControlError(
            f"{where}: missing review: progress {due.previous} -> {due.progress} per-mille "
            f"at {due.where} passes the {due.points[done]} per-mille review point, and "
            f"{kind} comes before its control.review"
        )
    elapsed, heightened = int(body["elapsed_s"]), bool(body["heightened"])
    low = max(0, (due.settled_us - version_us) // 1_000_000)
    high = max(0, (now_us - started_us) // 1_000_000)
    if not low <= elapsed <= high or (due.elapsed not in (None, (elapsed, heightened))):
        raise ControlError(
            f"{where}: control.review records elapsed_s {elapsed}: the settlement at "
            f"{due.where} came {low} to {high} whole seconds into the run (one value per "
            "settlement)"
        )
    rule = phases.HEIGHTENED_FROM_S <= elapsed < phases.HEIGHTENED_UNTIL_S
    if heightened != rule:
        raise ControlError(
            f"{where}: control.review records heightened {heightened} at {elapsed} s; "
            f"hours 4 to 6 of the run give {rule}"
        )
    if due.expected is None:
        due.expected = list(machine.reviews(due.previous, heightened=heightened))
        due.elapsed = (elapsed, heightened)
    expected = due.expected.pop(0)
    want = {"step": machine.steps, "progress_pm": due.progress, **expected.record()}
    for member, value in want.items():
        if body[member] != value:
            raise ControlError(
                f"{where}: control.review of point {expected.point} records {member} "
                f"{body[member]!r}, the rule gives {value!r}"
            )
    return not due.expected
