"""Shared value types of the runtime: plans, tasks, batches, agent results.

Plain frozen dataclasses so that the coordination functions (scheduler, capability and
capsule checks) stay pure: same inputs, same decisions, no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.verify.fsm import TaskState
from harness.verify.rules.budget import Limits
from harness.verify.rules.controller import Params

from .modelroutes import ModelRoute

NO_BUDGET = Limits()
"""No limit on any resource (the default budget of a task, a role and the run)."""


@dataclass(frozen=True)
class Gate:
    """A quality gate: a real command run in the task's worktree; exit 0 passes."""

    name: str
    command: tuple[str, ...]
    timeout_s: float = 120.0


@dataclass(frozen=True)
class Edit:
    """A file edit the scripted agent applies (``content`` None deletes the file)."""

    path: str
    content: str | None


@dataclass(frozen=True)
class RoundStep:
    """One step of a scripted Manager's script: what it asks for, what the step edits."""

    say: str
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class RoundsSpec:
    """A task that runs as audited rounds (Manager / Executor / Auditor; docs/spec/rounds.md).

    ``manager``/``auditor`` are adapter names (default: the task's own adapter); the task's
    adapter is the Executor. ``steps`` and the misbehaviour switches drive the scripted roles
    only (the demo and the tests): a real Manager plans from the goal."""

    max_rounds: int = 25
    manager: str | None = None
    auditor: str | None = None
    manager_model: str | None = None
    auditor_model: str | None = None
    steps: tuple[RoundStep, ...] = ()
    ghost: bool = False
    """Scripted Executor: claim success without changing anything."""
    auditor_writes: str | None = None
    """Scripted Auditor: try to write this repository-relative path (it must be refused)."""
    bad_header: bool = False
    """Scripted Auditor: first answer with an invalid header (the one repair then fixes it)."""
    gate_wait_s: int = 3600
    """How long a round gate (``ask`` or three failing rounds) waits for an operator."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of a plan, as written by the operator."""

    id: str
    role: str
    prompt: str
    priority: int = 0
    adapter: str = "scripted"
    scope: tuple[str, ...] = ("**",)
    """Globs (repository-relative, POSIX) the task may change."""
    depends: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    gates: tuple[Gate, ...] = ()
    edits: tuple[Edit, ...] = ()
    """For the scripted adapter: the edits to make."""
    timeout_s: float = 300.0
    model: str | None = None
    order: int = 0
    """Position in the plan file (creation order), the scheduler's tie-breaker."""
    budget: Limits = NO_BUDGET
    """The task's own budget (``budget = {wall_s, tokens, cost_usd}``), in record units:
    every batch the task is in is charged to it in full (``harness.verify.rules.budget``)."""
    max_attempts: int | None = None
    """Attempts this task may have (1..10); ``None``: the plan's ``max_attempts``."""
    idle_s: int | None = None
    """Idle limit in seconds for this task's agents (1..1800); ``None``: the plan's."""
    rounds: RoundsSpec | None = None
    """Set: the task runs as audited rounds (issue 12) instead of one agent run."""
    usage_tokens: int | None = None
    """For the scripted adapter: the output tokens it reports for this task (a stand-in for
    a model's usage report; None: it reports none)."""
    requirements: tuple[str, ...] = ()
    """Requirement ids this task covers (the ``coverage`` sensor; docs/spec/control.md)."""
    strategy_edits: Mapping[str, tuple[Edit, ...]] = field(default_factory=dict)
    """For the scripted adapter: the edits it makes instead of ``edits`` when its agent's
    prompt template is the key (``focused``, ``stepwise``): a stand-in for an agent that
    does better once the I layer changed its strategy."""
    models: tuple[str, ...] | None = None
    """The model routes its (proxied) adapter may reach, narrowing the adapter's defaults
    (``harness.orchestrate.modelroutes``); None: the adapter's."""


@dataclass(frozen=True)
class CapsuleSpec:
    """An intent capsule: the approved goal and what the run may do to reach it."""

    goal: str
    actions: tuple[str, ...] = ("edit",)
    """Allowed action classes: edit, delete, gate, merge."""
    scope: tuple[str, ...] = ("**",)
    adapters: tuple[str, ...] = ()
    """Allowed adapters (empty: any)."""
    egress: tuple[str, ...] = ()
    """Allowed external hosts (empty: none)."""
    expires: str = "9999-12-31T23:59:59.999999Z"


