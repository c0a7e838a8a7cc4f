"""Retiring a finished batch, strictly in batch order: every record about it, then the merge.

Like a CPU's reorder buffer: batches finish in any order, but the loop retires only the oldest
one in flight, so the records (agent exit, model calls, lineage, scope and capsule checks,
gates, integrity, merge, attempts, the lock release) and the merges come in batch order,
whatever order the processes finished in. Each step is decided before its effect and recorded
with its inputs (the verifier re-decides it); the merge takes exactly the commit the lineage was
computed from, and only after the merge check against the HEAD that the batches retired before
this one left.

A failed attempt is classified (``harness.verify.rules.attempts``) and either retried — the
task goes back to ``open`` with what failed saved as feedback for its next prompt, restarting
from the current HEAD (its last verified checkpoint) — or failed for good. Either way it is an
``attempt.failed`` record. A merge conflict with work retired earlier is recorded as a fork
(``merge.fork``: the common parent and both tips) before the attempt fails; the conflicting
branch is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.verify.fsm import TaskState
from harness.verify.rules import attempts as attempt_rule
from harness.verify.rules.integrity import violation
from harness.verify.rules.scope import in_scope

from .. import git
from ..capsule import conformance
from ..control.facts import JobFacts
from ..gates import GateResult
from ..model import TaskSpec
from ..replay import call_key, text_sha256
from . import budgets
from .core import ReplayMissError, RunCore
from .job import BatchJob, feedback_sha256
from .proxied import exchange_body, first_miss, source_body

S = TaskState

FEEDBACK_CHARS = 4000
"""How much of what failed is carried into the next attempt's prompt."""


def retire(run: RunCore, job: BatchJob) -> None:
    """Record everything about a finished job and land or fail it; release its lock; then
    respace progressive sealing (wider after a merge, narrower after a failure).

    The records are queued, not flushed here (a merge flushes before itself): they become
    durable in the next group commit, with the decisions they lead to, which comes before
    the next outside effect (a spawn, a merge, the worktree's removal, ``run.end``)."""
    merged_before = len(run.merged)
    leaving = False
    try:
        if job.error is not None and job.outcome is None:
            _fail(run, job, "crash", job.error)
            return
        _retire(run, job)
    except BaseException:
        leaving = True  # a replay miss or an error leaves the loop: commit what is known now
        raise
    finally:
        _release(run, job, "retired")
        _steps(run, job)
        job.close()
        if leaving:
            run.flush()
        # Otherwise no flush of its own: the retirement's records ride on the next group
        # commit (the next decision point's, before any process starts, or run.end's), and
        # the worktree is removed only once they are durable.
        run.when_durable(job.remove_worktree)
        _respace(run, succeeded=len(run.merged) > merged_before)


def _steps(run: RunCore, job: BatchJob) -> None:
    """One controller step per task whose attempt this retirement ended: landed (None), failed
    (its anomaly class) or a suspended rounds task (``incomplete``/``blocked``)."""
    facts = JobFacts(
        duration_ms=job.outcome.result.duration_ms if job.outcome is not None else 0,
        usage=job.usage_record,
        gates=[
            (task, gate.name, gate.passed)
            for task, gate in zip(job.gate_tasks, job.gates.results, strict=False)
        ]
        if job.gates is not None and job.gates_recorded
        else (),
        paths=[change.path for change in job.changes],
        calls=[call.request for call in job.output.model_calls] if job.output else (),
    )
    for task in job.tasks:
        attempt = run.attempts.get(task.id, job.attempt)
        state = run.states[task.id]
        if state is S.DONE:
            cls: str | None = None
        elif task.id in run.suspended and state is S.BLOCKED:
            cls = run.suspended[task.id]
        elif run.last_failure.get(task.id, (0, ""))[0] == attempt:
            cls = run.last_failure[task.id][1]
        else:
            continue
        run.control.step(task, attempt, cls, facts)


def _respace(run: RunCore, *, succeeded: bool) -> None:
    current = run.recorder.seal_every_records
    if current is not None:
        base = run.plan.seal_every_records
        run.recorder.respace(attempt_rule.next_spacing(current, base, succeeded))


def _release(run: RunCore, job: BatchJob, reason: str) -> None:
    if not job.released:
        job.released = True
        run.audit("lock.release", {"batch": job.batch.id, "reason": reason})


