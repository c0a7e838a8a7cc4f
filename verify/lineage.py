"""The artifacts a run leaves behind: the latest write of every path not deleted afterwards.

Receipts and attestations are about these *final* artifacts (what a merge gate compares with
the files at head), one per path, while the lineage store keeps every write. When the run was
made by the runtime (its audit store declares tasks), only writes and deletes of tasks whose
change was merged count: a failed task's writes stay in the lineage as evidence of what the
agent did, but they never reached the repository, so no receipt vouches for them. Builder
and verifier share this one definition so they can never disagree on which receipts exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson


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


Write = tuple[str, str, str, int, "str | None", str]
"""A write's members as folded: (sha256, actor, task, step, model, mode)."""

WRITE_MEMBERS: Final = ("sha256", "actor", "task", "step", "model", "mode")


def pack_write(texts: Sequence[bytes]) -> bytes:
    """The JSON texts of a write's ``WRITE_MEMBERS``, as a canonical record spells them, in one
    bytes object (joined by newlines, which canonical JSON text never holds)."""
    return b"\n".join(texts)


def unpack_write(packed: bytes) -> Write:
    sha256, actor, task, step, model, mode = (orjson.loads(t) for t in packed.split(b"\n"))
    return sha256, actor, task, step, model, mode


class ArtifactFold:
    """What a run of lineage records does to the final artifacts, for joining in order.

    ``paths``: per path (its canonical JSON text, quotes included: a canonical record spells a
    string one way only), how many writes it had, and its last write as ``(seq, packed
    members)``, or None when its last operation is a delete. ``FinalArtifacts.join`` applies
    one after another: a store checked in chunks (other processes fold theirs) reaches exactly
    the state of ``FinalArtifacts.apply`` record by record, because a path's final artifact
    depends only on its last operation and its count. Nothing is decoded until it is read.
    """

    __slots__ = ("paths",)

    def __init__(self) -> None:
        self.paths: dict[bytes, tuple[int, tuple[int, bytes] | None]] = {}


class FinalArtifacts:
    """Folds lineage records, in order, into the final artifact per path.

    ``merged_tasks``: None when the run has no runtime records (every write counts), else the
    tasks whose changes were merged (see ``MergeFacts``). A path's latest write is kept as it
    was folded (decoded members, or the packed JSON texts of a joined ``ArtifactFold``), and
    becomes a ``FinalArtifact`` only when asked for.
    """

    def __init__(self, merged_tasks: frozenset[str] | None = None) -> None:
        self._latest: dict[str, tuple[int, Write | bytes, int]] = {}
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
                seq,
                (
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
        for text, (writes, last) in fold.paths.items():
            path = orjson.loads(text)
            total = counts.get(path, 0) + writes
            if writes:
                counts[path] = total
            if last is None:
                latest.pop(path, None)
            else:
                latest[path] = (last[0], last[1], total)

    def current(self, path: str) -> FinalArtifact | None:
        """The final artifact of ``path`` so far (None if none, or deleted)."""
        kept = self._latest.get(path)
        return None if kept is None else _artifact(path, *kept)

    def final(self) -> list[FinalArtifact]:
        """Final artifacts sorted by path."""
        return [_artifact(path, *self._latest[path]) for path in sorted(self._latest)]


def _artifact(path: str, seq: int, write: Write | bytes, writes: int) -> FinalArtifact:
    sha256, actor, task, step, model, mode = (
        unpack_write(write) if isinstance(write, bytes) else write
    )
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
