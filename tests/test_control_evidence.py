"""The verifier re-decides every control decision of a real run (issue 13 §9), end to end.

``harness demo`` runs its plan through the runtime: the tuner's task fails its gate twice
(its bucket crosses the plan's threshold: the template strategy, configuration version 2,
loaded by its third attempt, which lands), the rounds tasks' suspensions fill the docs
subtree's bucket (a split), the firing rate escalates, the writer's third task alarms the
CUSUM on its tokens (a warning) and progress moves the run into integrate. Its bundle
verifies and the report says what was re-decided. Each other test re-records the run's
records with one change under a test key (as tests/test_attempt_evidence.py does), exports
and verifies: each is refused by the control check with its own message. Before the check
existed (commit 632621a registered nothing) every one of these bundles verified.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import DemoResult, run_demo
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.policy import TrustPolicy
from harness.verify.records import STORES
from harness.verify.render import render_json, render_text
from harness.verify.report import Report

from .evidence_helpers import make_keys

Body = dict[str, Any]
Row = tuple[str, str, Body]


@dataclass(frozen=True)
class Demo:
    result: DemoResult
    rows: list[Row]
    plan: bytes
    rounds: dict[str, bytes]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    result = run_demo(tmp_path_factory.mktemp("demo") / "d")
    folder = result.repo / ".harness" / "runs" / result.run_id
    rows: list[Row] = []
    for store in STORES:
        path = folder / f"{store}.jsonl"
        if path.exists():
            for line in path.read_bytes().splitlines():
                obj = parse_canonical(line)
                rows.append((store, obj["kind"], obj["body"]))
    rounds = {p.name: p.read_bytes() for p in sorted((folder / "rounds").iterdir())}
    return Demo(result, rows, (folder / "plan.json").read_bytes(), rounds)


def _verify(tmp_path: Path, demo: Demo, rows: list[Row]) -> Report:
    keys = make_keys()
    state = tmp_path / "state"
    with RunRecorder(state, demo.result.run_id, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(demo.plan)
        for store, kind, body in rows:
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
        rounds = recorder.folder / "rounds"
        rounds.mkdir(exist_ok=True)
        for name, data in demo.rounds.items():
            (rounds / name).write_bytes(data)
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def _refused(report: Report, *words: str) -> str:
    assert report.status.value == "invalid", "tampered evidence verified"
    assert report.failure is not None and report.failure.check == "semantics", report.failure
    reason = report.failure.reason
    for word in words:
        assert word in reason, reason
    return reason


def _at(rows: list[Row], kind: str, nth: int = 0, **match: Any) -> int:
    found = [
        i
        for i, (store, k, body) in enumerate(rows)
        if store == "audit" and k == kind and all(body.get(m) == v for m, v in match.items())
    ]
    return found[nth]


def _changed(rows: list[Row], index: int, change: Callable[[Body], None]) -> list[Row]:
    out = copy.deepcopy(rows)
    change(out[index][2])
    return out


def _without(rows: list[Row], *indexes: int) -> list[Row]:
    return [row for i, row in enumerate(rows) if i not in indexes]


def _reading(body: Body, sensor: str) -> Body:
    return next(r for r in body["readings"] if r["sensor"] == sensor)


def test_the_demo_verifies_and_reports_what_was_re_decided(tmp_path: Path, demo: Demo) -> None:
    report = demo.result.report
    assert report.status.value == "verified", report.failure
    audit = [(kind, body) for store, kind, body in demo.rows if store == "audit"]
    sensors = [body for kind, body in audit if kind == "control.sensor"]
    decisions = [body for kind, body in audit if kind == "control.decision"]
    versions = [body for kind, body in audit if kind == "config.version"]
    actions = {(d["layer"], d["rule"], d["action"]) for d in decisions}
    assert {("I", "bucket", "template"), ("D", "cusum", "warn")} <= actions
    assert len(versions) >= 2 and versions[1]["parent"] == versions[0]["sha256"]
    (control,) = report.controls
    assert (control.steps, control.versions) == (len(sensors), len(versions) - 1)
    assert sum(control.decisions.values()) == len(decisions)
    assert control.readings == sum(len(s["readings"]) for s in sensors)
    text = render_text(report)
    assert f"control:       run demo-run: {len(sensors)} steps (" in text, text
    assert "I/bucket/template 1" in text
    assert '"controls": [' in render_json(report)
    again = _verify(tmp_path, demo, demo.rows)  # re-recorded unchanged: still lawful
    assert again.status.value == "verified", again.failure


def test_a_wrong_decision_is_refused(tmp_path: Path, demo: Demo) -> None:
    at = _at(demo.rows, "control.decision", action="template")
    rows = _changed(demo.rows, at, lambda b: b.update(action="scope"))
    _refused(
        _verify(tmp_path, demo, rows),
        "records action 'scope', the rule decides 'template'",
        "the bucket of agent:tuner crossed 20 at step",
    )


def test_a_missing_decision_is_refused(tmp_path: Path, demo: Demo) -> None:
    at = _at(demo.rows, "control.decision", action="template")
    step = demo.rows[at][2]["step"]
    _refused(
        _verify(tmp_path, demo, _without(demo.rows, at)),
        f"missing decision: the bucket of agent:tuner crossed 20 at step {step} (level 20) and "
        "nothing was decided",
    )


def test_an_unprovoked_decision_is_refused(tmp_path: Path, demo: Demo) -> None:
    first = _at(demo.rows, "control.sensor")
    forged = copy.deepcopy(demo.rows[_at(demo.rows, "control.decision", action="warn")][2])
    forged["step"] = demo.rows[first][2]["step"]
    rows = [*demo.rows[: first + 1], ("audit", "control.decision", forged), *demo.rows[first + 1 :]]
    _refused(_verify(tmp_path, demo, rows), "D/cusum/warn", "has no trigger")


def test_a_wrong_reading_is_refused(tmp_path: Path, demo: Demo) -> None:
    failed = _at(demo.rows, "control.sensor", **{"class": "test"})
    flipped = _changed(demo.rows, failed, lambda b: _reading(b, "tests").update(anomaly=False))
    _refused(
        _verify(tmp_path / "a", demo, flipped), "(tests) has anomaly False, the rule gives True"
    )
    duration = _reading(demo.rows[failed][2], "pace_ms")["value"]
    slower = _changed(
        demo.rows, failed, lambda b: _reading(b, "pace_ms").update(value=duration * 10)
    )
    _refused(
        _verify(tmp_path / "b", demo, slower),
        f"pace_ms reads {duration * 10}, the batch's agent.exit took {duration} ms",
    )


def test_a_wrong_phase_is_refused(tmp_path: Path, demo: Demo) -> None:
    first = _at(demo.rows, "control.sensor")
    phase = demo.rows[first][2]["phase"]
    rows = _changed(demo.rows, first, lambda b: b.update(phase="converge"))
    _refused(
        _verify(tmp_path / "a", demo, rows),
        f"records phase 'converge', the evidence gives {phase!r}",
    )
    change = _at(demo.rows, "control.phase", reason="progress")
    rows = _changed(demo.rows, change, lambda b: b.update(phase="converge"))
    _refused(_verify(tmp_path / "b", demo, rows), "control.phase records phase 'converge'")
    _refused(
        _verify(tmp_path / "c", demo, _without(demo.rows, change)),
        "missing phase: progress",
    )


def test_a_broken_configuration_chain_is_refused(tmp_path: Path, demo: Demo) -> None:
    second = _at(demo.rows, "config.version", version=2)
    first = demo.rows[_at(demo.rows, "config.version", version=1)][2]["sha256"]
    rows = _changed(demo.rows, second, lambda b: b.update(parent="ab" * 32))
    _refused(
        _verify(tmp_path, demo, rows),
        f"config.version 2: parent {'ab' * 32} is not the SHA-256 of version 1 ({first})",
    )


def test_a_spawn_loading_a_stale_version_is_refused(tmp_path: Path, demo: Demo) -> None:
    spawn = _at(demo.rows, "agent.spawn", config=2)
    batch = demo.rows[spawn][2]["batch"]
    rows = _changed(demo.rows, spawn, lambda b: b.update(config=1))
    _refused(
        _verify(tmp_path, demo, rows),
        f"batch {batch!r} loads configuration version 1, the latest is version 2",
    )


def test_a_missing_step_is_refused(tmp_path: Path, demo: Demo) -> None:
    last = max(i for i, (s, k, _) in enumerate(demo.rows) if s == "audit" and k == "control.sensor")
    task = demo.rows[last][2]["task"]
    made = [
        i
        for i in range(last, len(demo.rows))
        if demo.rows[i][1] in ("control.decision", "config.version")
    ]  # what the last step decided goes with it
    _refused(
        _verify(tmp_path, demo, _without(demo.rows, last, *made)),
        f"missing step: the landing of task {task!r} (attempt 1) has no control.sensor before "
        "run.end",
    )


def test_a_run_without_configuration_version_one_is_refused(tmp_path: Path, demo: Demo) -> None:
    first = _at(demo.rows, "config.version", version=1)
    _refused(_verify(tmp_path, demo, _without(demo.rows, first)), "no configuration version 1")
