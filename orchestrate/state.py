"""The state folder of a repository (``.harness/``), the key layout, and the commands that
use them.

Layout (decision 0017): the state folder ``<repo>/.harness/`` holds the stores and journals
(git-ignored through ``.git/info/exclude``); the keys live outside the repository, by default
in ``${XDG_CONFIG_HOME:-~/.config}/harness/keys/<repo id>`` (``--keys`` chooses another
folder); worktrees live outside the state folder, in ``default_work_root``. ``harness init``
and ``harness run`` refuse a layout where a key file is reachable from an agent's view: inside
the repository's tree (which every worktree mirrors and the git folder belongs to) or inside
the worktree folder.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.receipts.commands import (
    CommandConflict,
    ControlLogError,
    Issued,
    RunEnded,
    UnknownRunError,
    issue_command,
)
from harness.receipts.keys import (
    KeyFileError,
    OperatorKeys,
    default_keys_dir,
    init_keys,
    load_keys,
)
from harness.receipts.run import RunRecorder, run_dir
from harness.verify.records import RUN_ID_RE

from .capabilities import DEFAULT_MATRIX, CapabilityError, load_capabilities
from .clock import LogicalClock, wall_clock
from .model import Plan
from .plan import PlanError, load_plan
from .replay import Journal
from .runtime import RunSummary, Runtime
from .sandbox import Settings, covers, default_work_root

STATE_NAME = ".harness"


class StateError(Exception):
    """The repository, plan or state cannot be used (message says why)."""


class UsageError(StateError):
    """The command line names something that does not exist or is malformed (exit 2)."""


def state_dir(repo: Path) -> Path:
    return repo / STATE_NAME


def check_run_id(run_id: str) -> None:
    """Refuse a malformed run id before anything is created (the stores would refuse it
    half-way, after a run folder exists)."""
    if not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(
            f"invalid run id {run_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def known_runs(state: Path) -> list[str]:
    """The runs recorded in ``state`` (folders holding an audit store), sorted."""
    root = state / "runs"
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and RUN_ID_RE.fullmatch(p.name) and (p / "audit.jsonl").is_file()
    )


def require_runs(state: Path, run_ids: Iterable[str]) -> None:
    """Refuse a run id that names no recorded run: commands must never create a phantom run
    (a signed control store for a run that never existed) or silently select nothing."""
    for run_id in run_ids:
        check_run_id(run_id)
        if not (run_dir(state, run_id) / "audit.jsonl").is_file():
            known = known_runs(state)
            listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
            raise UsageError(
                f"no run {run_id!r} in {state}"
                + (f" (runs: {listed})" if known else " (no runs recorded yet)")
            )


def task_reasons(state: Path, run_id: str) -> dict[str, str]:
    """The reason recorded with each task's latest transition (read from the audit store,
    best effort like ``task_states``): what ``harness run`` prints for a task not done."""
    from .runner.resume import audit_objects

    reasons: dict[str, str] = {}
    for obj in audit_objects(state, run_id):
        body = obj.get("body")
        if obj.get("kind") == "task.transition" and isinstance(body, dict):
            task, reason = body.get("task"), body.get("reason")
            if isinstance(task, str) and isinstance(reason, str):
                reasons[task] = reason
    return reasons


def plan_warnings(plan: Plan) -> list[str]:
    """What in a valid plan cannot succeed: a task without gates can never be done (the
    runtime fails it at gating, because nothing attests its change)."""
    return [
        f"task {task.id!r} has no gates: it can never be done (add a [[task.gates]] entry)"
        for task in plan.tasks
        if not task.gates
    ]


def keys_dir_for(repo: Path, keys: Path | None = None) -> Path:
    """The keys folder a command uses: ``keys`` when given, else the default for ``repo``."""
    return (keys if keys is not None else default_keys_dir(repo.absolute())).absolute()


def key_layout_problem(keys: Path, repo: Path, work_root: Path | None = None) -> str | None:
    """Why the keys folder is reachable from an agent's view, or None when it is not.

    Reachable: the keys folder (after resolving symlinks) lies inside the repository's tree or
    the worktree folder, or contains one of them (an agent in a worktree would then have the
    keys below or beside its working directory).
    """
    real_keys = os.path.realpath(keys)
    views = [("the repository", os.path.realpath(repo))]
    work = work_root if work_root is not None else default_work_root(repo)
    views.append(("the worktree folder", os.path.realpath(work)))
    for what, view in views:
        if covers(view, real_keys):
            return (
                f"the keys folder {keys} is inside {what} ({view}), where an agent can reach "
                "it: keep the keys outside the repository (the default is "
                f"{default_keys_dir(repo)}; or choose one with --keys)"
            )
        if covers(real_keys, view):
            return f"the keys folder {keys} contains {what} ({view}), where agents work"
    return None


def _exclude(repo: Path) -> None:
    """Keep .harness/ out of git without touching tracked files (.git/info/exclude)."""
    git_dir = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--git-dir"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if git_dir.returncode != 0:
        raise StateError(f"{repo} is not a git repository")
    exclude = (repo / git_dir.stdout.strip() / "info" / "exclude").resolve()
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if f"/{STATE_NAME}/" not in lines:
        exclude.write_text("\n".join([*lines, f"/{STATE_NAME}/"]) + "\n")


def init_state(repo: Path, keys: Path | None = None) -> tuple[Path, Path, OperatorKeys]:
    """Create the state folder and the keys; returns (state folder, keys folder, keys)."""
    repo = repo.absolute()
    _exclude(repo)
    state = state_dir(repo)
    folder = keys_dir_for(repo, keys)
    problem = key_layout_problem(folder, repo)
    if problem:
        raise StateError(problem)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        made = init_keys(folder)
    except KeyFileError as exc:
        raise StateError(str(exc)) from None
    return state, folder, made


def load_run_keys(repo: Path, keys: Path | None = None) -> tuple[Path, OperatorKeys]:
    """The keys for a command on ``repo``, refusing a reachable layout."""
    folder = keys_dir_for(repo, keys)
    problem = key_layout_problem(folder, repo)
    if problem:
        raise StateError(problem)
    try:
        return folder, load_keys(folder)
    except KeyFileError as exc:
        hint = "" if folder.exists() else " (run `harness init` first, or pass --keys)"
        raise StateError(f"{exc}{hint}") from None


def run_plan(
    repo: Path,
    plan_file: Path,
    *,
    run_id: str | None = None,
    replay: str | None = None,
    allow_live_miss: bool = False,
    logical_clock: bool = False,
    capabilities: Path | None = None,
    journal_state: Path | None = None,
    keys: Path | None = None,
    no_sandbox: bool = False,
    work_root: Path | None = None,
    warn: Callable[[str], None] | None = None,
    ray_address: str | None = None,
) -> RunSummary:
    if run_id is not None:
        check_run_id(run_id)
    if replay is not None:
        check_run_id(replay)
    state = state_dir(repo)
    folder, operator_keys = load_run_keys(repo, keys)
    if work_root is not None:
        problem = key_layout_problem(folder, repo, work_root)
        if problem:
            raise StateError(problem)
    try:
        plan = load_plan(plan_file)
    except (PlanError, OSError) as exc:
        raise StateError(str(exc)) from None
    if warn is not None:
        for message in plan_warnings(plan):
            warn(message)
        if replay is None or allow_live_miss:  # a strict replay asks no upstream
            from .modelroutes import key_warnings

            for message in key_warnings(plan.tasks, plan.models, plan.commands, os.environ):
                warn(message)
    if run_id is None:
        run_id = replay or f"{plan.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    journal_root = (journal_state or state) / "journals"
    if replay is not None:
        journal = Journal(journal_root / replay, "replay", allow_live_miss=allow_live_miss)
    else:
        journal = Journal(journal_root / run_id, "live")
    try:
        matrix = load_capabilities(capabilities) if capabilities else DEFAULT_MATRIX
    except (CapabilityError, OSError) as exc:
        raise StateError(f"capabilities: {exc}") from None
    runtime = Runtime(
        repo=repo,
        plan=plan,
        state_dir=state,
        keys=operator_keys,
        run_id=run_id,
        clock=LogicalClock() if logical_clock else wall_clock,
        capabilities=matrix,
        journal=journal,
        git_date="2026-01-01T00:00:00+00:00" if logical_clock else None,
        sandbox=Settings(opt_out=no_sandbox),
        work_root=work_root,
        keys_dir=folder,
    )
    if ray_address is None:
        return runtime.run()
    from .executors.ray_executor import RayExecutor

    ray = RayExecutor(ray_address)
    try:
        ray.connect()
    except ImportError:
        raise StateError(
            "--executor ray needs the ray extra: pip install 'harness-verify[ray]'"
        ) from None
    except Exception as exc:  # ray raises ConnectionError and friends
        raise StateError(f"cannot join the Ray cluster at {ray_address}: {exc}") from None
    runtime.executor = ray
    try:
        return runtime.run()
    finally:
        ray.close()


def request_command(
    repo: Path,
    run_id: str,
    command: str,
    args: Mapping[str, Any],
    operator: str,
    keys: Path | None = None,
    *,
    command_id: str | None = None,
    revision: int | None = None,
) -> Issued:
    """Put an operator command on the run's control bus (``receipts.commands``): idempotent by
    id (an exact replay returns the existing record), refused for an unknown run (UsageError),
    for a different payload under a known id, or once the run has ended (StateError)."""
    state = state_dir(repo)
    require_runs(state, [run_id])
    _, operator_keys = load_run_keys(repo, keys)
    try:
        return issue_command(
            state.resolve(),  # the operator's links resolved once; none followed after
            run_id,
            operator_keys,
            operator=operator,
            command=command,
            args=args,
            command_id=command_id,
            revision=revision,
        )
    except UnknownRunError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (CommandConflict, RunEnded, ControlLogError) as exc:
        raise StateError(str(exc)) from None


def last_status(state: Path, run_id: str) -> tuple[str | None, bool]:
    """(the run's last ``run.status``, whether its audit store ends with ``run.end``)."""
    from .runner.resume import audit_objects

    status: str | None = None
    ended = False
    for obj in audit_objects(state, run_id):
        ended = obj.get("kind") == "run.end"
        if obj.get("kind") == "run.status":
            status = str(obj["body"]["status"])
    return status, ended


def control_lines(state: Path, run_id: str) -> list[str]:
    """What ``harness status`` shows of a run's control layers: the phase and configuration
    version in force, then every control decision that acted or alerted (strategy changes,
    warnings, escalations, failed self-tests, review alerts), oldest first."""
    from .runner.resume import audit_objects

    phase, version, steps = "implement", 1, 0
    lines: list[str] = []
    for obj in audit_objects(state, run_id):
        kind, body = obj.get("kind"), obj.get("body") or {}
        if kind == "control.phase":
            phase = str(body["phase"])
        elif kind == "config.version":
            version = int(body["version"])
        elif kind == "control.sensor":
            steps = int(body["step"])
        elif kind == "control.decision" and body["action"] != "detected":
            made = f" (version {body['config']})" if body["config"] is not None else ""
            cls = f" ({body['class']})" if body["class"] is not None else ""
            lines.append(
                f"    step {body['step']:<4} {body['layer']} {body['rule']} {body['key']} "
                f"{body['level']}/{body['threshold']}{cls} -> {body['action']}{made}"
            )
        elif kind == "control.review" and (body["fit_alert"] or body["controllability_alert"]):
            lines.append(
                f"    review at {body['point'] // 10} %: fit {body['fit_pm']} per-mille, "
                f"controllability {body['controllability_pm']} per-mille -> alert"
            )
    head = f"  control: phase {phase}, configuration version {version}, {steps} steps"
    return [head, *lines] if steps or lines else []


def check_continuable(state: Path, run_id: str) -> None:
    """A continue needs a run that ended blocked or incomplete, or one that crashed (no
    ``run.end``): refused before anything is written (a resume no run answers would stay
    without its receipt)."""
    require_runs(state, [run_id])
    status, ended = last_status(state, run_id)
    if ended and status not in ("blocked", "incomplete"):
        raise StateError(
            f"run {run_id} ended {status or 'without a status'}: only a blocked or incomplete "
            "run (or one that crashed) can continue; use --retry for a new run"
        )


def recorded_plan_digest(state: Path, run_id: str) -> str:
    from .runner.resume import audit_objects

    for obj in audit_objects(state, run_id):
        if obj.get("kind") == "run.start":
            return str(obj["body"]["plan_sha256"])
    raise StateError(f"run {run_id} has no run.start record")


def check_same_plan(state: Path, run_id: str, plan_file: Path) -> None:
    """A retry starts a new run from the saved task: the plan file must still be the plan
    the run recorded (same document digest), else the retry would run another task."""
    try:
        plan = load_plan(plan_file)
    except (PlanError, OSError) as exc:
        raise StateError(str(exc)) from None
    from .plandoc import plan_bytes, plan_sha256

    if plan_sha256(plan_bytes(plan)) != recorded_plan_digest(state, run_id):
        raise StateError(
            f"{plan_file} is not the plan run {run_id} recorded (its digest differs): a retry "
            "must start from the saved task"
        )


def request_abandon(
    repo: Path, run_id: str, batch: str, operator: str, reason: str, keys: Path | None = None
) -> tuple[int, str, str]:
    """Abandon a retired, unmerged batch's branch: the decision first (a ``command`` record
    ``abandon`` in the run's control store, naming the branch and its tip, so the work stays
    recoverable from the object store until git collects it), then the branch is deleted.

    Branches are otherwise never deleted (docs/spec/runtime.md §20.3). Refused (UsageError)
    for a batch the run never spawned; refused (StateError) while the batch is in flight
    (no ``lock.release`` yet), when its branch is gone, or when its tip is already merged into
    HEAD (nothing would be abandoned). Returns (control seq, branch, tip).
    """
    from . import git
    from .runner.resume import audit_objects

    state = state_dir(repo)
    require_runs(state, [run_id])
    branch: str | None = None
    released = False
    for obj in audit_objects(state, run_id):
        body = obj.get("body", {})
        if obj.get("kind") == "agent.spawn" and body.get("batch") == batch:
            branch = str(body["branch"])
        elif obj.get("kind") == "lock.release" and body.get("batch") == batch:
            released = True
    if branch is None:
        raise UsageError(f"run {run_id!r} has no batch {batch!r}")
    if not released:
        raise StateError(f"batch {batch!r} is still in flight: stop the run first")
    if not git.branch_exists(repo, branch):
        raise StateError(f"branch {branch} no longer exists")
    tip = git.head(repo, branch)
    if git.is_ancestor(repo, tip, "HEAD"):
        raise StateError(f"branch {branch} is merged into HEAD: there is nothing to abandon")
    issued = request_command(
        repo,
        run_id,
        "abandon",
        {"batch": batch, "branch": branch, "tip": tip, "reason": reason},
        operator,
        keys,
    )
    _, operator_keys = load_run_keys(repo, keys)
    if not issued.replayed:  # the CLI applies it: its receipt, then the effect
        with RunRecorder(state, run_id, operator_keys) as run:
            run.record(
                "audit",
                "command.receipt",
                {
                    "id": issued.id,
                    "command": "abandon",
                    "control_seq": issued.seq,
                    "outcome": "applied",
                    "reason": f"branch {branch} deleted at {tip}",
                },
            )
    git.delete_branch(repo, branch)
    return issued.seq, branch, tip
