"""Renderers of the gate's report: text, JSON, SARIF 2.1.0 and a GitHub job-summary section.

Kept apart from ``gate.py`` (which decides) so that the escaping of file names and of every
bundle-controlled string lives in one place: everything shown goes through ``textsafe``.
"""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import quote

from .gate import _CHANGE_NAMES, GATE_FORMAT, GATE_FORMATS, GATE_VERSION, GateReport
from .render import sarif_document
from .report import Status


def render_gate_text(report: GateReport) -> str:
    lines = [
        f"harness-verify gate: {'PASSED' if report.passed else 'FAILED'} - {report.reason}",
        f"  bundle: {report.bundle} ({report.bundle_status.value})",
        f"  changes: {report.base[:12]}..{report.head[:12]} ({len(report.files)} files)",
    ]
    for entry in report.files:
        evidence = (
            f" [run {entry.run} task {entry.task} seq {entry.seq}]" if entry.run is not None else ""
        )
        lines.append(f"  {entry.verdict:<9} {entry.change} {entry.path}: {entry.reason}{evidence}")
    return "\n".join(lines) + "\n"


def gate_to_dict(report: GateReport) -> dict[str, Any]:
    return {
        "format": GATE_FORMAT,
        "version": GATE_VERSION,
        "passed": report.passed,
        "exit_code": int(report.exit_code),
        "reason": report.reason,
        "bundle": report.bundle,
        "bundle_status": report.bundle_status.value,
        "signer_key_id": report.signer_key_id,
        "trusted_by": report.trusted_by,
        "base": report.base,
        "head": report.head,
        "verifier_version": report.verifier_version,
        "files": [
            {
                "path": entry.path,
                "change": entry.change,
                "verdict": entry.verdict,
                "reason": entry.reason,
                "run": entry.run,
                "task": entry.task,
                "seq": entry.seq,
            }
            for entry in report.files
        ],
    }


def render_gate_json(report: GateReport) -> str:
    return json.dumps(gate_to_dict(report), indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def _uri(path: str) -> str:
    return quote(path.encode("utf-8", "surrogateescape"), safe="/:@")


_RULES: Final = (
    ("uncovered-file", "a changed file is not covered by an attested, merged agent write"),
    ("bundle", "the evidence bundle verifies and its signer is pinned"),
)


def render_gate_sarif(report: GateReport) -> str:
    """SARIF 2.1.0: one error per uncovered file (located at the file), one for the bundle."""
    rules = [
        {"id": rule, "shortDescription": {"text": text}, "defaultConfiguration": {"level": "error"}}
        for rule, text in _RULES
    ]
    results: list[dict[str, Any]] = []
    if report.bundle_status is not Status.VERIFIED:
        results.append(
            {
                "ruleId": "bundle",
                "ruleIndex": 1,
                "level": "error",
                "message": {"text": report.reason},
                "locations": [
                    {"physicalLocation": {"artifactLocation": {"uri": _uri(report.bundle)}}}
                ],
            }
        )
    for entry in report.uncovered:
        result: dict[str, Any] = {
            "ruleId": "uncovered-file",
            "ruleIndex": 0,
            "level": "error",
            "message": {
                "text": f"{entry.path} ({_CHANGE_NAMES.get(entry.change, entry.change)})"
                f": {entry.reason}"
            },
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(entry.path)}}}],
        }
        if entry.seq is not None:
            result["properties"] = {"run": entry.run, "task": entry.task, "seq": entry.seq}
        results.append(result)
    return sarif_document(
        "harness-verify gate",
        report.verifier_version,
        rules,
        results,
        successful=report.bundle_status is not Status.UNREADABLE,
        exit_code=int(report.exit_code),
    )


def _md(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    return " ".join(text.replace("<", "&lt;").replace(">", "&gt;").split())


def render_markdown(report: GateReport) -> str:
    """A GitHub job-summary section: verdict, reason, one table row per changed file."""
    mark = "✅ passed" if report.passed else "❌ failed"
    lines = [
        f"### harness-verify gate: {mark}",
        "",
        _md(report.reason),
        "",
        f"Bundle `{_md(report.bundle)}`: **{report.bundle_status.value}**"
        + (f", signer `{report.signer_key_id}`" if report.signer_key_id else ""),
        "",
    ]
    if report.files:
        lines += [
            "| File | Change | Verdict | Reason | Evidence |",
            "| --- | --- | --- | --- | --- |",
        ]
        for entry in report.files:
            icon = "✅" if entry.verdict == "covered" else "❌"
            evidence = (
                f"run {_md(entry.run)}, task {_md(entry.task)}, seq {entry.seq}"
                if entry.run is not None
                else ""
            )
            lines.append(
                f"| {_md(entry.path)} | {_CHANGE_NAMES.get(entry.change, entry.change)} "
                f"| {icon} {entry.verdict} | {_md(entry.reason)} | {evidence} |"
            )
    else:
        lines.append("No files changed.")
    return "\n".join(lines) + "\n"


def render_gate(report: GateReport, fmt: str) -> str:
    if fmt == "text":
        return render_gate_text(report)
    if fmt == "json":
        return render_gate_json(report)
    if fmt == "sarif":
        return render_gate_sarif(report)
    if fmt == "markdown":
        return render_markdown(report)
    raise ValueError(f"unknown gate report format {fmt!r}: expected one of {GATE_FORMATS}")
