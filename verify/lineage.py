"""The artifacts a run leaves behind: the latest write of every path not deleted afterwards.

Receipts and attestations are about these *final* artifacts (what a merge gate compares with
the files at head), one per path, while the lineage store keeps every write. Builder and
verifier share this one definition so they can never disagree on which receipts must exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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


class FinalArtifacts:
    """Folds lineage records, in order, into the final artifact per path."""

    def __init__(self) -> None:
        self._latest: dict[str, FinalArtifact] = {}
        self._writes: dict[str, int] = {}

    def apply(self, kind: str, seq: int, body: Mapping[str, Any]) -> None:
        if kind == "artifact.write":
            path = body["path"]
            writes = self._writes.get(path, 0) + 1
            self._writes[path] = writes
            self._latest[path] = FinalArtifact(
                path,
                seq,
                body["sha256"],
                body["actor"],
                body["task"],
                body["step"],
                body["model"],
                writes,
            )
        elif kind == "artifact.delete":
            self._latest.pop(body["path"], None)

    def final(self) -> list[FinalArtifact]:
        """Final artifacts sorted by path."""
        return [self._latest[path] for path in sorted(self._latest)]
