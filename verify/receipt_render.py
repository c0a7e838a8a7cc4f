"""SARIF and JUnit for ``harness-verify receipt``: what a CI step's code scanning and test
report read, in the same shapes as the bundle's and the gate's reports.

A receipt check is one check of one file, so each document holds one rule / one test case
(``receipt``). SARIF: no result when the file verified and its signer is pinned; a
``warning`` when it verified but the signer is not pinned; an ``error`` otherwise, located at
the file's repository path under ``%SRCROOT%`` (as the gate locates changed files), so code
scanning can place it in the checkout. JUnit: the test case fails unless verified and
trusted, with the reason as its message. Every string goes through ``textsafe`` (a receipt's
content and the paths given are not trusted to be printable).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Final

from . import textsafe
from .gate_render import SRCROOT
from .receiptcheck import ReceiptOutcome
from .render import TOOL_NAME, sarif_document
from .report import Status
from .version import verifier_version

RULE: Final = "receipt"
TITLE: Final = (
    "the file is an agent's attested write: its receipt verifies and its signer is pinned"
)
HINT: Final = (
    "If the file was edited by hand after the agent wrote it, that edit is not attested: "
    "revert it or have it written by a recorded run. If the signer is not pinned, pin the "
    "operator key with --trusted-key or the policy file, from outside the change under test."
)


def _reason(outcome: ReceiptOutcome) -> str:
    if outcome.reason:
        return outcome.reason
    if outcome.status is Status.UNTRUSTED:
        return "the receipt verifies but its signer is not pinned"
    return f"receipt check: {outcome.status.value}"


def render_receipt_sarif(outcome: ReceiptOutcome) -> str:
    rule: dict[str, Any] = {
        "id": RULE,
        "shortDescription": {"text": TITLE},
        "fullDescription": {"text": f"Check {RULE!r}: {TITLE}. {HINT}"},
        "defaultConfiguration": {"level": "error"},
        "help": {"text": HINT},
    }
    results: list[dict[str, Any]] = []
    if outcome.status is not Status.VERIFIED:
        location = {"uri": textsafe.uri(outcome.name), "uriBaseId": SRCROOT}
        results.append(
            {
                "ruleId": RULE,
                "ruleIndex": 0,
                "level": "warning" if outcome.status is Status.UNTRUSTED else "error",
                "message": {"text": _reason(outcome)},
                "locations": [{"physicalLocation": {"artifactLocation": location}}],
                "properties": {"receipt": outcome.receipt, "status": outcome.status.value},
            }
        )
    return sarif_document(
        TOOL_NAME,
        verifier_version(),
        [rule],
        results,
        successful=outcome.status is not Status.UNREADABLE,
        exit_code=int(outcome.exit_code),
        base_ids={SRCROOT: {"description": {"text": "the root of the repository checkout"}}},
    )


def render_receipt_junit(outcome: ReceiptOutcome) -> str:
    shown = textsafe.text
    suite = ET.Element("testsuite", {"name": TOOL_NAME})
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("receipt", outcome.receipt),
        ("artifact", outcome.artifact),
        ("status", outcome.status.value),
        ("exit_code", str(int(outcome.exit_code))),
        ("signer_key_id", outcome.signer_key_id or ""),
        ("trusted_by", outcome.trusted_by or ""),
        ("verifier_version", verifier_version()),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": shown(value)})
    case = ET.SubElement(
        suite, "testcase", {"classname": f"{TOOL_NAME}.{RULE}", "name": shown(outcome.name)}
    )
    failed = outcome.status is not Status.VERIFIED
    if failed:
        element = ET.SubElement(
            case, "failure", {"message": shown(_reason(outcome)), "type": outcome.status.value}
        )
        element.text = shown(f"{_reason(outcome)}\nWhat to do: {HINT}")
    suite.set("tests", "1")
    suite.set("failures", "1" if failed else "0")
    suite.set("errors", "0")
    suite.set("skipped", "0")
    ET.indent(suite)
    body = ET.tostring(suite, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'
