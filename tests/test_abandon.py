"""``harness abandon``: the only way a batch branch is deleted, and only after the decision is
recorded (issue 11 §3: unmerged work is never lost as a side effect)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from harness.orchestrate.demo import make_repo
from harness.verify.canonical import parse_canonical

from .test_orchestrate_cli import _harness

PLAN = textwrap.dedent(
    """
    [plan]
    name = "ab"
    [[task]]
    id = "good"
    role = "coder"
    prompt = "good"
    scope = ["good.txt"]
    gates = [{{ name = "ok", command = ["{python}", "-c", "pass"] }}]
    [[task.edits]]
    path = "good.txt"
    content = "good\\n"
    [[task]]
    id = "bad"
    role = "writer"
    prompt = "bad"
    scope = ["bad.txt"]
    gates = [{{ name = "ok", command = ["{python}", "-c", "raise SystemExit(1)"] }}]
    [[task.edits]]
    path = "bad.txt"
    content = "bad\\n"
    """
).format(python=sys.executable)


def _branches(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "branch", "--format=%(refname:short)"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return sorted(line for line in out.splitlines() if line.startswith("harness/"))


def test_abandon_records_the_decision_then_deletes_only_that_branch(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert _harness("init", cwd=repo).returncode == 0
    ran = _harness("run", tmp_path / "plan.toml", "--run", "r1", cwd=repo)
    assert ran.returncode == 1, ran.stderr  # "bad" failed its gate
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    records = [parse_canonical(line) for line in audit.read_bytes().splitlines()]
    batch_of = {r["body"]["tasks"][0]: r["body"]["batch"] for r in records
                if r["kind"] == "agent.spawn"}  # fmt: skip
    bad, good = batch_of["bad"], batch_of["good"]
    assert _branches(repo) == sorted([f"harness/r1/{bad}", f"harness/r1/{good}"])
    # the failed batch's work is still there, on its branch
    shown = subprocess.run(["git", "-C", str(repo), "show", f"harness/r1/{bad}:bad.txt"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert shown.stdout == "bad\n"

    merged = _harness("abandon", "--run", "r1", "--batch", good, "--reason", "x", cwd=repo)
    assert merged.returncode == 1 and "merged into HEAD" in merged.stderr
    unknown = _harness("abandon", "--run", "r1", "--batch", "b0099", "--reason", "x", cwd=repo)
    assert unknown.returncode == 2 and "no batch 'b0099'" in unknown.stderr

    done = _harness("abandon", "--run", "r1", "--batch", bad, "--reason", "wrong idea",
                    "--operator", "alice", cwd=repo)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _branches(repo) == [f"harness/r1/{good}"]
    control = repo / ".harness" / "runs" / "r1" / "control.jsonl"
    (command,) = [parse_canonical(line) for line in control.read_bytes().splitlines()]
    args = command["body"]["args"]
    assert command["body"]["command"] == "abandon" and command["body"]["operator"] == "alice"
    assert args["batch"] == bad and args["reason"] == "wrong idea"
    assert args["tip"] in done.stdout and args["branch"] == f"harness/r1/{bad}"
    again = _harness("abandon", "--run", "r1", "--batch", bad, "--reason", "x", cwd=repo)
    assert again.returncode == 1 and "no longer exists" in again.stderr
    # the decision names the tip, so the work can still be recovered
    recovered = subprocess.run(["git", "-C", str(repo), "show", f"{args['tip']}:bad.txt"],
                               capture_output=True, text=True, check=True)  # fmt: skip
    assert recovered.stdout == "bad\n"
