"""Whether a finished agent's changes land: scope and capsule, gates, gate integrity, merge.

Each step is decided before its effect and recorded with its inputs (the verifier re-decides
it): the scope and capsule check covers every action class the capsule governs (edits,
deletes, the gates, the merge); the gates run against a snapshot of the worktree, and the
``gate.integrity`` record proves they left it exactly as the lineage saw it; the merge takes
exactly the commit the lineage was computed from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.verify.fsm import TaskState
from harness.verify.rules.integrity import WorktreeState, violation
from harness.verify.rules.scope import in_scope

from .. import git
from ..capsule import conformance
from ..gates import run_gates
from ..model import Batch, TaskSpec
from ..sandbox import BatchDirs
from .core import RunCore

S = TaskState


def land(
    run: RunCore,
    batch: Batch,
    tasks: list[TaskSpec],
    dirs: BatchDirs,
    worktree: Path,
    branch: str,
    head: str | None,
    changes: Sequence[git.Change],
    owners: Mapping[str, str],
) -> None:
    """Take a batch whose agent succeeded from GATING to DONE (merged) or FAILED."""
    problems = _conformance(run, tasks, changes, owners, branch)
    for task in tasks:
        run.move(task.id, S.GATING, "agent finished")
    if problems:
        for task in tasks:
            run.move(task.id, S.FAILED, "out of scope or capsule drift: " + problems[0])
        return
    passed = True
    before = _worktree_state(worktree)
    run.flush()
    for task in tasks:
        for gate in run_gates(task.gates, worktree, run.sandbox, dirs.gate_home):
            run.audit(
                "gate.result",
                {
                    "task": task.id,
                    "gate": gate.name,
                    "passed": gate.passed,
                    "exit_code": gate.exit_code,
                    "duration_ms": gate.duration_ms,
                },
            )
            passed = passed and gate.passed
        if not task.gates:
            passed = False
    broken = _gate_integrity(run, batch, tasks, worktree, before)
    if broken is not None:
        for task in tasks:
            run.move(task.id, S.FAILED, f"integrity violation by a gate: {broken}")
        run.flush()
        return
    if not passed:
        for task in tasks:
            run.move(task.id, S.FAILED, "a quality gate failed (or the task has none)")
        return
    _merge(run, tasks, branch, head)


def _conformance(
    run: RunCore,
    tasks: list[TaskSpec],
    changes: Sequence[git.Change],
    owners: Mapping[str, str],
    branch: str,
) -> list[str]:
    """Scope and capsule check before the gates: the edits and deletes each task's agent
    made, plus the gates it will run and the branch it will merge (every action class the
    capsule governs is decided before its effect)."""
    problems = [
        f"{change.path} is outside the scope of every task in the batch"
        for change in changes
        if not any(in_scope(change.path, t.scope) for t in tasks)
    ]
    if run.plan.capsule is None:
        return problems
    for task in tasks:
        actions = [
            ("delete" if c.sha256 is None else "edit", c.path)
            for c in changes
            if owners.get(c.path) == task.id
        ]
        actions.extend(("gate", gate.name) for gate in task.gates)
        actions.append(("merge", branch))
        now = run.clock()
        violations = conformance(run.plan.capsule, now=now, task=task, actions=actions)
        run.capsule_check(task.id, now, actions, violations)
        problems.extend(violations)
    return problems


def _worktree_state(worktree: Path) -> WorktreeState:
    commit = git.head(worktree)
    return WorktreeState(commit, git.tree_of(worktree, commit), git.is_clean(worktree))


def _gate_integrity(
    run: RunCore, batch: Batch, tasks: list[TaskSpec], worktree: Path, before: WorktreeState
) -> str | None:
    """Record whether the gates left the worktree exactly as the lineage saw it (rule
    ``harness.verify.rules.integrity``); returns the violation, or None."""
    after = _worktree_state(worktree)
    broken = violation(before, after)
    run.audit(
        "gate.integrity",
        {
            "batch": batch.id,
            "tasks": [task.id for task in tasks],
            "commit": before.commit,
            "tree": before.tree,
            "head": after.commit,
            "head_tree": after.tree,
            "clean_before": before.clean,
            "clean_after": after.clean,
            "intact": broken is None,
            "reason": broken or "unchanged",
        },
    )
    return broken


def _merge(run: RunCore, tasks: list[TaskSpec], branch: str, head: str | None) -> None:
    """Merge exactly ``head``, the commit the lineage was computed from (by id: a ref
    moved after the diff, by a gate or anyone, cannot change what is merged)."""
    target = git.current_branch(run.repo) or git.head(run.repo)  # detached: merge on HEAD
    source = head if head is not None else branch
    check = git.merge_check(run.repo, target, source)
    commit: str | None = None
    reason = "clean"
    if not check.clean:
        reason = "merge conflict in " + ", ".join(check.conflicts)
    elif head is not None:
        run.flush()
        commit = git.merge(run.repo, head, f"merge {branch}", date=run.git_date)
    for task in tasks:
        run.audit(
            "merge.result",
            {
                "task": task.id,
                "branch": branch,
                "merged": commit is not None or (check.clean and head is None),
                "commit": commit,
                "reason": reason if head is not None or not check.clean else "no changes",
            },
        )
        if check.clean:
            run.move(task.id, S.DONE, "gates passed and merged")
            run.merged.append(task.id)
        else:
            run.move(task.id, S.FAILED, reason)
    run.flush()
