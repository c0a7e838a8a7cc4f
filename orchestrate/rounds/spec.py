"""The ``rounds`` table of a task in a plan (docs/spec/plan.md, "Rounds").

    [tasks.rounds]
    max_rounds = 6            # 1..1000, default 25
    manager = "scripted"      # adapter of the Manager (default: the task's adapter)
    auditor = "scripted"      # adapter of the Auditor (default: the task's adapter)
    manager_model = "..."     # optional
    auditor_model = "..."     # optional
    gate_wait_s = 3600        # how long a round gate waits for an operator (1..604800)
    # scripted roles only:
    steps = [{say = "Create the guide", edits = [{path = "docs/guide.md", content = "..."}]}]
    ghost = true              # the Executor claims success and changes nothing
    auditor_writes = "x.txt"  # the Auditor tries to write this path
    bad_header = true         # the Auditor's first report has an invalid header

A rounds task needs a role of its own (no other task has it), so it always runs as a batch of
one and the role's concurrency keeps it alone.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model import Edit, RoundsSpec, RoundStep
from ..planfields import (
    _ROUNDS_KEYS,
    _STEP_KEYS,
    MAX_GATE_WAIT_S,
    MAX_ROUNDS,
    PlanError,
    _int,
    _join,
    _kind,
    _list,
    _name,
    _str,
    _table,
)

EditParser = Callable[[object, str], Edit]


def _flag(value: object, key: str) -> bool:
    if type(value) is not bool:
        raise PlanError(key, f"must be a boolean, got {_kind(value)}")
    return value


def parse_rounds(value: object, key: str, parse_edit: EditParser) -> RoundsSpec:
    """The ``rounds`` table at ``key``; ``parse_edit`` checks an edit against the task scope."""
    table = _table(value, key, _ROUNDS_KEYS, ())

    def sub(name: str) -> str:
        return _join(key, name)

    steps_key = sub("steps")
    steps: list[RoundStep] = []
    for i, item in enumerate(_list(table.get("steps", []), steps_key)):
        step_key = f"{steps_key}[{i}]"
        step = _table(item, step_key, _STEP_KEYS, ("say",))
        edits_key = _join(step_key, "edits")
        edits = tuple(
            parse_edit(edit, f"{edits_key}[{j}]")
            for j, edit in enumerate(_list(step.get("edits", []), edits_key))
        )
        steps.append(RoundStep(say=_str(step["say"], _join(step_key, "say")), edits=edits))
    writes = table.get("auditor_writes")
    return RoundsSpec(
        max_rounds=_int(table.get("max_rounds", 25), sub("max_rounds"), 1, MAX_ROUNDS),
        manager=_name(table["manager"], sub("manager")) if "manager" in table else None,
        auditor=_name(table["auditor"], sub("auditor")) if "auditor" in table else None,
        manager_model=(
            _str(table["manager_model"], sub("manager_model")) if "manager_model" in table else None
        ),
        auditor_model=(
            _str(table["auditor_model"], sub("auditor_model")) if "auditor_model" in table else None
        ),
        steps=tuple(steps),
        ghost=_flag(table.get("ghost", False), sub("ghost")),
        auditor_writes=_str(writes, sub("auditor_writes")) if writes is not None else None,
        bad_header=_flag(table.get("bad_header", False), sub("bad_header")),
        gate_wait_s=_int(table.get("gate_wait_s", 3600), sub("gate_wait_s"), 1, MAX_GATE_WAIT_S),
    )
