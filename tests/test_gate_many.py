"""The gate on a change of many files at once: the same verdict for each file as when that file
is the only change, tricky file names included; and the one ``git cat-file`` stream it hashes
blobs from.

Real git and one real runtime run: a merged task writes files with odd (but plan-legal) names,
modifies and deletes project files; then a commit by hand edits, chmods, deletes and adds files,
some with names no plan may carry (a newline, bytes that are not UTF-8, a leading dash).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.orchestrate import git as hgit
from harness.orchestrate.demo import make_repo
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys
from harness.verify.gate import (
    CONTENT_DIFFERS,
    DELETION_NOT_ATTESTED,
    MODE_DIFFERS,
    NO_RECEIPT,
    BundleHistory,
    GateReport,
    GateUsageError,
    _runs_in_history,
    blob_digests,
    changed_files,
    run_gate,
)
from harness.verify.policy import TrustPolicy
from tests.test_gate_binding import _run

WRITTEN = {
    **{f"gen/f{i:02d}.txt": f"generated {i}\n" for i in range(8)},
    "-dash.txt": "leading dash\n",
    "with space.txt": "a space\n",
    "é ü.txt": "not ascii\n",
    "a::b ##[x].txt": "workflow-command look-alikes\n",
    "calc.py": "def add(a, b):\n    return b + a\n",
}
NEWLINE = "new\nline.txt"
NOT_UTF8 = os.fsdecode(b"raw\xff\xfe.txt")
BY_HAND = {NEWLINE: "by hand\n", NOT_UTF8: "by hand\n", "-n": "by hand\n"}


@dataclass(frozen=True)
class Change:
    repo: Path
    base: str
    head: str
    bundle: Path
    pins: TrustPolicy

    def gate(self, head: str | None = None) -> GateReport:
        return run_gate(self.repo, self.base, head or self.head, self.bundle, self.pins)


def _git(repo: Path, *args: str, stdin: bytes | None = None, index: Path | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    done = subprocess.run(
        ["git", *args], cwd=repo, input=stdin, env=env, capture_output=True, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> Change:
    folder = tmp_path_factory.mktemp("many")
    repo = folder / "repo"
    make_repo(repo)
    base = hgit.head(repo)
    keys = init_keys(folder / "keys")
    state = folder / "state"
    edits = [{"path": path, "content": content} for path, content in WRITTEN.items()]
    _run(repo, state, keys, "run-many", [*edits, {"path": "README.md"}])  # no content: delete
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    (repo / "gen" / "f01.txt").write_text("edited after the agent\n")
    (repo / "gen" / "f02.txt").chmod(0o755)
    (repo / "gen" / "f03.txt").unlink()
    (repo / "tests" / "__init__.py").unlink()
    for name, content in BY_HAND.items():
        (repo / name).write_bytes(content.encode())  # Path(str) maps surrogates back to bytes
    hgit.commit_all(repo, "by hand")
    pins = TrustPolicy(frozenset({keys.key_id}), "--trusted-key")
    return Change(repo, base, hgit.head(repo), bundle, pins)


def _only(change: Change, path: str) -> str:
    """A commit on the base whose sole change is ``path`` as it is at head (or its absence)."""
    repo = change.repo
    index = repo.parent / "only.index"
    _git(repo, "read-tree", change.base, index=index)
    raw = os.fsencode(path)
    listed = _git(repo, "ls-tree", "-z", change.head, "--", path)
    entry = listed.rstrip(b"\0") if listed else b"0 " + b"0" * 40 + b"\t" + raw
    _git(repo, "update-index", "-z", "--index-info", stdin=entry + b"\0", index=index)
    tree = _git(repo, "write-tree", index=index).decode().strip()
    commit = _git(repo, "commit-tree", tree, "-p", change.base, "-m", "one file")
    index.unlink()
    return commit.decode().strip()


def test_each_file_gets_the_verdict_it_gets_alone(change: Change) -> None:
    report = change.gate()
    assert [entry.path for entry in report.files] == sorted(entry.path for entry in report.files)
    # gen/f03.txt written then deleted is no change; README.md and tests/__init__.py deleted
    assert len(report.files) == len(WRITTEN) - 1 + 2 + len(BY_HAND)
    for entry in report.files:
        alone = change.gate(_only(change, entry.path))
        assert alone.files == [entry], entry.path


def test_verdicts_of_the_whole_change(change: Change) -> None:
    report = change.gate()
    verdicts = {entry.path: (entry.change, entry.verdict, entry.reason) for entry in report.files}
    covered = {path for path, (_, verdict, _) in verdicts.items() if verdict == "covered"}
    assert covered == (set(WRITTEN) | {"README.md"}) - {"gen/f01.txt", "gen/f02.txt", "gen/f03.txt"}
    assert verdicts["README.md"][:2] == ("D", "covered")
    assert verdicts["calc.py"][:2] == ("M", "covered")
    assert verdicts["gen/f01.txt"] == ("A", "uncovered", CONTENT_DIFFERS)
    assert verdicts["gen/f02.txt"][1:] == (
        "uncovered",
        f"{MODE_DIFFERS} (100755 at head, 100644 attested)",
    )
    assert "gen/f03.txt" not in verdicts  # written by the agent, deleted by hand: no change
    assert verdicts["tests/__init__.py"] == ("D", "uncovered", DELETION_NOT_ATTESTED)
    for name in BY_HAND:
        assert verdicts[name] == ("A", "uncovered", NO_RECEIPT), name
    assert not report.passed
    assert report.reason.startswith(f"{3 + len(BY_HAND)} of {len(report.files)} changed files")


# ---- blob_digests: one git cat-file stream for every blob -------------------------------------


def test_blob_digests_hash_every_blob_as_git_stores_it(change: Change, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom((1 << 16) * 3 + 17))  # several chunks, not a multiple of one
    oids = {
        _git(change.repo, "hash-object", "-w", str(big)).decode().strip(),
        _git(change.repo, "hash-object", "-w", "--stdin", stdin=b"").decode().strip(),
    }
    oids |= {c.new_oid for c in changed_files(change.repo, change.base, change.head)}
    oids.discard("0" * 40)  # deleted at head
    digests = blob_digests(change.repo, sorted(oids))
    assert set(digests) == oids
    for oid in oids:
        content = _git(change.repo, "cat-file", "blob", oid)
        assert digests[oid] == hashlib.sha256(content).hexdigest()
    assert digests[min(oids)] == blob_digests(change.repo, [min(oids)])[min(oids)]
    assert blob_digests(change.repo, []) == {}


def test_blob_digests_refuse_what_is_not_a_blob(change: Change) -> None:
    tree = _git(change.repo, "rev-parse", f"{change.head}^{{tree}}").decode().strip()
    with pytest.raises(GateUsageError, match="is not a blob"):
        blob_digests(change.repo, [tree])
    with pytest.raises(GateUsageError, match="is not a blob"):
        blob_digests(change.repo, ["1" * 40])  # missing


def test_runs_in_history_among_many_runs(change: Change) -> None:
    """Many runs sharing base commits: each counts iff its own base commit is an ancestor."""
    tree = _git(change.repo, "rev-parse", f"{change.base}^{{tree}}").decode().strip()
    unrelated = _git(change.repo, "commit-tree", tree, "-m", "orphan").decode().strip()
    commits: dict[str, str | None] = {"base": change.base, "head": change.head}
    commits |= {"unrelated": unrelated, "missing": "f" * 40, "none": None}
    history = BundleHistory(
        base_commits={f"{name}-{i}": commit for name, commit in commits.items() for i in range(3)}
    )
    counted = _runs_in_history(change.repo, change.head, history)
    assert counted == {f"{name}-{i}" for name in ("base", "head") for i in range(3)}
    assert _runs_in_history(change.repo, change.base, history) == {f"base-{i}" for i in range(3)}
