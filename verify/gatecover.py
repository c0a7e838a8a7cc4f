"""What covers one changed file: the bundle's merged history of its path, bound to the change.

A change of one path is the pair (state at base, state at head), where a *state* is the file's
content digest and git mode, or "absent". The gate covers it only with evidence of exactly that
transition (issue 9 §2):

* the **latest** merged action on the path (across every run of the bundle, ordered by record
  time, then run id, then seq) leaves the head state: a write with the same SHA-256 *and* mode
  (so ``chmod +x`` or a symlink whose target text equals the attested content is not covered),
  or a delete when the file is absent at head;
* walking back from it, each action's recorded **parent state** is either the base state — the
  chain starts where the pull request's base is — or the state the previous merged action left
  (a path written in several runs); a parent that matches neither (a maintainer's later manual
  fix, an old bundle re-applied, another repository) is not covered;
* only actions of runs whose recorded base commit is an ancestor of the head count: a run made
  in an unrelated history covers nothing (checked by the caller, which knows git).

Pure: no I/O; the caller folds the verified records into :class:`PathAction` lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

State = tuple[str, str] | None
"""(sha256 hex, git mode), or None for "absent"."""

NO_RECEIPT: Final = "no receipt for this file"
CONTENT_DIFFERS: Final = (
    "content differs from the attested write (edited after the agent wrote it?)"
)
MODE_DIFFERS: Final = "git mode differs from the attested write"
DELETION_NOT_ATTESTED: Final = "deletion not attested"
PARENT_DIFFERS: Final = (
    "the attested write started from another version of the file than the base has "
    "(changed after the run, or evidence of another change)"
)
BROKEN_HISTORY: Final = "the bundle's writes of this path do not follow one another"
OTHER_HISTORY: Final = "the bundle's runs that touch this path were made in another history"
SUBMODULE: Final = "submodule changes cannot be attested"


@dataclass(frozen=True, slots=True)
class PathAction:
    """One merged write or delete of a path, as recorded in a verified lineage store."""

    path: str
    kind: str
    """``artifact.write`` or ``artifact.delete``."""
    result: State
    """The state the action leaves (None for a delete)."""
    parent: State
    """The recorded state before the action (None: the file did not exist)."""
    run: str
    task: str
    seq: int
    time: str


def action_from_record(
    run: str, kind: str, seq: int, time: str, body: Mapping[str, Any]
) -> PathAction:
    """The :class:`PathAction` of a verified ``artifact.write``/``artifact.delete`` record."""
    parents = body["parents"]
    parent_mode = body["parent_mode"]
    parent: State = None
    if parents and parent_mode is not None:
        parent = (str(parents[0]), str(parent_mode))
    result: State = None
    if kind == "artifact.write":
        result = (str(body["sha256"]), str(body["mode"]))
    return PathAction(str(body["path"]), kind, result, parent, run, str(body["task"]), seq, time)


def order_key(action: PathAction) -> tuple[str, str, int]:
    return (action.time, action.run, action.seq)


@dataclass(frozen=True, slots=True)
class Coverage:
    covered: bool
    reason: str
    evidence: PathAction | None
    """The action that vouches for the head state (or the closest one found)."""


def _shown(state: State) -> str:
    return "absent" if state is None else f"{state[1]} {state[0][:12]}…"


def judge_transition(
    base: State, head: State, actions: Sequence[PathAction], *, gitlink: bool = False
) -> Coverage:
    """Whether ``actions`` (the merged actions on one path, any order) cover base -> head."""
    if gitlink:
        return Coverage(False, SUBMODULE, None)
    history = sorted(actions, key=order_key)
    if not history:
        return Coverage(False, DELETION_NOT_ATTESTED if head is None else NO_RECEIPT, None)
    last = history[-1]
    if head is None:
        if last.kind != "artifact.delete":
            return Coverage(
                False,
                DELETION_NOT_ATTESTED + " (the bundle's last attested action on this path is "
                "a write)",
                last,
            )
    elif last.result is None:
        return Coverage(
            False,
            NO_RECEIPT + " (the bundle's last attested action on this path deletes it)",
            last,
        )
    elif last.result[0] != head[0]:
        return Coverage(False, CONTENT_DIFFERS, last)
    elif last.result[1] != head[1]:
        return Coverage(
            False, f"{MODE_DIFFERS} ({head[1]} at head, {last.result[1]} attested)", last
        )
    index = len(history) - 1
    while history[index].parent != base:
        if index == 0:
            return Coverage(
                False,
                f"{PARENT_DIFFERS}: base {_shown(base)}, "
                f"attested parent {_shown(history[0].parent)}",
                last,
            )
        if history[index - 1].result != history[index].parent:
            return Coverage(False, BROKEN_HISTORY, last)
        index -= 1
    if head is None:
        return Coverage(True, f"deleted by merged task {last.task}", last)
    return Coverage(
        True,
        f"sha256 {head[0][:12]}… mode {head[1]} matches the final write of task {last.task}, "
        f"from the base's {_shown(base)}",
        last,
    )
