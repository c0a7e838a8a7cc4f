"""Git as an isolated subprocess, for the merge gate and its base-ref trust policy.

Git runs with no system or global config, hooks and fsmonitor disabled, no external diff or
textconv, and no ``GIT_*`` variable inherited from the caller: the repository under test is
the adversary's checkout (DESIGN §10), so nothing in it may decide what git executes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final

GIT_TIMEOUT_S: Final = 300

GIT_CONFIG: Final = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "diff.external=",
    "-c",
    "core.quotePath=false",
)


class GateUsageError(Exception):
    """Bad refs, not a git repository, git missing: the CLI maps it to exit code 2."""


def git_env() -> dict[str, str]:
    """The caller's environment without ``GIT_*`` and with user/system config switched off."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
    )
    return env


def git_argv(*args: str) -> list[str]:
    return ["git", *GIT_CONFIG, *args]


def _run(
    repo: Path, args: tuple[str, ...], stdin: bytes | None
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            git_argv(*args),
            cwd=repo,
            env=git_env(),
            input=stdin,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise GateUsageError("git is not installed or not on PATH") from None
    except NotADirectoryError:
        raise GateUsageError(f"{repo} is not a directory") from None
    except subprocess.TimeoutExpired:
        raise GateUsageError(f"git {args[0]} timed out after {GIT_TIMEOUT_S} s") from None


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run git in ``repo``; its stdout. GateUsageError when git fails or is missing."""
    done = _run(repo, args, stdin)
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GateUsageError(
            f"git {args[0]} failed: {message[-1] if message else f'exit {done.returncode}'}"
        )
    return done.stdout


def git_ok(repo: Path, *args: str) -> bool:
    """Whether git exits 0 (for predicates such as ``merge-base --is-ancestor``)."""
    try:
        return _run(repo, args, None).returncode == 0
    except GateUsageError:
        return False


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit id ``ref`` names in ``repo``; GateUsageError if it names no commit."""
    if not ref or ref.startswith("-"):
        raise GateUsageError(f"invalid ref {ref!r}")
    if not repo.is_dir():
        raise GateUsageError(f"{repo} is not a directory")
    try:
        git(repo, "rev-parse", "--git-dir")
    except GateUsageError:
        raise GateUsageError(f"{repo} is not a git repository") from None
    try:
        out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except GateUsageError:
        raise GateUsageError(
            f"ref {ref!r} does not name a commit in {repo} "
            "(with actions/checkout, fetch the history: fetch-depth: 0)"
        ) from None
    return out.decode("ascii").strip()
