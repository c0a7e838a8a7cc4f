"""Reports of ``harness-verify sigstore``: text, JSON, JUnit and SARIF, shaped like the bundle
verifier's (docs/spec/verifier.md §6) so that CI consumes them the same way.

One rule / test case per check of ``sigstore_check.CHECKS``. Every string that is not our own
wording (the certificate's identities, the issuer, sigstore's messages, paths) is written in
display form (``textsafe``): a certificate is attacker-chosen bytes until it verifies.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any, Final

from . import textsafe
from .render import TOOL_NAME, sarif_document
from .report import Outcome, Status
from .sigstore_check import CHECKS, HINTS, SigstoreOutcome
from .version import verifier_version

REPORT_FORMAT: Final = "harness-verify/sigstore-report"
TITLES: Final = dict(CHECKS)
_VERDICTS: Final = {
    Status.VERIFIED: "VERIFIED",
    Status.UNTRUSTED: "VERIFIED BUT NOT TRUSTED: integrity verified but identity not pinned",
    Status.INVALID: "INVALID",
    Status.UNREADABLE: "UNREADABLE",
}
_MARKS: Final = {
    Outcome.PASSED: "[pass]",
    Outcome.FAILED: "[FAIL]",
    Outcome.SKIPPED: "[skip]",
    Outcome.NOT_RUN: "[----]",
}


def to_json(outcome: SigstoreOutcome) -> dict[str, Any]:
    failure = outcome.failure
    return {
        "format": REPORT_FORMAT,
        "version": 1,
        "verifier_version": verifier_version(),
        "artifact": outcome.artifact,
        "sha256": outcome.sha256,
        "bundle": outcome.bundle,
        "status": outcome.status.value,
        "exit_code": int(outcome.exit_code),
        "media_type": outcome.media_type,
        "log_entry": outcome.log_entry,
        "log_index": outcome.log_index,
        "identities": list(outcome.identities),
        "issuer": outcome.issuer,
        "trusted_by": outcome.trusted_by,
        "checks": [
            {"name": check.name, "outcome": check.outcome.value, "detail": check.detail}
            for check in outcome.checks
        ],
        "failure": None
        if failure is None
        else {"check": failure.check, "reason": failure.reason, "hint": failure.hint},
    }


def render_json(outcome: SigstoreOutcome) -> str:
    document = textsafe.json_safe(to_json(outcome))
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def render_text(outcome: SigstoreOutcome) -> str:
    shown = textsafe.text
    lines = [
        f"harness-verify {verifier_version()} sigstore",
        f"artifact: {shown(outcome.artifact)} (sha256 {outcome.sha256})",
        f"bundle: {shown(outcome.bundle)}",
        f"result: {_VERDICTS.get(outcome.status, outcome.status.value.upper())}",
    ]
    for check in outcome.checks:
        detail = f": {shown(check.detail)}" if check.detail else ""
        lines.append(f"  {_MARKS[check.outcome]} {check.name}{detail}")
    if outcome.media_type is not None:
        lines.append(f"media type: {shown(outcome.media_type)}")
    if outcome.log_entry is not None:
        lines.append(f"log entry: {shown(outcome.log_entry)} at index {outcome.log_index}")
    if outcome.identities or outcome.issuer:
        names = ", ".join(shown(name) for name in outcome.identities) or "none"
        lines.append(f"certificate identity: {names} (issuer {shown(outcome.issuer)})")
    if outcome.trusted_by is not None:
        lines.append(f"trusted by: {shown(outcome.trusted_by)}")
    if outcome.failure is not None:
        lines.append(f"failed: {outcome.failure.check}: {shown(outcome.failure.reason)}")
        if outcome.failure.hint:
            lines.append(f"what to do: {outcome.failure.hint}")
    lines.append(f"exit code {int(outcome.exit_code)}")
    return "\n".join(lines) + "\n"


def render_junit(outcome: SigstoreOutcome) -> str:
    shown = textsafe.text
    suite = ET.Element("testsuite", {"name": f"{TOOL_NAME} sigstore"})
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("artifact", outcome.artifact),
        ("bundle", outcome.bundle),
        ("status", outcome.status.value),
        ("exit_code", str(int(outcome.exit_code))),
        ("trusted_by", outcome.trusted_by or ""),
        ("verifier_version", verifier_version()),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": shown(value)})
    failures = skipped = 0
    for check in outcome.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"{TOOL_NAME}.sigstore.{check.name}", "name": TITLES[check.name]},
        )
        if check.outcome is Outcome.FAILED:
            failures += 1
            element = ET.SubElement(
                case, "failure", {"message": shown(check.detail), "type": check.name}
            )
            element.text = f"check: {check.name}\nreason: {shown(check.detail)}\n" + (
                f"what to do: {HINTS.get(check.name, '')}\n"
            )
        elif check.outcome is Outcome.NOT_RUN:
            skipped += 1
            stopped = outcome.failure.check if outcome.failure is not None else ""
            ET.SubElement(
                case, "skipped", {"message": f"not run: verification stopped at {stopped}"}
            )
    suite.set("tests", str(len(outcome.checks)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def render_sarif(outcome: SigstoreOutcome) -> str:
    names = [name for name, _ in CHECKS]
    rules = [
        {
            "id": name,
            "shortDescription": {"text": title},
            "fullDescription": {"text": f"Check '{name}': {title}. {HINTS.get(name, '')}"},
            "help": {"text": HINTS.get(name, "")},
            "defaultConfiguration": {"level": "error"},
        }
        for name, title in CHECKS
    ]
    results: list[dict[str, Any]] = []
    failure = outcome.failure
    if failure is not None:
        location = {"uri": textsafe.uri(outcome.bundle.replace("\\", "/"))}
        results.append(
            {
                "ruleId": failure.check,
                "ruleIndex": names.index(failure.check),
                "level": "warning" if outcome.status is Status.UNTRUSTED else "error",
                "message": {"text": f"{failure.reason} What to do: {failure.hint}"},
                "locations": [{"physicalLocation": {"artifactLocation": location}}],
            }
        )
    return sarif_document(
        TOOL_NAME,
        verifier_version(),
        rules,
        results,
        successful=outcome.status is not Status.UNREADABLE,
        exit_code=int(outcome.exit_code),
    )


def render(outcome: SigstoreOutcome, fmt: str) -> str:
    if fmt == "json":
        return render_json(outcome)
    if fmt == "junit":
        return render_junit(outcome)
    if fmt == "sarif":
        return render_sarif(outcome)
    return render_text(outcome)
