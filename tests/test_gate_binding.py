"""Issue 9 §2: a changed file is covered only by evidence of exactly that change.

Each test is an attack that passed the gate before format 2 (content-only comparison against the
latest merged write of the path, whatever its mode, its parent or its repository), run with
real git and real runtime runs, through the gate's library entry and its CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate import git as hgit
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import PROJECT, _gate, make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys, init_keys
from harness.verify.gate import (
    CONTENT_DIFFERS,
    MODE_DIFFERS,
    OTHER_HISTORY,
    PARENT_DIFFERS,
    GateReport,
    run_gate,
)
from harness.verify.policy import TrustPolicy

BIN = Path(sys.executable).parent
DATE = "2026-01-01T00:00:00+00:00"
NEW_CALC = PROJECT["calc.py"] + "\n\ndef mul(a, b):\n    return a * b\n"


def _run(
    repo: Path, state: Path, keys: OperatorKeys, run_id: str, edits: list[dict[str, Any]]
) -> None:
    plan = {
        "plan": {"name": run_id, "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": f"{run_id}-task",
                "role": "writer",
                "prompt": "Make the change.",
                "scope": ["**"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": edits,
            }
        ],
    }
    summary = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=state,
        keys=keys,
        run_id=run_id,
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date=DATE,
    ).run()
    assert summary.merged, f"run {run_id} merged nothing: {summary.states}"


@dataclass(frozen=True)
class Made:
    repo: Path
    base: str
    bundle: Path
    keys: OperatorKeys
    state: Path

    @property
    def pins(self) -> TrustPolicy:
        return TrustPolicy(frozenset({self.keys.key_id}), "--trusted-key")

    def gate(self, base: str | None = None, repo: Path | None = None) -> GateReport:
        return run_gate(repo or self.repo, base or self.base, "HEAD", self.bundle, self.pins)


def _made(folder: Path, edits: list[dict[str, Any]] | None = None) -> Made:
    repo = folder / "repo"
    make_repo(repo)
    base = hgit.head(repo)
    keys = init_keys(folder / "keys")
    state = folder / "state"
    _run(repo, state, keys, "run-1", edits or [{"path": "calc.py", "content": NEW_CALC}])
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    return Made(repo, base, bundle, keys, state)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return _made(tmp_path_factory.mktemp("binding"))


@pytest.fixture
def clone(made: Made, tmp_path: Path) -> Path:
    target = tmp_path / "clone"
    shutil.copytree(made.repo, target, symlinks=True)
    return target


def _verdict(report: GateReport, path: str) -> tuple[str, str]:
    entry = next(entry for entry in report.files if entry.path == path)
    return entry.verdict, entry.reason


def test_honest_change_is_covered(made: Made) -> None:
    report = made.gate()
    assert report.passed, report.reason
    assert _verdict(report, "calc.py")[0] == "covered"


def test_chmod_of_an_attested_file_is_not_covered(made: Made, clone: Path) -> None:
    os.chmod(clone / "calc.py", 0o755)
    hgit.commit_all(clone, "make it executable", date=DATE)
    report = made.gate(repo=clone)
    verdict, reason = _verdict(report, "calc.py")
    assert verdict == "uncovered"
    assert reason.startswith(MODE_DIFFERS)
    assert "100755 at head, 100644 attested" in reason


def test_symlink_whose_target_text_is_the_attested_content_is_not_covered(
    made: Made, clone: Path
) -> None:
    (clone / "calc.py").unlink()
    os.symlink(NEW_CALC, clone / "calc.py")  # the blob of the link is exactly NEW_CALC
    hgit.commit_all(clone, "swap for a link", date=DATE)
    report = made.gate(repo=clone)
    verdict, reason = _verdict(report, "calc.py")
    assert verdict == "uncovered"
    assert reason.startswith(MODE_DIFFERS)
    assert "120000 at head" in reason


def test_old_bundle_reapplied_after_a_manual_fix_is_not_covered(made: Made, clone: Path) -> None:
    # A maintainer fixes calc.py by hand on the base branch; the attacker's pull request
    # brings back the agent's old output, with the old (genuine) bundle.
    (clone / "calc.py").write_text("def add(a, b):\n    return a + b  # fixed\n")
    hgit.commit_all(clone, "manual fix", date=DATE)
    fixed_base = hgit.head(clone)
    (clone / "calc.py").write_text(NEW_CALC)
    hgit.commit_all(clone, "re-apply the agent's old write", date=DATE)
    report = made.gate(base=fixed_base, repo=clone)
    verdict, reason = _verdict(report, "calc.py")
    assert verdict == "uncovered"
    assert reason.startswith(PARENT_DIFFERS)


def test_same_path_in_an_unrelated_repository_is_not_covered(made: Made, tmp_path: Path) -> None:
    other = tmp_path / "unrelated"
    hgit.init_repo(other)
    for name, content in PROJECT.items():
        (other / name).parent.mkdir(parents=True, exist_ok=True)
        (other / name).write_text(content)
    hgit.commit_all(other, "someone else's project", date="2025-06-01T00:00:00+00:00")
    base = hgit.head(other)
    (other / "calc.py").write_text(NEW_CALC)  # exactly the attested transition X -> Y
    hgit.commit_all(other, "copy the change", date=DATE)
    report = made.gate(base=base, repo=other)
    verdict, reason = _verdict(report, "calc.py")
    assert verdict == "uncovered"
    assert reason.startswith(OTHER_HISTORY)


def test_a_path_written_in_two_runs_is_covered_through_its_history(tmp_path: Path) -> None:
    made = _made(tmp_path)
    third = NEW_CALC + "\n\ndef sub(a, b):\n    return a - b\n"
    _run(made.repo, made.state, made.keys, "run-2", [{"path": "calc.py", "content": third}])
    bundle = export_bundle(made.state, tmp_path / "both.tar", made.keys).path
    report = run_gate(made.repo, made.base, "HEAD", bundle, made.pins)
    assert report.passed, report.reason
    entry = next(entry for entry in report.files if entry.path == "calc.py")
    assert entry.run == "run-2"  # the latest write vouches for the head state
    # The first run's bundle alone stops at NEW_CALC: the head is the second run's output.
    assert (
        _verdict(run_gate(made.repo, made.base, "HEAD", made.bundle, made.pins), "calc.py")[1]
        == CONTENT_DIFFERS
    )


def test_cli_reports_the_mode_change(made: Made, clone: Path) -> None:
    os.chmod(clone / "calc.py", 0o755)
    hgit.commit_all(clone, "make it executable", date=DATE)
    done = subprocess.run(
        [str(BIN / "harness-verify"), "gate", "--base", made.base, "--trusted-key",
         made.keys.key_id, str(made.bundle)],
        cwd=clone, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert MODE_DIFFERS in done.stdout


def test_the_gate_reads_the_bundle_once_and_judges_the_bytes_it_verified(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 9 §2: no second read (before: verify, then reopen the path and fold it again, so
    a bundle swapped in between was judged unverified)."""
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == made.bundle:
            opened.append(str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    report = made.gate()
    assert report.passed, report.reason
    assert opened == [str(made.bundle)]
