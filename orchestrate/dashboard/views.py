"""Server-rendered pages: every value is escaped (``html.escape`` with quotes) at the point
it enters the markup, and agent output (round texts, diffs, reasons) is shown as text inside
``<pre>``, never as HTML. The pages render the same dictionaries the JSON API returns.

No inline script or style (the CSP forbids them): the page's live behaviour is
``/static/dashboard.js``; its inputs are ``data-`` attributes.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

COMMANDS: Final = ("stop", "approve", "answer", "instruct", "resume")
LANE_H: Final = 18
WIDTH: Final = 1000
ATTEMPT_COLUMNS: Final = ("attempt", "batch", "branch", "exit_code", "duration_ms", "timed_out")
FAILURE_COLUMNS: Final = ("attempt", "anomaly", "reason", "retry")
GATE_COLUMNS: Final = ("gate", "passed", "exit_code", "duration_ms")
NONE: Final = '<p class="muted">none</p>'
READ_ONLY: Final = '<p class="muted">read-only (start with --allow-control to send commands)</p>'


def e(value: Any) -> str:
    """Escaped text for an element or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def run_url(run: str) -> str:
    return f"/runs/{quote(run, safe='')}"


def task_url(run: str, task: str) -> str:
    return f"{run_url(run)}/tasks/{quote(task, safe='')}"


def page(title: str, content: str, *, csrf: str, attrs: Mapping[str, str] | None = None) -> str:
    body_attrs = "".join(f' data-{k}="{e(v)}"' for k, v in (attrs or {}).items())
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title>"
        f'<meta name="csrf-token" content="{e(csrf)}">'
        '<link rel="stylesheet" href="/static/dashboard.css">'
        '<script src="/static/dashboard.js" defer></script>'
        f"</head><body{body_attrs}>"
        '<nav><a href="/">runs</a></nav>'
        f"{content}</body></html>\n"
    )


