"""One batch's agent: worktree, spawn-time re-decisions, the sandboxed process, and the
records of what it did (model calls, lineage).

Every file the agent changes becomes a lineage record computed from the worktree's git diff
after the agent exits: the one write boundary (an agent writing files directly cannot bypass
it). Whether those changes land (scope, capsule, gates, merge) is ``landing``'s job; this
module only hands it the commit the lineage was computed from.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.verify.fsm import TaskState
from harness.verify.rules.scope import in_scope

from .. import git
from ..adapters import CommandAdapter, get_adapter
from ..adapters.base import AgentRequest
from ..capabilities import check_task
from ..capsule import pre_spawn_violations
from ..model import Batch, TaskSpec
from ..proc import run_process
from ..replay import call_key, text_sha256
from ..sandbox import BatchDirs
from ..sandbox.policy import adapter_env_names, adapter_stdin, argv_files, batch_network
from ..scripted_agent import write_scripted_workfile
from .core import RunAbortedError, RunCore
from .landing import land

S = TaskState


def run_batch(run: RunCore, batch: Batch) -> None:
    """Claim the batch's tasks, give it a fresh worktree and branch off HEAD, run it, and
    remove the worktree whatever happens (its branch stays: the merge or the evidence)."""
    tasks = [run.specs[t] for t in batch.tasks]
    for task in tasks:
        run.move(task.id, S.CLAIMED, f"batch {batch.id}")
    base = git.head(run.repo)
    branch = f"harness/{run.run_id}/{batch.id}"
    dirs = BatchDirs(run.work / batch.id)
    worktree = dirs.tree
    dirs.create()
    run.flush()
    if git.branch_exists(run.repo, branch):
        # Only a batch that crashed before its agent.spawn record leaves this behind (the
        # batch counter counts spawn records): nothing of it was merged or recorded.
        git.delete_branch(run.repo, branch)
    git.add_worktree(run.repo, worktree, branch, base)
    try:
        _agent_and_merge(run, batch, tasks, worktree, branch, base)
    finally:
        git.remove_worktree(run.repo, worktree, force=True)
        shutil.rmtree(dirs.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # the run's work folder, once empty
            run.work.rmdir()


def fail_batch(run: RunCore, batch: Batch, reason: str) -> None:
    """Settle a batch that raised: claimed tasks are cancelled, running ones failed, so an
    error in one batch never takes the run (and its seal) down."""
    for task in batch.tasks:
        state = run.states[task]
        if state is S.CLAIMED:
            run.move(task, S.OPEN, reason)
            run.move(task, S.CANCELLED, reason)
        elif state in (S.IN_PROGRESS, S.GATING):
            run.move(task, S.FAILED, reason)
    run.flush()


def _agent_and_merge(
    run: RunCore, batch: Batch, tasks: list[TaskSpec], worktree: Path, branch: str, base: str
) -> None:
    spec = run.plan.commands.get(batch.adapter)
    adapter = CommandAdapter.from_spec(spec) if spec is not None else get_adapter(batch.adapter)
    dirs = BatchDirs(worktree.parent)
    scratch = dirs.io
    prompt = "\n\n".join(f"[{task.id}] {task.prompt}" for task in tasks)
    request = AgentRequest(
        batch=batch,
        tasks=tuple(tasks),
        worktree=worktree,
        prompt=prompt,
        prompt_file=scratch / "prompt.txt",
        model=tasks[0].model,
        journal_file=run.journal.path if run.journal is not None else None,
        workfile=scratch / "work.json",
        journal_mode=run.journal.mode if run.journal is not None else "live",
        allow_live_miss=run.journal.allow_live_miss if run.journal is not None else False,
    )
    request.prompt_file.write_text(prompt, encoding="utf-8")
    if batch.adapter == "scripted":
        write_scripted_workfile(request, request.workfile)
    timeout_s = max(task.timeout_s for task in tasks)
    argv = adapter.argv(request)
    profile, env = run.sandbox.agent(
        dirs,
        programs=[adapter.executable],
        files=argv_files(argv),
        network=batch_network(tasks, run.capabilities),
        adapter_env=adapter_env_names(adapter),
        journal_dir=(
            run.journal.directory
            if run.journal is not None and batch.adapter == "scripted"
            else None
        ),
    )
    if _denied_at_spawn(run, tasks, profile.to_json()):
        return
    run.audit(
        "agent.spawn",
        {
            "batch": batch.id,
            "tasks": [task.id for task in tasks],
            "adapter": batch.adapter,
            "branch": branch,
            "worktree": str(worktree),
            "timeout_ms": int(timeout_s * 1000),
            "sandbox": profile.to_json(),
            "env": list(profile.env),
            "supervisor": f"role:{batch.role}",
            "attempt": 1,
            "idle_ms": None,
            "lifetime_ms": int(min(timeout_s, 1800) * 1000),
            "lock": sorted({glob for task in tasks for glob in task.scope}),
            "budget": {"wall_ms": None, "tokens": None, "cost_micros": None},
        },
    )
    for task in tasks:
        run.move(task.id, S.IN_PROGRESS, f"agent for {batch.id} started")
    run.flush()
    result = run_process(
        run.sandbox.argv(profile, argv),
        cwd=worktree,
        timeout_s=timeout_s,
        grace_s=run.grace_s,
        env=env,
        stdin=adapter_stdin(adapter, request),
        sandboxed=profile.kind == "bwrap",
    )
    run.audit(
        "agent.exit",
        {
            "batch": batch.id,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "duration_ms": result.duration_ms,
            "anomaly": "timeout" if result.timed_out else None,
            "usage": None,
        },
    )
    output = adapter.parse(request, result)
    calls = [
        (
            "model.call",
            {
                "adapter": call.adapter,
                "key": call_key(call.adapter, call.model, call.request, call.parameters),
                "model": call.model,
                "request_sha256": text_sha256(call.request),
                "response_sha256": text_sha256(call.response),
            },
        )
        for call in output.model_calls
    ]
    if calls:
        run.recorder.store("replay").append_many(calls)
    message = f"{batch.id}: {', '.join(t.id for t in tasks)}"
    git.commit_all(worktree, message, date=run.git_date)
    tip = git.head(worktree)  # also covers commits the agent made itself
    head = tip if tip != base else None
    changes = git.changed_files(run.repo, base, head) if head else []
    model = next((c.model for c in output.model_calls), tasks[0].model)
    owners = _record_lineage(run, tasks, changes, batch.adapter, model)
    if not output.ok or result.timed_out or result.exit_code != 0:
        why = output.error or ("timed out" if result.timed_out else f"exit {result.exit_code}")
        for task in tasks:
            run.move(task.id, S.FAILED, f"agent failed: {why}")
        if output.error and "replay miss: " in output.error:
            # Strict replay: a miss aborts the whole run, recorded and sealed first.
            run.audit("run.end", {"outcome": "aborted: replay miss"})
            run.flush()
            run.recorder.checkpoint_all()
            raise RunAbortedError(output.error)
        return
    land(run, batch, tasks, dirs, worktree, branch, head, changes, owners)


def _denied_at_spawn(run: RunCore, tasks: list[TaskSpec], profile: Mapping[str, Any]) -> bool:
    """Right before the spawn, re-decide the trifecta with the profile this spawn really
    gets (it may differ from the run's default, e.g. network for egress tasks) and the
    capsule's pre-spawn rule at this instant (recorded for every task). A denied task ends
    DENIED, the rest of the batch goes back to OPEN for a later batch; nothing is spawned."""
    denials = [check_task(task, run.capabilities, profile) for task in tasks]
    drift: dict[str, list[str]] = {}
    if run.plan.capsule is not None:  # the capsule may have expired while tasks waited
        now = run.clock()
        for task in tasks:
            problems = pre_spawn_violations(run.plan.capsule, now, task)
            run.capsule_check(task.id, now, [], problems)
            if problems:
                drift[task.id] = problems
    if all(denial is None for denial in denials) and not drift:
        return False
    for task, denial in zip(tasks, denials, strict=True):
        if denial is not None:
            run.deny(denial, profile)
        elif task.id in drift:
            run.move(task.id, S.DENIED, "intent capsule: " + "; ".join(drift[task.id]))
        else:
            run.move(task.id, S.OPEN, "batch released: another task was denied at spawn")
    run.flush()
    return True


def _record_lineage(
    run: RunCore,
    tasks: list[TaskSpec],
    changes: Sequence[git.Change],
    actor: str,
    model: str | None,
) -> dict[str, str]:
    """One lineage record per changed file, attributed to the first task whose scope
    covers it (else the batch's first task); returns path -> task."""
    owners: dict[str, str] = {}
    writes = []
    for change in changes:
        owner = next((t.id for t in tasks if in_scope(change.path, t.scope)), tasks[0].id)
        owners[change.path] = owner
        # The parent state (content and mode before the agent) binds the transition: the
        # gate covers a change only from exactly this state (issue 9 §2).
        parents = [change.old_sha256] if change.old_sha256 else []
        body: dict[str, Any] = {
            "actor": actor,
            "model": model,
            "parents": parents,
            "parent_mode": change.old_mode,
            "path": change.path,
            "step": run.step,
            "task": owner,
        }
        if change.sha256 is None:
            writes.append(("artifact.delete", body))
        else:
            writes.append(
                ("artifact.write", {**body, "sha256": change.sha256, "mode": change.mode})
            )
        run.step += 1
    if writes:
        run.recorder.store("lineage").append_many(writes)
    return owners
