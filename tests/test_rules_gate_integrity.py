"""Gates cannot change what is merged: real hostile gates, real git, end to end.

The runtime snapshots the worktree (HEAD, its tree, clean or not) before and after the gates
(rule ``harness.verify.rules.integrity``) and merges the commit the lineage was computed from,
by id. A gate that commits (or leaves a file behind) is an integrity violation: recorded as
``gate.integrity`` with ``intact`` false, the task fails, nothing is merged, and the bundle
still verifies (the verifier re-decides the verdict from the recorded snapshots).

These run without the sandbox (an explicit opt-out, recorded): inside bubblewrap the worktree
is read-only for gates and the attempt fails earlier; here the check itself is what stops it.
On the code before this change the first test fails: the merge took the branch tip, so the
gate's commit ("pwned") reached the repository.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.fsm import TaskState
from harness.verify.policy import TrustPolicy

from .evidence_helpers import make_keys

DATE = "2026-01-01T00:00:00+00:00"

HOSTILE_COMMIT = """
    import pathlib, subprocess
    pathlib.Path("calc.py").write_text("pwned\\n")
    subprocess.run(["git", "add", "-A"], check=False)
    subprocess.run(["git", "-c", "user.name=g", "-c", "user.email=g@x", "commit", "-qm",
                    "gate was here"], check=False)
"""
HOSTILE_LITTER = """
    import pathlib
    pathlib.Path("planted.py").write_text("print('hi')\\n")
"""


def _plan(tmp: Path, gate_body: str) -> dict[str, Any]:
    script = tmp / "gate.py"
    script.write_text(textwrap.dedent(gate_body))
    return {
        "plan": {"name": "p", "settle_ticks": 1},
        "task": [
            {
                "id": "t1",
                "role": "coder",
                "prompt": "add a note",
                "scope": ["NOTES.md"],
                "edits": [{"path": "NOTES.md", "content": "agent's note\n"}],
                "gates": [{"name": "hostile", "command": [sys.executable, str(script)]}],
            }
        ],
    }


def _run(tmp: Path, gate_body: str) -> tuple[Path, Any, list[dict[str, Any]], Any]:
    repo = tmp / "repo"
    make_repo(repo)
    keys = make_keys()
    before = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    summary = Runtime(
        repo=repo,
        plan=parse_plan(_plan(tmp, gate_body)),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="r1",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date=DATE,
        grace_s=0.5,
        sandbox=Settings(opt_out=True),
    ).run()
    after = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert after == before, "nothing may be merged"
    audit = [
        parse_canonical(line)
        for line in (repo / ".harness/runs/r1/audit.jsonl").read_bytes().splitlines()
    ]
    bundle = export_bundle(repo / ".harness", tmp / "bundle.tar", keys).path
    report = verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"))
    return repo, summary, audit, report


def test_gate_that_commits_gets_nothing_merged(tmp_path: Path) -> None:
    repo, summary, audit, report = _run(tmp_path, HOSTILE_COMMIT)
    assert summary.states["t1"] is TaskState.FAILED
    assert "pwned" not in (repo / "calc.py").read_text()
    assert not (repo / "NOTES.md").exists()
    [check] = [r["body"] for r in audit if r["kind"] == "gate.integrity"]
    assert check["intact"] is False and check["head"] != check["commit"]
    assert check["reason"].startswith("HEAD moved from")
    assert not any(r["kind"] == "merge.result" for r in audit)
    failed = [r["body"]["reason"] for r in audit if r["kind"] == "task.transition"][-1]
    assert failed.startswith("integrity violation by a gate: HEAD moved")
    assert report.status.value == "verified", report.failure


def test_gate_that_leaves_a_file_gets_nothing_merged(tmp_path: Path) -> None:
    repo, summary, audit, report = _run(tmp_path, HOSTILE_LITTER)
    assert summary.states["t1"] is TaskState.FAILED
    [check] = [r["body"] for r in audit if r["kind"] == "gate.integrity"]
    assert check["intact"] is False and check["clean_after"] is False
    assert check["head"] == check["commit"] and check["tree"] == check["head_tree"]
    assert not (repo / "planted.py").exists() and not (repo / "NOTES.md").exists()
    assert report.status.value == "verified", report.failure


def test_harmless_gate_merges_exactly_the_agents_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    summary = Runtime(
        repo=repo,
        plan=parse_plan(_plan(tmp_path, "print('ok')\n")),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="r1",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date=DATE,
        sandbox=Settings(opt_out=True),
    ).run()
    assert summary.states["t1"] is TaskState.DONE
    assert (repo / "NOTES.md").read_text() == "agent's note\n"
    audit = [
        parse_canonical(line)
        for line in (repo / ".harness/runs/r1/audit.jsonl").read_bytes().splitlines()
    ]
    [check] = [r["body"] for r in audit if r["kind"] == "gate.integrity"]
    assert check["intact"] is True
    merged_parents = subprocess.run(
        ["git", "rev-list", "--parents", "-n1", "HEAD"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert check["commit"] in merged_parents  # the lineage's commit, by id (or fast-forward)


def test_capsule_run_end_to_end_is_re_decided_by_the_verifier(tmp_path: Path) -> None:
    """A real run under a capsule: every check is recorded with its inputs, the conforming task
    merges, the drifting one fails before its gates, and the verifier agrees with each."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"]}
    plan = {
        "plan": {"name": "p", "settle_ticks": 1, "max_batch": 1},
        "capsule": {
            "goal": "notes",
            "actions": ["edit", "gate", "merge"],
            "scope": ["src/**"],
            "expires": "2030-01-01T00:00:00.000000Z",
        },
        "task": [
            {"id": "t1", "role": "coder", "prompt": "p", "scope": ["src/**"], "gates": [gate],
             "edits": [{"path": "src/n.md", "content": "ok\n"}]},
            {"id": "t2", "role": "coder", "prompt": "p", "gates": [gate],
             "edits": [{"path": "docs/x.md", "content": "drift\n"}]},
        ],
    }  # fmt: skip
    summary = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="r1",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date=DATE,
        sandbox=Settings(opt_out=True),
    ).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.FAILED}
    audit = [
        parse_canonical(line)
        for line in (repo / ".harness/runs/r1/audit.jsonl").read_bytes().splitlines()
    ]
    checks = [r["body"] for r in audit if r["kind"] == "capsule.check"]
    t1 = [c for c in checks if c["task"] == "t1"]
    assert [c["actions"] for c in t1] == [
        [],
        [],
        [["edit", "src/n.md"], ["gate", "ok"], ["merge", "harness/r1/b0001"]],
    ]
    assert all(c["conforms"] for c in t1)
    (t2_last,) = [c for c in checks if c["task"] == "t2"][-1:]
    assert not t2_last["conforms"] and t2_last["violations"][0].startswith("scope: edit")
    assert not any(r["kind"] == "gate.result" and r["body"]["task"] == "t2" for r in audit)
    bundle = export_bundle(repo / ".harness", tmp_path / "bundle.tar", keys).path
    report = verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"))
    assert report.status.value == "verified", report.failure
