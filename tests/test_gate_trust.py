"""Issue 9 §1: the gate's trust never comes from anything the change under test can alter.

The adversary is a pull-request author with no operator key: they run a harness of their own
(their own keys, a genuine, valid bundle) whose agent writes a malicious edit *and* a policy
file pinning their key, and they try every way of making the gate pick that key up: a policy
file in the checkout, a key file in the checkout that ``--trusted-key`` names, an empty
``trusted-key`` in the GitHub Action, a policy planted in a parent folder. Every one of these
passed (exit 0) before decision 0016; each test here runs the real CLI, as CI does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.orchestrate import git as hgit
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import _gate, make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys, init_keys
from tests.action_steps import action_step

BIN = Path(sys.executable).parent
MALICIOUS = "def add(a, b):\n    return a + b  # and send ~/.ssh to evil.example\n"


@dataclass(frozen=True)
class Attack:
    repo: Path
    base: str
    bundle: Path
    attacker: OperatorKeys
    operator: OperatorKeys


def _commit(repo: Path, message: str) -> str:
    hgit.commit_all(repo, message, date="2026-01-01T00:00:00+00:00")
    return hgit.head(repo)


def _attack(folder: Path, *, base_files: dict[str, str] | None = None) -> Attack:
    """A repository whose base may hold ``base_files`` (e.g. the operator's real policy), and
    a genuine run of the attacker's own harness that edits calc.py maliciously and writes a
    policy file and a key file pinning the attacker's key."""
    repo = folder / "repo"
    make_repo(repo)
    operator = init_keys(folder / "operator-keys")
    attacker = init_keys(folder / "attacker-keys")
    for name, text in (base_files or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        text = text.replace("OPERATOR", operator.key_id).replace("SIGNER", attacker.key_id)
        (repo / name).write_text(text, encoding="utf-8")
    base = _commit(repo, "base with the operator's files") if base_files else hgit.head(repo)
    policy = f'[trust]\nkeys = ["{attacker.key_id}"]\n'
    plan = {
        "plan": {"name": "attack", "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": "evil",
                "role": "writer",
                "prompt": "Make the change.",
                "scope": ["**"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": [
                    {"path": "calc.py", "content": MALICIOUS},
                    {"path": "harness-verify.toml", "content": policy},
                    {
                        "path": "keys/signing.vkey",
                        "content": attacker.note_signer().verifier_key() + "\n",
                    },
                ],
            }
        ],
    }
    state = folder / "attacker-state"
    Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=state,
        keys=attacker,
        run_id="attack-run",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date="2026-01-01T00:00:00+00:00",
    ).run()
    bundle = export_bundle(state, folder / "bundle.tar", attacker).path
    assert (repo / "harness-verify.toml").exists(), "the attacker's task did not merge"
    return Attack(repo, base, bundle, attacker, operator)


def _gate_cli(
    attack: Attack, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN / "harness-verify"),
            "gate",
            "--base",
            attack.base,
            "--head",
            "HEAD",
            *args,
            str(attack.bundle),
        ],
        cwd=cwd or attack.repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def attack(tmp_path: Path) -> Attack:
    return _attack(tmp_path)


def test_the_attackers_bundle_is_genuine(attack: Attack) -> None:
    """Control: pinned explicitly, the attacker's bundle does cover the change (so every
    refusal below is about trust, not about a broken bundle)."""
    done = _gate_cli(attack, "--trusted-key", attack.attacker.key_id)
    assert done.returncode == 0, done.stdout + done.stderr


def test_policy_in_the_checkout_pins_nothing(attack: Attack) -> None:
    # The head (and working tree) holds harness-verify.toml pinning the attacker: ignored.
    done = _gate_cli(attack)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "not pinned" in done.stdout
    assert "--trusted-key" in done.stdout  # the message says how to pin


def test_policy_in_pyproject_of_the_checkout_pins_nothing(tmp_path: Path) -> None:
    attack = _attack(tmp_path)
    (attack.repo / "harness-verify.toml").unlink()
    (attack.repo / "pyproject.toml").write_text(
        f'[tool.harness-verify.trust]\nkeys = ["{attack.attacker.key_id}"]\n', encoding="utf-8"
    )
    done = _gate_cli(attack)
    assert done.returncode == 3, done.stdout + done.stderr


def test_base_ref_policy_is_used_and_the_heads_is_not(tmp_path: Path) -> None:
    attack = _attack(tmp_path, base_files={"harness-verify.toml": '[trust]\nkeys = ["OPERATOR"]\n'})
    # The head re-pins the policy to the attacker; the gate reads the base's: operator only.
    assert attack.attacker.key_id in (attack.repo / "harness-verify.toml").read_text()
    done = _gate_cli(attack, "--format", "json")
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{attack.base[:12]}:harness-verify.toml" in done.stdout
    assert "not among the pinned keys" in done.stdout


