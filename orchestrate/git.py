"""Small wrappers over the git CLI: repositories, worktrees, commits, diffs, checked merges.

Every call runs the real ``git`` binary with an isolated, deterministic configuration:

* no global or system config (``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_CONFIG_NOSYSTEM=1``), so
  a user's ``commit.gpgsign``, ``core.autocrlf``, aliases or hooks cannot change results;
* hooks and fsmonitor disabled (``core.hooksPath=/dev/null``, ``core.fsmonitor=false``): an
  agent that writes into the repository must not get code run by the harness's own git calls;
* a fixed identity (``harness <harness@localhost>``) and, when given, fixed author/committer
  dates, so the same content, messages and dates give the same commit ids;
* ``LC_ALL=C`` so messages are stable.

Failures raise :class:`GitError` carrying git's stderr. A merge refused for conflicts raises
:class:`MergeConflictError` (a ``GitError``) with the conflicted paths, which is what gets recorded.

Renames are deliberately not detected (``--no-renames``): a renamed file is reported as a
deletion of the old path plus an addition of the new one. Rename detection is a similarity
heuristic (it depends on a threshold and on what else changed); for lineage the honest,
exact statement is "this path's content went away, this path's content appeared", each with
its digest — a consumer can still pair them by equal digests.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "IDENTITY_EMAIL",
    "IDENTITY_NAME",
    "Change",
    "GitError",
    "MergeCheck",
    "MergeConflictError",
    "add_worktree",
    "changed_files",
    "commit_all",
    "current_branch",
    "delete_branch",
    "head",
    "init_repo",
    "is_ignored",
    "merge",
    "merge_check",
    "remove_worktree",
]

IDENTITY_NAME = "harness"
IDENTITY_EMAIL = "harness@localhost"
_TIMEOUT_S = 300.0
_CONFIG = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "commit.gpgsign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.quotePath=false",
    "-c", "advice.detachedHead=false",
)  # fmt: skip
_GITLINK = "160000"

ChangeStatus = Literal["added", "modified", "deleted", "renamed"]


class GitError(Exception):
    """A git command failed; ``stderr`` is git's own explanation."""

    def __init__(self, message: str, *, argv: Sequence[str] = (), returncode: int | None = None,
                 stderr: str = "") -> None:  # fmt: skip
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        super().__init__(f"{message}{detail}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr


class MergeConflictError(GitError):
    """A merge was refused because it would conflict; nothing was changed."""

    def __init__(
        self, message: str, *, conflicts: tuple[str, ...], messages: tuple[str, ...]
    ) -> None:
        super().__init__(message, stderr="\n".join(messages))
        self.conflicts = conflicts
        self.messages = messages


@dataclass(frozen=True)
class Change:
    """One path that differs between two commits (renames appear as deleted + added)."""

    path: str
    status: ChangeStatus
    old_path: str | None
    """Always None here (renames are not detected; see the module docstring)."""
    sha256: str | None
    """sha256 (hex) of the committed content at head (of a symlink: its target text; of a
    gitlink: the commit id as hex text); None when deleted."""
    old_sha256: str | None
    """sha256 (hex) of the committed content at base; None when added."""
    mode: str | None = None
    """Git file mode at head ("100644", "100755", "120000" symlink, "160000" gitlink); None
    when deleted."""
    old_mode: str | None = None
    """Git file mode at base; None when added."""


@dataclass(frozen=True)
class MergeCheck:
    """What merging ``source`` into ``target`` would do, computed without touching any checkout."""

    clean: bool
    conflicts: tuple[str, ...]
    """Paths with conflicts (empty when clean)."""
    tree: str | None
    """The merged tree id when clean; None on conflicts."""
    messages: tuple[str, ...] = ()
    """git's conflict notices (e.g. ``CONFLICT (content): Merge conflict in a.txt``)."""


def _env(date: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        # GIT_DIR & co. inherited from a surrounding git (e.g. a hook) would redirect us.
        if key.startswith("GIT_"):
            del env[key]
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=IDENTITY_NAME,
        GIT_AUTHOR_EMAIL=IDENTITY_EMAIL,
        GIT_COMMITTER_NAME=IDENTITY_NAME,
        GIT_COMMITTER_EMAIL=IDENTITY_EMAIL,
        LC_ALL="C",
        LANG="C",
    )
    if date is not None:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    return env


def _git(
    cwd: Path,
    *args: str,
    date: str | None = None,
    input: bytes | None = None,
    ok: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[bytes]:
    argv = ["git", *_CONFIG, *args]
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=_env(date),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {' '.join(args)} failed to run", argv=argv, stderr=str(exc)) from exc
    if proc.returncode not in ok:
        raise GitError(
            f"git {' '.join(args)} failed (exit {proc.returncode})",
            argv=argv,
            returncode=proc.returncode,
            stderr=proc.stderr.decode("utf-8", "replace"),
        )
    return proc


def _out(cwd: Path, *args: str, date: str | None = None) -> str:
    return _git(cwd, *args, date=date).stdout.decode("utf-8", "surrogateescape").strip()


def init_repo(
    path: Path, *, branch: str = "main", date: str | None = None, initial_commit: bool = True
) -> str | None:
    """Create a repository at ``path`` (created if missing) on ``branch``.

    The harness identity is also written to the repository config, so commits made by other
    tools in it are attributed the same way. With ``initial_commit`` (the default) an empty
    root commit is made (dated ``date`` when given), so that ``head`` and worktrees work at
    once; its id is returned (None without it).
    """
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", branch, ".")
    for key, value in (
        ("user.name", IDENTITY_NAME),
        ("user.email", IDENTITY_EMAIL),
        ("commit.gpgsign", "false"),
        ("core.autocrlf", "false"),
    ):
        _git(path, "config", key, value)
    if not initial_commit:
        return None
    _git(path, "commit", "-q", "--allow-empty", "--no-verify", "-m", "init", date=date)
    return head(path)


def head(repo: Path, ref: str = "HEAD") -> str:
    """The commit id ``ref`` (default HEAD) resolves to."""
    return _out(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")


def current_branch(repo: Path) -> str | None:
    """The branch checked out in ``repo`` (None when HEAD is detached)."""
    proc = _git(repo, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1))
    name = proc.stdout.decode("utf-8", "surrogateescape").strip()
    return name if proc.returncode == 0 and name else None


def add_worktree(repo: Path, path: Path, branch: str, base: str) -> None:
    """Check out a new branch ``branch`` (from ``base``) in a new worktree at ``path``."""
    _git(repo, "worktree", "add", "-q", "-b", branch, str(path), base)


def remove_worktree(repo: Path, path: Path, force: bool = True) -> None:
    """Remove the worktree at ``path`` (``force``: even with uncommitted changes).

    The branch is kept (see :func:`delete_branch`); stale worktree records are pruned.
    """
    if path.exists():
        args = ["worktree", "remove"] + (["--force", "--force"] if force else []) + [str(path)]
        _git(repo, *args)
        return  # git removed its record of the worktree with it
    _git(repo, "worktree", "prune")


def branch_exists(repo: Path, branch: str) -> bool:
    proc = _git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", ok=(0, 1))
    return proc.returncode == 0


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    """Whether ``ancestor`` is reachable from ``descendant`` (merged into it)."""
    proc = _git(repo, "merge-base", "--is-ancestor", ancestor, descendant, ok=(0, 1))
    return proc.returncode == 0


def delete_branch(repo: Path, branch: str, *, force: bool = True) -> None:
    _git(repo, "branch", "-D" if force else "-d", "--", branch)


def commit_all(worktree: Path, message: str, *, date: str | None = None) -> str | None:
    """Stage everything (additions, modifications, deletions) and commit.

    Returns the new commit id, or None when nothing changed. Ignored files are not staged
    (see :func:`is_ignored`).
    """
    _git(worktree, "add", "-A", "--", ".")
    staged = _git(worktree, "diff", "--cached", "--quiet", "--no-ext-diff", ok=(0, 1))
    if staged.returncode == 0:
        return None
    _git(worktree, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", message, date=date)
    return head(worktree)


def _is_null(oid: str) -> bool:
    return not oid.strip("0")  # the all-zero id (SHA-1 or SHA-256 repositories)


def _cat_blobs(repo: Path, oids: Sequence[str]) -> dict[str, bytes]:
    """Contents of the given blobs, via one ``git cat-file --batch``."""
    unique = sorted(set(oids))
    if not unique:
        return {}
    out = _git(repo, "cat-file", "--batch", input="".join(f"{o}\n" for o in unique).encode()).stdout
    blobs: dict[str, bytes] = {}
    pos = 0
    for oid in unique:
        eol = out.index(b"\n", pos)
        header = out[pos:eol].decode("ascii").split()
        if len(header) != 3 or header[0] != oid or header[1] != "blob":
            raise GitError(f"git cat-file: unexpected answer for {oid}: {' '.join(header)}")
        size = int(header[2])
        start = eol + 1
        blobs[oid] = out[start : start + size]
        pos = start + size + 1  # content is followed by a newline
    return blobs


def changed_files(repo: Path, base: str, head: str) -> list[Change]:
    """Paths that differ between commits ``base`` and ``head``, sorted by path.

    Computed from git's own tree diff (``git diff --raw -z --no-renames``) and the committed
    blob contents, so it sees every change whatever the agent did or claims. Digests are of
    the committed content (what a merge carries), and modes are git's, so a ``chmod +x`` or a
    file replaced by a symlink is a change with its own mode. A file whose type changed is
    "modified".
    """
    raw = _git(
        repo, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", "--no-ext-diff",
        "--no-textconv", "--ignore-submodules=none", base, head, "--",
    ).stdout  # fmt: skip
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    entries: list[tuple[str, str, str, str, str, str]] = []
    i = 0
    while i < len(fields):
        meta = fields[i].decode("ascii")
        path = fields[i + 1].decode("utf-8", "surrogateescape")
        i += 2
        old_mode, new_mode, old_oid, new_oid, letter = meta.lstrip(":").split()
        entries.append((path, letter[0], old_mode, new_mode, old_oid, new_oid))

    wanted: list[str] = []
    for _path, _letter, old_mode, new_mode, old_oid, new_oid in entries:
        if not _is_null(old_oid) and old_mode != _GITLINK:
            wanted.append(old_oid)
        if not _is_null(new_oid) and new_mode != _GITLINK:
            wanted.append(new_oid)
    blobs = _cat_blobs(repo, wanted)

    def digest(oid: str, mode: str) -> str | None:
        if _is_null(oid):
            return None
        if mode == _GITLINK:  # a submodule's entry is a commit id, not a blob of this repo
            return hashlib.sha256(oid.encode("ascii")).hexdigest()
        return hashlib.sha256(blobs[oid]).hexdigest()

    def mode_of(oid: str, mode: str) -> str | None:
        return None if _is_null(oid) else mode

    statuses: Mapping[str, ChangeStatus] = {
        "A": "added",
        "D": "deleted",
        "M": "modified",
        "T": "modified",
    }
    changes: list[Change] = []
    for path, letter, old_mode, new_mode, old_oid, new_oid in entries:
        if letter not in statuses:
            raise GitError(f"git diff: unexpected status {letter!r} for {path!r}")
        changes.append(
            Change(
                path=path,
                status=statuses[letter],
                old_path=None,
                sha256=digest(new_oid, new_mode),
                old_sha256=digest(old_oid, old_mode),
                mode=mode_of(new_oid, new_mode),
                old_mode=mode_of(old_oid, old_mode),
            )
        )
    return sorted(changes, key=lambda c: c.path)


def merge_check(repo: Path, target_branch: str, source_branch: str) -> MergeCheck:
    """Would merging ``source_branch`` into ``target_branch`` conflict? (touches no checkout)

    Uses ``git merge-tree --write-tree`` (exit 0 clean, 1 conflicts, anything else an error).
    """
    proc = _git(
        repo, "merge-tree", "--write-tree", "--name-only", "-z", "--messages",
        target_branch, source_branch, ok=(0, 1),
    )  # fmt: skip
    out = proc.stdout
    if proc.returncode == 0:
        tree = out.split(b"\0", 1)[0].decode("ascii").strip()
        return MergeCheck(clean=True, conflicts=(), tree=tree)
    # <tree>\0 <path>\0 ... \0 (empty field ends the list) then messages:
    # <n>\0 <path>\0 x n <type>\0 <message>\0 ...
    fields = out.split(b"\0")
    i = 1
    conflicts: list[str] = []
    while i < len(fields) and fields[i] != b"":
        conflicts.append(fields[i].decode("utf-8", "surrogateescape"))
        i += 1
    i += 1
    messages: list[str] = []
    while i < len(fields) and fields[i] != b"":
        try:
            n = int(fields[i])
        except ValueError:
            break
        i += 1 + n  # the paths the message is about
        if i + 1 >= len(fields):
            break
        kind = fields[i].decode("utf-8", "replace")
        text = fields[i + 1].decode("utf-8", "surrogateescape").rstrip("\n")
        i += 2
        if kind.startswith("CONFLICT"):
            messages.append(text)
    return MergeCheck(
        clean=False, conflicts=tuple(dict.fromkeys(conflicts)), tree=None, messages=tuple(messages)
    )


def merge(repo: Path, source_branch: str, message: str, *, date: str | None = None) -> str:
    """Merge ``source_branch`` into the branch checked out in ``repo``; returns the new HEAD.

    Fast-forwards when the current branch is an ancestor of the source; otherwise commits
    exactly the tree :func:`merge_check` computed (parents: current HEAD, source), dated
    ``date`` when given. Refuses — raising :class:`MergeConflictError`, with nothing changed — when
    the merge would conflict. The checkout is then updated with ``git merge --ff-only``, which
    itself refuses (GitError) rather than overwrite local uncommitted changes.
    """
    target = current_branch(repo)
    if target is None:
        raise GitError(f"merge into {repo}: HEAD is detached, no branch to merge into")
    if source_branch.startswith("-"):
        raise GitError(f"merge: {source_branch!r} is not a ref")
    ours, theirs = _out(repo, "rev-parse", "HEAD^{commit}", f"{source_branch}^{{commit}}").split()
    is_ancestor = _git(repo, "merge-base", "--is-ancestor", theirs, ours, ok=(0, 1)).returncode == 0
    if is_ancestor:  # already merged: nothing to do
        return ours
    ff = _git(repo, "merge-base", "--is-ancestor", ours, theirs, ok=(0, 1)).returncode == 0
    if ff:
        new = theirs
    else:
        check = merge_check(repo, ours, theirs)
        if not check.clean or check.tree is None:
            raise MergeConflictError(
                f"merge of {source_branch} into {target} refused: conflicts in "
                + ", ".join(check.conflicts),
                conflicts=check.conflicts,
                messages=check.messages,
            )
        new = _out(
            repo, "commit-tree", check.tree, "-p", ours, "-p", theirs, "-m", message, date=date
        )
    _git(repo, "merge", "-q", "--ff-only", "--no-verify", new)
    return new  # --ff-only either moved HEAD to exactly ``new`` or failed


def is_ignored(repo: Path, path: str | Path) -> bool:
    """True when git ignores ``path`` (relative to ``repo``, or absolute inside it).

    Tracked files are never "ignored", whatever the ignore rules say.
    """
    proc = _git(repo, "check-ignore", "-q", "--", str(path), ok=(0, 1))
    return proc.returncode == 0


def root_commits(repo: Path, commit: str) -> list[str]:
    """The root commits reachable from ``commit``, sorted: the repository's identity."""
    out = _out(repo, "rev-list", "--max-parents=0", "--end-of-options", commit)
    return sorted(set(out.split()))


def commit_and_tree(repo: Path, ref: str = "HEAD") -> tuple[str, str]:
    """``ref``'s commit id and its tree id, in one git call (the gate-integrity snapshot)."""
    if ref.startswith("-"):
        raise GitError(f"rev-parse: {ref!r} is not a ref")
    out = _out(repo, "rev-parse", f"{ref}^{{commit}}", f"{ref}^{{tree}}").split()
    if len(out) != 2:
        raise GitError(f"rev-parse {ref}: expected a commit and a tree, got {out!r}")
    return out[0], out[1]


def tree_of(repo: Path, commit: str) -> str:
    """The id of ``commit``'s tree."""
    return _out(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}")


def is_clean(worktree: Path) -> bool:
    """No modified, staged, deleted or untracked (not ignored) file in ``worktree``."""
    proc = _git(worktree, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    return proc.stdout == b""


def reset_hard(worktree: Path, commit: str) -> None:
    """Put ``worktree`` back at exactly ``commit``: tracked files reset, untracked (and
    ignored) files removed. Used after a read-only role changed the tree it may only read."""
    _git(worktree, "reset", "--hard", "--quiet", commit)
    _git(worktree, "clean", "-fdxq")
