"""Gates must not change what is merged: the worktree after the gates equals the one before.

The runtime snapshots the batch's worktree right before its first gate and right after its
last one: the commit HEAD resolves to, that commit's tree, and whether the working tree is
clean (no modified, staged or untracked-but-not-ignored file). The merge then takes exactly
the snapshot's commit (the one the lineage was computed from). Any difference is an integrity
violation: the tasks fail and nothing is merged. Ignored files are left out of "clean" on
purpose: they are never committed, so they cannot reach the merge (a gate's ``__pycache__``
is not an attack on the merge); the sandbox mounts the worktree read-only for gates anyway.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorktreeState:
    commit: str
    tree: str
    clean: bool


def violation(before: WorktreeState, after: WorktreeState) -> str | None:
    """Why the gates changed the worktree (None: intact). The checks, in order: dirty before
    the gates, HEAD moved, tree differs, dirty after."""
    if not before.clean:
        return "the worktree was not clean before the gates"
    if after.commit != before.commit:
        return f"HEAD moved from {before.commit} to {after.commit} during the gates"
    if after.tree != before.tree:
        return f"the tree changed from {before.tree} to {after.tree} during the gates"
    if not after.clean:
        return "the gates left modified or untracked files in the worktree"
    return None