def _outcomes(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{e(state)} {e(n)}" for state, n in counts.items()) or "none"


def _verification(result: Mapping[str, Any]) -> str:
    status = str(result.get("status"))
    detail = result.get("detail") or ""
    title = f' title="{e(detail)}"' if detail else ""
    return f'<span class="verification" data-status="{e(status)}"{title}>{e(status)}</span>'


def runs_page(runs: Sequence[Mapping[str, Any]], *, csrf: str) -> str:
    rows = []
    for run in runs:
        link = run_url(run["run"])
        seal = run["seal"]
        rows.append(
            f'<tr data-run="{e(run["run"])}">'
            f'<td class="run"><a href="{e(link)}">{e(run["run"])}</a></td>'
            f'<td class="state"><a href="{e(link)}">{e(run["state"])}</a></td>'
            f'<td class="epoch">{e(run["epoch"])}</td>'
            f'<td class="outcomes">{_outcomes(run["outcomes"])}</td>'
            f'<td class="seal">{e(seal["sealed"])} of {e(seal["records"])} audit records'
            f"{' (last ' + e(seal['time']) + ')' if seal.get('time') else ''}</td>"
            f'<td class="verification">{_verification(run["verification"])}</td></tr>'
        )
    table = (
        '<table id="runs"><thead><tr><th>run</th><th>state</th><th>epoch</th>'
        "<th>tasks by outcome</th><th>sealed</th><th>verification</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    empty = "" if runs else '<p class="muted">No runs recorded in this repository yet.</p>'
    return page("harness dashboard: runs", f"<h1>Runs</h1>{table}{empty}", csrf=csrf)


def timeline_svg(batches: Sequence[Mapping[str, Any]], records: int) -> str:
    """Batches as bars on parallel lanes; x is the audit record order (spawn to lock
    release), so lanes show which batches were in flight together."""
    if not batches:
        return '<p class="muted">No batch spawned yet.</p>'
    lanes: list[int] = []  # end seq of the last bar in each lane
    placed: list[tuple[int, Mapping[str, Any]]] = []
    for batch in sorted(batches, key=lambda b: b["start"]):
        end = batch["end"] if batch["end"] is not None else records
        lane = next((i for i, last in enumerate(lanes) if last < batch["start"]), len(lanes))
        if lane == len(lanes):
            lanes.append(end)
        else:
            lanes[lane] = end
        placed.append((lane, batch))
    span = max(1, records)
    height = len(lanes) * (LANE_H + 4) + 4
    out = [
        f'<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        'aria-label="Batches on parallel lanes">'
    ]
    for lane, batch in placed:
        end = batch["end"] if batch["end"] is not None else records
        x = batch["start"] * WIDTH / span
        w = max(3.0, (end - batch["start"]) * WIDTH / span)
        y = 4 + lane * (LANE_H + 4)
        fill = "#4c8c4a" if batch.get("exit_code") == 0 else "#b35c1e"
        if batch["end"] is None:
            fill = "#1f5fbf"
        label = f"{batch['batch']} attempt {batch['attempt']}: {', '.join(batch['tasks'])}"
        out.append(
            f'<g class="batch" data-batch="{e(batch["batch"])}">'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{LANE_H}" fill="{fill}">'
            f"<title>{e(label)}</title></rect>"
            f'<text x="{x + 2:.1f}" y="{y + 13}" font-size="11" fill="#fff">'
            f"{e(batch['batch'])}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)


def _store_rows(stores: Mapping[str, Mapping[str, int]]) -> str:
    return "".join(
        f'<tr data-store="{e(name)}"><td>{e(name)}</td><td class="records">{e(s["records"])}</td>'
        f'<td class="sealed">{e(s["sealed"])}</td><td class="unsealed">{e(s["unsealed"])}</td></tr>'
        for name, s in stores.items()
    )


def _receipt_items(receipts: Sequence[Mapping[str, Any]]) -> str:
    return "".join(
        f'<li data-command="{e(r["command"])}" data-kind="{e(r["kind"])}">'
        f'<code>{e(r["command"])}</code> <span class="kind">{e(r["kind"])}</span> '
        f'<span class="status">{e(r["status"])}</span>'
        f"{_reason(r.get('reason'))}"
        "</li>"
        for r in receipts
    )


def _reason(reason: Any) -> str:
    return f' <span class="reason">{e(reason)}</span>' if reason else ""


def _muted(text: Any) -> str:
    return f' <span class="muted">{e(text)}</span>' if text else ""


def control_form() -> str:
    buttons = "".join(f'<button type="button" data-command="{c}">{c}</button> ' for c in COMMANDS)
    return (
        '<form id="control-form" autocomplete="off">'
        '<label>text <input name="text" maxlength="4000"></label> '
        '<label>task <input name="task" maxlength="64"></label> '
        '<label>review <input name="review" maxlength="80" placeholder="b0001/1"></label> '
        f'{buttons}<span id="control-error"></span></form>'
    )


def run_page(detail: Mapping[str, Any], *, control_svg: str, allow_control: bool, csrf: str) -> str:
    run = detail["run"]
    tasks = "".join(
        f'<tr data-task="{e(t["task"])}">'
        f'<td class="name"><a href="{e(task_url(run, t["task"]))}">{e(t["task"])}</a></td>'
        f'<td class="state">{e(t["state"])}</td><td class="role">{e(t["role"])}</td>'
        f'<td class="attempts">{e(t["attempts"])}</td><td class="reason">{e(t["reason"])}</td></tr>'
        for t in detail["tasks"]
    )
    evidence = detail["evidence"]
    problems = "".join(f'<li class="problem">{e(p)}</li>' for p in detail["problems"])
    behind = (
        f'<p class="muted">catching up: {e(detail["behind"])} bytes of the audit store not '
        "read yet</p>"
        if detail["behind"]
        else ""
    )
    decisions = "".join(
        f"<tr><td>{e(d['step'])}</td><td>{e(d['layer'])}</td><td>{e(d['rule'])}</td>"
        f"<td>{e(d['key'])}</td><td>{e(d['level'])}/{e(d['threshold'])}</td>"
        f"<td>{e(d['action'])}</td></tr>"
        for d in detail["control"]["decisions"]
    )
    control_html = control_svg or '<p class="muted">No control steps recorded.</p>'
    if decisions:
        control_html += (
            '<table class="decisions"><thead><tr><th>step</th><th>layer</th><th>rule</th>'
            f"<th>key</th><th>level</th><th>action</th></tr></thead><tbody>{decisions}</tbody>"
            "</table>"
        )
    content = (
        f"<h1>Run {e(run)}</h1>"
        f'<p>state <strong id="run-state">{e(detail["state"])}</strong>, epoch '
        f'<span id="run-epoch">{e(detail["epoch"])}</span>, '
        f"{e(detail['records'])} audit records; tasks: "
        f'<span id="run-outcomes">{_outcomes(detail["outcomes"])}</span></p>'
        f"{behind}{'<ul>' + problems + '</ul>' if problems else ''}"
        f'<section id="timeline"><h2>Timeline</h2>'
        f"{timeline_svg(detail['batches'], detail['records'])}</section>"
        '<section><h2>Tasks</h2><table id="tasks"><thead><tr><th>task</th><th>state</th>'
        "<th>role</th><th>attempts</th><th>last reason</th></tr></thead>"
        f"<tbody>{tasks}</tbody></table></section>"
        f'<section id="control"><h2>Control</h2>{control_html}</section>'
        '<section id="evidence"><h2>Evidence</h2><table class="stores"><thead><tr>'
        "<th>store</th><th>records</th><th>sealed</th><th>unsealed tail</th></tr></thead>"
        f"<tbody>{_store_rows(evidence['stores'])}</tbody></table>"
        f"<p>fresh export: {_verification(evidence['verification'])}"
        f"{_muted(evidence['verification'].get('detail'))}"
        "</p></section>"
        '<section id="commands"><h2>Commands</h2>'
        f"{control_form() if allow_control else READ_ONLY}"
        f'<ul id="receipts">{_receipt_items(detail["receipts"])}</ul></section>'
    )
    attrs = {
        "run": run,
        "cursor": str(detail["records"]),
        "generation": str(detail["generation"]),
        "live": "1",
    }
    return page(f"run {run}", content, csrf=csrf, attrs=attrs)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], cls: str) -> str:
    if not rows:
        return NONE
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f'<table class="{e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "" if value is None else str(value)


def task_page(run: str, task: Mapping[str, Any], *, csrf: str) -> str:
    rounds = []
    for item in task["rounds"]:
        header = item.get("header")
        parsed = ""
        if header is not None:
            parsed = (
                '<p class="header">parsed header: '
                + (
                    ", ".join(f"{e(k)} {e(v)}" for k, v in header["fields"].items())
                    if header.get("fields")
                    else f'<span class="problem">{e(header.get("problem"))}</span>'
                )
                + "</p>"
            )
        fields = {k: v for k, v in item.items() if k not in ("text_body", "header", "task")}
        rounds.append(
            f'<div class="round" data-kind="{e(item["kind"])}"><h3>round {e(item.get("round"))}: '
            f'{e(item["kind"])}</h3><p class="muted">{e(_cell(fields))}</p>{parsed}'
            f"<pre>{e(item.get('text_body') or '')}</pre></div>"
        )
    writes = "".join(
        f'<div class="write" data-path="{e(w["path"])}"><h3>{e(w["path"])}</h3>'
        f'<p class="muted">lineage record {e(w["seq"])}, sha256 {e(w["sha256"])}; commit '
        f"{e(w.get('commit') or 'not found')} against {e(w.get('parent_commit') or 'nothing')}"
        f"{' (' + e(w['note']) + ')' if w.get('note') else ''}</p>"
        f'<pre class="diff">{e(w.get("diff") or "")}</pre></div>'
        for w in task["writes"]
    )
    content = (
        f'<p><a href="{e(run_url(run))}">run {e(run)}</a></p>'
        f"<h1>Task {e(task['task'])}</h1>"
        f'<p>state <strong class="state">{e(task["state"])}</strong>; role {e(task["role"])}, '
        f"adapter {e(task['adapter'])}</p>"
        '<section id="attempts"><h2>Attempts</h2>'
        f"{_table(task['attempts_list'], ATTEMPT_COLUMNS, 'attempts')}"
        f"{_table(task['failures'], FAILURE_COLUMNS, 'failures')}</section>"
        '<section id="transitions"><h2>Transitions</h2>'
        f"{_table(task['transitions'], ['seq', 'from', 'to', 'reason'], 'transitions')}</section>"
        '<section id="gates"><h2>Gates</h2>'
        f"{_table(task['gates'], GATE_COLUMNS, 'gates')}</section>"
        f'<section id="rounds"><h2>Rounds</h2>{"".join(rounds) or NONE}</section>'
        f'<section id="writes"><h2>Writes</h2>{writes or NONE}</section>'
    )
    return page(f"task {task['task']}", content, csrf=csrf, attrs={"run": run, "live": "0"})
