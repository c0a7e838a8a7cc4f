"""The control section of the Article 12 report: every control decision the verifier
re-decided, and per agent the trend of its bucket and CUSUM over the run's steps.

The trend is not a second copy of the controller: the recorded steps are folded through the
verifier's own ``harness.verify.rules.controller`` (the bundle was verified first, so the
fold gives the decisions the records carry), and each point is the state right after a step:
the agent's bucket level and the largest of its pace CUSUM statistics, each as per-mille of
its threshold (1000 = the line where the controller acts). A decision's own record gives the
level it acted at (the bucket and the statistic restart from 0 once it has acted).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any, Final

from harness.verify.canonical import parse_canonical
from harness.verify.records import Record
from harness.verify.rules import trifecta
from harness.verify.rules.controller import Controller, Params, parse_params, step_of

MAX_POINTS: Final = 400
"""Points per agent in the trend (a long run is thinned to every n-th step, decisions kept)."""
MAX_ROWS: Final = 500
CLIP_PM: Final = 1500
WIDTH: Final = 1000
LEFT: Final = 150
RIGHT: Final = 20
PANEL: Final = 60
GAP: Final = 16
LABEL_CHARS: Final = 22


def control_section(runs: Mapping[str, list[Record]], plans: Mapping[str, bytes]) -> dict[str, Any]:
    """``report.json``'s ``control``: decisions (with their evidence) and trends per agent."""
    decisions: list[dict[str, Any]] = []
    trends: list[dict[str, Any]] = []
    steps = 0
    for run_id, records in sorted(runs.items()):
        plan = plans.get(run_id)
        machine = _controller(records, parse_canonical(plan)) if plan is not None else None
        points: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            if record.store != "audit":
                continue
            body = record.body
            if record.kind == "control.decision":
                if len(decisions) < MAX_ROWS:
                    decisions.append(_row(record))
                _mark(points, body)
            elif record.kind == "control.phase" and machine is not None:
                machine.phase = str(body["phase"])
            elif record.kind == "control.sensor" and machine is not None:
                steps += 1
                step, readings = step_of(body)
                machine.observe(step, readings)
                points.setdefault(step.agent, []).append(_point(machine, step.agent, body))
        for agent, series in sorted(points.items()):
            trends.append({"run": run_id, "agent": agent, "points": _thin(series)})
    return {"steps": steps, "decisions": decisions, "trends": trends}


def _controller(records: list[Record], plan: Any) -> Controller | None:
    start = next((r for r in records if r.kind == "run.start"), None)
    if start is None or type(plan) is not dict or type(plan.get("tasks")) is not list:
        return None
    params = parse_params(plan.get("control"))
    if not isinstance(params, Params):
        return None
    matrix = trifecta.matrix_from_object(start.body["capabilities"])
    sandbox = start.body["sandbox"]
    tasks: dict[str, list[tuple[str, list[str]]]] = {}
    for task in plan["tasks"]:
        tasks.setdefault(str(task["role"]), []).append(
            (str(task["adapter"]), [str(t) for t in task["tools"]])
        )
    return Controller.under(params, tasks, matrix, sandbox)


