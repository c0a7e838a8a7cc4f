"""The artifacts a run leaves behind: the latest write of every path not deleted afterwards.

Receipts and attestations are about these *final* artifacts (what a merge gate compares with
the files at head), one per path, while the lineage store keeps every write. When the run was
made by the runtime (its audit store declares tasks), only writes and deletes of tasks whose
change was merged count: a failed task's writes stay in the lineage as evidence of what the
agent did, but they never reached the repository, so no receipt vouches for them. Builder
and verifier share this one definition so they can never disagree on which receipts exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class FinalArtifact:
    path: str
    seq: int
    sha256: str
    actor: str
    task: str
    step: int
    model: str | None
    writes: int
    """How many artifact.write records this path has in the run."""
    mode: str
    """Git file mode of the write ("100644", "100755", "120000", "160000")."""


Write = tuple[int, str, str, str, int, "str | None", str]
"""A write as folded: (seq, sha256, actor, task, step, model, mode)."""


class ArtifactFold:
    """What a run of lineage records does to the final artifacts, for joining in order.

    Per path: its last write (None when its last operation is a delete) and how many writes it
    had. ``FinalArtifacts.join`` applies one after another: a store checked in chunks (other
    processes fold theirs) reaches exactly the state of ``FinalArtifacts.apply`` record by
    record, because a path's final artifact depends only on its last operation and its count.
    """

    __slots__ = ("latest", "merged", "writes")

    def __init__(self, merged_tasks: frozenset[str] | None = None) -> None:
        self.latest: dict[str, Write | None] = {}
        self.writes: dict[str, int] = {}
        self.merged = merged_tasks

    def apply(self, kind: str, seq: int, body: Mapping[str, Any]) -> None:
        if self.merged is not None and body.get("task") not in self.merged:
            return
        if kind == "artifact.write":
            path = body["path"]
            self.writes[path] = self.writes.get(path, 0) + 1
            self.latest[path] = (
                seq,
                body["sha256"],
                body["actor"],
                body["task"],
                body["step"],
                body["model"],
                body["mode"],
            )
        elif kind == "artifact.delete":
            self.latest[body["path"]] = None


class FinalArtifacts:
    """Folds lineage records, in order, into the final artifact per path.

    ``merged_tasks``: None when the run has no runtime records (every write counts), else the
    tasks whose changes were merged (see ``MergeFacts``). A path's latest write is kept as the
    tuple it was folded into, and becomes a ``FinalArtifact`` only when asked for.
    """

    def __init__(self, merged_tasks: frozenset[str] | None = None) -> None:
        self._latest: dict[str, tuple[Write, int]] = {}
        self._writes: dict[str, int] = {}
        self._merged = merged_tasks

    @property
    def merged_tasks(self) -> frozenset[str] | None:
        return self._merged

    def apply(self, kind: str, seq: int, body: Mapping[str, Any]) -> None:
        if self._merged is not None and body.get("task") not in self._merged:
            return
        if kind == "artifact.write":
            path = body["path"]
            writes = self._writes.get(path, 0) + 1
            self._writes[path] = writes
            self._latest[path] = (
                (
                    seq,
                    body["sha256"],
                    body["actor"],
                    body["task"],
                    body["step"],
                    body["model"],
                    body["mode"],
                ),
                writes,
            )
        elif kind == "artifact.delete":
            self._latest.pop(body["path"], None)

    def join(self, fold: ArtifactFold) -> None:
        """Apply the records ``fold`` summarizes (the ones right after those applied so far)."""
        counts = self._writes
        latest = self._latest
        for path, writes in fold.writes.items():
            counts[path] = counts.get(path, 0) + writes
        for path, last in fold.latest.items():
            if last is None:
                latest.pop(path, None)
            else:
                latest[path] = (last, counts[path])

    def current(self, path: str) -> FinalArtifact | None:
        """The final artifact of ``path`` so far (None if none, or deleted)."""
        kept = self._latest.get(path)
        return None if kept is None else _artifact(path, *kept)

    def final(self) -> list[FinalArtifact]:
        """Final artifacts sorted by path."""
        return [_artifact(path, *self._latest[path]) for path in sorted(self._latest)]


def _artifact(path: str, write: Write, writes: int) -> FinalArtifact:
    seq, sha256, actor, task, step, model, mode = write
    return FinalArtifact(path, seq, sha256, actor, task, step, model, writes, mode)


FOLD_ORDER: Final = ("audit", "lineage", "replay", "control", "events")
"""Order in which builder and verifier fold a run's stores: audit before lineage (and before
events, whose messages cite audit records)."""


class MergeFacts:
    """Folds audit records into the set of merged tasks (None if no runtime records)."""

    def __init__(self) -> None:
        self.declared = False
        self.merged: set[str] = set()

    def apply(self, kind: str, body: Mapping[str, Any]) -> None:
        if kind == "task.planned":
            self.declared = True
        elif kind == "merge.result" and body["merged"]:
            self.merged.add(str(body["task"]))

    def merged_tasks(self) -> frozenset[str] | None:
        return frozenset(self.merged) if self.declared else None
