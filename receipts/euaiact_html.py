"""Renders the EU AI Act report (report.json) as self-contained HTML and as README.txt.

Everything is escaped; inline CSS only; no scripts, no external URLs: an auditor can open the
file offline years later and see exactly what report.json says.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Final

from .euaiact_text import (
    BUNDLE_NAME,
    PACK_MANIFEST,
    REGULATION,
    REPORT_HTML,
    REPORT_JSON,
    SECTION_TITLES,
    VERIFICATION_NAME,
)

# ---- HTML ------------------------------------------------------------------------------------

_CSS: Final = (
    "body{font-family:sans-serif;margin:2em;max-width:70em;color:#111}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #999;padding:.2em .4em;text-align:left;vertical-align:top;"
    "font-size:.9em}"
    "th{background:#eee}code{font-family:monospace;word-break:break-all}"
    ".cite{color:#333;font-size:.9em}.na{color:#a00}"
)


def _e(value: Any) -> str:
    if value is None:
        return "\u2014"
    if isinstance(value, list):
        return html.escape(", ".join(str(v) for v in value), quote=True)
    return html.escape(str(value), quote=True)


def _refs(item: dict[str, Any]) -> str:
    refs = "<br>".join(
        f"<code>{_e(ref['member'])}#{ref['seq']}</code>" for ref in item.get("evidence", [])
    )
    more = item.get("evidence_count", 0) - len(item.get("evidence", []))
    return refs + (f"<br>(+{more} more)" if more > 0 else "")


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p>None recorded in the period.</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in columns) + "<th>evidence (member#seq)</th>"
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(row.get(c))}</td>" for c in columns) + f"<td>{_refs(row)}</td>"
        "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _kv(pairs: dict[str, Any]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in pairs.items())
    return f"<table>{rows}</table>"


def render_html(report: dict[str, Any]) -> str:
    """Self-contained HTML of ``report``: everything escaped, inline CSS, no script, no URL."""
    cites = {p["id"]: p["citation"] for p in report["provisions"]}
    parts: list[str] = []

    def section(key: str, content: str) -> None:
        ids = report["section_provisions"].get(key, [])
        cited = "; ".join(cites[i] for i in ids)
        line = f'<p class="cite">Serves: {_e(cited)}</p>' if cited else ""
        parts.append(
            f'<section id="{key}"><h2>{_e(SECTION_TITLES[key])}</h2>{line}{content}</section>'
        )

    window = report["window"]
    section(
        "system",
        _kv(report["system"])
        + _kv(
            {
                "window since": window["since"] or "open",
                "window until": window["until"] or "open",
                "runs (selected whole)": window["runs"],
            }
        ),
    )
    section(
        "periods", _table(report["periods"], ("run", "start", "end", "records", "plan", "outcome"))
    )
    section("actors", _table(report["actors"], ("run", "source", "role", "actor", "model")))
    section("events", _table(report["events"], ("run", "store", "kind", "count")))
    section(
        "interventions",
        _table(report["interventions"], ("run", "time", "category", "kind", "detail")),
    )
    section("risks", _table(report["risks"], ("run", "time", "category", "task", "detail")))
    changes = report["changes"]
    section(
        "changes",
        "<h3>Final artifacts</h3>"
        + _table(changes["final_artifacts"], ("run", "path", "sha256", "task", "actor", "model"))
        + "<h3>All writes and deletes</h3>"
        + _table(changes["operations"], ("run", "time", "operation", "path", "sha256", "task")),
    )
    integrity = report["integrity"]
    section(
        "integrity",
        _kv({k: v for k, v in integrity.items() if k != "stores"})
        + _table(integrity["stores"], ("run", "store", "member", "records", "root", "checkpoints")),
    )
    rows = "".join(
        f"<tr><td>{_e(p['citation'])}</td><td>{_e(p['summary'])}</td>"
        f'<td class="{"na" if p["status"] == "not-applicable" else ""}">{_e(p["status"])}</td>'
        f"<td>{_e(p['sections'])}</td></tr>"
        for p in report["provisions"]
    )
    section(
        "provisions",
        "<table><tr><th>provision</th><th>what it asks</th><th>status</th><th>sections</th></tr>"
        f"{rows}</table>",
    )
    section("retention", _kv({k: v for k, v in report["retention"].items()}))
    verification = report["verification"]
    section(
        "verification",
        "<pre>"
        + _e("\n".join(verification["commands"]))
        + "</pre>"
        + f"<p>Expected exit code: {_e(verification['expected_exit_code'])}</p><ul>"
        + "".join(f"<li>{_e(c)}</li>" for c in verification["compare"])
        + "</ul>",
    )
    section("limitations", "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in report["limitations"]))
    parts[-1] = parts[-1].replace("</section>", "</ul></section>")
    toc = "".join(f'<li><a href="#{k}">{_e(t)}</a></li>' for k, t in SECTION_TITLES.items())
    title = f"EU AI Act Article 12 evidence pack: {report['system']['name']}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p>{_e(REGULATION)} (Artificial Intelligence Act). Generated from the records of the "
        f"signed bundle {_e(BUNDLE_NAME)}; every claim lists the records that support it.</p>"
        f"<nav><h2>Contents</h2><ol>{toc}</ol></nav>{''.join(parts)}</body></html>\n"
    )


def render_readme(report: dict[str, Any]) -> str:
    verification = report["verification"]
    key_id = report["system"]["signer_key_id"]
    lines = [
        "EU AI Act Article 12 evidence pack",
        "==================================",
        "",
        f"System: {report['system']['name']} {report['system']['version']}",
        f"Runs: {', '.join(report['window']['runs'])}",
        f"Signer key id: {key_id}",
        "",
        "Files:",
        f"  {BUNDLE_NAME}          signed bundle of the runs' records (harness-verify format)",
        f"  {VERIFICATION_NAME}    the verifier's JSON output on {BUNDLE_NAME}",
        f"  {REPORT_JSON}          the report (schemas/eu-ai-act-report.schema.json)",
        f"  {REPORT_HTML}          the same report, self-contained, for reading",
        f"  {PACK_MANIFEST}   SHA-256 of every other file",
        "",
        "Verify offline (no network needed once harness-verify is installed):",
        "",
    ]
    lines += [f"  {command}" for command in verification["commands"]]
    lines += [
        "",
        f"Expected exit code: {verification['expected_exit_code']}. Then check:",
    ]
    lines += [f"  - {item}" for item in verification["compare"]]
    lines += [
        "",
        f"Retention: {report['retention']['period_days']} days, controller "
        f"{report['retention']['controller']}.",
        report["retention"]["note"],
        "",
        "Not covered: " + " ".join(report["limitations"]),
        "",
    ]
    return "\n".join(lines)
