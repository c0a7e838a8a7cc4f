"""A rounds task's batch from its spawn to its retirement (the loop runs it alone).

After ``BatchJob.prepare`` (claim, worktree — at the task's last checkpoint on a continue —,
lock and ``agent.spawn``), the round loop runs to an ending outcome; the job then looks to
retirement like any batch whose agent has exited:

* ``done``: exit 0; the batch's diff (from the commit it started at), the scope check and its
  quality gates, then the usual retirement: lineage, capsule, gates, integrity, merge;
* ``incomplete`` / ``blocked``: the task is suspended (in_progress -> blocked, branch kept);
  a continue (``harness resume``) reopens it from its checkpoint;
* ``violation``: a failed attempt of class ``integrity``: never merged;
* ``stopped``: the operator's stop, as for any batch (the task is cancelled).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from harness.verify.records import parse_record_line

from .. import git
from ..adapters.base import AgentOutput
from ..model import ProcResult
from ..runner.job import worktree_state
from ..runner.proxied import ProxiedMeter
from ..supervise import Outcome
from .job import RoundLoop, RoundsState
from .rebuild import rebuild_state

if TYPE_CHECKING:
    from ..runner.core import RunCore
    from ..runner.job import BatchJob


def is_rounds_batch(run: RunCore, task_ids: tuple[str, ...]) -> bool:
    return any(run.specs[task].rounds is not None for task in task_ids)


def prior_state(run: RunCore, task: str) -> RoundsState:
    """The task's rounds so far (empty on a first start), from the audit store read strictly
    (a decision is taken on it: never the best-effort reader of ``harness status``)."""
    path = run.folder / "audit.jsonl"
    lines = path.read_bytes().splitlines() if path.exists() else []
    records = []
    for line in lines:
        record = parse_record_line(line, "audit", run.run_id)
        if record.kind.startswith("round."):
            records.append({"kind": record.kind, "body": record.body})
    return rebuild_state(run.folder, task, records)


def run_rounds_batch(run: RunCore, job: BatchJob, state: RoundsState) -> None:
    """Run the rounds of a prepared job, then make it ready to retire (``job.done``)."""
    started = time.monotonic()
    job.started_at = started
    start_commit = git.head(job.worktree)
    if job.proxy is not None:  # tokens from the proxy's exchanges, every role's (§11a)
        job.meter = ProxiedMeter(job.proxy, None)
    ended = RoundLoop(job, state).run_all()
    job.stop_proxy()  # after the last role: every exchange of the batch is reported by now
    duration_ms = int((time.monotonic() - started) * 1000)
    done = ended.outcome == "done"
    result = ProcResult(
        exit_code=0 if done else 1,
        signal=None,
        timed_out=False,
        duration_ms=duration_ms,
        stdout=b"",
        stderr=ended.reason.encode("utf-8"),
    )
    job.outcome = Outcome(result, "killed:stop" if ended.outcome == "stopped" else None, 0)
    job.output = AgentOutput(
        ok=done,
        summary=ended.reason,
        model_calls=tuple(ended.model_calls),
        error=None if done else f"rounds {ended.outcome}: {ended.reason}",
    )
    if ended.outcome == "stopped":
        job.killed = "stop"
    elif ended.outcome in ("incomplete", "blocked"):
        job.suspend = ended.outcome
    elif ended.outcome == "violation":
        job.violation = ended.reason
    job.collect_changes(start_commit, f"{job.batch.id}: rounds")
    if done and not job.scope_problems:
        job.start_gates()
        assert job.gates is not None
        while not job.gates.step(0.25):
            pass
        job.after = worktree_state(job.worktree)
    job.done = True