def _retire(run: RunCore, job: BatchJob) -> None:
    outcome = job.outcome
    assert outcome is not None and job.output is not None
    result = outcome.result
    usage = budgets.usage_of(run, job)
    job.usage_record = usage
    exit_anomaly = attempt_rule.supervisor_class(outcome.anomaly)
    if job.budget_breach is None:
        # An agent can pass a budget between two live checks (or finish just past its wall
        # budget): decided here, from the same ledger the verifier folds, before its exit.
        job.budget_breach = budgets.exit_breach(run, job, usage, result.duration_ms)
        if job.budget_breach is not None:
            exit_anomaly = "budget"
    if job.budget_breach is not None:
        run.audit("budget.exceeded", dict(job.budget_breach))
    exchanges = job.proxy.stop() if job.proxy is not None else []
    for exchange in exchanges:  # where each answer came from, right before the exit
        if exchange.outcome == "answered":
            run.audit("model.source", source_body(job.batch.id, exchange))
    run.audit(
        "agent.exit",
        {
            "batch": job.batch.id,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "timed_out": result.timed_out,
            "duration_ms": result.duration_ms,
            "anomaly": exit_anomaly,
            "usage": usage,
        },
    )
    budgets.charge(run, job, usage, result.duration_ms)
    # What the proxy observed (seq order), then what the adapter reports: an agent's claim.
    calls: list[tuple[str, dict[str, Any]]] = [
        ("model.exchange", exchange_body(job.batch.id, exchange)) for exchange in exchanges
    ]
    calls += [
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
        for call in job.output.model_calls
    ]
    if calls:
        run.recorder.store("replay").append_many(calls)
    model = next((c.model for c in job.output.model_calls), job.tasks[0].model)
    owners = _record_lineage(run, job.tasks, job.changes, job.batch.adapter, model)
    if job.error is not None:
        _fail(run, job, "crash", job.error)
        return
    miss = first_miss(exchanges)  # strict replay's miss aborts the run, a rounds task's too
    if job.suspend is not None and miss is None:  # a rounds task: kept for a continue
        for task in job.tasks:
            run.move(task.id, S.BLOCKED, f"rounds {job.suspend}: {job.output.summary}")
            run.suspended[task.id] = job.suspend
        return
    if job.violation is not None and miss is None:
        _fail(run, job, "integrity", f"auditor integrity violation: {job.violation}")
        return
    if miss is not None or not job.agent_ok() or exit_anomaly is not None:
        output = job.output
        error = output.error
        if miss is not None:  # the proxy could not answer from the journal: whatever the CLI
            error = miss.reason or f"replay miss: no journaled answer for key {miss.key}"
        why = error or (
            "timed out" if result.timed_out else exit_anomaly or f"exit {result.exit_code}"
        )
        if error and "replay miss: " in error:
            # Strict replay: a miss aborts the whole run, recorded and sealed first.
            for task in job.tasks:
                run.move(task.id, S.FAILED, f"agent failed: {why}")
            _release(run, job, "run aborted")
            raise ReplayMissError(error)
        anomaly = attempt_rule.classify(
            exit_anomaly=exit_anomaly,
            signal=result.signal,
            agent_ok=output.ok and result.exit_code == 0,
            refusal=None,
            failed_gates=(),
            conflict=False,
        )
        _fail(run, job, anomaly, f"agent failed: {why}", _tail(result.stdout, result.stderr))
        return
    _land(run, job, owners)


def _land(run: RunCore, job: BatchJob, owners: Mapping[str, str]) -> None:
    """Scope and capsule, gates, gate integrity, merge: GATING to DONE, or a failed attempt."""
    capsule_problems = _capsule(run, job, owners)
    for task in job.tasks:
        run.move(task.id, S.GATING, "agent finished")
    if job.killed is not None:  # stopped (or killed) while its gates ran: nothing to judge
        killed = job.killed if job.killed in attempt_rule.CLASSES else "crash"
        _fail(run, job, killed, f"killed while gating: {job.killed}")
        return
    problems = job.scope_problems + capsule_problems
    if problems:
        refusal = "scope" if job.scope_problems else "capsule"
        _fail(run, job, refusal, "out of scope or capsule drift: " + problems[0])
        return
    assert job.gates is not None and job.before is not None and job.after is not None
    results = job.gates.results
    for task_id, gate in zip(job.gate_tasks, results, strict=True):
        run.audit(
            "gate.result",
            {
                "task": task_id,
                "gate": gate.name,
                "passed": gate.passed,
                "exit_code": gate.exit_code,
                "duration_ms": gate.duration_ms,
            },
        )
    job.gates_recorded = True  # the sensors read only gates the evidence holds
    broken = violation(job.before, job.after)
    run.audit(
        "gate.integrity",
        {
            "batch": job.batch.id,
            "tasks": [task.id for task in job.tasks],
            "commit": job.before.commit,
            "tree": job.before.tree,
            "head": job.after.commit,
            "head_tree": job.after.tree,
            "clean_before": job.before.clean,
            "clean_after": job.after.clean,
            "intact": broken is None,
            "reason": broken or "unchanged",
        },
    )
    if broken is not None:
        _fail(run, job, "integrity", f"integrity violation by a gate: {broken}")
        return
    failed = [gate for gate in results if not gate.passed]
    if failed or any(not task.gates for task in job.tasks) or job.killed is not None:
        kind = attempt_rule.gate_kind(failed[0].name) if failed else "test"
        _fail(
            run,
            job,
            kind,
            "a quality gate failed (or the task has none)",
            _gate_feedback(failed),
        )
        return
    _merge(run, job)


