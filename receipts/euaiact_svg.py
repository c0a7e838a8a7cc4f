"""The timeline of report.html: the period's runs, tasks, risks and interventions as inline SVG.

Inline SVG and nothing else: no script, no external URL, no font file, so the picture survives
offline viewing and printing years later. Every text (task names are agent- or plan-controlled)
is escaped. Positions come from record times only (no wall clock), so the same report.json
always gives the same bytes.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any, Final

WIDTH: Final = 1000
LEFT: Final = 150
RIGHT: Final = 20
LANE: Final = 22
_LANES: Final = ("Run", "Tasks", "Risks", "Interventions")
_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
BAD_STATES: Final = frozenset({"failed", "denied", "cancelled", "blocked"})


def _t(value: str) -> float:
    return datetime.strptime(value, _TIME_FORMAT).timestamp()


def _x(value: str, start: float, span: float) -> float:
    if span <= 0:
        return LEFT + (WIDTH - LEFT - RIGHT) / 2
    return LEFT + (_t(value) - start) / span * (WIDTH - LEFT - RIGHT)


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _marker(shape: str, x: float, y: float, css: str, title: str) -> str:
    tip = f"<title>{_esc(title)}</title>"
    if shape == "circle":
        return f'<circle class="{css}" cx="{x:.1f}" cy="{y:.1f}" r="5">{tip}</circle>'
    if shape == "triangle":
        points = f"{x:.1f},{y - 6:.1f} {x - 6:.1f},{y + 5:.1f} {x + 6:.1f},{y + 5:.1f}"
    else:  # diamond
        points = f"{x:.1f},{y - 6:.1f} {x + 6:.1f},{y:.1f} {x:.1f},{y + 6:.1f} {x - 6:.1f},{y:.1f}"
    return f'<polygon class="{css}" points="{points}">{tip}</polygon>'


def timeline_svg(report: dict[str, Any]) -> str:
    """The timeline as one ``<svg>`` element (empty string if the report has no period)."""
    periods = report["periods"]
    if not periods:
        return ""
    first = min(p["start"] for p in periods)
    last = max(p["end"] for p in periods)
    start, span = _t(first), _t(last) - _t(first)
    rows: list[str] = []
    y = 30
    for period in periods:
        run = period["run"]
        rows.append(
            f'<text class="run" x="4" y="{y - 8}">{_esc("run " + run)}</text>'
            if len(run) <= 24
            else f'<text class="run" x="4" y="{y - 8}">{_esc("run " + run[:21] + "...")}</text>'
        )
        for index, lane in enumerate(_LANES):
            ly = y + index * LANE
            rows.append(f'<text class="lane" x="12" y="{ly + 4}">{lane}</text>')
            rows.append(
                f'<line class="grid" x1="{LEFT}" y1="{ly}" x2="{WIDTH - RIGHT}" y2="{ly}"/>'
            )
        x0, x1 = _x(period["start"], start, span), _x(period["end"], start, span)
        bar = f"run {run}: {period['start']} to {period['end']}"
        rows.append(
            f'<rect class="bar" x="{x0:.1f}" y="{y - 5}" width="{max(x1 - x0, 2):.1f}" '
            f'height="10"><title>{_esc(bar)}'
            "</title></rect>"
        )
        for task in (t for t in report.get("tasks", []) if t["run"] == run):
            css = (
                "ok" if task["state"] == "done" else "bad" if task["state"] in BAD_STATES else "mid"
            )
            rows.append(
                _marker(
                    "circle",
                    _x(task["time"], start, span),
                    y + LANE,
                    css,
                    f"task {task['task']}: {task['state']} at {task['time']}",
                )
            )
        for risk in (r for r in report["risks"] if r["run"] == run):
            rows.append(
                _marker(
                    "triangle",
                    _x(risk["time"], start, span),
                    y + 2 * LANE,
                    "bad",
                    f"{risk['category']} at {risk['time']}: {risk['detail']}",
                )
            )
        for item in (i for i in report["interventions"] if i["run"] == run):
            rows.append(
                _marker(
                    "diamond",
                    _x(item["time"], start, span),
                    y + 3 * LANE,
                    "human",
                    f"{item['category']} at {item['time']}: {item['detail']}",
                )
            )
        y += len(_LANES) * LANE + 24
    axis = y - 14
    height = axis + 52
    rows.append(f'<line class="axis" x1="{LEFT}" y1="{axis}" x2="{WIDTH - RIGHT}" y2="{axis}"/>')
    rows.append(f'<text class="tick" x="{LEFT}" y="{axis + 16}">{_esc(first)}</text>')
    rows.append(
        f'<text class="tick" x="{WIDTH - RIGHT}" y="{axis + 16}" text-anchor="end">'
        f"{_esc(last)}</text>"
    )
    legend = (
        f'<text class="tick" x="{LEFT}" y="{axis + 30}">circle: task at its last recorded '
        "state (green done; red failed, denied, cancelled or blocked; grey other)</text>"
        f'<text class="tick" x="{LEFT}" y="{axis + 44}">triangle: risk event; diamond: human '
        "intervention; times are the producer's record times (UTC)</text>"
    )
    label = _esc(f"Timeline of the period {first} to {last}")
    return (
        f'<svg class="timeline" role="img" '
        f'aria-label="{label}" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'preserveAspectRatio="xMinYMin meet"><title>{label}</title>'
        "<style>.run{font:bold 13px sans-serif}.lane,.tick{font:11px sans-serif;fill:#333}"
        ".grid{stroke:#ddd}.axis{stroke:#555}.bar{fill:#9ab}.ok{fill:#2a7a2a}"
        ".bad{fill:#b00}.mid{fill:#888}.human{fill:#2457b3}</style>"
        f"{''.join(rows)}{legend}</svg>"
    )
