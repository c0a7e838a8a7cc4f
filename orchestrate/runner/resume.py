"""Crash recovery: rebuild a run's task states from its audit store and settle the ones a
crash caught mid-flight.

Task states are kept nowhere but in the audit store, so resuming is replaying its
``task.transition`` records. A task caught mid-flight is released (claimed -> open: its batch
never started) or its attempt failed as a ``crash`` (retried while it has attempts left, else
failed), with the reason recorded, so nothing is duplicated and nothing acknowledged is lost.
The one exception is a gating task whose branch is already in HEAD: the crashed runtime merged
it, and the lost ``merge.result`` is recorded now.

Before anything is decided, the agents the crashed runtime left running are found from their
``agent.started`` records (pid, process group, start time, boot id) and killed — never a
process that merely reuses the pid — each recorded as ``orphan.reaped``; locks the crash left
held are released (``lock.release``, reason ``runtime crash``). Leftover worktrees are
committed to their branches before they are removed: unmerged work is never deleted.
"""

from __future__ import annotations

import contextlib
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
from ..control.facts import JobFacts
from ..sandbox import BatchDirs
from ..supervise import ProcIdentity, reap_orphan
from .core import RunCore
from .lifecycle import take_resume
from .retire import record_failed_attempt

S = TaskState


def resume(run: RunCore) -> bool:
    """Rebuild states from an existing audit store; returns True when resuming."""
    path = run.folder / "audit.jsonl"
    if not path.exists() or path.stat().st_size == 0:
        return False
    run.recorder.store("audit")  # opening recovers a torn tail first
    branches: dict[str, str] = {}
    batches: dict[str, list[str]] = {}
    started: dict[str, dict[str, Any]] = {}
    held: list[str] = []
    last = path.read_bytes().splitlines()[-1]
    ended = parse_record_line(last, "audit", run.run_id).kind == "run.end"
    for line in path.read_bytes().splitlines():
        record = parse_record_line(line, "audit", run.run_id)
        body = record.body
        run.control.replay(record.kind, body, record.time)
        if record.kind == "config.version":
            run.control_begun = True
        if record.kind == "run.status":
            if int(body["epoch"]) != run.epoch:
                run.attempts.clear()  # attempt limits count within one epoch
            run.epoch, run.status = int(body["epoch"]), str(body["status"])
        elif record.kind == "task.transition" and str(body["reason"]).startswith("rounds "):
            if body["to"] == "blocked":
                run.suspended[str(body["task"])] = str(body["reason"]).split()[1].rstrip(":")
        elif record.kind == "task.transition" and body["from"] == "blocked":
            run.suspended.pop(str(body["task"]), None)
        if record.kind == "run.start":
            sandbox = body.get("sandbox")
            run.run_profile = sandbox if isinstance(sandbox, Mapping) else None
        elif record.kind == "task.planned":
            run.set_state(str(body["task"]), S.PLANNED)
        elif record.kind == "task.transition":
            run.set_state(str(body["task"]), S(str(body["to"])))
        elif record.kind == "agent.spawn":
            run.batch_number += 1
            batches[str(body["batch"])] = [str(name) for name in body["tasks"]]
            for name in body["tasks"]:
                branches[str(name)] = str(body["branch"])
                run.attempts[str(name)] = run.attempts.get(str(name), 0) + 1
        elif record.kind == "agent.started":
            started[str(body["batch"])] = dict(body)
        elif record.kind == "agent.exit":
            started.pop(str(body["batch"]), None)
        elif record.kind == "lock.acquire":
            held.append(str(body["batch"]))
        elif record.kind == "lock.release" and str(body["batch"]) in held:
            held.remove(str(body["batch"]))
        elif record.kind == "attempt.failed" and body["retry"]:
            _load_feedback(run, str(body["task"]), int(body["attempt"]))
    run.control.resumed()
    if not ended:  # a crash: the lifecycle says so before anything of the recovery
        if run.status is None:
            run.set_status("creating", "run.start recorded")
        run.set_status("starting", "resumed after a runtime crash")
    lineage = run.folder / "lineage.jsonl"
    if lineage.exists():
        run.step = len(lineage.read_bytes().splitlines())
    for batch, body in sorted(started.items()):
        identity = ProcIdentity.from_json(
            {key: body[key] for key in ("pid", "pgid", "start_ticks", "boot_id")}
        )
        outcome = reap_orphan(identity, run.grace_s)
        run.audit("orphan.reaped", {"batch": batch, **identity.to_json(), "outcome": outcome})
    for batch in held:
        run.audit("lock.release", {"batch": batch, "reason": "runtime crash"})
    crashed: dict[str, str] = {}
    for task, state in sorted(run.states.items()):
        branch = branches.get(task)
        if state is S.CLAIMED:
            run.move(task, S.OPEN, "resumed after a runtime crash: batch never started")
        elif state is S.GATING and branch and _merged_before_crash(run, task, branch):
            run.move(task, S.DONE, "merged just before a runtime crash")
        elif state in (S.IN_PROGRESS, S.GATING):
            crashed[task] = next(
                (b for b, tasks in batches.items() if task in tasks and branch), "unknown"
            )
    for task, batch in sorted(crashed.items()):
        if run.specs[task].rounds is not None:
            # Its rounds are recorded as they end: suspend it; a continue goes on from the
            # checkpoint of its last ended round.
            run.move(task, S.BLOCKED, "rounds incomplete: interrupted by a runtime crash")
            run.suspended[task] = "incomplete"
        else:
            _crashed_attempt(run, task, batch)
    if run.work.exists():
        for leftover in sorted(run.work.iterdir()):
            tree = BatchDirs(leftover).tree
            if tree.exists():  # keep what the agent wrote: commit it to its branch
                with contextlib.suppress(git.GitError):
                    git.commit_all(tree, f"{leftover.name}: salvaged on resume", date=run.git_date)
            git.remove_worktree(run.repo, tree, force=True)
            shutil.rmtree(leftover, ignore_errors=True)
    run.flush()
    take_resume(run, ended=ended)  # an ended run without a resume command raises
    return True


def _crashed_attempt(run: RunCore, task: str, batch: str) -> None:
    """A task whose batch the crash interrupted: a failed ``crash`` attempt, retried from the
    current HEAD while the rule allows, else failed. The interrupted batch itself is never
    re-run (its branch is kept), so no effect is duplicated."""
    reason = "resumed after a runtime crash during its batch"
    attempt = run.attempts.get(task, 1)
    record_failed_attempt(run, run.specs[task], batch, attempt, "crash", reason, reason)
    run.control.step(run.specs[task], attempt, "crash", JobFacts())


def _load_feedback(run: RunCore, task: str, attempt: int) -> None:
    path = run.folder / "feedback" / f"{task}.{attempt}.txt"
    try:
        run.feedback[task] = path.read_text(encoding="utf-8")
    except OSError:
        run.feedback.pop(task, None)


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