def _capsule(run: RunCore, job: BatchJob, owners: Mapping[str, str]) -> list[str]:
    """The capsule check at retirement: the edits and deletes each task's agent made, the
    gates it ran and the branch it will merge (every action class the capsule governs)."""
    if run.plan.capsule is None:
        return []
    problems: list[str] = []
    for task in job.tasks:
        actions = [
            ("delete" if c.sha256 is None else "edit", c.path)
            for c in job.changes
            if owners.get(c.path) == task.id
        ]
        actions.extend(("gate", gate.name) for gate in task.gates)
        actions.append(("merge", job.branch))
        now = run.clock()
        violations = conformance(run.plan.capsule, now=now, task=task, actions=actions)
        run.capsule_check(task.id, now, actions, violations)
        problems.extend(violations)
    return problems


def _merge(run: RunCore, job: BatchJob) -> None:
    """Merge exactly ``job.head``, the commit the lineage was computed from (by id: a ref
    moved after the diff, by a gate or anyone, cannot change what is merged)."""
    head = job.head
    target = git.current_branch(run.repo) or git.head(run.repo)  # detached: merge on HEAD
    source = head if head is not None else job.branch
    check = git.merge_check(run.repo, target, source)
    commit: str | None = None
    reason = "clean"
    if not check.clean:
        reason = "merge conflict in " + ", ".join(check.conflicts)
    elif head is not None:
        run.flush()
        commit = git.merge(run.repo, head, f"merge {job.branch}", date=run.git_date)
    for task in job.tasks:
        run.audit(
            "merge.result",
            {
                "task": task.id,
                "branch": job.branch,
                "merged": commit is not None or (check.clean and head is None),
                "commit": commit,
                "reason": reason if head is not None or not check.clean else "no changes",
            },
        )
    if check.clean:
        for task in job.tasks:
            run.move(task.id, S.DONE, "gates passed and merged")
            run.merged.append(task.id)
        return  # durable at the next flush, before the worktree's removal (``retire``)
    ours = git.head(run.repo)
    theirs = head if head is not None else git.head(run.repo, job.branch)
    for task in job.tasks:
        run.audit(
            "merge.fork",
            {
                "task": task.id,
                "batch": job.batch.id,
                "base": job.base,
                "ours": ours,
                "theirs": theirs,
                "paths": sorted(check.conflicts),
            },
        )
    _fail(
        run,
        job,
        "conflict",
        reason,
        f"Your change conflicted with work merged meanwhile in: {', '.join(check.conflicts)}. "
        "You now start from the current state of the repository; redo the change on top of it.",
    )


def _fail(run: RunCore, job: BatchJob, anomaly: str, reason: str, feedback: str = "") -> None:
    """One failed attempt per task of the batch (``record_failed_attempt``), for the tasks the
    batch still has running."""
    text = (reason + ("\n" + feedback if feedback else ""))[:FEEDBACK_CHARS]
    for task in job.tasks:
        if run.states[task.id] in (S.IN_PROGRESS, S.GATING):
            attempt = run.attempts.get(task.id, job.attempt)
            record_failed_attempt(run, task, job.batch.id, attempt, anomaly, reason, text)


def record_failed_attempt(
    run: RunCore, task: TaskSpec, batch: str, attempt: int, anomaly: str, reason: str, text: str
) -> None:
    """Record one failed attempt and carry out the rule's decision: retried (back to OPEN,
    ``text`` saved as the next prompt's feedback) while ``rules.attempts.decide`` allows, else
    FAILED (CANCELLED for an operator stop). The checkpoint is the current HEAD: the verified
    work every retry restarts from. Shared by retirement and by resume (a crashed batch)."""
    checkpoint = git.head(run.repo)
    retry = attempt_rule.decide(anomaly, attempt, run.plan.attempts_for(task))
    run.last_failure[task.id] = (attempt, anomaly)
    run.audit(
        "attempt.failed",
        {
            "task": task.id,
            "batch": batch,
            "attempt": attempt,
            "anomaly": anomaly,
            "reason": reason,
            "retry": retry,
            "checkpoint": checkpoint,
            "feedback_sha256": feedback_sha256(text) if retry else None,
        },
    )
    if retry:
        run.feedback[task.id] = text
        _save_feedback(run, task.id, attempt, text)
        run.move(
            task.id, S.OPEN, f"attempt {attempt} failed ({anomaly}): restart from {checkpoint[:12]}"
        )
    elif anomaly == "stop":
        run.move(task.id, S.CANCELLED, "operator stop")
    else:
        run.move(task.id, S.FAILED, reason)


def _save_feedback(run: RunCore, task: str, attempt: int, text: str) -> None:
    """Keep the feedback in the run's state folder (out of every agent's reach), so a resumed
    run still gives it to the next attempt."""
    folder = run.folder / "feedback"
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / f"{task}.{attempt}.txt").write_text(text, encoding="utf-8")


def _tail(stdout: bytes, stderr: bytes) -> str:
    text = (stdout + b"\n" + stderr).decode("utf-8", "replace").strip()
    return text[-FEEDBACK_CHARS:]


def _gate_feedback(failed: Sequence[GateResult]) -> str:
    return "\n".join(f"gate {gate.name} failed:\n{gate.output_tail}" for gate in failed)


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
