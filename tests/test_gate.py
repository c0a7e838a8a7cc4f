"""``harness-verify gate``: real git, real demo runs, real bundles.

The demo's repository changes five files between "initial project" and HEAD, each written by a
merged task; the gate passes on it and fails, naming the file, after a manual edit, a file added
without a receipt, a deletion no agent made, with an unpinned signer, and with a bundle from
another run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from harness.orchestrate import git as hgit
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import DemoResult, _gate, make_repo, run_demo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys
from harness.verify.gate import (
    CONTENT_DIFFERS,
    DELETION_NOT_ATTESTED,
    NO_RECEIPT,
    OTHER_HISTORY,
    GateReport,
    GateUsageError,
    run_gate,
)
from harness.verify.gate_render import render_gate_sarif, render_markdown
from harness.verify.policy import EMPTY_POLICY, TrustPolicy
from harness.verify.report import ExitCode, Status

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "gate-report.schema.json"
DEMO_FILES = [
    "CHANGELOG.md",
    "README.md",
    "calc.py",
    "docs/guide.md",
    "docs/release.md",
    "docs/usage.md",
    "stats.py",
    "tests/test_mul.py",
    "tests/test_stats.py",
]


def _git(repo: Path, *args: str) -> str:
    return hgit._out(repo, *args)


def _commit_of(repo: Path, subject: str) -> str:
    for line in _git(repo, "log", "--format=%H %s").splitlines():
        sha, _, text = line.partition(" ")
        if text == subject:
            return sha
    raise AssertionError(f"no commit {subject!r} in {repo}")


def _pins(key_id: str) -> TrustPolicy:
    return TrustPolicy(frozenset({key_id}), "--trusted-key")


@dataclass(frozen=True)
class Other:
    """A second run: one task that moves README.md to docs/README.md (a delete and an add)."""

    repo: Path
    bundle: Path
    key_id: str


def _run_move(folder: Path) -> Other:
    folder.mkdir()
    repo = folder / "repo"
    make_repo(repo)
    state = repo / ".harness"
    keys = init_keys(state / "keys")
    plan = {
        "plan": {"name": "move", "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": "move-readme",
                "role": "writer",
                "prompt": "Move the readme into docs/.",
                "scope": ["README.md", "docs/**"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": [
                    {"path": "README.md"},  # no content: delete
                    {"path": "docs/README.md", "content": "# calc\n"},
                ],
            }
        ],
    }
    summary = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=state,
        keys=keys,
        run_id="move-run",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date="2026-01-01T00:00:00+00:00",
    ).run()
    assert summary is not None
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    return Other(repo, bundle, keys.key_id)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Other:
    return _run_move(tmp_path_factory.mktemp("other") / "run")


@pytest.fixture
def clone(demo: DemoResult, tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "clone"
    shutil.copytree(demo.repo, target, ignore=shutil.ignore_patterns(".harness"))
    yield target


def _base(repo: Path) -> str:
    return _commit_of(repo, "initial project")


def _verdicts(report: GateReport) -> dict[str, tuple[str, str]]:
    return {entry.path: (entry.verdict, entry.reason) for entry in report.files}


# ---- the library -----------------------------------------------------------------------------


def test_demo_change_is_covered(demo: DemoResult) -> None:
    report = run_gate(demo.repo, _base(demo.repo), "HEAD", demo.bundle, _pins(demo.key_id))
    assert report.passed, report.reason
    assert report.exit_code is ExitCode.VERIFIED
    assert report.bundle_status is Status.VERIFIED
    assert [entry.path for entry in report.files] == DEMO_FILES
    assert all(entry.verdict == "covered" for entry in report.files)
    by_path = {entry.path: entry for entry in report.files}
    assert by_path["calc.py"].change == "M"
    assert by_path["calc.py"].task == "add-mul"
    assert by_path["docs/usage.md"].change == "A"
    assert by_path["CHANGELOG.md"].run == demo.run_id
    # the failed task (break-add) and the denied one (exfiltrate) never count
    assert "leak.txt" not in by_path


def test_manual_edit_fails_naming_the_file(demo: DemoResult, clone: Path) -> None:
    with (clone / "calc.py").open("a", encoding="utf-8") as handle:
        handle.write("\n# tweaked by hand\n")
    hgit.commit_all(clone, "manual tweak")
    report = run_gate(clone, _base(clone), "HEAD", demo.bundle, _pins(demo.key_id))
    assert not report.passed
    assert report.exit_code is ExitCode.INVALID
    verdicts = _verdicts(report)
    assert verdicts["calc.py"] == ("uncovered", CONTENT_DIFFERS)
    assert [entry.path for entry in report.uncovered] == ["calc.py"]
    assert "calc.py" in report.reason


def test_file_without_receipt_fails(demo: DemoResult, clone: Path) -> None:
    (clone / "notes").mkdir()
    (clone / "notes" / "extra.txt").write_text("not from an agent\n", encoding="utf-8")
    hgit.commit_all(clone, "add a file by hand")
    report = run_gate(clone, _base(clone), "HEAD", demo.bundle, _pins(demo.key_id))
    assert not report.passed
    assert [entry.path for entry in report.uncovered] == ["notes/extra.txt"]
    assert _verdicts(report)["notes/extra.txt"] == ("uncovered", NO_RECEIPT)


def test_unattested_deletion_fails(demo: DemoResult, clone: Path) -> None:
    (clone / "tests" / "test_calc.py").unlink()
    hgit.commit_all(clone, "delete a test by hand")
    report = run_gate(clone, _base(clone), "HEAD", demo.bundle, _pins(demo.key_id))
    assert not report.passed
    entry = report.uncovered[0]
    assert (entry.path, entry.change, entry.reason) == (
        "tests/test_calc.py",
        "D",
        DELETION_NOT_ATTESTED,
    )


def test_attested_rename_is_covered(other: Other) -> None:
    report = run_gate(other.repo, _base(other.repo), "HEAD", other.bundle, _pins(other.key_id))
    assert report.passed, report.reason
    assert [(e.path, e.change, e.verdict) for e in report.files] == [
        ("README.md", "D", "covered"),
        ("docs/README.md", "A", "covered"),
    ]


def test_unpinned_signer_fails_naming_trust(demo: DemoResult) -> None:
    for pins, says in (
        (EMPTY_POLICY, "signer not pinned: no --trusted-key and no policy"),
        (_pins("ab" * 32), "is not among the pinned keys (--trusted-key)"),
    ):
        report = run_gate(demo.repo, _base(demo.repo), "HEAD", demo.bundle, pins)
        assert not report.passed
        assert report.exit_code is ExitCode.UNTRUSTED
        assert report.bundle_status is Status.UNTRUSTED
        assert says in report.reason
        assert "--trusted-key KEY" in report.reason  # and how to pin
        assert all(entry.verdict == "uncovered" for entry in report.files)


def test_bundle_from_another_run_fails(demo: DemoResult, other: Other) -> None:
    report = run_gate(demo.repo, _base(demo.repo), "HEAD", other.bundle, _pins(other.key_id))
    assert report.bundle_status is Status.VERIFIED
    assert not report.passed
    verdicts = _verdicts(report)
    for path in ("calc.py", "tests/test_mul.py", "CHANGELOG.md", "docs/usage.md"):
        assert verdicts[path] == ("uncovered", NO_RECEIPT), path
    # the other run (another repository: its base commit is not in this history) deleted
    # README.md: it covers nothing here, and the reason says why
    assert verdicts["README.md"][0] == "uncovered"
    assert verdicts["README.md"][1].startswith(OTHER_HISTORY)


def test_bad_refs_and_no_repo(demo: DemoResult, tmp_path: Path) -> None:
    with pytest.raises(GateUsageError, match="does not name a commit"):
        run_gate(demo.repo, "no-such-ref", "HEAD", demo.bundle, _pins(demo.key_id))
    with pytest.raises(GateUsageError, match="invalid ref"):
        run_gate(demo.repo, "--output=x", "HEAD", demo.bundle, _pins(demo.key_id))
    with pytest.raises(GateUsageError, match="not a git repository"):
        run_gate(tmp_path, "HEAD~1", "HEAD", demo.bundle, _pins(demo.key_id))


def test_renderers(demo: DemoResult, clone: Path) -> None:
    (clone / "a|b.md").write_text("x\n", encoding="utf-8")
    hgit.commit_all(clone, "pipe in a name")
    report = run_gate(clone, _base(clone), "HEAD", demo.bundle, _pins(demo.key_id))
    sarif = json.loads(render_gate_sarif(report))
    results = sarif["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results] == [
        "a%7Cb.md"
    ]
    assert results[0]["ruleId"] == "uncovered-file"
    markdown = render_markdown(report)
    assert "| `a\\|b.md` | added | ❌ uncovered |" in markdown
    assert markdown.count("✅ covered") == len(DEMO_FILES)


# ---- the command line ------------------------------------------------------------------------


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_end_to_end(demo: DemoResult, clone: Path, tmp_path: Path) -> None:
    base = _base(demo.repo)
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    out = _cli(
        demo.repo,
        "gate",
        "--base",
        base,
        "--trusted-key",
        demo.key_id,
        "--format",
        "json",
        "--summary",
        str(summary),
        str(demo.bundle),
    )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    Draft202012Validator(json.loads(SCHEMA.read_text("utf-8"))).validate(document)
    assert document["format"] == "harness-verify/gate-report"
    assert document["version"] == 2
    assert document["passed"] is True
    assert [f["path"] for f in document["files"]] == DEMO_FILES
    text = summary.read_text("utf-8")
    assert text.startswith("# earlier step\n")
    assert "### harness-verify gate: ✅ passed" in text
    assert "| `calc.py` | modified | ✅ covered |" in text

    # a manual edit, via --repo from elsewhere, SARIF to a file, text on stderr
    (clone / "README.md").write_text("# calc, by hand\n", encoding="utf-8")
    hgit.commit_all(clone, "manual readme")
    sarif_path = tmp_path / "gate.sarif"
    out = _cli(
        tmp_path,
        "gate",
        "--repo",
        str(clone),
        "--base",
        base,
        "--trusted-key",
        demo.key_id,
        "--format",
        "sarif",
        "--output",
        str(sarif_path),
        str(demo.bundle),
    )
    assert out.returncode == 1, out.stderr
    assert "README.md" in out.stderr and "content differs" in out.stderr
    results = json.loads(sarif_path.read_text("utf-8"))["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results] == [
        "README.md"
    ]

    # no pin: exit 3 naming trust, and the json still validates
    out = _cli(demo.repo, "gate", "--base", base, "--format", "json", str(demo.bundle))
    assert out.returncode == 3, out.stderr
    document = json.loads(out.stdout)
    Draft202012Validator(json.loads(SCHEMA.read_text("utf-8"))).validate(document)
    assert document["bundle_status"] == "verified-untrusted"
    assert "signer not pinned" in document["reason"]

    # unreadable bundle: exit 4
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar")
    out = _cli(demo.repo, "gate", "--base", base, "--trusted-key", demo.key_id, str(junk))
    assert out.returncode == 4, out.stdout + out.stderr


def test_cli_usage_errors(demo: DemoResult, tmp_path: Path) -> None:
    out = _cli(demo.repo, "gate", "--base", "nope", "--trusted-key", demo.key_id, str(demo.bundle))
    assert out.returncode == 2
    assert "ref 'nope' does not name a commit" in out.stderr
    out = _cli(tmp_path, "gate", "--base", "HEAD", "--trusted-key", demo.key_id, str(demo.bundle))
    assert out.returncode == 2
    assert "not a git repository" in out.stderr