@dataclass(frozen=True)
class CommandSpec:
    """A plan-defined agent (``[adapter.<name>]``): any CLI, run from an argv template with
    the prompt on stdin (``harness.orchestrate.adapters.command``)."""

    name: str
    command: tuple[str, ...]
    env: tuple[str, ...] = ()
    """Environment variable names it may get (only with network egress), e.g. an API key."""
    model: str | None = None
    """Default for the ``{model}`` placeholder."""
    models: tuple[str, ...] | None = None
    """Model routes: set, the adapter is proxied and reaches these (``modelroutes``)."""


@dataclass(frozen=True)
class Plan:
    name: str
    tasks: tuple[TaskSpec, ...]
    max_batch: int = 3
    """Tasks per batch (1..3): tasks of one batch share one agent process and worktree."""
    concurrency: Mapping[str, int] = field(default_factory=dict)
    """Per role: how many batches of that role may be in flight at once (default 1)."""
    capsule: CapsuleSpec | None = None
    settle_ticks: int = 2
    """Quiescent ticks (nothing runnable, nothing running) before the loop stops."""
    commands: Mapping[str, CommandSpec] = field(default_factory=dict)
    """Plan-defined command adapters by name."""
    max_in_flight: int = 4
    """Global limit (1..256) of batches in flight at once, over all roles; per-role
    ``concurrency`` limits still apply beneath it."""
    max_attempts: int = 1
    """Attempts per task (1..10) unless the task sets its own: a failed attempt is retried
    from the task's checkpoint while attempts remain."""
    idle_s: int | None = None
    """Seconds (1..1800) without progress after which an agent is *hung* and reaped;
    ``None``: no idle limit (a task may still set one)."""
    lifetime_s: int = 1800
    """Hard cap (1..1800 s) on any agent's life, whatever its ``timeout_s``."""
    seal_every_records: int = 1000
    """Progressive sealing: a signed checkpoint after at most this many records (1..10^7)."""
    seal_every_s: int = 60
    """Progressive sealing: a signed checkpoint at least this often (1..86400 s) while records
    are being written."""
    budget: Limits = NO_BUDGET
    """The run's budget (``[plan.budget]``): every batch is charged to it once."""
    role_budgets: Mapping[str, Limits] = field(default_factory=dict)
    """Per role (``[plan.budget.role.<role>]``), sorted by role: every batch of that role is
    charged to it once."""
    review_wait_s: int = 300
    """How long (1..3600 s) an irreversible action waits at the review gate for an operator's
    approval before it is denied (docs/spec/review.md §5)."""
    control: Mapping[str, Any] = field(default_factory=lambda: Params().record())
    """``[plan.control]`` with every default filled in (``harness.verify.rules.controller``:
    bucket threshold, CUSUM, aggregation, rate window, phase bounds)."""
    models: Mapping[str, ModelRoute] = field(default_factory=dict)
    """The plan's ``[models.<route>]`` upstreams, sorted by route (built-ins fill the rest)."""

    def attempts_for(self, task: TaskSpec) -> int:
        """The attempt limit that applies to ``task`` (its own, else the plan's)."""
        return self.max_attempts if task.max_attempts is None else task.max_attempts

    def idle_s_for(self, task: TaskSpec) -> int | None:
        """The idle limit that applies to ``task`` (its own, else the plan's; ``None``: off)."""
        return self.idle_s if task.idle_s is None else task.idle_s

    def budget_ledger_limits(self) -> tuple[Limits, Mapping[str, Limits], Mapping[str, Limits]]:
        """``(run, roles, tasks)`` limits, the arguments of ``rules.budget.Ledger``."""
        tasks = {task.id: task.budget for task in self.tasks if task.budget != NO_BUDGET}
        return self.budget, dict(self.role_budgets), tasks


@dataclass(frozen=True)
class TaskView:
    """What the scheduler sees of a task in a snapshot."""

    spec: TaskSpec
    state: TaskState


@dataclass(frozen=True)
class Batch:
    """Tasks chosen to run together: one agent process, one worktree, one branch."""

    id: str
    role: str
    adapter: str
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class ProcResult:
    """How a process ended (see harness.orchestrate.proc)."""

    exit_code: int | None
    """None when it was killed by a signal."""
    signal: str | None
    timed_out: bool
    duration_ms: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool = False
    """True when more than the stored ``stdout`` was written (the rest was drained, dropped)."""
    stderr_truncated: bool = False


@dataclass(frozen=True)
class ModelCall:
    """A model exchange an adapter reports (request and response text)."""

    adapter: str
    model: str
    request: str
    response: str
    parameters: Mapping[str, object] = field(default_factory=dict)
