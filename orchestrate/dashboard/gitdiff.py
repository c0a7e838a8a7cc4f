"""The diff of each recorded write against its parent, from the git objects the records name.

A lineage ``artifact.write`` names a path and the SHA-256 of the written content and of its
parent content (DESIGN §3); the audit records name the task's commits (``gate.integrity``
``commit``, ``round.step`` ``commit_after``). The write's content is the blob at the path
in the newest of those commits whose bytes hash to the record's digest; its parent is the
first blob up that commit's first-parent history (at most ``DEPTH`` commits) whose bytes
hash to the recorded parent digest, or no file at all for a write without parents. So what
is shown is checked against the evidence: a blob that does not match is never shown as the
write.

Read-only git: ``git cat-file --batch`` (one process per diff), no checkout, no index, no
optional locks, hooks off (``orchestrate/git.py``'s isolated configuration). Bounded: blobs
over ``MAX_BLOB`` bytes and diffs over ``MAX_LINES`` lines are cut with a note.
"""

from __future__ import annotations

import difflib
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .. import git

DEPTH: Final = 64
MAX_BLOB: Final = 1 << 20
MAX_LINES: Final = 2000
CACHE: Final = 1000


@dataclass(frozen=True)
class WriteDiff:
    path: str
    commit: str | None
    parent_commit: str | None
    text: str
    note: str


def _batch(repo: Path, names: Sequence[str]) -> list[bytes | None]:
    """Contents of ``<rev>:<path>`` names (None when missing or not a blob)."""
    if not names:
        return []
    data = "".join(f"{n}\n" for n in names).encode("utf-8", "surrogateescape")
    out = git._git(repo, "--no-optional-locks", "cat-file", "--batch", input=data).stdout
    found: list[bytes | None] = []
    pos = 0
    for _ in names:
        eol = out.index(b"\n", pos)
        line = out[pos:eol]
        header = line.split()
        pos = eol + 1
        if not line.endswith((b" missing", b" ambiguous")) and len(header) == 3:
            size = int(header[2])
            found.append(out[pos : pos + size] if header[1] == b"blob" else None)
            pos += size + 1
        else:
            found.append(None)
    return found


def _history(repo: Path, commit: str) -> list[str]:
    out = git._git(
        repo, "--no-optional-locks", "rev-list", "--first-parent", f"--max-count={DEPTH}",
        commit, "--",
    ).stdout  # fmt: skip
    return out.decode("ascii").split()


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _text(data: bytes) -> list[str]:
    return data[:MAX_BLOB].decode("utf-8", "replace").splitlines(keepends=True)


class Differ:
    """Diffs of writes, cached (a write's diff never changes once its commit exists)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._cache: OrderedDict[tuple[str, str, tuple[str, ...]], WriteDiff] = OrderedDict()

    def diff(
        self, path: str, sha256: str, parents: Sequence[str], commits: Sequence[str]
    ) -> WriteDiff:
        key = (path, sha256, tuple(commits))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        try:
            result = self._diff(path, sha256, parents, commits)
        except (git.GitError, ValueError) as exc:
            result = WriteDiff(path, None, None, "", f"git could not read the objects: {exc}")
        if result.commit is not None:
            self._cache[key] = result
            while len(self._cache) > CACHE:
                self._cache.popitem(last=False)
        return result

    def _diff(
        self, path: str, sha256: str, parents: Sequence[str], commits: Sequence[str]
    ) -> WriteDiff:
        if (
            "\n" in path
            or not path
            or not all(
                len(c) in (40, 64) and all(ch in "0123456789abcdef" for ch in c) for c in commits
            )
        ):
            return WriteDiff(path, None, None, "", "the records name no usable commit or path")
        candidates = list(dict.fromkeys(reversed(commits)))[:DEPTH]
        blobs = _batch(self.repo, [f"{c}:{path}" for c in candidates])
        written = next(
            ((c, b) for c, b in zip(candidates, blobs, strict=True) if _sha(b) == sha256), None
        )
        if written is None:
            return WriteDiff(path, None, None, "", "no commit the records name holds this content")
        commit, content = written
        assert content is not None
        history = _history(self.repo, commit)[1:]
        before = _batch(self.repo, [f"{c}:{path}" for c in history])
        parent_commit: str | None = None
        parent: bytes | None = None
        for candidate, blob in zip(history, before, strict=True):
            if (not parents and blob is None) or (parents and _sha(blob) == parents[0]):
                parent_commit, parent = candidate, blob
                break
        note = ""
        if parent_commit is None:
            note = f"the parent content was not found in the last {DEPTH} commits"
        if len(content) > MAX_BLOB or (parent is not None and len(parent) > MAX_BLOB):
            note = f"cut at {MAX_BLOB} bytes"
        lines = list(
            difflib.unified_diff(
                _text(parent) if parent is not None else [],
                _text(content),
                fromfile=f"a/{path}" if parent is not None else "/dev/null",
                tofile=f"b/{path}",
            )
        )
        if len(lines) > MAX_LINES:
            lines = lines[:MAX_LINES]
            note = f"cut at {MAX_LINES} lines"
        return WriteDiff(path, commit, parent_commit, "".join(lines), note)
