"""Semantic checks: each rule has a history that breaks it."""

from __future__ import annotations

from typing import Any

import pytest

from harness.verify.records import Record
from harness.verify.semantics import SemanticsError, check_run_semantics

HEX = "ab" * 32


def _rec(kind: str, **body: Any) -> Record:
    return Record("audit", "r", 0, "2026-01-01T00:00:00.000000Z", kind, body, HEX)


def planned(task: str) -> Record:
    return _rec(
        "task.planned", task=task, role="coder", priority=0, depends=[], adapter="s", tools=[]
    )


def move(task: str, a: str, b: str) -> Record:
    return _rec("task.transition", task=task, reason="r", **{"from": a, "to": b})


def spawn(*tasks: str) -> Record:
    return _rec(
        "agent.spawn",
        batch="b1",
        tasks=list(tasks),
        adapter="s",
        branch="x",
        worktree="w",
        timeout_ms=1,
    )


def gate(task: str, passed: bool) -> Record:
    return _rec("gate.result", task=task, gate="g", passed=passed, exit_code=0, duration_ms=1)


def merge(task: str, merged: bool) -> Record:
    return _rec("merge.result", task=task, branch="x", merged=merged, commit=None, reason="r")


def write(task: str) -> Record:
    return Record(
        "lineage",
        "r",
        0,
        "2026-01-01T00:00:00.000000Z",
        "artifact.write",
        {"path": "a", "task": task},
        HEX,
    )


def _happy(task: str = "t1") -> list[Record]:
    return [
        planned(task),
        move(task, "planned", "open"),
        move(task, "open", "claimed"),
        spawn(task),
        move(task, "claimed", "in_progress"),
        move(task, "in_progress", "gating"),
        gate(task, True),
        merge(task, True),
        move(task, "gating", "done"),
    ]


def _check(audit: list[Record], lineage: list[Record] = ()) -> None:  # type: ignore[assignment]
    check_run_semantics(
        "r",
        [(r, f"a{i}") for i, r in enumerate(audit)],
        [(r, f"l{i}") for i, r in enumerate(lineage)],
    )


def test_lawful_history_passes() -> None:
    _check(_happy(), [write("t1")])
    denied = [
        planned("t2"),
        move("t2", "planned", "open"),
        _rec("capability.denied", task="t2", tools=["web"], tags=["A"], reason="trifecta"),
        move("t2", "open", "denied"),
        _rec("task.refused", task="t2", reason="terminal", **{"from": "denied", "to": "open"}),
    ]
    _check(_happy() + denied, [write("t1")])
    _check([], [write("anything")])  # no runtime records: nothing to check


@pytest.mark.parametrize(
    ("audit", "lineage", "reason"),
    [
        ([move("t1", "planned", "open")], [], "never declared"),
        ([planned("t1"), planned("t1")], [], "declared twice"),
        ([planned("t1"), move("t1", "open", "claimed")], [], "but is 'planned'"),
        ([planned("t1"), move("t1", "planned", "done")], [], "not a legal transition"),
        ([*_happy()[:6], merge("t1", True), move("t1", "gating", "done")], [], "merged without"),
        ([*_happy()[:6], gate("t1", False), move("t1", "gating", "done")], [], "done without"),
        ([*_happy()[:7], move("t1", "gating", "done")], [], "done without"),
        (
            [
                planned("t1"),
                _rec("task.refused", task="t1", reason="x", **{"from": "planned", "to": "open"}),
            ],
            [],
            "legal transition planned -> open was refused",
        ),
        (
            [
                planned("t1"),
                _rec("capability.denied", task="t1", tools=[], tags=[], reason="x"),
                spawn("t1"),
            ],
            [],
            "spawned denied task",
        ),
        (
            [
                planned("t1"),
                _rec("capability.denied", task="t1", tools=[], tags=[], reason="x"),
                move("t1", "planned", "open"),
            ],
            [],
            "denied by the capability matrix but moves",
        ),
        (
            [planned("t1"), _rec("capability.denied", task="t1", tools=[], tags=[], reason="x")],
            [],
            "denied but ends 'planned'",
        ),
        ([planned("t1")], [write("t1")], "which never ran"),
        (_happy(), [write("t9")], "never declared"),
    ],
)
def test_each_rule_fails(audit: list[Record], lineage: list[Record], reason: str) -> None:
    with pytest.raises(SemanticsError, match=reason):
        _check(audit, lineage)
