"""Issue 10 §1: the sandbox opt-out is recorded, shown by the verifier, and a trust policy can
require a sandbox.

Two real runs of the same plan with the scripted agent: one sandboxed with bubblewrap, one with
the operator's explicit opt-out (``harness run --no-sandbox``). The verifier reports, per run,
how its batches were confined, and ``--require-sandbox`` (or ``[require] sandbox = true`` in a
policy file) turns the opt-out run's verdict into "not trusted by policy" (exit 3).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import _gate, make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys, init_keys
from harness.verify.policy import PolicyError, load_policy_file

BIN = Path(sys.executable).parent
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@dataclass(frozen=True)
class Made:
    bundle: Path
    keys: OperatorKeys


def _made(folder: Path, *, opt_out: bool) -> Made:
    repo = folder / "repo"
    make_repo(repo)
    keys = init_keys(folder / "keys")
    plan = {
        "plan": {"name": "confined", "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": "edit",
                "role": "writer",
                "prompt": "Edit the changelog.",
                "scope": ["CHANGELOG.md"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": [{"path": "CHANGELOG.md", "content": "# changes\n"}],
            }
        ],
    }
    Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=folder / "state",
        keys=keys,
        run_id="run-1",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date="2026-01-01T00:00:00+00:00",
        sandbox=Settings(opt_out=opt_out),
        work_root=folder / "work",
    ).run()
    return Made(export_bundle(folder / "state", folder / "bundle.tar", keys).path, keys)


def _verify(made: Made, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "harness-verify"), str(made.bundle), "--trusted-key", made.keys.key_id, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def unconfined(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return _made(tmp_path_factory.mktemp("optout"), opt_out=True)


@needs_bwrap
def test_sandboxed_run_is_shown_and_meets_the_requirement(tmp_path: Path) -> None:
    made = _made(tmp_path, opt_out=False)
    done = _verify(made, "--format", "json", "--require-sandbox")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["sandboxes"] == [
        {"kind": "bwrap", "opt_out": False, "run": "run-1", "spawns": 1, "unsandboxed_batches": []}
    ]
    text = _verify(made).stdout
    assert "sandbox:       run run-1: bwrap for all 1 batches" in text


def test_opt_out_is_shown_and_passes_without_a_requirement(unconfined: Made) -> None:
    done = _verify(unconfined, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    (summary,) = json.loads(done.stdout)["sandboxes"]
    assert summary["kind"] == "none"
    assert summary["opt_out"] is True
    assert len(summary["unsandboxed_batches"]) == summary["spawns"] == 1
    text = _verify(unconfined).stdout
    assert "NONE for 1 of 1 batches (operator opt-out recorded)" in text


def test_require_sandbox_refuses_trust_for_an_opt_out_run(unconfined: Made) -> None:
    done = _verify(unconfined, "--require-sandbox", "--format", "json")
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "verified-untrusted"
    assert report["failure"]["check"] == "trust"
    assert "requires a sandbox" in report["failure"]["reason"]
    assert "opt-out" in report["failure"]["reason"]


def test_policy_file_can_require_a_sandbox(unconfined: Made, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[trust]\nkeys = ["{unconfined.keys.key_id}"]\n\n[require]\nsandbox = true\n'
    )
    assert load_policy_file(policy).require_sandbox is True
    done = subprocess.run(
        [str(BIN / "harness-verify"), str(unconfined.bundle), "--policy", str(policy)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    policy.write_text(
        f'[trust]\nkeys = ["{unconfined.keys.key_id}"]\n\n[require]\nsandbox = false\n'
    )
    assert load_policy_file(policy).require_sandbox is False


@pytest.mark.parametrize(
    "text, message",
    [
        ('[require]\nsandbox = "yes"\n\n', "require.sandbox must be true or false"),
        ("[require]\nsandboxes = true\n\n", "unknown policy entries: require.sandboxes"),
        ('require = "sandbox"\n', "require must be a table"),
    ],
)
def test_policy_requirement_is_parsed_strictly(tmp_path: Path, text: str, message: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(text + '[trust]\nkeys = ["' + "a" * 64 + '"]\n')
    with pytest.raises(PolicyError, match=message):
        load_policy_file(policy)