def test_base_ref_policy_pins_a_signer_committed_on_the_base(tmp_path: Path) -> None:
    """The default source works: the key committed on the base pins the bundle's signer."""
    attack = _attack(tmp_path, base_files={"harness-verify.toml": '[trust]\nkeys = ["SIGNER"]\n'})
    done = _gate_cli(attack, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'"trusted_by": "{attack.base[:12]}:harness-verify.toml"' in done.stdout


def test_key_file_in_the_checkout_is_read_from_the_base(tmp_path: Path) -> None:
    # The base holds the operator's key file; the attacker's run overwrote it with theirs.
    attack = _attack(tmp_path, base_files={"keys/signing.vkey": "OPERATOR\n"})
    assert (
        attack.attacker.note_signer().verifier_key()
        in (attack.repo / "keys/signing.vkey").read_text()
    )
    for value in ("keys/signing.vkey", str(attack.repo / "keys" / "signing.vkey")):
        done = _gate_cli(attack, "--trusted-key", value)
        assert done.returncode == 3, (value, done.stdout + done.stderr)


def test_key_file_only_in_the_head_is_refused(attack: Attack) -> None:
    done = _gate_cli(attack, "--trusted-key", "keys/signing.vkey")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "base commit has no keys/signing.vkey" in done.stderr


def test_link_out_of_the_checkout_into_it_is_read_from_the_base(
    attack: Attack, tmp_path: Path
) -> None:
    # A path outside the checkout that resolves into it is the checkout's file too.
    link = tmp_path / "outside.vkey"
    link.symlink_to(attack.repo / "keys" / "signing.vkey")
    done = _gate_cli(attack, "--trusted-key", str(link))
    assert done.returncode == 2, done.stdout + done.stderr


def test_policy_file_in_the_checkout_given_explicitly_is_read_from_the_base(
    attack: Attack,
) -> None:
    done = _gate_cli(attack, "--policy", "harness-verify.toml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "base commit has no harness-verify.toml" in done.stderr


def test_key_file_outside_the_checkout_is_read_from_disk(attack: Attack, tmp_path: Path) -> None:
    pinned = tmp_path / "pinned.vkey"
    pinned.write_text(attack.attacker.note_signer().verifier_key() + "\n", encoding="utf-8")
    done = _gate_cli(attack, "--trusted-key", str(pinned))
    assert done.returncode == 0, done.stdout + done.stderr


def test_bundle_mode_discovers_nothing(attack: Attack, tmp_path: Path) -> None:
    """Outside a repository the old discovery walked up to /: a file planted in any parent
    folder pinned a key. Inside one, the checkout's own policy did."""
    planted = tmp_path / "downloads"
    (planted / "deep").mkdir(parents=True)
    (planted / "harness-verify.toml").write_text(
        f'[trust]\nkeys = ["{attack.attacker.key_id}"]\n', encoding="utf-8"
    )
    for cwd in (planted / "deep", attack.repo):
        done = subprocess.run(
            [str(BIN / "harness-verify"), str(attack.bundle)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 3, (cwd, done.stdout + done.stderr)
    receipt = next(iter(sorted(attack.repo.glob("*.receipt.json"))), None)
    assert receipt is None  # receipts are checked with explicit pins too: see test_receipts_flow


# ---- the GitHub Action's own step, run from action.yml ------------------------------------


def _run_action(
    attack: Attack, keys: str, tmp_path: Path, base_policy: str = "false"
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HV_BUNDLE": str(attack.bundle),
        "HV_BASE": attack.base,
        "HV_HEAD": "HEAD",
        "HV_KEYS": keys,
        "HV_BASE_POLICY": base_policy,
        "HV_SARIF": "",
        "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
    }
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-c", action_step("Run the gate")],
        cwd=attack.repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_action_with_an_empty_trusted_key_fails(attack: Attack, tmp_path: Path) -> None:
    # The documented ${{ vars.X }} is empty on fork pull requests: the step must fail.
    for keys in ("", "\n  \n"):
        done = _run_action(attack, keys, tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "no pinned signer" in done.stderr


def test_action_base_policy_reads_the_base_not_the_head(attack: Attack, tmp_path: Path) -> None:
    # Opted in to the base ref's policy: the base has none (the head's pins the attacker).
    done = _run_action(attack, "", tmp_path, base_policy="true")
    assert done.returncode == 3, done.stdout + done.stderr


def test_action_with_a_pin_runs_the_gate(attack: Attack, tmp_path: Path) -> None:
    done = _run_action(attack, f"  {attack.attacker.key_id}  \n", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    sarif = tmp_path / "runner-temp" / "harness-gate.sarif"  # outside the checkout
    assert sarif.is_file()
    report = tmp_path / "runner-temp" / "harness-gate.json"
    assert (tmp_path / "github-output").read_text(encoding="utf-8") == (
        f"sarif={sarif}\nreport={report}\nexit-code=0\npassed=true\n"
    )
    assert "harness-verify gate" in (tmp_path / "summary.md").read_text(encoding="utf-8")
