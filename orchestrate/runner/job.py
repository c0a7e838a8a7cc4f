"""One batch in flight: its worktree, its supervised agent, then its gates, never blocking.

The tick loop keeps up to ``max_in_flight`` of these at once and serves them all from one
thread: ``step`` advances a job as far as it can without waiting (the agent's process, then,
once the agent has finished, its commit and diff, then its gates one by one). A job records
NOTHING while it runs: every record about it is written when it retires, strictly in batch
order (``harness.orchestrate.runner.retire``), so the evidence never depends on which process
finished first. What a job computes on the way (the diff, the scope check, the gate verdicts)
is a function of its own worktree only: no clock, no shared state.

What is decided before a job's processes start, in batch order and flushed first: the claim,
the spawn-time re-decisions (trifecta, capsule), the lock and the ``agent.spawn`` record
(``prepare``); ``agent.started`` (pid, group, start time) right after the start. The agent
and its gates are one sandboxed unit confined to the batch's own worktree: nothing they do
reaches the repository until retirement decides the merge (decision 0027).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.verify.fsm import TaskState
from harness.verify.rules.integrity import WorktreeState
from harness.verify.rules.locks import lock_of
from harness.verify.rules.scope import in_scope

from .. import git
from ..adapters import CommandAdapter, get_adapter
from ..adapters.base import Adapter, AgentOutput, AgentRequest
from ..capabilities import check_task
from ..capsule import pre_spawn_violations
from ..gates import GateRun
from ..model import Batch, Gate, TaskSpec
from ..modelroutes import batch_routes
from ..review.desk import ReviewDesk, close_batch, waiters
from ..review.wire import wire_review
from ..sandbox import BatchDirs
from ..sandbox.policy import adapter_env_names, adapter_stdin, argv_files, batch_network
from ..scripted_agent import write_scripted_workfile
from ..supervise import Limits, Outcome, Supervised
from ..supervise.limits import MAX_LIFETIME_S
from . import budgets
from .agents import start_agent
from .core import RunCore
from .proxied import BatchProxy, open_proxy

S = TaskState

LIFETIME_CAP_S = MAX_LIFETIME_S
"""No agent runs longer than this, whatever its task says (issue 11 §4)."""


class BatchJob:
    """A batch from claim to retirement (see the module docstring)."""

    def __init__(self, run: RunCore, batch: Batch) -> None:
        self.run = run
        self.batch = batch
        self.tasks: list[TaskSpec] = [run.control.configure(run.specs[t]) for t in batch.tasks]
        """The batch's tasks as their agents run them under the configuration in force."""
        self.branch = f"harness/{run.run_id}/{batch.id}"
        self.dirs = BatchDirs(run.work / batch.id)
        self.worktree = self.dirs.tree
        self.base = ""
        self.lock: list[str] = list(lock_of(task.scope for task in self.tasks))
        """The batch's write lock, as the rule defines it (``rules.locks.lock_of``)."""
        self.attempt = 1
        self.request: AgentRequest | None = None
        self.adapter: Adapter | None = None
        self.proc: Supervised | Any = None
        """The agent: a local ``Supervised`` process or a remote handle with the same face."""
        self.outcome: Outcome | None = None
        self.output: AgentOutput | None = None
        self.head: str | None = None
        self.changes: list[git.Change] = []
        self.scope_problems: list[str] = []
        self.gates: GateRun | None = None
        self.gate_tasks: list[str] = []
        self.before: WorktreeState | None = None
        self.after: WorktreeState | None = None
        self.error: str | None = None
        """A runtime error while the job ran (it then retires as a failed batch)."""
        self.killed: str | None = None
        self.started_at: float | None = None
        """Monotonic time the agent started (its live wall-clock budget counts from here)."""
        self.meter: Any = None
        """The usage meter fed with the agent's output (None: its adapter reports none)."""
        self.budget_breach: Mapping[str, Any] | None = None
        self.gates_recorded = False
        """Whether retirement recorded this batch's ``gate.result``s (the gate sensors read
        only those)."""
        self.usage_record: Mapping[str, Any] | None = None
        """``agent.exit.usage`` once retired (the pace sensors read its tokens)."""
        """The ``budget.exceeded`` body when the supervisor killed the agent for its budget."""
        self.start_commit: str | None = None
        """Where the worktree starts (None: HEAD): a continued rounds task's checkpoint."""
        self.suspend: str | None = None
        """A rounds task that ended ``incomplete`` or ``blocked``: suspended at retirement."""
        self.violation: str | None = None
        """A rounds task whose Auditor changed the tree: failed at retirement, never merged."""
        self.done = False
        self.released = False
        """Whether its ``lock.release`` is queued (retirement releases it once)."""
        self.proxy: BatchProxy | None = None
        """The batch's recording model proxy (a proxied adapter's batch only)."""

    # -- before the processes start (in batch order, recorded) -----------------------------

    def prepare(self) -> bool:
        """Claim, worktree, spawn-time re-decisions, lock and ``agent.spawn`` (queued).

        Returns False when the batch was denied at spawn (its records are queued; nothing
        is started and no lock is taken).
        """
        run = self.run
        for task in self.tasks:
            run.move(task.id, S.CLAIMED, f"batch {self.batch.id}")
        self.base = git.head(run.repo)
        self.dirs.create()
        if git.branch_exists(run.repo, self.branch):
            # Only a batch that crashed before its agent.spawn record leaves this behind (the
            # batch counter counts spawn records): nothing of it was merged or recorded.
            git.delete_branch(run.repo, self.branch)
        git.add_worktree(run.repo, self.worktree, self.branch, self.start_commit or self.base)
        spec = run.plan.commands.get(self.batch.adapter)
        adapter = (
            CommandAdapter.from_spec(spec) if spec is not None else get_adapter(self.batch.adapter)
        )
        adapter, review = wire_review(run, self, adapter)  # the action review gate (§23)
        self.adapter = adapter
        scratch = self.dirs.io
        self.task_attempts = {task.id: run.attempts.get(task.id, 0) + 1 for task in self.tasks}
        self.attempt = max(self.task_attempts.values())
        prompt = self._prompt()
        request = AgentRequest(
            batch=self.batch,
            tasks=tuple(self.tasks),
            worktree=self.worktree,
            prompt=prompt,
            prompt_file=scratch / "prompt.txt",
            model=self.tasks[0].model,
            journal_file=run.journal.path if run.journal is not None else None,
            workfile=scratch / "work.json",
            journal_mode=run.journal.mode if run.journal is not None else "live",
            allow_live_miss=run.journal.allow_live_miss if run.journal is not None else False,
        )
        self.request = request
        request.prompt_file.write_text(prompt, encoding="utf-8")
        if self.batch.adapter == "scripted":
            write_scripted_workfile(request, request.workfile)
        timeout_s = max(task.timeout_s for task in self.tasks)
        argv = adapter.argv(request)
        network = batch_network(self.tasks, run.capabilities)
        self.proxy = self._open_proxy(network, adapter_env_names(adapter))
        proxy = self.proxy
        profile, env = run.sandbox.agent(
            self.dirs,
            programs=[adapter.executable],
            files=argv_files(argv),
            network=network,
            adapter_env=adapter_env_names(adapter) if proxy is None else (),
            journal_dir=(
                run.journal.directory
                if run.journal is not None and self.batch.adapter == "scripted"
                else None
            ),
            review=review,
            proxy_env=proxy.env if proxy is not None else None,
            egress=proxy.egress if proxy is not None else (),
        )
        if proxy is not None:
            argv = proxy.wrap(argv)
        if _denied_at_spawn(run, self.batch, self.tasks, profile.to_json()):
            self.cleanup()
            return False
        idle_s = _idle_s(run, self.tasks)
        lifetime_s = min(float(run.plan.lifetime_s), LIFETIME_CAP_S)
        self.limits = Limits(
            wall_s=timeout_s, idle_s=idle_s, lifetime_s=lifetime_s, grace_s=run.grace_s
        )
        self.argv = run.sandbox.argv(profile, argv)
        self.env = env
        self.stdin = adapter_stdin(adapter, request)
        self.sandboxed = profile.kind == "bwrap"
        run.audit("lock.acquire", {"batch": self.batch.id, "globs": self.lock})
        ReviewDesk.of(run).hold(self.batch.id, self)  # the lock registry reviews decide by
        run.audit(
            "agent.spawn",
            {
                "batch": self.batch.id,
                "tasks": [task.id for task in self.tasks],
                "adapter": self.batch.adapter,
                "branch": self.branch,
                "worktree": str(self.worktree),
                "timeout_ms": int(timeout_s * 1000),
                "sandbox": profile.to_json(),
                "env": list(profile.env),
                "supervisor": f"role:{self.batch.role}",
                "attempt": self.attempt,
                "idle_ms": int(idle_s * 1000) if idle_s is not None else None,
                "lifetime_ms": int(min(timeout_s, lifetime_s) * 1000),
                "grace_ms": int(run.grace_s * 1000),
                "lock": self.lock,
                "budget": budgets.budget_of(run, self.tasks),
                "config": run.control.version,
            },
        )
        for task in self.tasks:
            run.attempts[task.id] = self.task_attempts[task.id]
            run.move(task.id, S.IN_PROGRESS, f"agent for {self.batch.id} started")
        return True

    def _open_proxy(self, network: bool, names: tuple[str, ...]) -> BatchProxy | None:
        """The batch's proxy when its adapter is proxied (docs/spec/runtime.md §11a): on
        ``<io>/model.sock`` behind the bridge when sandboxed without network, else on a
        loopback port. A rounds task has one proxy for all its roles, on the socket whenever
        there is a sandbox (its Manager and Auditor never have network; §21). A remote
        executor's batch: on TCP at the address its workers' relays reach (§18)."""
        run = self.run
        if run.executor is not None:
            remote = batch_routes(self.tasks, run.plan.commands)
            if remote is None or any(task.rounds is not None for task in self.tasks):
                return None
            return open_proxy(
                run, self.dirs.io, remote, bridged=False, adapter=self.batch.adapter,
                adapter_env=names, remote_host=run.executor.proxy_host(),
            )  # fmt: skip
        rounds = any(task.rounds is not None for task in self.tasks)
        if rounds:
            from ..rounds.roles import rounds_routes

            routes = rounds_routes(self)
        else:
            routes = batch_routes(self.tasks, run.plan.commands)
        if routes is None:
            return None
        bridged = run.sandbox.available and (rounds or not network)
        return open_proxy(
            run, self.dirs.io, routes, bridged=bridged, adapter=self.batch.adapter,
            adapter_env=names,
        )  # fmt: skip

    def stop_proxy(self) -> None:
        """After the agent exited (or never started): drain and close the proxy."""
        if self.proxy is not None:
            self.proxy.stop()

    def _prompt(self) -> str:
        """The tasks' prompts; a retried task's prompt carries what failed last time (the
        reflex arc: the failing gates' output goes into the next attempt)."""
        parts = []
        for task in self.tasks:
            parts.append(f"[{task.id}] {task.prompt}")
            feedback = self.run.feedback.get(task.id)
            if feedback:
                done = self.run.attempts.get(task.id, 0)
                parts.append(
                    f"[{task.id}] Attempt {done} of this task failed. What failed:\n{feedback}"
                )
        return "\n\n".join(parts)

    def start(self) -> None:
        """Start the agent (after ``agent.spawn`` is durable) and queue ``agent.started``."""
        run = self.run
        self.meter = budgets.meter_for(run, self)
        self.started_at = time.monotonic()
        self.proc = start_agent(run, self, self.meter)
        identity = getattr(self.proc, "identity", None)
        if identity is not None:
            run.audit("agent.started", {"batch": self.batch.id, **identity.to_json()})

    # -- while in flight (no records) -----------------------------------------------------

    def processes(self) -> list[Supervised]:
        """The local processes of this job now running (for the loop's ``wait_any``)."""
        if self.done:
            return []
        if self.gates is not None:
            return self.gates.processes()
        # A local process or a remote handle: both give wait_any what it sleeps on
        # (watch/wake_at/done), so the loop never spins while only remote agents run.
        running = [self.proc] if self.proc is not None and not self.proc.done else []
        return running + waiters(self.run, self.batch.id) if running else running

    def step(self, wait_s: float = 0.0) -> bool:
        """Advance as far as possible without blocking (longer than ``wait_s``); True once
        the job is ready to retire. A runtime error ends the job (recorded at retirement)."""
        if self.done:
            return True
        try:
            self._step(wait_s)
        except Exception as exc:  # a job never takes the run (and its seal) down
            self.error = f"runtime error: {type(exc).__name__}: {exc}"
            self.kill("error")
            self.done = True
        return self.done

    def _step(self, wait_s: float) -> None:
        if self.outcome is None:
            breach = budgets.live_breach(self.run, self)
            if breach is not None and self.killed is None:
                self.budget_breach = breach
                self.kill("budget")
            outcome = self.proc.step(wait_s)
            if outcome is None:
                return
            self.outcome = outcome
            self.stop_proxy()  # every exchange of the agent is reported by now
            close_batch(self.run, self.batch.id)  # reviews still waiting: denied, recorded
            self._collect()
            if not self.agent_ok() or self.scope_problems:
                self.done = True
                return
            self.start_gates()
            wait_s = 0.0
        assert self.gates is not None
        if self.gates.step(wait_s):
            self.after = worktree_state(self.worktree)
            self.done = True

    def _collect(self) -> None:
        """After the agent: parse its output, then commit, diff and check the scope."""
        assert self.outcome is not None and self.adapter is not None and self.request is not None
        self.output = self.adapter.parse(self.request, self.outcome.result)
        self.collect_changes(self.base, f"{self.batch.id}: {', '.join(t.id for t in self.tasks)}")

    def collect_changes(self, start: str, message: str) -> None:
        """Commit the worktree, diff it against ``start`` (the commit the batch's work began
        from) and check the scope (pure: the job's own data)."""
        git.commit_all(self.worktree, message, date=self.run.git_date)
        tip = git.head(self.worktree)  # also covers commits the agent made itself
        self.head = tip if tip != start else None
        self.changes = git.changed_files(self.run.repo, start, self.head) if self.head else []
        self.scope_problems = [
            f"{change.path} is outside the scope of every task in the batch"
            for change in self.changes
            if not any(in_scope(change.path, t.scope) for t in self.tasks)
        ]

    def start_gates(self) -> None:
        """Take the worktree's state and start the tasks' gates on it (non-blocking)."""
        self.before = worktree_state(self.worktree)
        gates: list[Gate] = []
        for task in self.tasks:
            gates.extend(task.gates)
            self.gate_tasks.extend(task.id for _ in task.gates)
        self.gates = GateRun(gates, self.worktree, self.run.sandbox, self.dirs.gate_home)

    def agent_ok(self) -> bool:
        """The agent succeeded: its adapter says so, exit 0, no supervisor verdict."""
        assert self.outcome is not None and self.output is not None
        result = self.outcome.result
        return (
            self.output.ok
            and self.outcome.anomaly is None
            and not result.timed_out
            and result.exit_code == 0
        )

    def kill(self, why: str) -> None:
        """End whatever of this job runs (agent or gates); it retires as failed. A job that
        already finished is left as it is (its verdicts stand)."""
        if self.done:
            return
        self.killed = self.killed or why
        if self.gates is not None:
            self.gates.kill(why)
        elif self.proc is not None and not getattr(self.proc, "done", True):
            self.proc.kill(why)

    # -- after retirement -----------------------------------------------------------------

    def cleanup(self) -> None:
        """Close the agent's review gate and proxy, then remove the worktree and the batch
        folder; the branch stays (it holds the committed work, merged or not: unmerged work
        is never deleted)."""
        self.close()
        self.remove_worktree()

    def close(self) -> None:
        """Settle the review gate (what still waits is denied and recorded) and stop the
        proxy: at retirement, before anything else is decided."""
        close_batch(self.run, self.batch.id)
        self.stop_proxy()

    def remove_worktree(self) -> None:
        """Remove the worktree and the batch folder (a leftover is committed to the branch
        first). Retirement defers this until its records are durable (``when_durable``)."""
        run = self.run
        with contextlib.suppress(git.GitError):
            if self.output is None and self.worktree.exists():  # never collected: keep it
                git.commit_all(self.worktree, f"{self.batch.id}: salvage", date=run.git_date)
        git.remove_worktree(run.repo, self.worktree, force=True)
        shutil.rmtree(self.dirs.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # the run's work folder, once empty
            run.work.rmdir()


def worktree_state(worktree: Path) -> WorktreeState:
    commit, tree = git.commit_and_tree(worktree)
    return WorktreeState(commit, tree, git.is_clean(worktree))


def feedback_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _idle_s(run: RunCore, tasks: Sequence[TaskSpec]) -> float | None:
    """The batch's idle limit: the smallest that applies to its tasks; None when off."""
    limits = [value for value in (run.plan.idle_s_for(task) for task in tasks) if value]
    return float(min(limits)) if limits else None


def budget_words(breach: Mapping[str, Any]) -> str:
    """``task t1 tokens 1200 of 1000`` for a ``budget.exceeded`` body."""
    return (
        f"{breach['scope']} {breach['name']} {breach['resource']} "
        f"{breach['used']} of {breach['limit']}"
    )


def _denied_at_spawn(
    run: RunCore, batch: Batch, tasks: list[TaskSpec], profile: Mapping[str, Any]
) -> bool:
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
    exhausted = budgets.spawn_exhausted(run, batch, tasks)
    if all(denial is None for denial in denials) and not drift and exhausted is None:
        return False
    if exhausted is not None:
        run.audit("budget.exceeded", dict(exhausted))
    for task, denial in zip(tasks, denials, strict=True):
        if denial is not None:
            run.deny(denial, profile)
        elif task.id in drift:
            run.move(task.id, S.DENIED, "intent capsule: " + "; ".join(drift[task.id]))
        elif exhausted is not None:
            run.move(task.id, S.DENIED, "budget exhausted: " + budget_words(exhausted))
        else:
            run.move(task.id, S.OPEN, "batch released: another task was denied at spawn")
    return True
