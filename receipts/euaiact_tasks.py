"""The ``tasks`` section of the EU AI Act report: each task's last recorded state.

The report's verdict box counts tasks by outcome and its timeline places each task's last
transition; both must come from report.json itself (report.html renders report.json and nothing
else), so the final state of every task is derived here from the verified audit records:
``task.planned`` puts a task in ``planned``, each ``task.transition`` moves it to ``to``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.verify.layout import store_member
from harness.verify.records import Record

_CAP = 50


def tasks_section(runs: Mapping[str, Sequence[Record]]) -> list[dict[str, Any]]:
    """One entry per (run, task), sorted: last state, its time, transitions, evidence."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for run_id in sorted(runs):
        for record in runs[run_id]:
            if record.store != "audit" or record.kind not in ("task.planned", "task.transition"):
                continue
            task = str(record.body["task"])
            entry = found.setdefault(
                (run_id, task),
                {"run": run_id, "task": task, "transitions": 0, "evidence": [], "count": 0},
            )
            if record.kind == "task.transition":
                entry["state"] = str(record.body["to"])
                entry["transitions"] += 1
            else:
                entry.setdefault("state", "planned")
            entry["time"] = record.time
            entry["count"] += 1
            if len(entry["evidence"]) < _CAP:
                ref = {"member": store_member(record.run, record.store), "seq": record.seq}
                entry["evidence"].append(ref)
    out = []
    for (_run, _task), entry in sorted(found.items()):
        count = entry.pop("count")
        entry.setdefault("state", "planned")
        out.append({**entry, "evidence_count": count})
    return out