def _point(machine: Controller, agent: str, body: Mapping[str, Any]) -> dict[str, Any]:
    threshold = machine.params.threshold
    trend = 0
    for sensor in ("pace_ms", "pace_tokens"):
        state = machine.trends.get(f"agent:{agent}:{sensor}")
        if state is not None and state.n > machine.params.cusum.warmup:
            reference = state.total // machine.params.cusum.warmup
            h = max(1, reference * machine.params.cusum.h_pm // 1000)
            trend = max(trend, state.s * 1000 // h)
    return {
        "step": int(body["step"]),
        "bucket_pm": machine.level(f"agent:{agent}") * 1000 // threshold,
        "cusum_pm": trend,
        "decisions": [],
    }


def _mark(points: dict[str, list[dict[str, Any]]], body: Mapping[str, Any]) -> None:
    """Put a decision on the point of its step (the level it acted at)."""
    key = str(body["key"])
    if not key.startswith("agent:"):
        return
    agent = key.split(":")[1]
    series = points.get(agent)
    if not series or series[-1]["step"] != body["step"]:
        return
    point = series[-1]
    level = int(body["level"]) * 1000 // max(1, int(body["threshold"]))
    if body["rule"] == "bucket":
        point["bucket_pm"] = max(point["bucket_pm"], level)
    elif body["rule"] == "cusum":
        point["cusum_pm"] = max(point["cusum_pm"], level)
    point["decisions"].append(f"{body['layer']} {body['rule']}: {body['action']}")


def _thin(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(series) <= MAX_POINTS:
        return series
    stride = -(-len(series) // MAX_POINTS)
    return [p for i, p in enumerate(series) if i % stride == 0 or p["decisions"]]


def _row(record: Record) -> dict[str, Any]:
    body = record.body
    return {
        "run": record.run,
        "time": record.time,
        "kind": record.kind,
        "step": body["step"],
        "layer": body["layer"],
        "rule": body["rule"],
        "key": body["key"],
        "level": body["level"],
        "threshold": body["threshold"],
        "action": body["action"],
        "config": body["config"],
        "evidence": [{"member": f"runs/{record.run}/stores/audit.jsonl", "seq": record.seq}],
        "evidence_count": 1,
    }


# ---- the trend panel ------------------------------------------------------------------------


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def trend_svg(section: Mapping[str, Any]) -> str:
    """Inline SVG, one panel per agent: its bucket (solid) and CUSUM (dashed) as per-mille of
    their thresholds over the run's steps, the threshold line, and a marker per decision.
    No script, no URL; every label escaped."""
    trends = section.get("trends") or []
    if not trends:
        return ""
    last = max((p["step"] for t in trends for p in t["points"]), default=1)
    span = max(1, last - 1)
    height = len(trends) * (PANEL + GAP) + GAP
    out = [
        f'<svg viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="Control trends per agent">'
    ]
    for index, trend in enumerate(trends):
        top = GAP + index * (PANEL + GAP)

        def xy(step: int, pm: int, top: int = top) -> str:
            x = LEFT + (step - 1) / span * (WIDTH - LEFT - RIGHT)
            y = top + PANEL - min(pm, CLIP_PM) * PANEL / CLIP_PM
            return f"{x:.1f},{y:.1f}"

        label = f"{trend['run']} / {trend['agent']}"
        shown = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
        line_y = top + PANEL - 1000 * PANEL / CLIP_PM
        out.append(
            f'<text x="4" y="{top + PANEL / 2:.0f}" font-size="11">{_esc(shown)}'
            f"<title>{_esc(label)}</title></text>"
            f'<rect x="{LEFT}" y="{top}" width="{WIDTH - LEFT - RIGHT}" height="{PANEL}" '
            'fill="none" stroke="#bbb"/>'
            f'<line x1="{LEFT}" y1="{line_y:.1f}" x2="{WIDTH - RIGHT}" y2="{line_y:.1f}" '
            'stroke="#c00" stroke-dasharray="2,3"><title>threshold</title></line>'
        )
        points = trend["points"]
        bucket = " ".join(xy(p["step"], p["bucket_pm"]) for p in points)
        cusum = " ".join(xy(p["step"], p["cusum_pm"]) for p in points)
        out.append(
            f'<polyline points="{bucket}" fill="none" stroke="#1f5fbf" stroke-width="2">'
            "<title>bucket (per-mille of threshold M)</title></polyline>"
            f'<polyline points="{cusum}" fill="none" stroke="#d9822b" stroke-width="2" '
            'stroke-dasharray="5,3"><title>CUSUM (per-mille of h)</title></polyline>'
        )
        for point in points:
            x, y = xy(point["step"], point["bucket_pm"]).split(",")
            out.append(
                f'<circle cx="{x}" cy="{y}" r="2" fill="#1f5fbf"><title>step '
                f"{_esc(point['step'])}: bucket {_esc(point['bucket_pm'])} per-mille of M"
                "</title></circle>"
            )
            for decision in point["decisions"]:
                x, y = xy(point["step"], max(point["bucket_pm"], point["cusum_pm"])).split(",")
                out.append(
                    f'<circle cx="{x}" cy="{y}" r="4" fill="#c00"><title>step '
                    f"{_esc(point['step'])}: {_esc(decision)}</title></circle>"
                )
    out.append("</svg>")
    return "".join(out)
