"""Render a :class:`~harness.verify.report.Report` as text, JSON, JUnit XML or SARIF 2.1.0.

Every function is pure: it takes a report and returns a ``str``; the CLI writes it out.

Bundle content is attacker-controlled (member names, run ids, times, reasons quoting record
fields), and so are paths given on the command line, which need not be UTF-8. The renderers
never pass such text through raw: every string of every format is shown in the display form of
``textsafe`` (one printable line, controls, bidirectional and invisible characters escaped,
lossless, no ``::`` or ``##[`` workflow command), which also carries only characters XML 1.0
and every JSON parser accept; JSON and SARIF are ASCII-only on top of that.

The JSON form is a stable format described by ``schemas/verify-report.schema.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from . import textsafe
from .report import (
    CHECK_HINTS,
    CHECK_ORDER,
    CHECK_TITLES,
    ExitCode,
    Failure,
    Outcome,
    Report,
    Status,
)

__all__ = [
    "EXIT_MEANINGS",
    "FORMATS",
    "JSON_FORMAT",
    "JSON_VERSION",
    "SARIF_SCHEMA",
    "VERDICTS",
    "render",
    "render_json",
    "render_junit",
    "render_sarif",
    "render_text",
    "report_to_dict",
]

JSON_FORMAT: Final = "harness-verify/report"
JSON_VERSION: Final = 1
SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME: Final = "harness-verify"
FORMATS: Final = ("text", "json", "junit", "sarif")

VERDICTS: Final = {
    Status.VERIFIED: "VERIFIED",
    Status.UNTRUSTED: "VERIFIED BUT NOT TRUSTED: integrity verified but signer not pinned",
    Status.EMPTY: "EMPTY BUNDLE",
    Status.SEAL_ONLY: "SEAL-ONLY BUNDLE",
    Status.INVALID: "INVALID",
    Status.UNREADABLE: "UNREADABLE",
}
"""The verdict line of the text summary, per status."""

_VERDICT_NOTES: Final = {
    Status.VERIFIED: "every check passed and the signer is pinned",
    Status.UNTRUSTED: "every integrity check passed, but no pinned key says who signed it",
    Status.EMPTY: "the bundle holds no evidence records; nothing was proven",
    Status.SEAL_ONLY: "the bundle carries a seal but no evidence records; nothing was proven",
    Status.INVALID: "the evidence failed a check",
    Status.UNREADABLE: "the input is not a readable, safe, supported bundle",
}

EXIT_MEANINGS: Final = {
    ExitCode.VERIFIED: "verified and trusted",
    ExitCode.INVALID: "evidence invalid (tampered, incomplete, empty or seal-only)",
    ExitCode.USAGE: "usage error (command line or policy file)",
    ExitCode.UNTRUSTED: "verified but not trusted by policy",
    ExitCode.UNREADABLE: "unreadable or unsupported input",
}

_PIN_HINT: Final = (
    "if you expected this signer, pin its key: --trusted-key KEY_ID|VERIFIER_KEY|signing.pub, "
    'or keys = ["..."] under [trust] in harness-verify.toml '
    "(or [tool.harness-verify.trust] in pyproject.toml)"
)

_STATUS_HINTS: Final = {
    Status.UNTRUSTED: _PIN_HINT,
    Status.EMPTY: "the run recorded nothing: check that the harness actually ran and sealed "
    "its stores before the bundle was exported",
    Status.SEAL_ONLY: "the bundle was exported without its stores: re-export the full bundle",
    Status.UNREADABLE: "give the .tar bundle produced by the harness export, unmodified",
}


_OUTCOME_TAGS: Final = {
    Outcome.PASSED: "pass",
    Outcome.FAILED: "FAIL",
    Outcome.SKIPPED: "skip",
    Outcome.NOT_RUN: "----",
}

_ANSI: Final = {"red": "\x1b[31;1m", "green": "\x1b[32;1m", "yellow": "\x1b[33;1m"}
_ANSI_RESET: Final = "\x1b[0m"
_STATUS_COLOR: Final = {
    Status.VERIFIED: "green",
    Status.UNTRUSTED: "yellow",
    Status.EMPTY: "red",
    Status.SEAL_ONLY: "red",
    Status.INVALID: "red",
    Status.UNREADABLE: "red",
}
_OUTCOME_COLOR: Final = {Outcome.PASSED: "green", Outcome.FAILED: "red", Outcome.SKIPPED: "yellow"}

_safe_text = textsafe.text
"""Every string shown, in every format: the display form (see ``textsafe``). It carries no
character XML 1.0 cannot (controls, surrogates and noncharacters are all escaped), so JUnit
needs nothing more."""


@dataclass(frozen=True)
class _Problem:
    """One reason the run is not a clean pass, as CI formats report it."""

    rule: str
    level: str  # "error" or "warning"
    reason: str
    hint: str
    failure: Failure | None


def _hint(report: Report) -> str:
    failure = report.failure
    if failure is not None and failure.hint:
        return failure.hint
    if report.status in _STATUS_HINTS:
        return _STATUS_HINTS[report.status]
    if failure is not None:
        return CHECK_HINTS.get(failure.check, "")
    return ""


def _problems(report: Report) -> list[_Problem]:
    """Why the run is not a clean pass: failed checks, the failure, an untrusted signer, and
    a non-zero verdict no check explains (so CI never shows green for a non-zero exit code)."""
    problems: list[_Problem] = []
    failure = report.failure
    untrusted = report.status is Status.UNTRUSTED
    for result in report.checks:
        if result.outcome is not Outcome.FAILED:
            continue
        level = "warning" if untrusted and result.name == "trust" else "error"
        if failure is not None and failure.check == result.name:
            problems.append(_Problem(result.name, level, failure.reason, _hint(report), failure))
        else:
            reason = result.detail or f"check failed: {CHECK_TITLES.get(result.name, '')}"
            hint = _PIN_HINT if level == "warning" else CHECK_HINTS.get(result.name, "")
            problems.append(_Problem(result.name, level, reason, hint, None))
    if failure is not None and all(p.failure is not failure for p in problems):
        level = "warning" if untrusted and failure.check == "trust" else "error"
        problems.append(_Problem(failure.check, level, failure.reason, _hint(report), failure))
    if untrusted and all(p.rule != "trust" for p in problems):
        reason = "integrity verified but signer not pinned"
        if report.signer_key_id:
            reason += f" (signer key id {report.signer_key_id})"
        problems.append(_Problem("trust", "warning", reason, _PIN_HINT, None))
    if report.exit_code is not ExitCode.VERIFIED and not problems:
        reason = f"{VERDICTS[report.status]}: {_VERDICT_NOTES[report.status]}"
        problems.append(_Problem("verdict", "error", reason, _hint(report), None))
    return problems


# --------------------------------------------------------------------------------------- text


def _paint(text: str, color: str | None, enabled: bool) -> str:
    if not enabled or color is None:
        return text
    return f"{_ANSI[color]}{text}{_ANSI_RESET}"


def _checkpoint_sizes(sizes: tuple[int, ...]) -> str:
    if not sizes:
        return "-"
    if len(sizes) <= 6:
        return ", ".join(str(size) for size in sizes)
    head = ", ".join(str(size) for size in sizes[:3])
    return f"{head}, ..., {sizes[-1]} ({len(sizes)} checkpoints)"


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    return [
        (
            indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def render_text(report: Report, *, color: bool = False) -> str:
    """A human summary: verdict, checks, stores, signer, the failure and what to do."""
    status_color = _STATUS_COLOR[report.status]
    lines = [f"harness-verify {_safe_text(report.verifier_version)}".rstrip()]
    lines.append(f"bundle: {_safe_text(report.bundle)}")
    lines.append("")
    verdict = _paint(VERDICTS[report.status], status_color, color)
    lines.append(f"result: {verdict}")
    lines.append(f"        {_VERDICT_NOTES[report.status]}")
    lines.append("")

    lines.append("checks:")
    if not report.checks:
        lines.append("  (none ran)")
    width = max((len(_safe_text(result.name)) for result in report.checks), default=0)
    for result in report.checks:
        tag = _paint(
            f"[{_OUTCOME_TAGS[result.outcome]}]", _OUTCOME_COLOR.get(result.outcome), color
        )
        title = CHECK_TITLES.get(result.name, "")
        line = f"  {tag} {_safe_text(result.name).ljust(width)}  {title}"
        if result.outcome is Outcome.NOT_RUN:
            line += " (not run)"
        elif result.detail:
            line += f": {_safe_text(result.detail)}"
        lines.append(line)
    lines.append("")

    if report.stores:
        lines.append("stores:")
        rows: list[tuple[str, ...]] = [
            ("RUN", "STORE", "RECORDS", "ROOT", "MAX-UNSEALED", "CHECKPOINTS")
        ]
        rows.extend(
            (
                _safe_text(store.run),
                _safe_text(store.store),
                str(store.records),
                _safe_text(store.root[:16]) or "-",
                str(store.largest_unsealed),
                _checkpoint_sizes(store.checkpoints),
            )
            for store in report.stores
        )
        lines.extend(_table(rows))
        lines.append("")

    for summary in report.sandboxes:
        if summary.unsandboxed:
            note = f"NONE for {len(summary.unsandboxed)} of {summary.spawns} batches" + (
                " (operator opt-out recorded)" if summary.opt_out else ""
            )
        else:
            note = f"{_safe_text(summary.kind)} for all {summary.spawns} batches"
        lines.append(f"sandbox:       run {_safe_text(summary.run)}: {note}")
    for control in report.controls:
        lines.append(f"control:       run {_safe_text(control.run)}: {_safe_text(control.line())}")
    signer = _safe_text(report.signer_key_id) if report.signer_key_id else "(unknown)"
    lines.append(f"signer key id: {signer}")
    if report.trusted_by:
        lines.append(f"trusted by:    {_safe_text(report.trusted_by)}")
    elif report.status is Status.UNTRUSTED:
        lines.append("trusted by:    nothing (not pinned by --trusted-key or a policy file)")
    else:
        lines.append("trusted by:    -")
    hmac_failed = any(
        result.name == "hmac-chain" and result.outcome is Outcome.FAILED for result in report.checks
    )
    if hmac_failed:  # checked with --hmac-key, and a MAC did not chain: never "not checked"
        hmac = "FAILED (see the failure below)"
    elif report.hmac_checked:
        hmac = "checked"
    else:
        hmac = "not checked (give --hmac-key to check it)"
    lines.append(f"hmac chain:    {hmac}")

    failure = report.failure
    if failure is not None:
        lines.append("")
        lines.append(_paint("failure:", "red", color))
        lines.append(f"  check:  {_safe_text(failure.check)}")
        if failure.member is not None:
            lines.append(f"  member: {_safe_text(failure.member)}")
        if failure.line is not None:
            lines.append(f"  line:   {failure.line}")
        if failure.seq is not None:
            lines.append(f"  seq:    {failure.seq}")
        lines.append(f"  reason: {_safe_text(failure.reason)}")
    hint = _hint(report)
    if hint and report.exit_code is not ExitCode.VERIFIED:
        lines.append("")
        lines.append(f"what to do: {_safe_text(hint)}")

    lines.append("")
    code = report.exit_code
    lines.append(f"exit code {int(code)}: {EXIT_MEANINGS[code]}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- JSON


def report_to_dict(report: Report) -> dict[str, Any]:
    """The JSON document of ``report`` (schemas/verify-report.schema.json) as a dict, every
    string (keys of ``kinds`` included) in the display form of ``textsafe``."""
    failure = report.failure
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "verifier_version": report.verifier_version,
        "bundle": report.bundle,
        "status": report.status.value,
        "exit_code": int(report.exit_code),
        "signer_key_id": report.signer_key_id,
        "trusted_by": report.trusted_by,
        "hmac_checked": report.hmac_checked,
        "checks": [
            {"name": result.name, "outcome": result.outcome.value, "detail": result.detail}
            for result in report.checks
        ],
        "failure": None
        if failure is None
        else {
            "check": failure.check,
            "reason": failure.reason,
            "member": failure.member,
            "line": failure.line,
            "seq": failure.seq,
            "hint": failure.hint,
        },
        "stores": [
            {
                "run": store.run,
                "store": store.store,
                "records": store.records,
                "root": store.root,
                "checkpoints": list(store.checkpoints),
                "largest_unsealed": store.largest_unsealed,
                "first_time": store.first_time,
                "last_time": store.last_time,
                "kinds": dict(store.kinds),
            }
            for store in report.stores
        ],
        "sandboxes": [
            {
                "run": summary.run,
                "kind": summary.kind,
                "opt_out": summary.opt_out,
                "spawns": summary.spawns,
                "unsandboxed_batches": list(summary.unsandboxed),
            }
            for summary in report.sandboxes
        ],
        "controls": [
            {
                "run": control.run,
                "steps": control.steps,
                "readings": control.readings,
                "decisions": dict(control.decisions),
                "versions": control.versions,
            }
            for control in report.controls
        ],
    }
    safe: dict[str, Any] = textsafe.json_safe(document)
    return safe


def render_json(report: Report) -> str:
    """Stable JSON (sorted keys, ASCII only, two-space indent, final newline)."""
    return json.dumps(report_to_dict(report), sort_keys=True, indent=2) + "\n"


# -------------------------------------------------------------------------------------- JUnit


def _failure_text(problem: _Problem) -> str:
    """The failure's body: one ``label: value`` line per fact, each value in display form."""
    lines = [f"check: {_safe_text(problem.rule)}"]
    failure = problem.failure
    if failure is not None:
        if failure.member is not None:
            lines.append(f"member: {_safe_text(failure.member)}")
        if failure.line is not None:
            lines.append(f"line: {failure.line}")
        if failure.seq is not None:
            lines.append(f"seq: {failure.seq}")
    lines.append(f"reason: {_safe_text(problem.reason)}")
    if problem.hint:
        lines.append(f"what to do: {_safe_text(problem.hint)}")
    return "\n".join(lines)


