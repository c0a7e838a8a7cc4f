"""``harness.verify.compare``'s pure parts: the decision sequence, the first difference in
records and decisions, run pairing and the reports (no runtime; test_compare.py runs real
runs and bundles end to end)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.verify.compare import (
    DECISION_MEMBERS,
    CompareError,
    Comparison,
    Difference,
    RunComparison,
    StoreComparison,
    _decision_difference,
    _first_member,
    _store_difference,
    decisions,
    pair_runs,
)
from harness.verify.records import Record
from harness.verify.report import ExitCode, Report, StoreSummary

T0 = "2026-01-01T00:00:00.000001Z"


def record(seq: int, kind: str, mac: str = "0" * 64, run: str = "r", time: str = T0,
           **body: Any) -> Record:  # fmt: skip
    return Record("audit", run, seq, time, kind, body, mac)


def test_decision_sequence_keeps_decisions_and_drops_measurements() -> None:
    def record(seq: int, kind: str, **body: Any) -> Record:
        return Record("audit", "r", seq, "2026-01-01T00:00:00.000000Z", kind, body, "0" * 64)

    records = [
        record(0, "run.start", sandbox={}),
        record(1, "gate.result", task="t", gate="g", passed=True, exit_code=0, duration_ms=17),
        record(
            2, "task.transition", task="t", to="done", reason="after 17 ms", **{"from": "gating"}
        ),
        record(3, "run.end", outcome="completed"),
    ]
    assert list(decisions(records)) == [
        (1, {"kind": "gate.result", "task": "t", "gate": "g", "passed": True, "exit_code": 0}),
        (2, {"kind": "task.transition", "task": "t", "from": "gating", "to": "done"}),
        (3, {"kind": "run.end", "outcome": "completed"}),
    ]
    # every member named is one the record kind has (a renamed member would compare None to None)
    from harness.verify.recordkinds import BODY_SPECS

    for kind, members in DECISION_MEMBERS.items():
        assert set(members) <= set(BODY_SPECS["audit"][kind]), kind


def test_first_difference_names_the_decision_and_both_audit_seqs() -> None:

    ours = [(4, {"kind": "run.end", "outcome": "completed"})]
    theirs = [(9, {"kind": "run.end", "outcome": "aborted: replay miss"})]
    difference = _decision_difference(ours, theirs)
    assert difference == Difference(
        "decisions", 0, "decision.outcome", "completed", "aborted: replay miss", 4, 9
    )
    longer = _decision_difference(ours + theirs, ours)
    assert longer is not None and (longer.index, longer.original_seq, longer.replay_seq) == (
        1,
        9,
        None,
    )
    assert _decision_difference(ours, ours) is None


def test_first_member_walks_depth_first_in_sorted_key_order() -> None:
    assert _first_member({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 3]}}, "x") == (
        "x.b.c[1]",
        2,
        3,
    )
    assert _first_member({"a": 1}, {"a": 1, "b": 2}, "x") == ("x.b", "<absent>", 2)
    assert _first_member({"a": 1, "b": 2}, {"a": 1}, "x") == ("x.b", 2, "<absent>")
    assert _first_member([1, 2], [1, 2, 3], "x") == ("x.length", 2, 3)
    assert _first_member(1, True, "x") == ("x", 1, True)  # equal in Python, not in JSON
    assert _first_member({"z": 1, "a": 1}, {"z": 2, "a": 2}, "x") == ("x.a", 1, 2)
    assert _first_member({"a": [{"b": None}]}, {"a": [{"b": None}]}, "x") is None


def test_store_difference_names_the_cause_before_the_mac() -> None:
    ours = [record(0, "event", mac="a" * 64, name="x"), record(1, "event", mac="b" * 64, name="y")]
    same_body = [ours[0], record(1, "event", mac="c" * 64, name="y")]
    other_body = [ours[0], record(1, "event", mac="c" * 64, name="z")]
    assert _store_difference("lineage", ours, list(ours)) is None
    assert _store_difference("lineage", ours, same_body) == Difference(
        "lineage", 1, "record.mac", "b" * 64, "c" * 64
    )
    assert _store_difference("lineage", ours, other_body) == Difference(
        "lineage", 1, "record.body.name", "y", "z"
    )
    later = [
        ours[0],
        record(1, "event", mac="b" * 64, time="2026-01-01T00:00:00.000002Z", name="y"),
    ]
    assert _store_difference("replay", ours, later) == Difference(
        "replay", 1, "record.time", T0, "2026-01-01T00:00:00.000002Z"
    )
    other_run = [record(0, "event", mac="a" * 64, run="s", name="x")]
    assert _store_difference("lineage", ours[:1], other_run) == Difference(
        "lineage", 0, "record.run", "r", "s"
    )
    assert _store_difference("lineage", ours, ours[:1]) == Difference("lineage", 1, "records", 2, 1)
    assert _store_difference("lineage", ours[:1], ours) == Difference("lineage", 1, "records", 1, 2)


def _report(*runs: str, bundle: str = "b.tar") -> Report:
    report = Report(bundle=bundle)
    report.stores = [
        StoreSummary(run, store, 3, "ab" * 32, (3,), T0, T0, {})
        for run in runs
        for store in ("audit", "lineage", "replay")
    ]
    return report


def test_runs_pair_by_id_by_name_or_one_each() -> None:
    assert pair_runs(_report("a", "b"), _report("b", "a"), None) == [("a", "a"), ("b", "b")]
    assert pair_runs(_report("a"), _report("z"), None) == [("a", "z")]
    assert pair_runs(_report("a", "b"), _report("a", "c"), "a") == [("a", "a")]
    with pytest.raises(CompareError) as refused:
        pair_runs(_report("a", "b"), _report("a", "c"), None)
    assert refused.value.code == ExitCode.USAGE and "--run" in str(refused.value)
    with pytest.raises(CompareError) as refused:
        pair_runs(_report("a"), _report("b"), "a")
    assert "the replay bundle" in str(refused.value) and "original" not in str(refused.value)
    with pytest.raises(CompareError) as refused:
        pair_runs(_report("a"), _report("b"), "c")
    assert "the original and the replay bundle" in str(refused.value)
    with pytest.raises(CompareError):
        pair_runs(_report(), _report(), None)


def test_the_reports_say_what_differs() -> None:
    same = StoreComparison("lineage", "ab" * 32, "ab" * 32, 3, 3)
    other = StoreComparison("replay", "ab" * 32, "cd" * 32, 3, 4)
    assert same.same and not other.same
    assert not StoreComparison("lineage", "ab" * 32, "ab" * 32, 3, 4).same
    difference = Difference("decisions", 2, "decision.outcome", "completed", "x" * 200, 7, 9)
    run = RunComparison("r", "r", (same, other), (5, 5), difference)
    comparison = Comparison(_report("r", bundle="a.tar"), _report("r", bundle="b.tar"), [run])
    assert not run.same and not comparison.same and comparison.exit_code == ExitCode.DIFFERENT
    text = comparison.to_text()
    assert text.splitlines()[:2] == ["original: a.tar", "replay:   b.tar"]
    assert "run r: DIFFERENT" in text
    assert "  lineage: same root (3 / 3 records, root abababababababab / abababababababab)" in text
    assert "  replay: different (3 / 4 records, root abababababababab / cdcdcdcdcdcdcdcd)" in text
    assert "  decisions: 5 / 5" in text
    shown = next(line for line in text.splitlines() if "first difference" in line)
    assert shown.startswith(
        "  first difference: decisions #2 (audit seq 7 / 9), decision.outcome: "
    )
    assert shown.endswith("...") and len(shown) < 220  # a long value is cut
    assert text.endswith("the runs differ\n")
    document = json.loads(json.dumps(comparison.to_json()))
    assert document["same"] is False
    assert document["runs"][0]["stores"]["replay"] == {
        "same": False,
        "original_root": "ab" * 32,
        "replay_root": "cd" * 32,
        "original_records": 3,
        "replay_records": 4,
    }
    assert document["runs"][0]["first_difference"]["original_seq"] == 7
    renamed = RunComparison("r", "s", (same,), (1, 1), None)
    ok = Comparison(_report("r"), _report("s"), [renamed])
    assert ok.same and ok.exit_code == ExitCode.VERIFIED
    assert "run r / s: same" in ok.to_text() and ok.to_text().endswith("same run\n")
    assert (
        Difference("lineage", 0, "records", 1, 2).line()
        == "first difference: lineage #0, records: 1 != 2"
    )


def test_the_json_report_holds_every_member() -> None:
    """The whole document, exactly (a renamed or dropped member fails)."""
    stores = (
        StoreComparison("lineage", "ab" * 32, "ab" * 32, 3, 3),
        StoreComparison("replay", "ab" * 32, "cd" * 32, 2, 2),
    )
    difference = Difference("replay", 1, "record.body.key", "k1", "k2")
    run = RunComparison("r", "s", stores, (4, 5), difference)
    original, replay = _report("r", bundle="a.tar"), _report("s", bundle="b.tar")
    original.signer_key_id, replay.signer_key_id = "11" * 32, "22" * 32
    assert Comparison(original, replay, [run]).to_json() == {
        "same": False,
        "original": {"bundle": "a.tar", "signer": "11" * 32},
        "replay": {"bundle": "b.tar", "signer": "22" * 32},
        "runs": [
            {
                "original_run": "r",
                "replay_run": "s",
                "same": False,
                "stores": {
                    "lineage": {
                        "same": True,
                        "original_root": "ab" * 32,
                        "replay_root": "ab" * 32,
                        "original_records": 3,
                        "replay_records": 3,
                    },
                    "replay": {
                        "same": False,
                        "original_root": "ab" * 32,
                        "replay_root": "cd" * 32,
                        "original_records": 2,
                        "replay_records": 2,
                    },
                },
                "decisions": {"original": 4, "replay": 5},
                "first_difference": {
                    "where": "replay",
                    "index": 1,
                    "member": "record.body.key",
                    "original": "k1",
                    "replay": "k2",
                    "original_seq": None,
                    "replay_seq": None,
                },
            }
        ],
    }
    assert Comparison(original, replay, []).to_json()["same"] is True


def test_a_shorter_decision_sequence_names_the_first_extra_decision() -> None:
    ours = [(3, {"kind": "run.end", "outcome": "completed"})]
    extra = (8, {"kind": "gate.result", "task": "t"})
    assert _decision_difference(ours, [*ours, extra]) == Difference(
        "decisions", 1, "decisions", 1, 2, None, 8
    )
    assert _decision_difference([*ours, extra], ours) == Difference(
        "decisions", 1, "decisions", 2, 1, 8, None
    )
    assert _decision_difference([], []) is None
    assert _decision_difference([], ours) == Difference("decisions", 0, "decisions", 0, 1, None, 3)
    first = _decision_difference(
        [(1, {"kind": "a", "x": 1}), (2, {"kind": "b", "x": 1})],
        [(1, {"kind": "a", "x": 1}), (5, {"kind": "b", "x": 2})],
    )
    assert first == Difference("decisions", 1, "decision.x", 1, 2, 2, 5)


def test_values_are_shown_short() -> None:
    from harness.verify.compare import _short, _show

    assert _show("abc") == "'abc'"
    assert _show("x" * 118) == repr("x" * 118)  # 120 characters: shown whole
    assert _show("x" * 119) == repr("x" * 119)[:117] + "..."
    assert len(_show("x" * 500)) == 120
    assert _short(None) == "-" and _short("0123456789abcdef0123") == "0123456789abcdef"
