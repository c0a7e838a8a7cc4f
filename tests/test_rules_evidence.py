"""Recomputed decisions, end to end: bundles written with the project's own writers.

Each test records a run whose one decision disagrees with its recorded inputs (a trifecta
denial the rule would allow, a task that ran though the rule denies it, a capsule check that
says "conforms" for an out-of-scope edit, a task done with an unchecked edit, a gate-integrity
verdict that contradicts its snapshots, a plan digest that is not the plan's), exports it with
``export_bundle`` under a test key and verifies it with ``verify_bundle``: each is refused by
the semantics check, naming the task and the rule. The lawful variant verifies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, check_task, matrix_object
from harness.orchestrate.capsule import capsule_digest, capsule_document, conformance
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy

from .evidence_helpers import make_keys, with_control

RUN = "r1"
BASE, TIP, TREE = "1" * 40, "2" * 40, "3" * 40
NOW = "2026-01-01T00:00:00.000000Z"
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
PLAN = parse_plan(
    {
        "plan": {"name": "p"},
        "capsule": {
            "goal": "fix it",
            "actions": ["edit", "gate", "merge"],
            "scope": ["src/**"],
            "egress": ["api.anthropic.com"],  # t2's model route (a plan rule, issue 18 B)
            "expires": "2030-01-01T00:00:00.000000Z",
        },
        "task": [
            {"id": "t1", "role": "coder", "prompt": "fix", "scope": ["src/**"],
             "gates": [{"name": "tests", "command": ["true"]}]},
            {"id": "t2", "role": "coder", "prompt": "browse", "adapter": "claude",
             "tools": ["web"]},
        ],
    }
)  # fmt: skip
T1, T2 = PLAN.tasks
BRANCH = "harness/r1/b0001"
Body = dict[str, Any]
Records = list[tuple[str, str, Body]]


def _check(task: Any, actions: list[tuple[str, str]]) -> Body:
    assert PLAN.capsule is not None
    violations = conformance(PLAN.capsule, now=NOW, task=task, actions=actions)
    return {
        "task": task.id,
        "capsule": capsule_digest(PLAN.capsule),
        "now": NOW,
        "actions": [list(a) for a in actions],
        "conforms": not violations,
        "violations": violations,
    }


def _denial(task: Any) -> Body:
    denial = check_task(task, DEFAULT_MATRIX, NO_SANDBOX)
    assert denial is not None
    return {
        "task": denial.task,
        "tools": list(denial.tools),
        "tags": list(denial.tags),
        "reason": denial.reason,
        "sandbox": NO_SANDBOX,
    }


def _move(task: str, a: str, b: str) -> tuple[str, str, Body]:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": "r"})


def lawful() -> Records:
    """t1 edits src/a.py, passes its gate and merges; t2 (claude + web, no sandbox) is denied."""
    assert PLAN.capsule is not None
    actions = [("edit", "src/a.py"), ("gate", "tests"), ("merge", BRANCH)]
    start = {
        "plan": "p",
        "plan_sha256": hashlib.sha256(plan_bytes(PLAN)).hexdigest(),
        "producer": "harness test",
        "harness_version": "0",
        "base_commit": BASE,
        "repository_roots": [BASE],
        "capabilities": matrix_object(DEFAULT_MATRIX),
        "capsule": capsule_document(PLAN.capsule),
        "sandbox": NO_SANDBOX,
    }
    planned = [
        ("audit", "task.planned", {"task": t.id, "role": t.role, "priority": t.priority,
         "depends": list(t.depends), "adapter": t.adapter, "tools": list(t.tools)})
        for t in PLAN.tasks
    ]  # fmt: skip
    spawn = {
        "batch": "b0001",
        "tasks": ["t1"],
        "adapter": "scripted",
        "branch": BRANCH,
        "worktree": "/w",
        "timeout_ms": 1000,
        "sandbox": NO_SANDBOX,
        "env": ["PATH"],
        "supervisor": "role:coder",
        "attempt": 1,
        "idle_ms": None,
        "lifetime_ms": 1000,
        "grace_ms": 2000,
        "lock": ["src/**"],
        "budget": {"wall_ms": None, "tokens": None, "cost_micros": None},
        "config": 1,
    }
    integrity = {
        "batch": "b0001",
        "tasks": ["t1"],
        "commit": TIP,
        "tree": TREE,
        "head": TIP,
        "head_tree": TREE,
        "clean_before": True,
        "clean_after": True,
        "intact": True,
        "reason": "unchanged",
    }
    return [
        ("audit", "run.start", start),
        (
            "audit",
            "capsule.approved",
            {"capsule": capsule_digest(PLAN.capsule), "goal": "fix it", "expires": "x"},
        ),
        *planned,
        ("audit", "capability.denied", _denial(T2)),
        _move("t2", "planned", "denied"),
        ("audit", "capsule.check", _check(T1, [])),
        _move("t1", "planned", "open"),
        _move("t1", "open", "claimed"),
        ("audit", "lock.acquire", {"batch": "b0001", "globs": ["src/**"]}),
        ("audit", "agent.spawn", spawn),
        _move("t1", "claimed", "in_progress"),
        ("lineage", "artifact.write", _write("src/a.py")),
        ("audit", "capsule.check", _check(T1, actions)),
        _move("t1", "in_progress", "gating"),
        ("audit", "gate.result", {"task": "t1", "gate": "tests", "passed": True, "exit_code": 0,
                                  "duration_ms": 1}),
        ("audit", "gate.integrity", integrity),
        ("audit", "merge.result", {"task": "t1", "branch": BRANCH, "merged": True, "commit": TIP,
                                   "reason": "clean"}),
        _move("t1", "gating", "done"),
        ("audit", "lock.release", {"batch": "b0001", "reason": "retired"}),
        ("audit", "run.end", {"outcome": "completed"}),
    ]  # fmt: skip


def _write(path: str) -> Body:
    return {
        "path": path,
        "sha256": "ab" * 32,
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "actor": "scripted",
        "task": "t1",
        "step": 0,
        "model": None,
    }


def _verify(tmp_path: Path, records: Records, plan: bytes | None = None) -> Any:
    keys = make_keys()
    state = tmp_path / "state"
    with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
        document = plan if plan is not None else plan_bytes(PLAN)
        recorder.write_plan(document)
        for store, kind, body in with_control(records, document):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def _replace(records: Records, kind: str, change: Callable[[Body], Body], nth: int = 0) -> Records:
    out, seen = [], 0
    for store, k, body in records:
        if k == kind:
            if seen == nth:
                body = change(dict(body))
            seen += 1
        out.append((store, k, body))
    return out


def test_lawful_run_verifies(tmp_path: Path) -> None:
    report = _verify(tmp_path, lawful())
    assert report.status.value == "verified", report.failure


def _refused(report: Any, task: str, rule: str) -> None:
    assert report.status.value == "invalid"
    assert report.failure.check == "semantics", report.failure
    assert f"task {task!r} breaks rule {rule}" in report.failure.reason, report.failure.reason


def test_denial_the_rule_would_allow_is_refused(tmp_path: Path) -> None:
    """t2 in a sandbox without network or private mounts is allowed: its recorded denial is not."""
    offline = {"kind": "bwrap", "network": False, "private_mounts": False, "opt_out": False}
    records = _replace(lawful(), "capability.denied", lambda b: {**b, "sandbox": offline})
    _refused(_verify(tmp_path, records), "t2", "trifecta")


def test_task_that_ran_though_the_rule_denies_it_is_refused(tmp_path: Path) -> None:
    """Drop t2's denial and let it run: the rule denies it under the recorded sandbox."""
    denied = _move("t2", "planned", "denied")
    records = [r for r in lawful() if r[1] != "capability.denied" and r != denied]
    records.insert(4, _move("t2", "planned", "open"))
    _refused(_verify(tmp_path, records), "t2", "trifecta")