def render_junit(report: Report) -> str:
    """JUnit XML: one test suite, one test case per check (plus ``verdict`` when needed)."""
    import xml.etree.ElementTree as ET  # here: the text and JSON reports need no XML

    problems = {problem.rule: problem for problem in _problems(report)}
    suite = ET.Element("testsuite", {"name": TOOL_NAME})
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("bundle", report.bundle),
        ("status", report.status.value),
        ("exit_code", str(int(report.exit_code))),
        ("signer_key_id", report.signer_key_id or ""),
        ("trusted_by", report.trusted_by or ""),
        ("verifier_version", report.verifier_version),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": _safe_text(value)})

    tests = failures = skipped = 0
    cases: list[tuple[str, str, Outcome, str]] = [
        (result.name, CHECK_TITLES.get(result.name, result.name), result.outcome, result.detail)
        for result in report.checks
    ]
    seen = {result.name for result in report.checks}
    cases.extend(
        (rule, CHECK_TITLES.get(rule, "bundle verdict"), Outcome.FAILED, "")
        for rule in problems
        if rule not in seen
    )
    stopped_at = report.failure.check if report.failure is not None else None
    for name, title, outcome, detail in cases:
        tests += 1
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": _safe_text(f"{TOOL_NAME}.{name}"), "name": _safe_text(title)},
        )
        problem = problems.get(name)
        if outcome is Outcome.FAILED or problem is not None:
            failures += 1
            if problem is None:
                problem = _Problem(name, "error", detail or "check failed", "", None)
            element = ET.SubElement(
                case,
                "failure",
                {"message": _safe_text(problem.reason), "type": _safe_text(problem.rule)},
            )
            element.text = _failure_text(problem)
        elif outcome in (Outcome.SKIPPED, Outcome.NOT_RUN):
            skipped += 1
            if outcome is Outcome.NOT_RUN:
                message = "not run: verification stopped at the first failure"
                if stopped_at:
                    message += f" ({stopped_at})"
            else:
                message = detail or "skipped"
            ET.SubElement(case, "skipped", {"message": _safe_text(message)})
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    ET.indent(suite)
    body = ET.tostring(suite, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


# -------------------------------------------------------------------------------------- SARIF


def _uri(path: str) -> str:
    """A URI reference for a bundle path or member name (percent-encoded from its bytes,
    ``/`` kept, backslashes turned into ``/``)."""
    return textsafe.uri(path.replace("\\", "/"))


def render_sarif(report: Report) -> str:
    """SARIF 2.1.0: one rule per check, one result per failed check (a warning if untrusted)."""
    rule_ids = list(CHECK_ORDER)
    rules: list[dict[str, Any]] = [_sarif_rule(name) for name in CHECK_ORDER]
    results: list[dict[str, Any]] = []
    for problem in _problems(report):
        if problem.rule not in rule_ids:
            rule_ids.append(problem.rule)
            rules.append(_sarif_rule(problem.rule))
        text = problem.reason.rstrip()
        if problem.hint:
            if not text.endswith((".", "!", "?")):
                text += "."
            text += f" What to do: {problem.hint}"
        failure = problem.failure
        if failure is not None and failure.member:  # a member: relative to the bundle's root
            artifact = {"uri": _uri(failure.member), "uriBaseId": BUNDLE_ROOT}
        else:  # the bundle itself, as named on the command line
            artifact = {"uri": _uri(report.bundle)}
        physical: dict[str, Any] = {"artifactLocation": artifact}
        if failure is not None and failure.line is not None and failure.line >= 1:
            physical["region"] = {"startLine": failure.line}
        result: dict[str, Any] = {
            "ruleId": problem.rule,
            "ruleIndex": rule_ids.index(problem.rule),
            "level": problem.level,
            "message": {"text": text},
            "locations": [{"physicalLocation": physical}],
        }
        if failure is not None and failure.seq is not None:
            result["properties"] = {"seq": failure.seq}
        results.append(result)
    return sarif_document(
        TOOL_NAME,
        report.verifier_version,
        rules,
        results,
        successful=report.status is not Status.UNREADABLE,
        exit_code=int(report.exit_code),
        base_ids={
            BUNDLE_ROOT: {
                "description": {
                    "text": f"the root of the bundle {report.bundle}: locations under it are "
                    "member names inside the archive, not files of a checkout"
                }
            }
        },
    )


BUNDLE_ROOT: Final = "BUNDLEROOT"
"""``uriBaseId`` of bundle member locations (declared in ``originalUriBaseIds``)."""


def _sarif_rule(name: str) -> dict[str, Any]:
    """A rule per check: title, a full description with what to do, level ``error``."""
    title = CHECK_TITLES.get(name, "the bundle carries evidence")
    hint = CHECK_HINTS.get(name, "")
    rule: dict[str, Any] = {
        "id": name,
        "shortDescription": {"text": title},
        "fullDescription": {"text": f"Check {name!r}: {title}." + (f" {hint}" if hint else "")},
        "defaultConfiguration": {"level": "error"},
    }
    if hint:
        rule["help"] = {"text": hint}
    return rule


def sarif_document(
    tool: str,
    version: str,
    rules: list[dict[str, Any]],
    results: list[dict[str, Any]],
    *,
    successful: bool,
    exit_code: int,
    base_ids: dict[str, Any] | None = None,
) -> str:
    """One SARIF 2.1.0 run of ``tool`` (shared by the bundle and gate reports).

    Callers pass raw text; every string of the document is put in display form here, once
    (URIs, already percent-encoded by ``textsafe.uri``, are unchanged by it)."""
    driver: dict[str, Any] = {"name": tool, "rules": rules}
    if version:
        driver["version"] = version
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": driver},
                "invocations": [{"executionSuccessful": successful, "exitCode": exit_code}],
                "results": results,
                **({"originalUriBaseIds": base_ids} if base_ids else {}),
            }
        ],
    }
    return json.dumps(textsafe.json_safe(document), sort_keys=True, indent=2) + "\n"


# ------------------------------------------------------------------------------------ dispatch


def render(report: Report, fmt: str) -> str:
    """Render ``report`` as ``fmt``: ``"text"``, ``"json"``, ``"junit"`` or ``"sarif"``."""
    if fmt == "text":
        return render_text(report)
    if fmt == "json":
        return render_json(report)
    if fmt == "junit":
        return render_junit(report)
    if fmt == "sarif":
        return render_sarif(report)
    raise ValueError(f"unknown output format {fmt!r}: expected one of {', '.join(FORMATS)}")
