"""harness.orchestrate.git: real git repositories and worktrees in temporary folders."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.orchestrate import git
from harness.orchestrate.git import Change, GitError, MergeConflictError

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")

DATE = "2024-01-02T03:04:05+00:00"


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def write(root: Path, rel: str, data: bytes | str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        p.write_text(data)
    else:
        p.write_bytes(data)


def porcelain(repo: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def parents(repo: Path, rev: str) -> list[str]:
    out = subprocess.run(
        ["git", "rev-list", "--parents", "-n", "1", rev],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return out[1:]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    git.init_repo(root, date=DATE)
    write(root, ".gitignore", "*.log\n")
    write(root, "a.txt", "alpha\n")
    write(root, "b.txt", "beta\n")
    write(root, "old.txt", "rename me\n")
    write(root, "dir/keep.txt", "keep\n")
    assert git.commit_all(root, "base", date=DATE) is not None
    return root


def test_init_repo(tmp_path: Path) -> None:
    root = tmp_path / "r"
    first = git.init_repo(root, date=DATE)
    assert first is not None and first == git.head(root)
    assert git.current_branch(root) == "main"
    bare = tmp_path / "bare"
    assert git.init_repo(bare, initial_commit=False) is None
    with pytest.raises(GitError):
        git.head(bare)


R = "100644"


def test_worktree_commit_and_changed_files(repo: Path, tmp_path: Path) -> None:
    base = git.head(repo)
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, "task-1", base)
    assert git.head(wt) == base
    assert git.current_branch(wt) == "task-1"
    assert git.commit_all(wt, "nothing yet") is None

    binary = bytes(range(256)) * 4 + b"\r\n\0\r\n\x00\xff"
    write(wt, "new.txt", "new\n")  # added
    write(wt, "a.txt", "alpha 2\n")  # modified
    (wt / "b.txt").unlink()  # deleted
    (wt / "old.txt").rename(wt / "moved.txt")  # renamed: delete + add
    write(wt, "bin/blob.dat", binary)  # binary, with CR/LF and NUL bytes
    write(wt, "debug.log", "ignored\n")  # ignored: never staged
    assert git.is_ignored(wt, "debug.log")
    assert not git.is_ignored(wt, "new.txt")

    tip = git.commit_all(wt, "task-1 work", date=DATE)
    assert tip is not None and tip == git.head(wt) == git.head(repo, "task-1")
    assert git.commit_all(wt, "again", date=DATE) is None
    assert porcelain(wt) == ""  # all staged and committed except the ignored file

    changes = git.changed_files(repo, base, tip)
    assert changes == [
        Change("a.txt", "modified", None, sha("alpha 2\n"), sha("alpha\n"), R, R),
        Change("b.txt", "deleted", None, None, sha("beta\n"), None, R),
        Change("bin/blob.dat", "added", None, sha(binary), None, R, None),
        Change("moved.txt", "added", None, sha("rename me\n"), None, R, None),
        Change("new.txt", "added", None, sha("new\n"), None, R, None),
        Change("old.txt", "deleted", None, None, sha("rename me\n"), None, R),
    ]
    assert (wt / "bin/blob.dat").read_bytes() == binary

    git.remove_worktree(repo, wt)
    assert not wt.exists()
    assert git.head(repo, "task-1") == tip  # the branch survives its worktree
    git.remove_worktree(repo, wt)  # already gone: just prunes
    git.delete_branch(repo, "task-1")
    with pytest.raises(GitError):
        git.head(repo, "task-1")


def test_agent_commits_are_seen_too(repo: Path, tmp_path: Path) -> None:
    """Lineage comes from the tree diff base..tip, whatever the agent committed itself."""
    base = git.head(repo)
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, "t", base)
    write(wt, "x.txt", "one\n")
    subprocess.run(["git", "add", "x.txt"], cwd=wt, check=True)
    subprocess.run(
        ["git", "-c", "user.name=agent", "-c", "user.email=a@b", "commit", "-qm", "agent"],
        cwd=wt, check=True,
    )  # fmt: skip
    write(wt, "y.txt", "two\n")
    tip = git.commit_all(wt, "rest")
    assert tip is not None
    assert [(c.path, c.status) for c in git.changed_files(repo, base, tip)] == [
        ("x.txt", "added"),
        ("y.txt", "added"),
    ]


def test_add_worktree_existing_branch_is_git_error(repo: Path, tmp_path: Path) -> None:
    base = git.head(repo)
    git.add_worktree(repo, tmp_path / "w1", "dup", base)
    with pytest.raises(GitError) as info:
        git.add_worktree(repo, tmp_path / "w2", "dup", base)
    assert "already exists" in info.value.stderr
    assert info.value.returncode not in (None, 0)


def _branch_with(repo: Path, tmp_path: Path, branch: str, files: dict[str, str]) -> str:
    wt = tmp_path / f"wt-{branch}"
    git.add_worktree(repo, wt, branch, git.head(repo))
    for rel, text in files.items():
        write(wt, rel, text)
    tip = git.commit_all(wt, f"{branch} work", date=DATE)
    assert tip is not None
    git.remove_worktree(repo, wt)
    return tip


def test_merge_check_clean_and_conflicting(repo: Path, tmp_path: Path) -> None:
    _branch_with(repo, tmp_path, "left", {"a.txt": "alpha from left\n"})
    _branch_with(repo, tmp_path, "right", {"a.txt": "alpha from right\n"})
    _branch_with(repo, tmp_path, "other", {"b.txt": "beta from other\n"})

    clean = git.merge_check(repo, "left", "other")
    assert clean.clean and clean.conflicts == () and clean.tree is not None
    assert len(clean.tree) == 40

    bad = git.merge_check(repo, "left", "right")
    assert not bad.clean
    assert bad.conflicts == ("a.txt",)
    assert bad.tree is None
    assert any("a.txt" in m and "CONFLICT" in m for m in bad.messages)


def test_merge_refuses_conflict_and_leaves_main_untouched(repo: Path, tmp_path: Path) -> None:
    _branch_with(repo, tmp_path, "right", {"a.txt": "alpha from right\n"})
    write(repo, "a.txt", "alpha on main\n")
    main_tip = git.commit_all(repo, "main edit", date=DATE)
    assert main_tip is not None

    with pytest.raises(MergeConflictError) as info:
        git.merge(repo, "right", "merge right", date=DATE)
    assert isinstance(info.value, GitError)
    assert info.value.conflicts == ("a.txt",)
    assert "a.txt" in str(info.value)
    assert git.head(repo) == main_tip
    assert git.current_branch(repo) == "main"
    assert (repo / "a.txt").read_text() == "alpha on main\n"
    assert porcelain(repo) == ""
    assert not (repo / ".git" / "MERGE_HEAD").exists()


def test_fast_forward_merge(repo: Path, tmp_path: Path) -> None:
    tip = _branch_with(repo, tmp_path, "ff", {"c.txt": "gamma\n"})
    new = git.merge(repo, "ff", "merge ff", date=DATE)
    assert new == tip == git.head(repo)
    assert (repo / "c.txt").read_text() == "gamma\n"
    assert porcelain(repo) == ""
    assert git.merge(repo, "ff", "again") == tip  # already merged: nothing happens


def test_true_merge_commits_checked_tree(repo: Path, tmp_path: Path) -> None:
    side = _branch_with(repo, tmp_path, "side", {"c.txt": "gamma\n"})
    write(repo, "b.txt", "beta on main\n")
    main_tip = git.commit_all(repo, "main edit", date=DATE)
    assert main_tip is not None
    check = git.merge_check(repo, "main", "side")
    new = git.merge(repo, "side", "merge side", date=DATE)
    assert parents(repo, new) == [main_tip, side]
    tree = subprocess.run(
        ["git", "rev-parse", f"{new}^{{tree}}"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert tree == check.tree
    assert (repo / "c.txt").read_text() == "gamma\n"
    assert (repo / "b.txt").read_text() == "beta on main\n"
    assert porcelain(repo) == ""


def test_merge_refuses_to_overwrite_local_changes(repo: Path, tmp_path: Path) -> None:
    _branch_with(repo, tmp_path, "ff", {"a.txt": "alpha 2\n"})
    before = git.head(repo)
    write(repo, "a.txt", "uncommitted\n")
    with pytest.raises(GitError):
        git.merge(repo, "ff", "merge")
    assert git.head(repo) == before
    assert (repo / "a.txt").read_text() == "uncommitted\n"


def _build(root: Path, date: str) -> tuple[str, str]:
    git.init_repo(root, date=date)
    write(root, "f.txt", "same content\n")
    first = git.commit_all(root, "same message", date=date)
    assert first is not None
    wt = root.parent / (root.name + "-wt")
    git.add_worktree(root, wt, "b", first)
    write(wt, "g.txt", "g\n")
    assert git.commit_all(wt, "on b", date=date) is not None
    write(root, "h.txt", "h\n")
    assert git.commit_all(root, "on main", date=date) is not None
    merged = git.merge(root, "b", "merge b", date=date)
    return first, merged


def test_deterministic_commit_ids_with_fixed_dates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a user's identity in the environment must not leak into the commits
    monkeypatch.setenv("GIT_AUTHOR_NAME", "someone else")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "x@y")
    one = _build(tmp_path / "one", DATE)
    two = _build(tmp_path / "two", DATE)
    assert one == two
    three = _build(tmp_path / "three", "2024-01-02T03:04:06+00:00")
    assert three[0] != one[0] and three[1] != one[1]
    author = subprocess.run(
        ["git", "log", "-1", "--format=%an <%ae> %ad|%cn <%ce> %cd", "--date=iso-strict"],
        cwd=tmp_path / "one", capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    ).stdout.strip()  # fmt: skip
    assert author == (
        "harness <harness@localhost> 2024-01-02T03:04:05+00:00|"
        "harness <harness@localhost> 2024-01-02T03:04:05+00:00"
    )


def test_is_ignored_tracked_file_is_not_ignored(repo: Path) -> None:
    write(repo, "tracked.log", "x\n")
    subprocess.run(["git", "add", "-f", "tracked.log"], cwd=repo, check=True)
    assert not git.is_ignored(repo, "tracked.log")
    assert git.is_ignored(repo, "other.log")
    assert git.is_ignored(repo, repo / "nested" / "x.log")


def test_changed_files_odd_paths_modes_and_symlinks(repo: Path, tmp_path: Path) -> None:
    base = git.head(repo)
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, "odd", base)
    odd = "sp ace/ünï\ncode\t.txt"
    write(wt, odd, "odd\n")
    (wt / "a.txt").chmod(0o755)  # mode change only: modified, same content digest
    (wt / "link").symlink_to("dir/keep.txt")
    tip = git.commit_all(wt, "odd", date=DATE)
    assert tip is not None
    assert git.changed_files(repo, base, tip) == [
        # mode change only: the same content digest, the modes tell the change
        Change("a.txt", "modified", None, sha("alpha\n"), sha("alpha\n"), "100755", R),
        # a link's blob is its target text; its mode says it is a link
        Change("link", "added", None, sha("dir/keep.txt"), None, "120000", None),
        Change(odd, "added", None, sha("odd\n"), None, R, None),
    ]
