"""Crash recovery: rebuild a run's task states from its audit store and settle the ones a
crash caught mid-flight.

Task states are kept nowhere but in the audit store, so resuming is replaying its
``task.transition`` records. A task caught mid-flight is released (claimed -> open: its batch
never started) or failed (in_progress/gating -> failed), with the reason recorded, so nothing
is duplicated and nothing acknowledged is lost. The one exception is a gating task whose
branch is already in HEAD: the crashed runtime merged it, and the lost ``merge.result`` is
recorded now.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.receipts.run import run_dir
from harness.verify.canonical import parse_canonical
from harness.verify.errors import VerificationError
from harness.verify.fsm import TaskState
from harness.verify.records import parse_record_line

from .. import git
from ..sandbox import BatchDirs
from .core import RunAbortedError, RunCore

S = TaskState


def resume(run: RunCore) -> bool:
    """Rebuild states from an existing audit store; returns True when resuming."""
    path = run.folder / "audit.jsonl"
    if not path.exists() or path.stat().st_size == 0:
        return False
    run.recorder.store("audit")  # opening recovers a torn tail first
    branches: dict[str, str] = {}
    last = path.read_bytes().splitlines()[-1]
    if parse_record_line(last, "audit", run.run_id).kind == "run.end":
        raise RunAbortedError(
            f"run {run.run_id} has already ended; start a new run (another --run id), or "
            "replay it in a fresh checkout with the same keys (harness run --replay)"
        )
    for line in path.read_bytes().splitlines():
        record = parse_record_line(line, "audit", run.run_id)
        body = record.body
        if record.kind == "run.start":
            sandbox = body.get("sandbox")
            run.run_profile = sandbox if isinstance(sandbox, Mapping) else None
        elif record.kind == "task.planned":
            run.set_state(str(body["task"]), S.PLANNED)
        elif record.kind == "task.transition":
            run.set_state(str(body["task"]), S(str(body["to"])))
        elif record.kind == "agent.spawn":
            run.batch_number += 1
            for name in body["tasks"]:
                branches[str(name)] = str(body["branch"])
    lineage = run.folder / "lineage.jsonl"
    if lineage.exists():
        run.step = len(lineage.read_bytes().splitlines())
    for task, state in sorted(run.states.items()):
        branch = branches.get(task)
        if state is S.CLAIMED:
            run.move(task, S.OPEN, "resumed after a runtime crash: batch never started")
        elif state is S.GATING and branch and _merged_before_crash(run, task, branch):
            run.move(task, S.DONE, "merged just before a runtime crash")
        elif state in (S.IN_PROGRESS, S.GATING):
            run.move(task, S.FAILED, "resumed after a runtime crash during its batch")
    if run.work.exists():
        for leftover in sorted(run.work.iterdir()):
            git.remove_worktree(run.repo, BatchDirs(leftover).tree, force=True)
            shutil.rmtree(leftover, ignore_errors=True)
    return True


def _merged_before_crash(run: RunCore, task: str, branch: str) -> bool:
    """A gating task whose branch is already in HEAD was merged by the crashed runtime
    (the merge happens right after its gates passed); record what the crash lost."""
    if not git.branch_exists(run.repo, branch) or not git.is_ancestor(run.repo, branch, "HEAD"):
        return False
    run.audit(
        "merge.result",
        {
            "task": task,
            "branch": branch,
            "merged": True,
            "commit": git.head(run.repo),
            "reason": "merged before a runtime crash (recorded on resume)",
        },
    )
    return True


def audit_objects(state_dir: Path, run_id: str) -> Iterator[dict[str, Any]]:
    """The decoded records of a run's audit store, read-only and best effort (a live run may
    be appending): it stops at a torn tail instead of recovering it, which only the writer
    may do. For ``harness status`` and ``harness run``'s report, never for decisions."""
    path = run_dir(state_dir, run_id) / "audit.jsonl"
    if not path.is_file():
        return
    for line in path.read_bytes().splitlines():
        try:
            obj = parse_canonical(line)
        except VerificationError:  # a torn tail: the writer recovers it, a reader stops there
            return
        if isinstance(obj, dict):
            yield obj


def task_states(state_dir: Path, run_id: str) -> dict[str, str]:
    """Current task states of a run, read from its audit store (for `harness status`)."""
    states: dict[str, str] = {}
    for obj in audit_objects(state_dir, run_id):
        if obj.get("kind") == "task.planned":
            states[obj["body"]["task"]] = "planned"
        elif obj.get("kind") == "task.transition":
            states[obj["body"]["task"]] = obj["body"]["to"]
    return states
