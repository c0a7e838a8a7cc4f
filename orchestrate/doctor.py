"""``harness doctor``: can this machine run agents safely, and is the key layout sound?

Each check is ``ok``, ``fail`` or ``info`` (informational: never fails the command). Checks:

* ``git``: ``git --version`` is at least 2.31 (``rev-parse --path-format``, worktrees);
* ``sandbox``: bubblewrap actually builds a sandbox here (it is run once, with the namespaces
  every agent gets), not merely found on PATH;
* ``keys``: the keys folder exists, is a folder of mode 0700 owned by us, ``signing.key`` and
  ``hmac.key`` are regular files (no symlinks) of mode 0600, and the folder is not reachable
  from an agent's view (``harness.orchestrate.state.key_layout_problem``);
* ``cli:<name>``: each real agent CLI the adapters know: found on PATH and its ``--version``
  (info only: a missing CLI is not an error unless a plan uses it).

The command exits 1 when any check fails, 0 otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from harness.receipts.keys import HMAC_KEY_FILE, SIGNING_KEY_FILE

from .sandbox import Settings, probe
from .state import key_layout_problem, keys_dir_for

__all__ = ["CLIS", "MIN_GIT", "Check", "run_checks"]

MIN_GIT: Final = (2, 31)
CLIS: Final = ("claude", "codex", "gemini", "aider", "goose", "opencode")
_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class Check:
    name: str
    status: Literal["ok", "fail", "info"]
    detail: str


def _git() -> Check:
    git = shutil.which("git")
    if git is None:
        return Check("git", "fail", "git not found on PATH")
    try:
        out = subprocess.run(
            [git, "--version"], capture_output=True, text=True, check=False, timeout=_TIMEOUT_S
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("git", "fail", f"{git} --version failed: {exc}")
    found = re.search(r"(\d+)\.(\d+)", out)
    if found is None:
        return Check("git", "fail", f"cannot read a version from {out!r}")
    version = (int(found.group(1)), int(found.group(2)))
    need = ".".join(map(str, MIN_GIT))
    if version < MIN_GIT:
        return Check("git", "fail", f"{out}: at least git {need} is needed")
    return Check("git", "ok", out)


def _sandbox(settings: Settings) -> Check:
    probe.cache_clear()
    support = probe(settings.bwrap)
    if not support.available:
        return Check(
            "sandbox",
            "fail",
            f"{support.reason}; real agent CLIs will refuse to run (or use --no-sandbox, "
            "recorded in the evidence)",
        )
    return Check("sandbox", "ok", f"{support.version or 'bwrap'} at {support.executable}")


def _mode_problem(path: Path, want: int, what: str) -> str | None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    kind_ok = stat.S_ISDIR(info.st_mode) if what == "folder" else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        return f"{path} is not a {what}"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"{path} is owned by uid {info.st_uid}, not by us"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return f"{path} has mode {mode:o}: others can read it (want {want:o})"
    return None


def _keys(repo: Path, keys: Path | None) -> Check:
    folder = keys_dir_for(repo, keys)
    if not folder.exists():
        return Check("keys", "fail", f"no keys at {folder} (run `harness init`, or pass --keys)")
    problems = [
        problem
        for problem in (
            _mode_problem(folder, 0o700, "folder"),
            _mode_problem(folder / SIGNING_KEY_FILE, 0o600, "file"),
            _mode_problem(folder / HMAC_KEY_FILE, 0o600, "file"),
            key_layout_problem(folder, repo),
        )
        if problem
    ]
    if problems:
        return Check("keys", "fail", "; ".join(problems))
    return Check("keys", "ok", f"{folder}: modes 0700/0600, outside every agent's view")


def _cli(name: str) -> Check:
    found = shutil.which(name)
    if found is None:
        return Check(f"cli:{name}", "info", "not on PATH")
    try:
        done = subprocess.run(
            [found, "--version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        version = (done.stdout.strip() or done.stderr.strip()).splitlines()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(f"cli:{name}", "info", f"{found}: --version failed ({exc})")
    return Check(f"cli:{name}", "info", f"{found}: {version[0] if version else 'no version'}")


def run_checks(
    repo: Path,
    *,
    keys: Path | None = None,
    settings: Settings | None = None,
    clis: Sequence[str] = CLIS,
) -> list[Check]:
    """Every check, in a fixed order."""
    settings = settings or Settings()
    repo = repo.absolute()
    return [_git(), _sandbox(settings), _keys(repo, keys), *(_cli(name) for name in clis)]