def test_capsule_check_that_disagrees_with_its_inputs_is_refused(tmp_path: Path) -> None:
    """The check records 'conforms' for an edit outside the capsule scope."""

    def outside(body: Body) -> Body:
        return {**body, "actions": [["edit", "docs/x.md"], *body["actions"][1:]]}

    records = _replace(lawful(), "capsule.check", outside, nth=1)
    _refused(_verify(tmp_path, records), "t1", "capsule")


def test_done_with_an_unchecked_edit_is_refused(tmp_path: Path) -> None:
    """The check is self-consistent but never saw the lineage's second edit (src/b.py, inside
    the batch's lock: the write-lock check has nothing to say)."""
    records = lawful()
    at = next(i for i, r in enumerate(records) if r[1] == "artifact.write")
    records.insert(at + 1, ("lineage", "artifact.write", {**_write("src/b.py"), "step": 1}))
    _refused(_verify(tmp_path, records), "t1", "capsule")


def test_integrity_verdict_that_contradicts_its_snapshots_is_refused(tmp_path: Path) -> None:
    records = _replace(lawful(), "gate.integrity", lambda b: {**b, "head": "4" * 40})
    _refused(_verify(tmp_path, records), "t1", "gate-integrity")


@pytest.mark.parametrize("variant", ["other plan bytes", "missing plan"])
def test_plan_digest_must_bind_the_plan_member(tmp_path: Path, variant: str) -> None:
    if variant == "missing plan":
        keys = make_keys()
        state = tmp_path / "state"
        with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
            for store, kind, body in lawful():
                recorder.record(store, kind, body)
            recorder.checkpoint_all()
        bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
        report = verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))
    else:
        report = _verify(tmp_path, lawful(), plan=plan_bytes(PLAN) + b" ")
    assert report.status.value == "invalid" and report.failure.check == "semantics"
    assert "breaks rule plan" in report.failure.reason, report.failure.reason
