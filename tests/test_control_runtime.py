"""The control layers in a real run: real worktrees, real gates, the scripted agent.

An agent that fails its gate on every attempt walks the whole toolbox — a neutral template
change and an expanding toolchain change (both through the slow channel, each a new
configuration version whose parent is the previous one), a split, then escalation once the
phase's restructuring bounds are spent — and every attempt loads the version in force at
its spawn. A resumed runtime folds the same records into the same controller state, and
``harness status`` shows what the controller did. The evidence verifies.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.control import RunControl
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runner.resume import audit_objects
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.state import control_lines
from harness.receipts.bundle import export_bundle
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy
from harness.verify.rules import configchain

from .evidence_helpers import make_keys

KEYS = make_keys(13)
DATE = "2026-01-01T00:00:00+00:00"
GATE = {
    "name": "unit-tests",
    "command": [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
    "timeout_s": 60,
}
BROKEN = "def add(a, b):\n    return a - b\n"


def _plan(**control: Any) -> dict[str, Any]:
    return {
        "plan": {
            "name": "control",
            "settle_ticks": 1,
            "max_attempts": 5,
            # one anomaly crosses; the run stays in implement (3 switches, 1 topology change)
            "control": {"threshold": 10, "phase_bounds": [0, 1001, 1001], **control},
        },
        "task": [
            {
                "id": "fix",
                "role": "fixer",
                "prompt": "Refactor add.",
                "scope": ["calc.py"],
                "tools": ["edit", "web"],
                "gates": [GATE],
                "edits": [{"path": "calc.py", "content": BROKEN}],
            }
        ],
    }


def _run(repo: Path, plan: dict[str, Any]) -> Runtime:
    make_repo(repo)
    runtime = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=KEYS,
        run_id="r1",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date=DATE,
        grace_s=0.5,
    )
    runtime.run()
    return runtime


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Runtime, list[dict[str, Any]]]:
    repo = tmp_path_factory.mktemp("control") / "repo"
    runtime = _run(repo, _plan())
    return runtime, list(audit_objects(repo / ".harness", "r1"))


def _bodies(audit: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj["body"] for obj in audit if obj["kind"] == kind]


def test_a_failing_agent_walks_the_toolbox_then_escalates(walked: Any) -> None:
    _, audit = walked
    decisions = _bodies(audit, "control.decision")
    agent = [d for d in decisions if d["key"] == "agent:fixer"]
    assert [(d["step"], d["action"], d["config"]) for d in agent] == [
        (1, "template", 2),
        (2, "toolchain", 3),
        (3, "split", None),
        (4, "escalate", None),
        (5, "escalate", None),
    ]
    assert all(d["class"] == "test" and d["level"] == d["threshold"] == 10 for d in agent)
    versions = _bodies(audit, "config.version")
    assert [(v["version"], v["change"], v["channel"]) for v in versions] == [
        (1, "initial", "initial"),
        (2, "neutral", "slow"),
        (3, "expand", "slow"),
    ]
    for parent, child in itertools.pairwise(versions):
        assert (
            child["parent"] == parent["sha256"] == configchain.document_sha256(parent["document"])
        )
    entry = versions[2]["document"]["agents"]["fixer"]
    assert entry == {"template": "focused", "add": ["shell"], "drop": [], "gates_in_prompt": True}
    spawns = _bodies(audit, "agent.spawn")
    assert [(s["attempt"], s["config"]) for s in spawns] == [(1, 1), (2, 2), (3, 3), (4, 3), (5, 3)]


def test_every_attempt_ending_is_one_step_with_its_readings(walked: Any) -> None:
    _, audit = walked
    steps = _bodies(audit, "control.sensor")
    assert [(s["step"], s["attempt"], s["class"], s["phase"]) for s in steps] == [
        (n, n, "test", "implement") for n in range(1, 6)
    ]
    for step in steps:
        readings = {r["sensor"]: r for r in step["readings"]}
        assert readings["outcome"]["value"] == 1 and readings["outcome"]["anomaly"] is True
        assert readings["restarts"]["value"] == step["attempt"] - 1
        assert readings["tests"] == {
            "sensor": "tests", "tier": 1, "value": 1, "anomaly": True, "trigger": None,
        }  # fmt: skip
        assert readings["pace_ms"]["trigger"] == "anomaly"  # the failure turns pace on
        assert "pace_tokens" not in readings  # the agent reported no usage


def test_the_configured_strategy_reaches_the_next_attempt(walked: Any) -> None:
    runtime, _ = walked
    # The last configuration in force: the task's tools as its agent now runs them.
    task = runtime.control.configure(runtime.specs["fix"])
    assert task.tools == ("edit", "shell", "web")
    assert "Strategy (focused)" in task.prompt
    assert "run these checks yourself" in task.prompt and "unittest" in task.prompt


def test_a_resumed_runtime_folds_the_records_into_the_same_controller(walked: Any) -> None:
    runtime, audit = walked
    live = runtime.control.machine
    folded = RunControl(runtime)
    for obj in audit:
        folded.replay(obj["kind"], obj["body"], obj["time"])
    again = folded.machine
    assert (again.steps, again.version, again.sha256, again.phase) == (
        live.steps,
        live.version,
        live.sha256,
        live.phase,
    )
    assert again.document == live.document and again.windows == live.windows
    assert {k: a.__dict__ for k, a in again.agents.items()} == {
        k: a.__dict__ for k, a in live.agents.items()
    }


def test_status_shows_what_the_controller_did(walked: Any) -> None:
    runtime, _ = walked
    lines = control_lines(runtime.state_dir, "r1")
    assert lines[0] == "  control: phase implement, configuration version 3, 5 steps"
    assert lines[1].split() == [
        "step", "1", "I", "bucket", "agent:fixer", "10/10", "(test)", "->", "template",
        "(version", "2)",
    ]  # fmt: skip
    assert sum("-> escalate" in line for line in lines) == 2


def test_the_evidence_verifies(walked: Any, tmp_path: Path) -> None:
    runtime, _ = walked
    bundle = export_bundle(runtime.state_dir, tmp_path / "bundle.tar", KEYS).path
    report = verify_bundle(
        bundle, pins=TrustPolicy(frozenset({KEYS.key_id}), "t"), hmac_master=KEYS.hmac_master
    )
    assert report.status.value == "verified", report.failure


def test_an_inconsistent_expansion_is_never_applied(tmp_path: Path) -> None:
    """A task with ``secrets`` (private data): adding ``shell`` (untrusted input, external
    communication) would complete the lethal trifecta, so the slow channel's consistency
    check refuses the toolchain change and the toolbox goes on to the split."""
    plan = _plan()
    plan["task"][0]["tools"] = ["edit", "secrets"]
    runtime = _run(tmp_path / "repo", plan)
    audit = list(audit_objects(runtime.state_dir, "r1"))
    actions = [d["action"] for d in _bodies(audit, "control.decision") if d["key"] == "agent:fixer"]
    assert actions[:3] == ["template", "split", "escalate"]
    assert [v["version"] for v in _bodies(audit, "config.version")] == [1, 2]


def test_the_art12_report_carries_every_decision_and_the_trend(walked: Any) -> None:
    from harness.receipts.euaiact import _read_runs
    from harness.receipts.euaiact_control import control_section, trend_svg

    runtime, audit = walked
    bundle = export_bundle(runtime.state_dir, runtime.state_dir.parent / "r.tar", KEYS).path
    _, runs, plans = _read_runs(bundle)
    section = control_section(runs, plans)
    recorded = _bodies(audit, "control.decision")
    assert section["steps"] == 5
    assert [
        {k: row[k] for k in ("step", "layer", "rule", "key", "level", "threshold", "action")}
        for row in section["decisions"]
    ] == [{k: d[k] for k in ("step", "layer", "rule", "key", "level", "threshold", "action")}
          for d in recorded]  # fmt: skip
    (trend,) = section["trends"]
    assert trend["agent"] == "fixer"
    # every step crossed (threshold 10 = one anomaly): the bucket acted at 1000 per-mille
    assert [(p["step"], p["bucket_pm"]) for p in trend["points"]] == [
        (n, 1000) for n in range(1, 6)
    ]
    assert trend["points"][0]["decisions"] == ["I bucket: template"]
    svg = trend_svg(section)
    assert svg.count("<polyline") == 2 and "r1 / fixer" in svg
    assert "<script" not in svg


def test_the_trend_panel_escapes_names_and_thins_long_runs() -> None:
    from harness.receipts.euaiact_control import MAX_POINTS, _thin, trend_svg

    points = [
        {"step": n, "bucket_pm": 0, "cusum_pm": 0, "decisions": ["I bucket: x"] if n == 7 else []}
        for n in range(1, 2001)
    ]
    thinned = _thin(points)
    assert len(thinned) <= MAX_POINTS + 1 and any(p["step"] == 7 for p in thinned)
    hostile = '<script>alert(1)</script>"'
    svg = trend_svg({"trends": [{"run": "r", "agent": hostile, "points": points[:3]}]})
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_a_judge_command_is_answered_then_its_verdict_recorded(tmp_path: Path) -> None:
    """The command desk's side of ``harness judge``: a verdict on a waiting alert is applied
    (receipt, then ``control.verdict``), one on no waiting alert rejected; nothing else."""
    from harness.receipts.commands import Command

    runtime = _run(tmp_path / "repo", _plan())
    machine = runtime.control.machine
    waiting = sorted(machine.pending)
    assert waiting == ["4:agent:fixer", "5:agent:fixer"]  # the two escalations
    runtime._pending.clear()

    def judge(seq: int, alert: str, verdict: str) -> None:
        args = {"alert": alert, "verdict": verdict}
        command = Command(seq, f"j{seq}", "judge", args, "op", runtime.epoch, "")
        runtime.desk.decide(command)

    judge(1, "5:agent:fixer", "overridden")
    judge(2, "5:agent:fixer", "confirmed")  # already judged
    judge(3, "4:agent:fixer", "wrong")
    queued = [(kind, body) for kind, body in runtime._pending]
    assert queued[0] == (
        "command.receipt",
        {"id": "j1", "command": "judge", "control_seq": 1, "outcome": "applied",
         "reason": "alert 5:agent:fixer judged overridden"},
    )  # fmt: skip
    assert queued[1] == (
        "control.verdict",
        {"alert": "5:agent:fixer", "verdict": "overridden", "command": "j1"},
    )
    assert [(b["id"], b["outcome"]) for k, b in queued[2:]] == [
        ("j2", "rejected"),
        ("j3", "rejected"),
    ]
    assert "not waiting" in queued[2][1]["reason"] and "'wrong'" in queued[3][1]["reason"]
    assert machine.outcomes == ["overridden"] and list(machine.pending) == ["4:agent:fixer"]
    runtime._pending.clear()


def test_a_resumed_run_does_not_pass_its_review_points_again(walked: Any) -> None:
    """The walked run settled its one task (progress 1000: the 25/50/75 % reviews are
    recorded) while its phase never changed, so no control.phase carries that progress: the
    fold takes it from the task states, and a settlement after the resume reviews nothing."""
    runtime, audit = walked
    assert [b["point"] for b in _bodies(audit, "control.review")] == [250, 500, 750]
    folded = RunControl(runtime)
    for obj in audit:
        folded.replay(obj["kind"], obj["body"], obj["time"])
    folded.resumed()
    assert folded.machine.progress == 1000
    runtime._pending.clear()
    folded.settled()
    assert [kind for kind, _ in runtime._pending] == []


def test_the_review_wait_is_a_plan_setting_the_desk_takes() -> None:
    from harness.orchestrate.plan import PlanError
    from harness.orchestrate.review.desk import ReviewDesk

    plan = _plan()
    assert parse_plan(plan).review_wait_s == 300
    plan["plan"]["review_wait_s"] = 5
    assert parse_plan(plan).review_wait_s == 5

    class Run:
        pass

    run = Run()
    run.plan = parse_plan(plan)  # type: ignore[attr-defined]
    assert ReviewDesk.of(run).wait_s == 5
    for bad in (0, 3601, 2.5, "5"):
        plan["plan"]["review_wait_s"] = bad
        with pytest.raises(PlanError, match=r"plan\.review_wait_s"):
            parse_plan(plan)
