"""``harness-verify compare``: a run's bundle against its replay's (docs/spec/compare.md).

Real runs: the same small plan run live and then replayed from its journal in a second state
folder (same keys, same run id, the logical clock), exported and compared; then runs that
really differ (another answer, another gate verdict) and bundles that do not verify.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.replay import Journal
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.verify import cli
from harness.verify.compare import (
    CompareError,
    compare_bundles,
    decisions,
)
from harness.verify.policy import TrustPolicy
from harness.verify.report import ExitCode

from .evidence_helpers import make_keys

DATE = "2026-01-01T00:00:00+00:00"
KEYS = make_keys(11)
PINS = TrustPolicy(frozenset({KEYS.key_id}), "test")


def _gate(passes: bool) -> dict[str, Any]:
    return {
        "name": "check",
        "command": [sys.executable, "-c", f"raise SystemExit({0 if passes else 1})"],
        "timeout_s": 60,
    }


def _plan(greeting: str = "hello", notes_gate_passes: bool = True) -> dict[str, Any]:
    return {
        "plan": {"name": "compare"},
        "task": [
            {
                "id": "greet",
                "role": "coder",
                "prompt": "Write the greeting.",
                "scope": ["greeting.txt"],
                "tools": ["edit"],
                "gates": [_gate(True)],
                "edits": [{"path": "greeting.txt", "content": greeting + "\n"}],
            },
            {
                "id": "notes",
                "role": "writer",
                "prompt": "Write the notes.",
                "depends": ["greet"],
                "scope": ["notes.md"],
                "tools": ["edit"],
                "gates": [_gate(notes_gate_passes)],
                "edits": [{"path": "notes.md", "content": "notes\n"}],
            },
        ],
    }


def _run(
    root: Path, plan: dict[str, Any], journal: Journal, base: Path, keys: OperatorKeys = KEYS
) -> Path:
    """Run ``plan`` on a copy of the repository ``base`` (a replay runs on the same commit)."""
    repo = root / "repo"
    shutil.copytree(base, repo, symlinks=True)
    runtime = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="same",
        clock=LogicalClock(),
        git_date=DATE,
        grace_s=0.5,
        journal=journal,
        capabilities=DEFAULT_MATRIX,
    )
    runtime.run()
    return export_bundle(repo / ".harness", root / "bundle.tar", keys).path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """original (live), its replay, a run with another answer, a run whose gate fails."""
    base = tmp_path_factory.mktemp("compare")
    repo = base / "base-repo"
    make_repo(repo)
    journal = base / "journal"
    return {
        "original": _run(base / "original", _plan(), Journal(journal, "live"), repo),
        "replay": _run(base / "replay", _plan(), Journal(journal, "replay"), repo),
        "other-answer": _run(base / "other", _plan("bonjour"), Journal(base / "j2", "live"), repo),
        "gate-fails": _run(
            base / "gate", _plan(notes_gate_passes=False), Journal(base / "j3", "live"), repo
        ),
    }


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        cli.main(list(args))
    out, err = capsys.readouterr()
    code = stop.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_a_replay_is_the_same_run(
    bundles: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    comparison = compare_bundles(
        bundles["original"], bundles["replay"], pins=PINS, hmac_master=KEYS.hmac_master
    )
    assert comparison.same
    (run,) = comparison.runs
    assert run.original_run == run.replay_run == "same"
    assert {store.store for store in run.stores} == {"lineage", "replay"}
    assert all(store.original_root == store.replay_root for store in run.stores)
    assert all(store.original_records > 0 for store in run.stores)
    assert run.decisions[0] == run.decisions[1] > 0
    code, out, err = _cli(
        capsys,
        "compare",
        str(bundles["original"]),
        str(bundles["replay"]),
        "--trusted-key",
        KEYS.key_id,
    )
    assert (code, err) == (0, "")
    assert "run same: same" in out and out.endswith("same run\n")


def test_another_answer_is_found_in_the_lineage_store(
    bundles: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    comparison = compare_bundles(bundles["original"], bundles["other-answer"], pins=PINS)
    (run,) = comparison.runs
    assert not comparison.same and comparison.exit_code == ExitCode.DIFFERENT
    difference = run.difference
    assert difference is not None and difference.where == "lineage"
    # the first write of greeting.txt is where the runs part: its content digest
    assert difference.member.startswith("record.body.")
    assert difference.original != difference.replay
    code, out, _ = _cli(
        capsys, "compare", str(bundles["original"]), str(bundles["other-answer"]),
        "--trusted-key", KEYS.key_id, "--format", "json",
    )  # fmt: skip
    assert code == 5
    document = json.loads(out)
    assert document["same"] is False
    first = document["runs"][0]["first_difference"]
    assert first["where"] == "lineage" and first["member"] == difference.member
    assert document["runs"][0]["stores"]["lineage"]["same"] is False


def test_a_different_gate_verdict_is_a_different_decision(bundles: dict[str, Path]) -> None:
    comparison = compare_bundles(bundles["original"], bundles["gate-fails"], pins=PINS)
    (run,) = comparison.runs
    # the same writes and the same model answers: only a decision tells the two runs apart
    assert all(store.same for store in run.stores)
    assert not comparison.same and comparison.exit_code == ExitCode.DIFFERENT
    difference = run.difference
    assert difference is not None and difference.where == "decisions"
    assert (difference.member, difference.original, difference.replay) == (
        "decision.exit_code",
        0,
        1,
    )
    ours = _audit_decisions(bundles["original"])
    theirs = _audit_decisions(bundles["gate-fails"])
    assert (
        ours[difference.index]["kind"] == "gate.result"
        and ours[difference.index]["task"] == "notes"
    )
    assert theirs[difference.index]["passed"] is False
    assert difference.original_seq is not None and difference.replay_seq is not None


def _audit_decisions(bundle: Path) -> list[dict[str, Any]]:
    from harness.verify.bundle import verify_bundle_contents
    from harness.verify.records import parse_record_line

    contents = verify_bundle_contents(
        bundle, keep=lambda name: name.endswith("audit.jsonl"), pins=PINS
    )
    (data,) = contents.members.values()
    records = [parse_record_line(line, "audit", "same") for line in data.splitlines()]
    return [decision for _, decision in decisions(records)]


def test_an_unverified_bundle_is_refused_with_its_own_exit_code(
    bundles: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tampered = tmp_path / "tampered.tar"
    data = bytearray(bundles["replay"].read_bytes())
    offset = data.find(b'"kind":"artifact.write"')
    assert offset > 0
    data[offset + 9] ^= 0x01  # one byte of one lineage record
    tampered.write_bytes(bytes(data))
    with pytest.raises(CompareError) as refused:
        compare_bundles(bundles["original"], tampered, pins=PINS)
    assert refused.value.code == ExitCode.INVALID and "replay bundle" in str(refused.value)
    code, out, err = _cli(
        capsys, "compare", str(bundles["original"]), str(tampered), "--trusted-key", KEYS.key_id
    )
    assert (code, out) == (1, "") and err.startswith("error: replay bundle")
    # unpinned: verified but not trusted, exit 3 (never "same" on evidence nobody vouches for)
    code, out, err = _cli(capsys, "compare", str(bundles["original"]), str(bundles["replay"]))
    assert (code, out) == (3, "") and "original bundle" in err and "trust" in err
    other = make_keys(12)
    code, _, err = _cli(
        capsys,
        "compare",
        str(bundles["original"]),
        str(bundles["replay"]),
        "--trusted-key",
        other.key_id,
    )
    assert code == 3
    code, _, err = _cli(capsys, "compare", str(bundles["original"]), str(tmp_path / "missing.tar"))
    assert code == 4 and "missing.tar" in err


def test_runs_are_paired_by_id_or_by_name(
    bundles: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    same = compare_bundles(bundles["original"], bundles["replay"], pins=PINS, run="same")
    assert same.same
    with pytest.raises(CompareError) as refused:
        compare_bundles(bundles["original"], bundles["replay"], pins=PINS, run="nope")
    assert refused.value.code == ExitCode.USAGE and "'nope'" in str(refused.value)
    code, _, err = _cli(
        capsys, "compare", str(bundles["original"]), str(bundles["replay"]),
        "--trusted-key", KEYS.key_id, "--run", "nope",
    )  # fmt: skip
    assert code == 2 and "nope" in err
