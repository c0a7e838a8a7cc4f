"""How the runtime groups its audit records into group commits (one fsync each).

Evidence must be cheap enough never to turn off (issue 14): a retirement's records are one
group commit, made durable before the worktree's cleanup (the next effect), rather than one
commit per settling task. A settling transition is committed on its own only when it passes a
review point: the review's ``elapsed_s`` is read after the transition is durable, so it lies
between the two record times (what the verifier checks, and does here: the run verifies).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
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
from harness.verify.rules.phases import SETTLED

from .evidence_helpers import make_keys

TASKS = 8  # one per batch: progress 125, 250 (review), 375, 500 (review), ..., 1000


@pytest.fixture(autouse=True)
def _noop_adapter() -> Iterator[None]:
    saved = dict(ADAPTERS)
    register_adapter(
        CommandAdapter.from_template([shutil.which("true") or "/bin/true"], name="noop")
    )
    yield
    ADAPTERS.clear()
    ADAPTERS.update(saved)


def _plan() -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    task = {"role": "r", "prompt": "noop", "adapter": "noop", "gates": [gate]}
    return {
        "plan": {"name": "commits", "max_batch": 1, "max_in_flight": 1, "settle_ticks": 1},
        "task": [{"id": f"t{i}", **task} for i in range(TASKS)],
    }


def _commits(audit: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The audit store cut into group commits: a logical clock gives each commit (one clock
    reading) its own time, shared by all its records."""
    commits: list[list[dict[str, Any]]] = []
    for record in audit:
        if commits and commits[-1][0]["time"] == record["time"]:
            commits[-1].append(record)
        else:
            commits.append([record])
    return commits


def test_a_retirement_is_one_group_commit_unless_a_review_needs_its_settlement(
    tmp_path: Path,
) -> None:
    """Catches a flush per settling transition (or after the merge's records) that is not
    needed: each retirement without a review point is then split into several commits."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "noop": NO_TAGS}
    )
    summary = Runtime(
        repo=repo, plan=parse_plan(_plan()), state_dir=repo / ".harness", keys=keys,
        run_id="r1", clock=LogicalClock(), capabilities=matrix,
        git_date="2026-01-01T00:00:00+00:00", sandbox=Settings(opt_out=True),
    ).run()  # fmt: skip
    assert set(summary.states.values()) == {TaskState.DONE}

    path = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    audit = [parse_canonical(line) for line in path.read_bytes().splitlines()]
    commits = _commits(audit)
    retirements = [c for c in commits if any(r["kind"] == "agent.exit" for r in c)]
    reviewed = [c for c in commits if any(r["kind"] == "control.review" for r in c)]
    assert len(reviewed) == 3  # 25, 50 and 75 %

    whole = 0
    for commit in retirements:
        kinds = [record["kind"] for record in commit]
        settling = [
            r for r in commit if r["kind"] == "task.transition" and r["body"]["to"] in SETTLED
        ]
        assert len(settling) == 1 and "merge.result" in kinds
        if "lock.release" in kinds:  # agent.exit ... merge, done, lock.release, sensors
            whole += 1
        else:  # the settlement passed a review point: committed before the clock is read
            assert kinds[-1] == "task.transition" and commit[-1] is settling[0]
            after = commits[commits.index(commit) + 1]
            assert after[0]["kind"] != "task.transition"
            assert any(r["kind"] == "control.review" for r in after)
    assert whole == TASKS - 3
    assert len(retirements) == TASKS

    bundle = export_bundle(repo / ".harness", tmp_path / "bundle.tar", keys).path
    report = verify_bundle(
        bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"), hmac_master=keys.hmac_master
    )
    assert report.status.value == "verified", report.failure
