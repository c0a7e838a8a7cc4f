"""The dictionaries the pages render and the JSON API returns, built from a ``RunIndex``.

One builder per view (runs list row, run detail, task detail): the HTML and the JSON of a
view are the same data, so what a script reads from ``/api`` is what the page shows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from harness.receipts.euaiact_control import control_section, trend_svg
from harness.receipts.safeopen import SafeOpenError, open_read
from harness.verify.rules.header import MAX_TEXT_BYTES, parse_header, parse_next

from .evidence import Evidence, sealed_size
from .fold import TaskView
from .gitdiff import Differ
from .index import RunIndex

MAX_PLAN: Final = 4 << 20
HEX: Final = frozenset("0123456789abcdef")


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file (no link followed), None when absent, unsafe or larger
    than ``limit``."""
    try:
        fd = open_read(path)
    except SafeOpenError:
        return None
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size > limit:
            return None
        return os.read(fd, limit + 1)[:limit]
    finally:
        os.close(fd)


def summary(index: RunIndex, evidence: Evidence) -> dict[str, Any]:
    fold = index.fold
    return {
        "run": index.run_id,
        "state": fold.state_label(),
        "status": fold.status,
        "ended": fold.ended,
        "outcome": fold.outcome,
        "epoch": fold.epoch,
        "records": fold.count,
        "generation": index.generation,
        "outcomes": fold.outcomes(),
        "seal": {
            "records": fold.count,
            "sealed": sealed_size(index.folder, "audit"),
            "time": fold.last_time,
        },
        "verification": evidence.verification(index.run_id),
    }


def _control(index: RunIndex) -> tuple[dict[str, Any], str]:
    """The control section and its trend (``receipts.euaiact_control``, the verifier's own
    controller fold), cached until a control record is added."""
    key = (index.generation, len(index.fold.control_records))
    cached = index.control_cache
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    plan = read_bounded(index.folder / "plan.json", MAX_PLAN)
    plans = {index.run_id: plan} if plan is not None else {}
    try:
        section = control_section({index.run_id: index.fold.control_records}, plans)
        svg = trend_svg(section)
    except (KeyError, TypeError, ValueError) as exc:  # records a foreign harness wrote
        section, svg = {"steps": 0, "decisions": [], "trends": [], "problem": str(exc)}, ""
    index.control_cache = (key, section, svg)
    return section, svg


def detail(index: RunIndex, evidence: Evidence) -> tuple[dict[str, Any], str]:
    """The run's detail and its control trend SVG."""
    fold = index.fold
    out = summary(index, evidence)
    control, svg = _control(index)
    out.update(
        tasks=[
            {
                "task": t.name,
                "state": t.state,
                "role": t.role,
                "attempts": len(t.attempts),
                "reason": t.reason,
            }
            for t in sorted(fold.tasks.values(), key=lambda t: t.name)
        ],
        batches=[
            {
                "batch": b.batch,
                "tasks": b.tasks,
                "attempt": b.attempt,
                "branch": b.branch,
                "start": b.start,
                "end": b.end,
                "exit_code": b.exit_code,
                "commit": b.commit,
            }
            for b in fold.batches.values()
        ],
        receipts=index.receipts(),
        evidence=evidence.health(index.run_id),
        control=control,
        problems=[*fold.problems, *(p for p in (index.error, index.bus_error) if p)],
        behind=index.behind,
    )
    return out, svg


def _round_text(index: RunIndex, digest: Any) -> str | None:
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= HEX:
        return None
    data = read_bounded(index.folder / "rounds" / f"{digest}.txt", MAX_TEXT_BYTES)
    return data.decode("utf-8", "replace") if data is not None else None


def _round(index: RunIndex, item: dict[str, Any]) -> dict[str, Any]:
    out = dict(item)
    text = _round_text(index, item.get("text"))
    out["text_body"] = text
    if text is not None and item["kind"] == "round.audit":
        parsed = parse_header(text)
        fields = (
            {
                "Status": parsed.header.status,
                "Integrity": parsed.header.integrity,
                "Contract audit": parsed.header.contract,
            }
            if parsed.header is not None
            else None
        )
        out["header"] = {"fields": fields, "problem": parsed.problem}
    elif text is not None and item["kind"] == "round.plan":
        nxt = parse_next(text)
        fields = {"Next": nxt.action} if nxt.action is not None else None
        out["header"] = {"fields": fields, "problem": nxt.problem}
    return out


def task_detail(index: RunIndex, view: TaskView, differ: Differ) -> dict[str, Any]:
    writes = []
    for write in view.writes:
        diff = differ.diff(write["path"], write["sha256"], write["parents"], view.commits)
        writes.append(
            {
                **write,
                "commit": diff.commit,
                "parent_commit": diff.parent_commit,
                "diff": diff.text,
                "note": diff.note,
            }
        )
    return {
        "run": index.run_id,
        "task": view.name,
        "state": view.state,
        "role": view.role,
        "adapter": view.adapter,
        "depends": view.depends,
        "attempts_list": view.attempts,
        "failures": view.failures,
        "transitions": view.transitions,
        "gates": view.gates,
        "rounds": [_round(index, item) for item in view.rounds],
        "writes": writes,
        "commits": view.commits,
    }
