"""The deterministic tick loop: plan in, agents in worktrees, gates, merges, evidence out.

No model call and no randomness in coordination: each tick takes a snapshot of task states and
asks pure functions (scheduler, capability matrix, capsule) what to do. Batches run one after
the other in this single-threaded loop (so per-role concurrency never exceeds 1 in flight; the
limits still shape which batches are chosen). Every decision is an audit record, every file an
agent changes a lineage record computed from the worktree's git diff after the agent exits
(the one write boundary: an agent writing files directly cannot bypass it), every model call a
replay record.

Crash safety: task states are not kept anywhere but in the audit store. On start, an existing
run is resumed by replaying its ``task.transition`` records; tasks caught mid-flight are
released (claimed -> open) or failed (in_progress/gating -> failed), with the reason recorded,
so nothing is duplicated and nothing acknowledged is lost.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder, run_dir
from harness.verify.canonical import parse_canonical
from harness.verify.fsm import TaskState, is_legal
from harness.verify.records import parse_record_line
from harness.verify.rules.integrity import WorktreeState, violation
from harness.verify.rules.scope import in_scope

from . import git
from .adapters import CommandAdapter, get_adapter
from .adapters.base import AgentRequest
from .capabilities import CapabilityMatrix, Denial, check_task, matrix_object
from .capsule import capsule_digest, capsule_document, conformance, pre_spawn_violations
from .gates import run_gates
from .model import Batch, Plan, TaskSpec
from .plandoc import plan_bytes, plan_sha256
from .proc import run_process
from .replay import Journal, call_key, text_sha256
from .sandbox import BatchDirs, Sandbox, Settings, default_work_root
from .sandbox.policy import (
    adapter_env_names,
    adapter_stdin,
    argv_files,
    batch_network,
    check_sandboxed,
)
from .scheduler import TaskTable, choose_batches, is_quiescent, promotions
from .scripted_agent import write_scripted_workfile

S = TaskState


@dataclass
class RunSummary:
    run_id: str
    states: dict[str, TaskState]
    batches: int
    merged: list[str] = field(default_factory=list)
    stopped: bool = False


class RunAbortedError(Exception):
    """The run stopped early (e.g. a strict-replay miss); its evidence is sealed."""


class Runtime:
    """Runs one plan as one run; ``run()`` returns when the run is quiescent or stopped."""

    def __init__(
        self,
        *,
        repo: Path,
        plan: Plan,
        state_dir: Path,
        keys: OperatorKeys,
        run_id: str,
        clock: Callable[[], str],
        capabilities: CapabilityMatrix,
        journal: Journal | None = None,
        grace_s: float = 2.0,
        git_date: str | None = None,
        sandbox: Settings | None = None,
        work_root: Path | None = None,
        keys_dir: Path | None = None,
    ) -> None:
        self.repo = repo
        self.plan = plan
        self.specs = {task.id: task for task in plan.tasks}
        self.state_dir = state_dir
        self.keys = keys
        self.run_id = run_id
        self.clock = clock
        self.capabilities = capabilities
        self.journal = journal
        self.grace_s = grace_s
        self.git_date = git_date
        self.folder = run_dir(state_dir, run_id)
        # Worktrees live outside the state folder (decision 0017): an agent walking up from
        # its working directory finds neither the stores nor the keys.
        self.work = (work_root or default_work_root(repo)) / run_id
        self.sandbox = Sandbox.for_run(
            sandbox or Settings(), repo=repo, state_dir=state_dir, keys_dir=keys_dir
        )
        self.recorder = RunRecorder(state_dir, run_id, keys, clock=clock)
        self.states: dict[str, TaskState] = {}
        self.table = TaskTable.from_plan(plan)
        """Indexed snapshot for the scheduler, kept in step with ``states`` by ``_set``."""
        self.batch_number = 1
        self.step = 0
        self.control_seen = 0
        self._pending: list[tuple[str, Mapping[str, Any]]] = []
        self.merged: list[str] = []
        self._prechecked: set[str] = set()
        """Tasks whose promotion-time capsule check is recorded (not repeated every tick)."""
        self.run_profile: Mapping[str, Any] | None = None
        """The run's default sandbox profile as ``run.start`` records it: promotion-time
        trifecta decisions use it (the verifier re-decides them with the same record)."""

    # ---- records --------------------------------------------------------------------------
    def audit(self, kind: str, body: Mapping[str, Any]) -> None:
        """Queue an audit record; ``flush`` makes the queue durable in one group commit.

        The rule that keeps this honest: flush before every effect outside the evidence (a
        worktree, a process, a merge) and at the end of each tick, so no effect ever happens on
        the strength of a decision that a crash could lose.
        """
        self._pending.append((kind, body))

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self.recorder.store("audit").append_many(pending)

    def move(self, task: str, target: TaskState, reason: str) -> bool:
        """Apply a transition if legal; an illegal one is refused and recorded, not applied."""
        current = self.states[task]
        if not is_legal(current, target):
            self.audit(
                "task.refused",
                {"task": task, "from": current.value, "to": target.value, "reason": reason},
            )
            return False
        self.audit(
            "task.transition",
            {"task": task, "from": current.value, "to": target.value, "reason": reason},
        )
        self._set(task, target)
        return True

    def _set(self, task: str, state: TaskState) -> None:
        self.states[task] = state
        self.table.set_state(task, state)

    # ---- start / resume -------------------------------------------------------------------
    def _resume(self) -> bool:
        """Rebuild states from an existing audit store; returns True when resuming."""
        path = self.folder / "audit.jsonl"
        if not path.exists() or path.stat().st_size == 0:
            return False
        self.recorder.store("audit")  # opening recovers a torn tail first
        branches: dict[str, str] = {}
        last = path.read_bytes().splitlines()[-1]
        if parse_record_line(last, "audit", self.run_id).kind == "run.end":
            raise RunAbortedError(
                f"run {self.run_id} has already ended; start a new run (another --run id), or "
                "replay it in a fresh checkout with the same keys (harness run --replay)"
            )
        for line in path.read_bytes().splitlines():
            record = parse_record_line(line, "audit", self.run_id)
            body = record.body
            if record.kind == "run.start":
                sandbox = body.get("sandbox")
                self.run_profile = sandbox if isinstance(sandbox, Mapping) else None
            elif record.kind == "task.planned":
                self._set(str(body["task"]), S.PLANNED)
            elif record.kind == "task.transition":
                self._set(str(body["task"]), S(str(body["to"])))
            elif record.kind == "agent.spawn":
                self.batch_number += 1
                for name in body["tasks"]:
                    branches[str(name)] = str(body["branch"])
        lineage = self.folder / "lineage.jsonl"
        if lineage.exists():
            self.step = len(lineage.read_bytes().splitlines())
        for task, state in sorted(self.states.items()):
            branch = branches.get(task)
            if state is S.CLAIMED:
                self.move(task, S.OPEN, "resumed after a runtime crash: batch never started")
            elif state is S.GATING and branch and self._merged_before_crash(task, branch):
                self.move(task, S.DONE, "merged just before a runtime crash")
            elif state in (S.IN_PROGRESS, S.GATING):
                self.move(task, S.FAILED, "resumed after a runtime crash during its batch")
        if self.work.exists():
            for leftover in sorted(self.work.iterdir()):
                git.remove_worktree(self.repo, BatchDirs(leftover).tree, force=True)
                shutil.rmtree(leftover, ignore_errors=True)
        return True

    def _merged_before_crash(self, task: str, branch: str) -> bool:
        """A gating task whose branch is already in HEAD was merged by the crashed runtime
        (the merge happens right after its gates passed); record what the crash lost."""
        if not git.branch_exists(self.repo, branch) or not git.is_ancestor(
            self.repo, branch, "HEAD"
        ):
            return False
        self.audit(
            "merge.result",
            {
                "task": task,
                "branch": branch,
                "merged": True,
                "commit": git.head(self.repo),
                "reason": "merged before a runtime crash (recorded on resume)",
            },
        )
        return True

    def _start(self) -> None:
        self.audit("run.start", self._run_start_body())
        if self.plan.capsule is not None:
            self.audit(
                "capsule.approved",
                {
                    "capsule": capsule_digest(self.plan.capsule),
                    "goal": self.plan.capsule.goal,
                    "expires": self.plan.capsule.expires,
                },
            )
        for task in sorted(self.plan.tasks, key=lambda t: t.order):
            self.audit(
                "task.planned",
                {
                    "task": task.id,
                    "role": task.role,
                    "priority": task.priority,
                    "depends": list(task.depends),
                    "adapter": task.adapter,
                    "tools": list(task.tools),
                },
            )
            self._set(task.id, S.PLANNED)

    def _run_start_body(self) -> dict[str, Any]:
        """Everything the run's decisions depend on (format 2, docs/spec/records.md): the plan
        document (stored first, bound by digest), the effective capability matrix, the full
        capsule, the harness version and the repository identity."""
        document = plan_bytes(self.plan)
        self.recorder.write_plan(document)
        base = git.head(self.repo)
        body: dict[str, Any] = {
            "plan": self.plan.name,
            "plan_sha256": plan_sha256(document),
            "producer": f"harness {__version__}",
            "harness_version": __version__,
            "base_commit": base,
            "repository_roots": git.root_commits(self.repo, base),
            "capabilities": matrix_object(self.capabilities),
            "capsule": capsule_document(self.plan.capsule) if self.plan.capsule else None,
            "sandbox": self.sandbox.run_profile(self.work),
        }
        sandbox = body.get("sandbox")
        self.run_profile = sandbox if isinstance(sandbox, Mapping) else None
        return body

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        try:
            check_sandboxed(self.plan, self.sandbox)
            if not self._resume():
                self._start()
            self.flush()
            quiet = 0
            stopped = False
            while True:
                if self._stop_requested():
                    stopped = True
                    for task, state in sorted(self.states.items()):
                        if state in (S.PLANNED, S.OPEN, S.BLOCKED, S.CLAIMED):
                            self.move(task, S.CANCELLED, "operator stop")
                    break
                self._promote()
                self.flush()
                batches = choose_batches(
                    self.table, in_flight={}, plan=self.plan, next_batch_number=self.batch_number
                )
                if not batches:
                    if is_quiescent(self.table, {}):
                        quiet += 1
                        if quiet >= self.plan.settle_ticks:
                            break
                    continue
                quiet = 0
                for batch in batches:
                    self.batch_number += 1
                    try:
                        self._run_batch(batch)
                    except RunAbortedError:
                        raise
                    except Exception as exc:  # a batch never takes the run (and its seal) down
                        self._fail_batch(batch, f"runtime error: {type(exc).__name__}: {exc}")
            outcome = "stopped" if stopped else "completed"
            self.audit("run.end", {"outcome": outcome})
            self.flush()
            self.recorder.checkpoint_all()
            return RunSummary(
                self.run_id, dict(self.states), self.batch_number - 1, self.merged, stopped
            )
        finally:
            self.recorder.close()

    def _promote(self) -> None:
        for task_id, state in sorted(self.states.items()):
            if state is not S.PLANNED:
                continue
            denial = check_task(self.specs[task_id], self.capabilities, self.run_profile)
            if denial is not None:
                self._deny(denial, self.run_profile)
                continue
            if self.plan.capsule is not None and task_id not in self._prechecked:
                self._prechecked.add(task_id)  # once per task here; again right before spawn
                now = self.clock()
                problems = pre_spawn_violations(self.plan.capsule, now, self.specs[task_id])
                self._capsule_check(task_id, now, [], problems)  # every task: re-checkable
                if problems:
                    self.move(task_id, S.DENIED, "intent capsule: " + "; ".join(problems))
        for task_id, target, reason in promotions(self.table):
            self.move(task_id, target, reason)

    def _deny(self, denial: Denial, sandbox: Mapping[str, Any] | None) -> None:
        """Record a trifecta denial with the sandbox profile it was decided under."""
        self.audit(
            "capability.denied",
            {
                "task": denial.task,
                "tools": list(denial.tools),
                "tags": list(denial.tags),
                "reason": denial.reason,
                "sandbox": dict(sandbox) if sandbox is not None else None,
            },
        )
        self.move(denial.task, S.DENIED, denial.reason)

    def _denied_at_spawn(self, tasks: list[TaskSpec], profile: Mapping[str, Any]) -> bool:
        """Right before the spawn, re-decide the trifecta with the profile this spawn really
        gets (it may differ from the run's default, e.g. network for egress tasks) and the
        capsule's pre-spawn rule at this instant (recorded for every task). A denied task ends
        DENIED, the rest of the batch goes back to OPEN for a later batch; nothing is spawned."""
        denials = [check_task(task, self.capabilities, profile) for task in tasks]
        drift: dict[str, list[str]] = {}
        if self.plan.capsule is not None:  # the capsule may have expired while tasks waited
            now = self.clock()
            for task in tasks:
                problems = pre_spawn_violations(self.plan.capsule, now, task)
                self._capsule_check(task.id, now, [], problems)
                if problems:
                    drift[task.id] = problems
        if all(denial is None for denial in denials) and not drift:
            return False
        for task, denial in zip(tasks, denials, strict=True):
            if denial is not None:
                self._deny(denial, profile)
            elif task.id in drift:
                self.move(task.id, S.DENIED, "intent capsule: " + "; ".join(drift[task.id]))
            else:
                self.move(task.id, S.OPEN, "batch released: another task was denied at spawn")
        self.flush()
        return True

    def _fail_batch(self, batch: Batch, reason: str) -> None:
        for task in batch.tasks:
            state = self.states[task]
            if state is S.CLAIMED:
                self.move(task, S.OPEN, reason)
                self.move(task, S.CANCELLED, reason)
            elif state in (S.IN_PROGRESS, S.GATING):
                self.move(task, S.FAILED, reason)
        self.flush()

    def _capsule_check(
        self,
        task: str,
        now: str,
        actions: Sequence[tuple[str, str]],
        violations: Sequence[str],
    ) -> None:
        """Record a capsule decision with its inputs (the verifier recomputes it)."""
        assert self.plan.capsule is not None
        self.audit(
            "capsule.check",
            {
                "task": task,
                "capsule": capsule_digest(self.plan.capsule),
                "now": now,
                "actions": [[kind, target] for kind, target in actions],
                "conforms": not violations,
                "violations": list(violations),
            },
        )

    def _stop_requested(self) -> bool:
        path = self.folder / "control.jsonl"
        if not path.exists():
            return False
        lines = path.read_bytes().splitlines()
        new, self.control_seen = lines[self.control_seen :], len(lines)
        for line in new:
            record = parse_record_line(line, "control", self.run_id)
            if record.kind == "command" and record.body["command"] == "stop":
                return True
        return False

    # ---- one batch ------------------------------------------------------------------------
    def _run_batch(self, batch: Batch) -> None:
        tasks = [self.specs[t] for t in batch.tasks]
        for task in tasks:
            self.move(task.id, S.CLAIMED, f"batch {batch.id}")
        base = git.head(self.repo)
        branch = f"harness/{self.run_id}/{batch.id}"
        dirs = BatchDirs(self.work / batch.id)
        worktree = dirs.tree
        dirs.create()
        self.flush()
        if git.branch_exists(self.repo, branch):
            # Only a batch that crashed before its agent.spawn record leaves this behind (the
            # batch counter counts spawn records): nothing of it was merged or recorded.
            git.delete_branch(self.repo, branch)
        git.add_worktree(self.repo, worktree, branch, base)
        try:
            self._agent_and_merge(batch, tasks, worktree, branch, base)
        finally:
            git.remove_worktree(self.repo, worktree, force=True)
            shutil.rmtree(dirs.root, ignore_errors=True)
            with contextlib.suppress(OSError):  # the run's work folder, once empty
                self.work.rmdir()

    def _agent_and_merge(
        self, batch: Batch, tasks: list[TaskSpec], worktree: Path, branch: str, base: str
    ) -> None:
        spec = self.plan.commands.get(batch.adapter)
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
            journal_file=self.journal.path if self.journal is not None else None,
            workfile=scratch / "work.json",
            journal_mode=self.journal.mode if self.journal is not None else "live",
            allow_live_miss=self.journal.allow_live_miss if self.journal is not None else False,
        )
        request.prompt_file.write_text(prompt, encoding="utf-8")
        if batch.adapter == "scripted":
            write_scripted_workfile(request, request.workfile)
        timeout_s = max(task.timeout_s for task in tasks)
        argv = adapter.argv(request)
        profile, env = self.sandbox.agent(
            dirs,
            programs=[adapter.executable],
            files=argv_files(argv),
            network=batch_network(tasks, self.capabilities),
            adapter_env=adapter_env_names(adapter),
            journal_dir=(
                self.journal.directory
                if self.journal is not None and batch.adapter == "scripted"
                else None
            ),
        )
        if self._denied_at_spawn(tasks, profile.to_json()):
            return
        self.audit(
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
            },
        )
        for task in tasks:
            self.move(task.id, S.IN_PROGRESS, f"agent for {batch.id} started")
        self.flush()
        result = run_process(
            self.sandbox.argv(profile, argv),
            cwd=worktree,
            timeout_s=timeout_s,
            grace_s=self.grace_s,
            env=env,
            stdin=adapter_stdin(adapter, request),
            sandboxed=profile.kind == "bwrap",
        )
        self.audit(
            "agent.exit",
            {
                "batch": batch.id,
                "exit_code": result.exit_code,
                "signal": result.signal,
                "timed_out": result.timed_out,
                "duration_ms": result.duration_ms,
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
            self.recorder.store("replay").append_many(calls)
        message = f"{batch.id}: {', '.join(t.id for t in tasks)}"
        git.commit_all(worktree, message, date=self.git_date)
        tip = git.head(worktree)  # also covers commits the agent made itself
        head = tip if tip != base else None
        changes = git.changed_files(self.repo, base, head) if head else []
        model = next((c.model for c in output.model_calls), tasks[0].model)
        owners = self._record_lineage(tasks, changes, batch.adapter, model)
        if not output.ok or result.timed_out or result.exit_code != 0:
            why = output.error or ("timed out" if result.timed_out else f"exit {result.exit_code}")
            for task in tasks:
                self.move(task.id, S.FAILED, f"agent failed: {why}")
            if output.error and "replay miss: " in output.error:
                # Strict replay: a miss aborts the whole run, recorded and sealed first.
                self.audit("run.end", {"outcome": "aborted: replay miss"})
                self.flush()
                self.recorder.checkpoint_all()
                raise RunAbortedError(output.error)
            return
        problems = self._conformance(tasks, changes, owners, branch)
        for task in tasks:
            self.move(task.id, S.GATING, "agent finished")
        if problems:
            for task in tasks:
                self.move(task.id, S.FAILED, "out of scope or capsule drift: " + problems[0])
            return
        passed = True
        before = self._worktree_state(worktree)
        self.flush()
        for task in tasks:
            for gate in run_gates(task.gates, worktree, self.sandbox, dirs.gate_home):
                self.audit(
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
        broken = self._gate_integrity(batch, tasks, worktree, before)
        if broken is not None:
            for task in tasks:
                self.move(task.id, S.FAILED, f"integrity violation by a gate: {broken}")
            self.flush()
            return
        if not passed:
            for task in tasks:
                self.move(task.id, S.FAILED, "a quality gate failed (or the task has none)")
            return
        self._merge(tasks, branch, head)

    @staticmethod
    def _worktree_state(worktree: Path) -> WorktreeState:
        commit = git.head(worktree)
        return WorktreeState(commit, git.tree_of(worktree, commit), git.is_clean(worktree))

    def _gate_integrity(
        self, batch: Batch, tasks: list[TaskSpec], worktree: Path, before: WorktreeState
    ) -> str | None:
        """Record whether the gates left the worktree exactly as the lineage saw it (rule
        ``harness.verify.rules.integrity``); returns the violation, or None."""
        after = self._worktree_state(worktree)
        broken = violation(before, after)
        self.audit(
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

    def _merge(self, tasks: list[TaskSpec], branch: str, head: str | None) -> None:
        """Merge exactly ``head``, the commit the lineage was computed from (by id: a ref
        moved after the diff, by a gate or anyone, cannot change what is merged)."""
        target = git.current_branch(self.repo) or git.head(self.repo)  # detached: merge on HEAD
        source = head if head is not None else branch
        check = git.merge_check(self.repo, target, source)
        commit: str | None = None
        reason = "clean"
        if not check.clean:
            reason = "merge conflict in " + ", ".join(check.conflicts)
        elif head is not None:
            self.flush()
            commit = git.merge(self.repo, head, f"merge {branch}", date=self.git_date)
        for task in tasks:
            self.audit(
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
                self.move(task.id, S.DONE, "gates passed and merged")
                self.merged.append(task.id)
            else:
                self.move(task.id, S.FAILED, reason)
        self.flush()

    def _record_lineage(
        self, tasks: list[TaskSpec], changes: Sequence[git.Change], actor: str, model: str | None
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
                "step": self.step,
                "task": owner,
            }
            if change.sha256 is None:
                writes.append(("artifact.delete", body))
            else:
                writes.append(
                    ("artifact.write", {**body, "sha256": change.sha256, "mode": change.mode})
                )
            self.step += 1
        if writes:
            self.recorder.store("lineage").append_many(writes)
        return owners

    def _conformance(
        self,
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
        if self.plan.capsule is None:
            return problems
        for task in tasks:
            actions = [
                ("delete" if c.sha256 is None else "edit", c.path)
                for c in changes
                if owners.get(c.path) == task.id
            ]
            actions.extend(("gate", gate.name) for gate in task.gates)
            actions.append(("merge", branch))
            now = self.clock()
            violations = conformance(self.plan.capsule, now=now, task=task, actions=actions)
            self._capsule_check(task.id, now, actions, violations)
            problems.extend(violations)
        return problems


def task_states(state_dir: Path, run_id: str) -> dict[str, str]:
    """Current task states of a run, read from its audit store (for `harness status`)."""
    path = run_dir(state_dir, run_id) / "audit.jsonl"
    states: dict[str, str] = {}
    if not path.exists():
        return states
    for line in path.read_bytes().splitlines():
        try:
            obj = parse_canonical(line)
        except Exception:  # a torn tail: status is best effort, the writer recovers it
            break
        if obj.get("kind") == "task.planned":
            states[obj["body"]["task"]] = "planned"
        elif obj.get("kind") == "task.transition":
            states[obj["body"]["task"]] = obj["body"]["to"]
    return states
