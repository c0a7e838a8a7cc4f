"""`harness` and `harness-verify` behave like the tools their users know (issue 15, part 3):
no tracebacks, `--version`, usage errors on one stderr line with exit 2, unknown run ids
refused everywhere, a run that did not complete exits non-zero and says why.

Real subprocesses through the console entry points (``python -m``), real git."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import __version__
from harness.orchestrate.demo import make_repo


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and worktrees go to per-test XDG folders, never the real ~/.config or ~/.cache."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _run(module: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300, env=dict(os.environ),
    )  # fmt: skip


def harness(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run("harness.cli", *args, cwd=cwd)


def verifier(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run("harness.verify.cli", *args, cwd=cwd)


def assert_usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one ``error:`` line on stderr naming the problem, no traceback, no stdout."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr.replace("error:", "")
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert done.stdout == ""


PLAN = textwrap.dedent(
    """
    [plan]
    name = "cli"
    [[task]]
    id = "good"
    role = "coder"
    prompt = "Add a module."
    gates = [{{ name = "ok", command = ["{python}", "-c", "import good"] }}]
    [[task.edits]]
    path = "good.py"
    content = "x = 1\\n"
    [[task]]
    id = "gateless"
    role = "writer"
    prompt = "Write notes."
    [[task.edits]]
    path = "NOTES.md"
    content = "notes\\n"
    """
).format(python=sys.executable)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An initialised repository (keys in the per-test XDG folder) with one run, ``r1``."""
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert harness("init", cwd=repo).returncode == 0
    return repo


def test_versions(tmp_path: Path) -> None:
    for flag in ("--version", "-v"):
        done = harness(flag, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, f"harness {__version__}\n"), done.stderr
        done = verifier(flag, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, f"harness-verify {__version__}\n"), done.stderr


def test_malformed_run_id_is_a_usage_error_not_a_traceback(repo: Path) -> None:
    done = harness("run", repo.parent / "plan.toml", "--run", "bad id!", cwd=repo)
    assert_usage_error(done, "invalid run id 'bad id!'")
    assert not (repo / ".harness" / "runs" / "bad id!").exists()


def test_demo_into_a_used_folder_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "D"
    first = harness("demo", "--dir", folder, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = harness("demo", "--dir", folder, cwd=tmp_path)
    assert_usage_error(again, "--dir", str(folder), "not an empty folder")


def test_unknown_run_ids_are_errors_everywhere(repo: Path) -> None:
    runs = repo / ".harness" / "runs"
    cases = (
        ("stop", "--run", "nope"),
        ("status", "--run", "nope"),
        ("export", repo.parent / "b.tar", "--run", "nope"),
        ("export", repo.parent / "pack", "--eu-ai-act", "--run", "nope"),
        ("receipt", "calc.py", "--run", "nope"),
    )
    for args in cases:
        done = harness(*args, cwd=repo)
        assert_usage_error(done, "no run 'nope'")
        assert not (runs / "nope").exists(), args  # no phantom run
    assert not (repo.parent / "b.tar").exists() and not (repo.parent / "pack").exists()
    assert harness("status", cwd=repo).stdout == "no runs\n"


def test_export_never_creates_missing_parent_folders(repo: Path) -> None:
    ran = harness("run", repo.parent / "plan.toml", "--run", "r1", cwd=repo)
    assert ran.returncode == 1  # one task has no gates
    out = repo.parent / "missing" / "b.tar"
    assert_usage_error(harness("export", out, cwd=repo), str(out.parent), "does not exist")
    assert not out.parent.exists()


def test_run_that_did_not_complete_exits_1_and_says_why(repo: Path) -> None:
    done = harness("run", repo.parent / "plan.toml", "--run", "r1", cwd=repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "warning: task 'gateless' has no gates: it can never be done" in done.stderr
    assert "did not complete: 1 of 2 task(s) not done" in done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines()[1:])
    assert lines["good"] == "done"
    assert lines["gateless"].startswith("failed: ") and "gate" in lines["gateless"]
    status = harness("status", "--run", "r1", cwd=repo)
    assert status.returncode == 0 and "gateless" in status.stdout
