"""The state folder of a repository (``.harness/``) and the commands that use it."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from harness.receipts.keys import KeyFileError, OperatorKeys, init_keys, load_keys
from harness.receipts.run import RunRecorder

from .capabilities import DEFAULT_MATRIX, CapabilityError, load_capabilities
from .clock import LogicalClock, wall_clock
from .plan import PlanError, load_plan
from .replay import Journal
from .runtime import RunSummary, Runtime

STATE_NAME = ".harness"


class StateError(Exception):
    """The repository, plan or state cannot be used (message says why)."""


def state_dir(repo: Path) -> Path:
    return repo / STATE_NAME


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


def init_state(repo: Path) -> tuple[Path, OperatorKeys]:
    repo = repo.absolute()
    _exclude(repo)
    state = state_dir(repo)
    try:
        keys = init_keys(state / "keys")
    except KeyFileError as exc:
        raise StateError(str(exc)) from None
    return state, keys


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
) -> RunSummary:
    state = state_dir(repo)
    try:
        keys = load_keys(state / "keys")
        plan = load_plan(plan_file)
    except (KeyFileError, PlanError, OSError) as exc:
        raise StateError(str(exc)) from None
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
    return Runtime(
        repo=repo,
        plan=plan,
        state_dir=state,
        keys=keys,
        run_id=run_id,
        clock=LogicalClock() if logical_clock else wall_clock,
        capabilities=matrix,
        journal=journal,
        git_date="2026-01-01T00:00:00+00:00" if logical_clock else None,
    ).run()


def request_stop(repo: Path, run_id: str, operator: str) -> int:
    state = state_dir(repo)
    keys = load_keys(state / "keys")
    with RunRecorder(state, run_id, keys) as run:
        return run.record(
            "control", "command", {"operator": operator, "command": "stop", "args": {}}
        )
