"""The four renderings of a verification Report: text, JSON (with its schema), JUnit, SARIF."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from harness.verify.render import (
    FORMATS,
    SARIF_SCHEMA,
    VERDICTS,
    render,
    render_json,
    render_junit,
    render_sarif,
    render_text,
)
from harness.verify.report import (
    CHECK_ORDER,
    CHECK_TITLES,
    EXIT_CODES,
    CheckResult,
    ExitCode,
    Failure,
    Outcome,
    Report,
    Status,
    StoreSummary,
    failed_report,
)
from harness.verify.textsafe import text, unescape

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "schemas" / "verify-report.schema.json"
KEY_ID = "3b" * 32
NASTY = "bad \x00 <tag> & ]]> \x1b[31m red \u202e evil 🔥 \ud800 \x7f \ufffe end"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _stores() -> list[StoreSummary]:
    return [
        StoreSummary(
            run="run-1",
            store="lineage",
            records=12,
            root="ab" * 32,
            checkpoints=(1, 5, 12),
            first_time="2025-01-01T00:00:00Z",
            last_time="2025-01-01T00:05:00Z",
            kinds={"artifact": 10, "run-start": 2},
        ),
        StoreSummary("run-1", "audit", 0, "cd" * 32, (), None, None, {}),
    ]


def _all_passed(report: Report, *, hmac: bool = False) -> Report:
    for name in CHECK_ORDER:
        if name == "hmac-chain" and not hmac:
            report.checks.append(CheckResult(name, Outcome.SKIPPED, "no --hmac-key given"))
        else:
            report.checks.append(CheckResult(name, Outcome.PASSED))
    report.hmac_checked = hmac
    return report


def verified() -> Report:
    report = Report(
        "bundles/run-1.tar",
        status=Status.VERIFIED,
        signer_key_id=KEY_ID,
        trusted_by="--trusted-key",
        stores=_stores(),
        verifier_version="0.1.0",
    )
    return _all_passed(report, hmac=True)


def untrusted() -> Report:
    report = Report(
        "bundles/run-1.tar",
        status=Status.UNTRUSTED,
        signer_key_id=KEY_ID,
        stores=_stores(),
        verifier_version="0.1.0",
    )
    _all_passed(report)
    report.checks[-1] = CheckResult("trust", Outcome.FAILED, "signer not pinned")
    return report


def empty() -> Report:
    report = Report("empty.tar", status=Status.EMPTY, signer_key_id=KEY_ID)
    return _all_passed(report)


def seal_only() -> Report:
    report = Report("seal.tar", signer_key_id=KEY_ID, verifier_version="0.1.0")
    report.checks.append(CheckResult("archive", Outcome.PASSED))
    report.checks.append(CheckResult("manifest-signature", Outcome.PASSED))
    return failed_report(
        report,
        Failure("members", "the bundle holds a seal but no stores", member="manifest.json"),
        Status.SEAL_ONLY,
    )


FULL_FAILURE = Failure(
    check="records",
    reason="seq 7 follows seq 5",
    member="runs/run-1/lineage.jsonl",
    line=7,
    seq=6,
    hint="a record was removed; treat the store as tampered",
)


def invalid(failure: Failure = FULL_FAILURE) -> Report:
    report = Report("bundles/run-1.tar", signer_key_id=KEY_ID, verifier_version="0.1.0")
    for name in CHECK_ORDER[: CHECK_ORDER.index(failure.check)]:
        report.checks.append(CheckResult(name, Outcome.PASSED))
    return failed_report(report, failure)


def unreadable() -> Report:
    report = Report("notes.txt", verifier_version="0.1.0")
    return failed_report(
        report,
        Failure("archive", "not a tar archive", hint="give the .tar the export produced"),
        Status.UNREADABLE,
    )


BUILDERS = {
    Status.VERIFIED: verified,
    Status.UNTRUSTED: untrusted,
    Status.EMPTY: empty,
    Status.SEAL_ONLY: seal_only,
    Status.INVALID: invalid,
    Status.UNREADABLE: unreadable,
}


def test_every_status_has_a_builder() -> None:
    assert set(BUILDERS) == set(Status)
    for status, build in BUILDERS.items():
        assert build().status is status


# ----------------------------------------------------------------------------------- JSON


def test_schema_enums_follow_the_report_contract() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    props = schema["properties"]
    assert schema["$defs"]["check"]["enum"] == list(CHECK_ORDER)
    assert set(props["status"]["enum"]) == {status.value for status in Status}
    outcome = props["checks"]["items"]["properties"]["outcome"]
    assert set(outcome["enum"]) == {o.value for o in Outcome}
    assert set(props["exit_code"]["enum"]) == {int(code) for code in EXIT_CODES.values()}


def _objects(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append(node)
        for value in node.values():
            found.extend(_objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_objects(value))
    return found


def test_schema_closes_every_object() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    for node in _objects(schema):
        if node.get("type") == "object":
            assert "additionalProperties" in node, node
            assert node["additionalProperties"] is not True, node


@pytest.mark.parametrize("status", list(Status))
def test_json_validates_and_round_trips(status: Status, validator: Draft202012Validator) -> None:
    report = BUILDERS[status]()
    text = render_json(report)
    assert text.endswith("\n")
    assert text.isascii()
    doc = json.loads(text)
    validator.validate(doc)
    assert doc["format"] == "harness-verify/report"
    assert doc["version"] == 1
    assert doc["verifier_version"] == report.verifier_version
    assert doc["bundle"] == report.bundle
    assert doc["status"] == status.value
    assert doc["exit_code"] == int(report.exit_code) == int(EXIT_CODES[status])
    assert doc["signer_key_id"] == report.signer_key_id
    assert doc["trusted_by"] == report.trusted_by
    assert doc["hmac_checked"] is report.hmac_checked
    assert [(c["name"], c["outcome"], c["detail"]) for c in doc["checks"]] == [
        (c.name, c.outcome.value, c.detail) for c in report.checks
    ]
    if report.failure is None:
        assert doc["failure"] is None
    else:
        assert Failure(**doc["failure"]) == report.failure
    rebuilt = [
        StoreSummary(
            **{
                **{k: v for k, v in store.items() if k != "largest_unsealed"},
                "checkpoints": tuple(store["checkpoints"]),
            }
        )
        for store in doc["stores"]
    ]
    assert rebuilt == report.stores
    assert [s["largest_unsealed"] for s in doc["stores"]] == [
        s.largest_unsealed for s in report.stores
    ]
    # Stable: same report, same bytes; keys sorted.
    assert render_json(report) == text
    assert text == json.dumps(doc, sort_keys=True, indent=2) + "\n"


def test_json_full_failure_fields(validator: Draft202012Validator) -> None:
    doc = json.loads(render_json(invalid()))
    validator.validate(doc)
    assert doc["failure"] == {
        "check": "records",
        "reason": "seq 7 follows seq 5",
        "member": "runs/run-1/lineage.jsonl",
        "line": 7,
        "seq": 6,
        "hint": "a record was removed; treat the store as tampered",
    }
    assert [c["outcome"] for c in doc["checks"]] == [
        "passed",
        "passed",
        "passed",
        "failed",
        *["not-run"] * (len(CHECK_ORDER) - 4),
    ]


def test_json_with_nasty_strings_is_valid(validator: Draft202012Validator) -> None:
    report = invalid(Failure("members", NASTY, member=NASTY, hint=NASTY))
    report.bundle = NASTY
    doc = json.loads(render_json(report))
    validator.validate(doc)
    # the display form (one printable line, lossless), never the raw text
    assert doc["failure"]["reason"] == text(NASTY)
    assert doc["bundle"] == text(NASTY)
    assert unescape(doc["failure"]["member"]) == NASTY
    assert "\\x1b[31m" in doc["failure"]["reason"]
    assert "🔥" in doc["failure"]["reason"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(extra=1),
        lambda d: d["checks"][0].update(extra=1),
        lambda d: d["stores"][0].update(extra=1),
        lambda d: d.update(exit_code=3),  # verified must be 0
        lambda d: d.update(status="ok"),
        lambda d: d["checks"][0].update(name="no-such-check"),
        lambda d: d["checks"][0].update(outcome="maybe"),
        lambda d: d.update(signer_key_id="AB" * 32),
        lambda d: d["stores"][0].update(records=-1),
        lambda d: d["stores"][0]["kinds"].update(x="1"),
        lambda d: d.pop("failure"),
        lambda d: d.update(format="something-else"),
    ],
)
def test_schema_rejects_drift(mutate: Any, validator: Draft202012Validator) -> None:
    doc = json.loads(render_json(verified()))
    mutate(doc)
    assert not validator.is_valid(doc)


def test_schema_rejects_extra_failure_member(validator: Draft202012Validator) -> None:
    doc = json.loads(render_json(invalid()))
    doc["failure"]["extra"] = 1
    assert not validator.is_valid(doc)


# ---------------------------------------------------------------------------------- JUnit


def _junit(report: Report) -> ET.Element:
    text = render_junit(report)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuite"
    assert root.get("name") == "harness-verify"
    return root


def _counts(root: ET.Element) -> tuple[int, int, int]:
    cases = root.findall("testcase")
    failures = sum(1 for case in cases if case.find("failure") is not None)
    skipped = sum(1 for case in cases if case.find("skipped") is not None)
    assert root.get("tests") == str(len(cases))
    assert root.get("failures") == str(failures)
    assert root.get("skipped") == str(skipped)
    assert root.get("errors") == "0"
    return len(cases), failures, skipped


@pytest.mark.parametrize("status", list(Status))
def test_junit_counts_match(status: Status) -> None:
    report = BUILDERS[status]()
    root = _junit(report)
    tests, failures, _ = _counts(root)
    assert tests >= len(report.checks)
    # A non-zero exit code is never all green in CI.
    assert (failures > 0) == (report.exit_code is not ExitCode.VERIFIED)


def test_junit_verified() -> None:
    root = _junit(verified())
    assert _counts(root) == (len(CHECK_ORDER), 0, 0)
    cases = root.findall("testcase")
    assert [case.get("classname") for case in cases] == [
        f"harness-verify.{name}" for name in CHECK_ORDER
    ]
    assert [case.get("name") for case in cases] == [CHECK_TITLES[name] for name in CHECK_ORDER]


def test_junit_invalid_failure_and_not_run() -> None:
    root = _junit(invalid())
    assert _counts(root) == (len(CHECK_ORDER), 1, len(CHECK_ORDER) - 4)
    case = root.find("testcase[@classname='harness-verify.records']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == "seq 7 follows seq 5"
    assert failure.get("type") == "records"
    body = failure.text or ""
    for part in ("runs/run-1/lineage.jsonl", "line: 7", "seq: 6", "treat the store as tampered"):
        assert part in body
    skipped = root.find("testcase[@classname='harness-verify.trust']/skipped")
    assert skipped is not None
    assert "records" in (skipped.get("message") or "")


def test_junit_skipped_check_has_its_detail() -> None:
    root = _junit(untrusted())
    skipped = root.find("testcase[@classname='harness-verify.hmac-chain']/skipped")
    assert skipped is not None
    assert skipped.get("message") == "no --hmac-key given"


def test_junit_empty_bundle_gets_a_failing_verdict_case() -> None:
    root = _junit(empty())
    verdict = root.find("testcase[@classname='harness-verify.verdict']/failure")
    assert verdict is not None
    assert "EMPTY BUNDLE" in (verdict.get("message") or "")


def test_junit_survives_control_characters_and_unicode() -> None:
    report = invalid(Failure("records", NASTY, member=NASTY, line=3, seq=2, hint=NASTY))
    report.bundle = NASTY
    root = _junit(report)
    failure = root.find("testcase/failure")
    assert failure is not None
    message = failure.get("message") or ""
    assert "<tag> & ]]>" in message
    assert "🔥" in message
    assert "\\x00" in message
    assert "\x00" not in message
    assert "\\ud800" in message
    assert "<tag> & ]]>" in (failure.text or "")
    bundle = root.find("properties/property[@name='bundle']")
    assert bundle is not None
    assert "🔥" in (bundle.get("value") or "")


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text(), st.text(min_size=1))
def test_junit_and_sarif_always_parse(reason: str, hint: str, member: str) -> None:
    report = invalid(Failure("merkle-roots", reason, member=member, line=1, seq=0, hint=hint))
    ET.fromstring(render_junit(report).encode("utf-8"))
    doc = json.loads(render_sarif(report))
    assert doc["runs"][0]["results"][0]["ruleId"] == "merkle-roots"
    text = render_text(report)
    assert re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text) is None


# ---------------------------------------------------------------------------------- SARIF


def _check_sarif(doc: dict[str, Any]) -> None:
    """The structural parts of SARIF 2.1.0 that consumers (code scanning) rely on."""
    assert set(doc) == {"$schema", "version", "runs"}
    assert doc["$schema"] == SARIF_SCHEMA
    assert doc["version"] == "2.1.0"
    assert isinstance(doc["runs"], list)
    assert len(doc["runs"]) == 1
    run = doc["runs"][0]
    assert set(run) <= {"tool", "invocations", "results", "originalUriBaseIds"}
    base_ids = run.get("originalUriBaseIds", {})
    driver = run["tool"]["driver"]
    assert driver["name"] == "harness-verify"
    assert isinstance(driver.get("version", ""), str)
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert len(rule_ids) == len(set(rule_ids))
    for rule in driver["rules"]:
        assert isinstance(rule["shortDescription"]["text"], str)
        assert rule["shortDescription"]["text"]
        assert rule["fullDescription"]["text"].startswith(f"Check {rule['id']!r}: ")
    (invocation,) = run["invocations"]
    assert isinstance(invocation["executionSuccessful"], bool)
    assert isinstance(invocation["exitCode"], int)
    for result in run["results"]:
        assert result["level"] in {"error", "warning", "note", "none"}
        assert isinstance(result["message"]["text"], str)
        assert result["message"]["text"]
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        for location in result["locations"]:
            physical = location["physicalLocation"]
            assert isinstance(physical["artifactLocation"]["uri"], str)
            assert physical["artifactLocation"]["uri"]
            if "uriBaseId" in physical["artifactLocation"]:  # declared, so consumers resolve it
                assert physical["artifactLocation"]["uriBaseId"] in base_ids
            if "region" in physical:
                assert isinstance(physical["region"]["startLine"], int)
                assert physical["region"]["startLine"] >= 1


def _sarif(report: Report) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(render_sarif(report))
    _check_sarif(doc)
    return doc


@pytest.mark.parametrize("status", list(Status))
def test_sarif_structure_and_invocation(status: Status) -> None:
    report = BUILDERS[status]()
    run = _sarif(report)["runs"][0]
    assert run["invocations"][0]["exitCode"] == int(report.exit_code)
    assert run["invocations"][0]["executionSuccessful"] is (status is not Status.UNREADABLE)
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]][: len(CHECK_ORDER)] == list(
        CHECK_ORDER
    )
    for rule in run["tool"]["driver"]["rules"][: len(CHECK_ORDER)]:
        assert rule["shortDescription"]["text"] == CHECK_TITLES[rule["id"]]


def test_sarif_verified_has_no_results() -> None:
    run = _sarif(verified())["runs"][0]
    assert run["results"] == []
    assert run["tool"]["driver"]["version"] == "0.1.0"
    assert len(run["tool"]["driver"]["rules"]) == len(CHECK_ORDER)


def test_sarif_invalid_points_at_member_and_line() -> None:
    (result,) = _sarif(invalid())["runs"][0]["results"]
    assert result["ruleId"] == "records"
    assert result["level"] == "error"
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {
        "uri": "runs/run-1/lineage.jsonl",
        "uriBaseId": "BUNDLEROOT",  # a member name, relative to the bundle, not the checkout
    }
    assert physical["region"] == {"startLine": 7}
    assert "seq 7 follows seq 5" in result["message"]["text"]
    assert "treat the store as tampered" in result["message"]["text"]
    assert result["properties"] == {"seq": 6}


def test_sarif_without_member_points_at_bundle_and_has_no_region() -> None:
    (result,) = _sarif(unreadable())["runs"][0]["results"]
    assert result["ruleId"] == "archive"
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "notes.txt"}  # the bundle as named
    assert "region" not in physical


def test_sarif_member_uri_is_percent_encoded() -> None:
    report = invalid(Failure("members", "extra member", member="runs/a b/x#1.jsonl"))
    (result,) = _sarif(report)["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "runs/a%20b/x%231.jsonl"
    )


def test_sarif_untrusted_is_one_warning() -> None:
    (result,) = _sarif(untrusted())["runs"][0]["results"]
    assert result["ruleId"] == "trust"
    assert result["level"] == "warning"
    assert "--trusted-key" in result["message"]["text"]


def test_untrusted_as_the_verifier_reports_it() -> None:
    """bundle.py marks an untrusted signer with failed_report(Failure("trust", ...))."""
    report = Report("b.tar", signer_key_id=KEY_ID, verifier_version="0.1.0")
    for name in CHECK_ORDER[:-1]:
        report.checks.append(CheckResult(name, Outcome.PASSED))
    failed_report(
        report,
        Failure("trust", "integrity verified but signer not pinned", hint="pin it"),
        Status.UNTRUSTED,
    )
    (result,) = _sarif(report)["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("trust", "warning")
    assert result["message"]["text"].endswith("What to do: pin it")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "b.tar"
    root = _junit(report)
    assert _counts(root) == (len(CHECK_ORDER), 1, 0)
    text = render_text(report)
    assert "VERIFIED BUT NOT TRUSTED" in text
    assert "what to do: pin it" in text
    assert "exit code 3" in text


def test_sarif_untrusted_without_failed_trust_check_still_warns() -> None:
    report = untrusted()
    report.checks[-1] = CheckResult("trust", Outcome.SKIPPED, "no policy")
    (result,) = _sarif(report)["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("trust", "warning")
    assert KEY_ID in result["message"]["text"]


def test_sarif_empty_and_seal_only_are_errors() -> None:
    (result,) = _sarif(empty())["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("verdict", "error")
    (result,) = _sarif(seal_only())["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("members", "error")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "manifest.json"
    )


def test_sarif_zero_line_has_no_region() -> None:
    report = invalid(Failure("records", "bad", member="m.jsonl", line=0))
    (result,) = _sarif(report)["runs"][0]["results"]
    assert "region" not in result["locations"][0]["physicalLocation"]


# ----------------------------------------------------------------------------------- text


@pytest.mark.parametrize("status", list(Status))
def test_text_has_verdict_checks_and_exit_code(status: Status) -> None:
    report = BUILDERS[status]()
    text = render_text(report)
    assert VERDICTS[status] in text
    assert report.bundle in text
    assert f"exit code {int(report.exit_code)}:" in text
    for result in report.checks:
        assert CHECK_TITLES[result.name] in text
    assert "\x1b" not in text


def test_text_verdict_wording() -> None:
    assert "VERIFIED\n" in render_text(verified()).replace("result: ", "")
    text = render_text(untrusted())
    assert "VERIFIED BUT NOT TRUSTED: integrity verified but signer not pinned" in text
    assert KEY_ID in text
    assert "--trusted-key" in text
    assert "exit code 3: verified but not trusted by policy" in text


def test_text_failure_block() -> None:
    text = render_text(invalid())
    assert "INVALID" in text
    assert "member: runs/run-1/lineage.jsonl" in text
    assert "line:   7" in text
    assert "seq:    6" in text
    assert "reason: seq 7 follows seq 5" in text
    assert "what to do: a record was removed; treat the store as tampered" in text
    assert "exit code 1: evidence invalid" in text
    assert "[FAIL] records" in text
    assert "(not run)" in text


def test_text_stores_table_and_trust_source() -> None:
    text = render_text(verified())
    assert "trusted by:    --trusted-key" in text
    assert KEY_ID in text
    header = next(line for line in text.splitlines() if "RECORDS" in line)
    assert header.split() == ["RUN", "STORE", "RECORDS", "ROOT", "MAX-UNSEALED", "CHECKPOINTS"]
    row = next(line for line in text.splitlines() if "lineage" in line and "run-1" in line)
    assert "ab" * 8 in row
    assert "ab" * 9 not in row
    assert "1, 5, 12" in row
    assert row.split()[4] == "7"  # the gap from 5 to 12
    assert "hmac chain:    checked" in text
    assert "exit code 0: verified and trusted" in text


def test_text_long_checkpoint_list_is_shortened() -> None:
    report = verified()
    report.stores = [
        StoreSummary("r", "audit", 100, "00" * 32, tuple(range(1, 101)), None, None, {})
    ]
    text = render_text(report)
    assert "1, 2, 3, ..., 100 (100 checkpoints)" in text


def test_text_escapes_terminal_controls() -> None:
    report = invalid(Failure("records", NASTY, member=NASTY, hint=NASTY))
    text = render_text(report)
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\x00" not in text
    assert "\\x1b[31m" in text
    assert "🔥" in text


def test_text_color_only_when_asked() -> None:
    plain = render_text(invalid())
    colored = render_text(invalid(), color=True)
    assert "\x1b[" not in plain
    assert "\x1b[31;1mINVALID\x1b[0m" in colored
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == plain


def test_text_untrusted_without_key_id() -> None:
    report = untrusted()
    report.signer_key_id = None
    assert "signer key id: (unknown)" in render_text(report)


# ------------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("fmt", FORMATS)
def test_render_dispatches(fmt: str) -> None:
    report = invalid()
    expected = {
        "text": render_text,
        "json": render_json,
        "junit": render_junit,
        "sarif": render_sarif,
    }[fmt](report)
    assert render(report, fmt) == expected


@pytest.mark.parametrize("fmt", ["xml", "", "JSON", "html"])
def test_render_rejects_unknown_format(fmt: str) -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        render(verified(), fmt)
