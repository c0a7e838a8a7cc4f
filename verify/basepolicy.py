"""The merge gate's trust: pins from outside the change under test (DESIGN §10, decision 0016).

The gate runs in the checkout of the pull request it judges, so every file of that checkout is
the pull request author's to write. Pins therefore come only from

1. ``--trusted-key`` values (key ids, verifier keys, or key files),
2. an explicit ``--policy FILE``,
3. by default, the policy **as committed on the base ref**: ``harness-verify.toml``, else the
   ``[tool.harness-verify]`` table of ``pyproject.toml``, at the repository's top level in the
   base commit (``git ls-tree`` / ``git cat-file``, never the working tree or the head),

and any file path among them that lies inside the repository's work tree (lexically, or after
resolving symbolic links) is read **from the base commit** as well: a key file or policy file
the pull request edits, adds or replaces by a link changes nothing. A path inside the checkout
that the base commit does not hold as a regular file is refused (exit 2). Files outside the
checkout (``$RUNNER_TEMP/policy.toml`` written from a secret) are read from disk.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from .gitio import GateUsageError, git
from .policy import (
    EMPTY_POLICY,
    POLICY_FILE_NAME,
    PYPROJECT_FILE_NAME,
    PolicyError,
    TrustPolicy,
    load_policy_file,
    pyproject_policy_table,
    read_regular_file,
    resolve_policy,
)

_REGULAR_MODES: Final = frozenset({"100644", "100755"})


class BaseRefReader:
    """Reads paths inside the work tree from one commit, and other paths from disk."""

    def __init__(self, repo: Path, commit: str) -> None:
        self.repo = repo
        self.commit = commit
        self._entries: dict[str, tuple[str, str, str] | None] = {}
        try:
            real_top = git(repo, "rev-parse", "--show-toplevel").decode("utf-8").strip()
            cdup = git(repo, "rev-parse", "--show-cdup").decode("utf-8").strip()
        except (GateUsageError, UnicodeDecodeError):
            raise PolicyError(f"{repo} is not inside a git work tree") from None
        lexical = os.path.normpath(os.path.join(os.path.abspath(repo), cdup))
        self.tops = sorted({os.path.realpath(real_top), lexical})

    def relative(self, path: Path) -> str | None:
        """The path inside the work tree (``a/b``), or ``None`` for a path outside it."""
        try:
            candidates = (os.path.abspath(path), os.path.realpath(path))
        except (OSError, ValueError):  # e.g. a NUL byte: no such file anywhere
            return None
        for candidate in candidates:
            for top in self.tops:
                if candidate == top:
                    return ""
                if candidate.startswith(top.rstrip(os.sep) + os.sep):
                    return Path(os.path.relpath(candidate, top)).as_posix()
        return None

    def _entry(self, rel: str) -> tuple[str, str, str] | None:
        """(mode, type, object id) of ``rel`` in the commit, or ``None`` if it has none
        (asked once per path: ``exists`` and ``read`` of one key file share the answer)."""
        if rel not in self._entries:
            self._entries[rel] = self._lookup(rel)
        return self._entries[rel]

    def _lookup(self, rel: str) -> tuple[str, str, str] | None:
        if not rel:
            return None
        out = git(self.repo, "ls-tree", "-z", "--full-tree", self.commit, "--", rel)
        for item in out.split(b"\0"):
            if not item:
                continue
            meta, _, name = item.partition(b"\t")
            if name.decode("utf-8", "surrogateescape") != rel:
                continue
            mode, kind, oid = meta.decode("ascii").split(" ")
            return mode, kind, oid
        return None

    def name(self, path: Path) -> str:
        rel = self.relative(path)
        return str(path) if rel is None else f"{self.commit[:12]}:{rel}"

    def exists(self, path: Path) -> bool:
        # A file of the checkout that the base lacks "exists", so that ``read`` refuses it with
        # the reason (it is the change's file) rather than a bare "not found".
        try:
            on_disk = os.path.lexists(path)
        except (OSError, ValueError):
            on_disk = False
        rel = self.relative(path)
        if rel is None:
            return on_disk
        return on_disk or self._entry(rel) is not None

    def in_base(self, path: Path) -> bool:
        """Whether the base commit holds ``path`` (a path inside the work tree)."""
        rel = self.relative(path)
        return rel is not None and self._entry(rel) is not None

    def read(self, path: Path, limit: int, what: str) -> bytes:
        rel = self.relative(path)
        if rel is None:
            return read_regular_file(path, limit, what)
        entry = self._entry(rel)
        shown = f"{self.commit[:12]}:{rel}"
        if entry is None:
            raise PolicyError(
                f"{what} {path} is inside the checkout, and the base commit has no {rel}: the "
                "gate reads files of the checkout as committed on the base ref, never from the "
                "change under test (keep it outside the checkout, or commit it on the base)"
            )
        mode, kind, oid = entry
        if kind != "blob" or mode not in _REGULAR_MODES:
            raise PolicyError(f"{what} {shown} is not a regular file in the base commit")
        size = int(git(self.repo, "cat-file", "-s", oid).decode("ascii").strip())
        if size > limit:
            raise PolicyError(f"{what} {shown} is too large ({size} bytes, limit {limit})")
        return git(self.repo, "cat-file", "blob", oid)


def base_ref_policy(reader: BaseRefReader) -> TrustPolicy:
    """The policy committed at the top level of the base commit, or the empty policy."""
    top = Path(reader.tops[0])
    policy = top / POLICY_FILE_NAME
    if reader.in_base(policy):
        return load_policy_file(policy, reader)
    pyproject = top / PYPROJECT_FILE_NAME
    if reader.in_base(pyproject) and pyproject_policy_table(pyproject, reader) is not None:
        return load_policy_file(pyproject, reader)
    return EMPTY_POLICY


def resolve_gate_policy(
    trusted_keys: Sequence[str], policy_file: Path | None, repo: Path, base_commit: str, cwd: Path
) -> TrustPolicy:
    """The gate's pins: ``--trusted-key``, else ``--policy``, else the base ref's policy file;
    paths inside the checkout are read from ``base_commit``. Raises :class:`PolicyError`."""
    reader = BaseRefReader(repo, base_commit)
    if trusted_keys or policy_file is not None:
        return resolve_policy(trusted_keys, policy_file, cwd, reader)
    return base_ref_policy(reader)


__all__ = ["BaseRefReader", "base_ref_policy", "resolve_gate_policy"]
