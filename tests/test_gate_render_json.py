"""The gate's JSON report, rendered fast, is the very text the standard library would write.

``dumps_indented`` encodes with orjson and escapes non-ASCII afterwards; ``gate_to_dict``
memoizes the display form of repeated strings. Both must give exactly what
``json.dumps(textsafe.json_safe(raw), indent=2, sort_keys=True, ensure_ascii=True)`` gives,
for any strings a pull request or a bundle can carry.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify import textsafe
from harness.verify.gate import FileVerdict, GateReport
from harness.verify.gate_render import dumps_indented, gate_to_dict, render_gate_json
from harness.verify.report import Status


def _reference(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)  # beyond 64 bits: orjson refuses
    | st.text(),  # lone surrogates included: orjson refuses those too
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_dumps_indented_is_json_dumps(document: Any) -> None:
    assert dumps_indented(document) == _reference(document)


def test_dumps_indented_escapes_like_json_dumps() -> None:
    document = {
        "z": ["é", "…", "🔥", "a\u2028b", "\x00\x1f\x7f", '"\\/', "", [], {}],
        "a": {"nested": [1, -2, None, True, False], "ü": "mixed ascii and é…🔥 runs"},
        "big": 2**64,
        "surrogate": os.fsdecode(b"\xff"),
    }
    assert dumps_indented(document) == _reference(document)
    del document["big"], document["surrogate"]  # the orjson path proper
    assert dumps_indented(document) == _reference(document)


def _report(paths: list[str], reasons: list[str]) -> GateReport:
    files = [
        FileVerdict(
            path,
            "A" if index % 2 else "M",
            "covered" if index % 3 else "uncovered",
            reasons[index % len(reasons)],
            run=None if index % 4 == 0 else "run\n1",
            task=None if index % 4 == 0 else "task::x",
            seq=None if index % 4 == 0 else index,
            expected_sha256=None if index % 5 == 0 else "ab" * 32,
            actual_sha256=None if index % 7 == 0 else "cd" * 32,
        )
        for index, path in enumerate(paths)
    ]
    return GateReport(
        passed=False,
        bundle_status=Status.VERIFIED,
        reason="2 of 3 uncovered: ##[error]x",
        files=files,
        bundle="bundle\x1b[31m.tar",
        base="a" * 40,
        head="b" * 40,
        signer_key_id="k",
        trusted_by="--trusted-key",
        verifier_version="0.1.0",
    )


def _raw_document(report: GateReport) -> dict[str, Any]:
    """The report as the schema names it, before any escaping (what json_safe is given)."""
    return {
        "format": "harness-verify/gate-report",
        "version": 2,
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
                "path": e.path,
                "change": e.change,
                "verdict": e.verdict,
                "reason": e.reason,
                "run": e.run,
                "task": e.task,
                "seq": e.seq,
                "expected_sha256": e.expected_sha256,
                "actual_sha256": e.actual_sha256,
            }
            for e in report.files
        ],
    }


TRICKY = [
    "new\nline.txt",
    os.fsdecode(b"raw\xff\xfe.txt"),
    "-n",
    "with space.txt",
    "é ü.txt",
    "🔥.md",
    "a::b ##[x].txt",
    "back\\slash",
    "bidi\u202e.txt",
    "tab\there",
]


def test_gate_document_is_json_safe_of_the_raw_one() -> None:
    report = _report(TRICKY, ["no receipt for this file", "sha256 ab… matches", "x\ny"])
    assert gate_to_dict(report) == textsafe.json_safe(_raw_document(report))
    rendered = render_gate_json(report)
    assert rendered == _reference(textsafe.json_safe(_raw_document(report))) + "\n"
    shown = json.loads(rendered)
    assert [textsafe.unescape(entry["path"]) for entry in shown["files"]] == TRICKY
    assert "\n" not in "".join(entry["path"] for entry in shown["files"])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1), min_size=1, max_size=8), st.lists(st.text(), min_size=1))
def test_gate_document_for_any_names_and_reasons(paths: list[str], reasons: list[str]) -> None:
    report = _report(paths, reasons)
    assert gate_to_dict(report) == textsafe.json_safe(_raw_document(report))
    assert render_gate_json(report) == _reference(gate_to_dict(report)) + "\n"
