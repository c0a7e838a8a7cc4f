"""Rebuild a rounds task's state from its records, for a continue (or a crash resume).

Only rounds that ended (``round.end``) count: a round cut short by a crash or a stop is done
again, from the checkpoint of the last round that ended. What comes back is what the Manager
is allowed to know: the plans, the auditor reports (repaired when repaired), the effective
statuses, the failing streak (reset by an ``approve`` that closed a gate), the feedback on an
invalid last plan, and the operator's answers and instructions it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.verify.rules.header import Header

from .job import RoundsState
from .texts import load_text


def rebuild_state(folder: Path, task: str, records: Iterable[Mapping[str, Any]]) -> RoundsState:
    """The state of ``task`` after the records (audit objects: kind and body), in order."""
    state = RoundsState()
    pending: dict[str, Any] = {}
    for obj in records:
        kind = obj.get("kind")
        body = obj.get("body", {})
        if not str(kind).startswith("round.") or body.get("task") != task:
            continue
        if kind == "round.plan":
            pending = {"plan": body, "audit": None}
        elif kind == "round.audit":
            pending["audit"] = body
        elif kind == "round.end":
            plan, audit = pending.get("plan"), pending.get("audit")
            pending = {}
            if plan is None:
                continue
            report: str | None = None
            effective: str | None = None
            if audit is not None:
                report = load_text(folder, audit["repair"] or audit["text"])
                effective = str(audit["effective"])
                state.latest = Header(audit["status"], audit["integrity"], audit["contract"])
                state.latest_effective = effective
            state.history.append(
                {
                    "round": int(body["round"]),
                    "plan": load_text(folder, plan["text"]),
                    "report": report,
                    "effective": effective,
                }
            )
            state.round = int(body["round"])
            state.failing = int(body["failing"])
            state.checkpoint = str(body["checkpoint"])
            state.feedback = None if plan["valid"] else str(plan["reason"])
            state.inputs = []  # the Manager of this round saw them
        elif kind == "round.input":
            if body["kind"] == "approve":
                state.failing = 0
            text = load_text(folder, body["text"])
            if text:
                state.inputs.append((str(body["kind"]), text))
    return state
