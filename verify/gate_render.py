"""Renderers of the gate's report: text, JSON, SARIF 2.1.0 and a GitHub job-summary section.

Kept apart from ``gate.py`` (which decides) so that what is shown is escaped in one place. File
names come from the pull request and run/task ids and reasons from the bundle: every string of
a report goes through ``textsafe`` (the display form: one printable line, no ``::``), Markdown
puts each in a code span, SARIF locations are percent-encoded from the file name's bytes. So no
file name forges a line, drives a terminal, becomes a link or a workflow command, or (not being
UTF-8) crashes the writer.
"""

from __future__ import annotations

import functools
import json
import re
from json.encoder import encode_basestring_ascii
from typing import Any, Final

import orjson

from . import textsafe
from .gate import _CHANGE_NAMES, GATE_FORMAT, GATE_FORMATS, GATE_VERSION, GateReport
from .render import sarif_document
from .report import Status

_t = textsafe.text


def render_gate_text(report: GateReport) -> str:
    """The human report: verdict and reason, bundle, commit range, one line per changed file."""
    lines = [
        f"harness-verify gate: {'PASSED' if report.passed else 'FAILED'} - {_t(report.reason)}",
        f"  bundle: {_t(report.bundle)} ({report.bundle_status.value})",
        f"  changes: {_t(report.base[:12])}..{_t(report.head[:12])} ({len(report.files)} files)",
    ]
    shown = functools.cache(_t)  # runs, tasks, change letters and most reasons repeat
    for entry in report.files:
        evidence = (
            f" [run {shown(entry.run)} task {shown(entry.task)} seq {entry.seq}]"
            if entry.run is not None
            else ""
        )
        lines.append(
            f"  {entry.verdict:<9} {shown(entry.change)} {_t(entry.path)}: "
            f"{shown(entry.reason)}{evidence}"
        )
    return "\n".join(lines) + "\n"


def gate_to_dict(report: GateReport) -> dict[str, Any]:
    """The JSON document (schemas/gate-report.schema.json): every string in display form.

    The same document as ``textsafe.json_safe`` of the raw one (the tests check it); the
    per-file fields go through one memoized ``textsafe.text`` per report, because their
    keys, change letters, verdicts, runs, tasks and most reasons repeat for every file."""
    header = {
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
    }
    document: dict[str, Any] = textsafe.json_safe(header)
    shown = functools.cache(_t)

    def _s(value: str | None) -> str | None:
        return None if value is None else shown(value)

    document[shown("files")] = [
        {
            shown("path"): shown(entry.path),
            shown("change"): shown(entry.change),
            shown("verdict"): shown(entry.verdict),
            shown("reason"): shown(entry.reason),
            shown("run"): _s(entry.run),
            shown("task"): _s(entry.task),
            shown("seq"): entry.seq,
            shown("expected_sha256"): _s(entry.expected_sha256),
            shown("actual_sha256"): _s(entry.actual_sha256),
        }
        for entry in report.files
    ]
    return document


_ESCAPED: Final = re.compile(r"[^\x00-\x7e]+")
"""What ``ensure_ascii`` escapes and orjson writes raw: DEL and every non-ASCII character."""


def _escaped_run(match: re.Match[str]) -> str:
    escaped: str = encode_basestring_ascii(match.group())
    return escaped[1:-1]  # without the quotes it adds


def dumps_indented(document: Any) -> str:
    """``json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True)``, the same text,
    encoded by orjson (the standard library's indenting encoder is pure Python: 0.15 s for a
    change of 10^4 files). orjson writes DEL and non-ASCII characters raw; each run of them
    is escaped afterwards with the standard library's own ``encode_basestring_ascii``
    (outside strings a JSON text has neither). What orjson refuses (lone surrogates,
    integers beyond 64 bits) goes to ``json.dumps``."""
    try:
        encoded = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True)
    if encoded.isascii() and b"\x7f" not in encoded:
        return encoded.decode("ascii")
    return _ESCAPED.sub(_escaped_run, encoded.decode("utf-8"))


def render_gate_json(report: GateReport) -> str:
    return dumps_indented(gate_to_dict(report)) + "\n"


_RULES: Final = (
    (
        "uncovered-file",
        "a changed file is not covered by an attested, merged agent write",
        "Every file changed between the base and head commits must be exactly a transition "
        "recorded by a merged task in the verified, pinned bundle (content, git mode and parent "
        "state). Re-run the agent task that should produce it, or review and vouch for the change "
        "another way.",
    ),
    (
        "bundle",
        "the evidence bundle verifies and its signer is pinned",
        "The bundle must verify (harness-verify BUNDLE) and be signed by a key pinned with "
        "--trusted-key or the base branch's harness-verify.toml; until then no file is covered.",
    ),
)


SRCROOT: Final = "%SRCROOT%"
"""``uriBaseId`` of changed-file locations: repository paths, relative to the checkout (the
base id code scanning resolves to the repository root)."""


def render_gate_sarif(report: GateReport) -> str:
    """SARIF 2.1.0: one error per uncovered file (located at the file), one for the bundle.

    Locations are URIs of the file name's bytes; ``sarif_document`` escapes every string."""
    rules = [
        {
            "id": rule,
            "shortDescription": {"text": text},
            "fullDescription": {"text": full},
            "help": {"text": full},
            "defaultConfiguration": {"level": "error"},
        }
        for rule, text, full in _RULES
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
                    {"physicalLocation": {"artifactLocation": {"uri": textsafe.uri(report.bundle)}}}
                ],
            }
        )
    for entry in report.uncovered:
        change = _CHANGE_NAMES.get(entry.change, entry.change)
        result: dict[str, Any] = {
            "ruleId": "uncovered-file",
            "ruleIndex": 0,
            "level": "error",
            "message": {"text": f"{entry.path} ({change}): {entry.reason}"},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": textsafe.uri(entry.path), "uriBaseId": SRCROOT}
                    }
                }
            ],
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
        base_ids={SRCROOT: {"description": {"text": "the root of the repository checkout"}}},
    )


def render_markdown(report: GateReport) -> str:
    """A GitHub job-summary section: verdict, reason, one table row per changed file.

    Every value that is not our own fixed wording is a code span (``textsafe.md_code``): no
    file name, id or reason renders as a link, a mention, HTML, emphasis or a table cell."""
    mark = "✅ passed" if report.passed else "❌ failed"
    signer = textsafe.md_code(report.signer_key_id) if report.signer_key_id else ""
    lines = [
        f"### harness-verify gate: {mark}",
        "",
        textsafe.md_code(report.reason),
        "",
        f"Bundle {textsafe.md_code(report.bundle)}: **{report.bundle_status.value}**"
        + (f", signer {signer}" if signer else ""),
        "",
    ]
    if report.files:
        lines += [
            "| File | Change | Verdict | Reason | Evidence |",
            "| --- | --- | --- | --- | --- |",
        ]
        cell = functools.cache(functools.partial(textsafe.md_code, table=True))  # repeats
        for entry in report.files:
            icon = "✅" if entry.verdict == "covered" else "❌"
            evidence = (
                f"run {cell(entry.run)}, task {cell(entry.task)}, seq {entry.seq}"
                if entry.run is not None
                else ""
            )
            change = _CHANGE_NAMES.get(entry.change) or cell(entry.change)
            lines.append(
                f"| {textsafe.md_code(entry.path, table=True)} | {change} "
                f"| {icon} {entry.verdict} | {cell(entry.reason)} | {evidence} |"
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
