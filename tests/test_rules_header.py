"""The control header, Next and Cites grammar (verify/rules/header.py, docs/spec/rounds.md).

The tables in tests/vectors/headers.json are the contract the verifier's tests share; the
unit tests below pin each rule of the grammar on its own so that breaking one fails a test
named after it, and hypothesis checks the grammar on texts nobody wrote by hand.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.rules import header as h
from harness.verify.rules.header import (
    CONTRACTS,
    INTEGRITIES,
    MAX_TEXT_BYTES,
    NEXT_ACTIONS,
    REPLACEMENT,
    STATUSES,
    VIOLATION,
    Header,
    accept_done,
    effective_status,
    parse_cites,
    parse_header,
    parse_next,
)

TABLE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "vectors" / "headers.json").read_text(encoding="utf-8")
)


def _text(row: dict[str, Any]) -> str:
    text: str = row["text"]
    if "repeat" in row:
        unit, times = row["repeat"]
        text += unit * times
    return text


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["name"] for row in rows]


# ---- the tables -------------------------------------------------------------------------


def test_the_tables_are_big_enough_and_cover_both_outcomes() -> None:
    headers, nexts = TABLE["headers"], TABLE["next"]
    assert len(headers) >= 48 and len(nexts) >= 15
    assert {r["valid"] for r in headers} == {True, False} == {r["valid"] for r in nexts}
    assert len(set(_ids(headers))) == len(headers) and len(set(_ids(nexts))) == len(nexts)
    assert any("状态" in r["text"] for r in headers) and any("下一步" in r["text"] for r in nexts)


@pytest.mark.parametrize("row", TABLE["headers"], ids=_ids(TABLE["headers"]))
def test_header_table(row: dict[str, Any]) -> None:
    got = parse_header(_text(row))
    if row["valid"]:
        assert got.problem is None, got.problem
        assert got.header == Header(row["status"], row["integrity"], row["contract"])
    else:
        assert got.header is None
        assert got.problem is not None and row["problem_contains"] in got.problem, got.problem


@pytest.mark.parametrize("row", TABLE["next"], ids=_ids(TABLE["next"]))
def test_next_table(row: dict[str, Any]) -> None:
    got = parse_next(_text(row))
    if row["valid"]:
        assert got == h.NextParse(row["action"], None)
    else:
        assert got.action is None
        assert got.problem is not None and row["problem_contains"] in got.problem, got.problem


@pytest.mark.parametrize("row", TABLE["cites"], ids=_ids(TABLE["cites"]))
def test_cites_table(row: dict[str, Any]) -> None:
    assert parse_cites(_text(row)) == tuple(row["cites"])


# ---- single rules -----------------------------------------------------------------------

GOOD = "Status: complete\nIntegrity: clean\nContract audit: aligned\n"


def test_replacement_and_violation_headers() -> None:
    assert Header("blocked", "suspect", "unknown") == REPLACEMENT
    assert Header("blocked", "violation", "unknown") == VIOLATION


def test_problem_messages_are_exact() -> None:
    """The verifier re-derives recorded reasons, so the wording is part of the contract."""
    assert parse_header("").problem == "missing Status line: the report has only 0 non-empty lines"
    assert parse_header("Status: complete\n").problem == (
        "missing Integrity line: the report has only 1 non-empty lines"
    )
    assert parse_header("Status: ok\n").problem == (
        "line 1: Status value 'ok' is not one of complete|incomplete|blocked"
    )
    assert parse_header("状态: ok\n").problem == (
        "line 1: Status value 'ok' is not one of 完成|未完成|阻塞 or complete|incomplete|blocked"
    )
    assert parse_header("Status: complete\n完整性: 干净").problem == (
        "line 2: Integrity value '\\u5e72\\u51c0' is not one of clean|suspect|violation"
    )
    assert parse_header("X  Y: z").problem == "line 1: expected the Status label, got label 'x y'"
    assert parse_header("xyz\n").problem == "line 1: expected 'Status: <value>', got 'xyz'"
    assert parse_next("a\nNext: go").problem == (
        "line 2: Next value 'go' is not one of gui|cli|ask|done|blocked"
    )
    assert parse_next("下一步: go").problem == (
        "line 1: Next value 'go' is not one of "
        "gui任务|cli任务|请示用户|完成|阻塞 or gui|cli|ask|done|blocked"
    )


def test_problem_clips_untrusted_values() -> None:
    value = "é" * 40
    problem = parse_header(f"Status: {value}\n").problem
    assert problem == f"line 1: Status value {'é' * 32!a}... is not one of " + "|".join(STATUSES)
    assert parse_header("Status: " + "a" * 32).problem == (
        f"line 1: Status value '{'a' * 32}' is not one of complete|incomplete|blocked"
    )


def test_problem_escapes_are_defined() -> None:
    """Quote, backslash, controls and non-ASCII are escaped as rounds.md §7 says."""
    got = parse_header("Status: a'b\\c\td\x7f\u00e9\u4e2d\U0001f600~ \n").problem
    assert got == (
        "line 1: Status value 'a\\'b\\\\c\\x09d\\x7f\\xe9\\u4e2d\\U0001f600~' is not one of "
        "complete|incomplete|blocked"
    )


def test_escape_ranges() -> None:
    """The width of an escape changes exactly at U+0100 and U+10000; letters pass as is."""
    got = parse_header("\u00ff\u0100\uffff\U00010000X").problem
    assert got == "line 1: expected 'Status: <value>', got '\\xff\\u0100\\uffff\\U00010000X'"


def test_splitting_edges_exact() -> None:
    """Where the label is empty or the line is not a label line at all (rounds.md §2)."""
    empty_label = "line 1: expected the Status label, got label ''"
    for line in (": x", "\uff1aa: b", "****: x", "**: x**", "**\uff1a x**"):
        assert parse_header(line).problem == empty_label, line
    for line in ("**:Status:** x", "**Status: complete** x", "**Status:complete** x", "** x"):
        assert parse_header(line).problem == f"line 1: expected 'Status: <value>', got '{line}'"
    assert parse_header("**Status:** complete **bold**").problem == (
        "line 1: Status value 'complete **bold**' is not one of complete|incomplete|blocked"
    )


def test_other_unicode_spaces_are_content() -> None:
    """Only the seven whitespace characters are stripped: an em space (U+2003) is not."""
    rest = "\nIntegrity: clean\nContract audit: aligned"
    assert parse_header("**Status**\u2003: complete" + rest).problem == (
        "line 1: expected 'Status: <value>', got '**Status**\\u2003: complete'"
    )
    assert parse_header("Status: complete\u2003" + rest).header is None
    assert parse_header("Status:\u2003complete" + rest).header is None
    assert parse_cites("Cites: 1\u2003") == ()
    assert parse_cites("Cites:\u20031") == ()
    assert parse_next("Next: gui\u2003").action is None


def test_size_limit_is_on_utf8_bytes() -> None:
    at = GOOD + "x" * (MAX_TEXT_BYTES - len(GOOD))
    assert parse_header(at).header is not None
    assert parse_header(at + "x").problem == f"report too long (more than {MAX_TEXT_BYTES} bytes)"
    # fewer characters than the limit, more bytes
    wide = GOOD + "完" * ((MAX_TEXT_BYTES - len(GOOD)) // 3 + 1)
    assert len(wide) < MAX_TEXT_BYTES and parse_header(wide).header is None
    assert parse_next("Next: gui\n" + "y" * MAX_TEXT_BYTES).problem == (
        f"plan too long (more than {MAX_TEXT_BYTES} bytes)"
    )
    assert parse_next("y" * (MAX_TEXT_BYTES - 9) + "\nNext: gui").action is None
    assert parse_next("y" * (MAX_TEXT_BYTES - 10) + "\nNext: gui").action == "gui"
    assert parse_cites("Cites: 1\n" + "y" * MAX_TEXT_BYTES) == ()
    assert parse_cites("Cites: 1\n" + "y" * (MAX_TEXT_BYTES - 9)) == (1,)


def test_lone_surrogates_do_not_raise() -> None:
    assert parse_header("Status: \ud800\n").header is None
    assert parse_next("Next: \udfff").action is None


def test_only_one_leading_byte_order_mark_is_dropped() -> None:
    assert parse_header("\ufeff" + GOOD).header is not None
    assert parse_header("\ufeff\ufeff" + GOOD).header is None
    assert parse_header("x\n\ufeff" + GOOD).header is None


def test_case_folding_is_ascii_only() -> None:
    # U+212A KELVIN SIGN lowercases to "k" under Unicode rules, U+0130 to "i" + a dot
    assert (
        parse_header("Status: BLOC\u212aED\nIntegrity: clean\nContract audit: aligned").header
        is None
    )
    assert parse_header("St\u0130tus: blocked").header is None
    assert parse_next("Next: \u0130").action is None


def test_whitespace_set() -> None:
    for space in " \t\r\f\v\u00a0\u3000":
        line = f"{space}Status{space}:{space}complete{space}"
        text = line + "\nIntegrity: clean\nContract audit: aligned"
        assert parse_header(text).header is not None, repr(space)
    # other Unicode spaces are content, not whitespace
    assert (
        parse_header("\u2003Status: complete\nIntegrity: clean\nContract audit: aligned").header
        is None
    )
    # a line of only whitespace is empty; an LF-free CR does not end a line
    assert parse_header("Status: complete\rIntegrity: clean").header is None


def test_bold_forms() -> None:
    def ok(line: str) -> bool:
        return parse_header(line + "\nIntegrity: clean\nContract audit: aligned").header is not None

    assert ok("**Status:** complete") and ok("**Status**: complete") and ok("**Status: complete**")
    assert ok("**Status:**complete") and ok("**Status** : complete") and ok("**Status**:complete")
    assert ok("** Status :** complete")
    assert not ok("Status: **complete**")
    assert not ok("**Status**")
    assert not ok("**Status** complete")
    assert not ok("**Status:** complete**")
    assert not ok("**Status: complete")
    assert not ok("****")
    assert not ok("**Status:** complete**x")
    assert not ok("**Sta:tus:** complete")
    assert not ok("**Sta:tus**: complete")
    assert not ok("*Status:* complete")


def test_first_separator_splits() -> None:
    assert parse_header("Status：complete: x").header is None
    # the full-width colon comes first: the label is "Status", the value ":complete"
    assert parse_header("Status：:complete").header is None
    assert parse_header("Status:：complete").header is None


def test_needs_revision_spellings() -> None:
    def contract(value: str) -> str | None:
        got = parse_header(f"Status: incomplete\nIntegrity: clean\nContract audit: {value}").header
        return None if got is None else got.contract

    for value in ("needs_revision", "needs-revision", "needs revision", "NEEDS-REVISION"):
        assert contract(value) == "needs_revision"
    for value in (
        "needsrevision",
        "needs  revision",
        "needs\trevision",
        "needs-_revision",
        "need revision",
    ):
        assert contract(value) is None
    assert contract("aligned") == "aligned" and contract("对齐") is None


def test_zh_labels_take_english_or_zh_values_english_labels_english_only() -> None:
    assert parse_header("状态：完成\n完整性：clean\n契约审计：对齐").header == Header(
        "complete", "clean", "aligned"
    )
    assert parse_header("状态：COMPLETE\n完整性：clean\n契约审计：NEEDS revision").header == Header(
        "complete", "clean", "needs_revision"
    )
    assert parse_header("Status: 完成").header is None
    assert parse_header("Status: complete\nIntegrity: clean\nContract audit: 需修订").header is None
    # a zh status value is not a zh contract value and vice versa
    assert parse_header("状态：对齐").header is None
    assert parse_header("Status: complete\nIntegrity: clean\n契约审计：完成").header is None
    assert parse_next("下一步：DONE").action == "done"
    assert parse_next("Next: 完成").action is None
    assert parse_next("下一步：gui任务").action == "gui"


def test_label_matching() -> None:
    assert parse_header("Status: complete\nIntegrity: clean\nCONTRACT \t AUDIT: aligned").header
    assert parse_header("Status: complete\nIntegrity: clean\nContractaudit: aligned").header is None
    assert parse_header("Status: complete\nIntegrity: clean\ncontract audit : aligned").header
    assert parse_next("NeXt: gui").action == "gui"


def test_out_of_order_versus_duplicate() -> None:
    assert "out of order" in str(parse_header("Contract audit: aligned").problem)
    assert "(duplicate)" in str(parse_header("Status: complete\nStatus: complete").problem)
    assert "(duplicate)" in str(
        parse_header("Status: complete\nIntegrity: clean\nStatus: complete").problem
    )
    assert "(duplicate)" in str(
        parse_header("Status: complete\nIntegrity: clean\nIntegrity: clean").problem
    )
    assert "out of order" in str(parse_header("Status: complete\nContract audit: aligned").problem)


def test_body_after_header_is_never_read() -> None:
    assert parse_header(GOOD + "garbage\x00\n**Status: blocked**\n" + "Next: x\n" * 5).header == (
        Header("complete", "clean", "aligned")
    )


def test_next_rules() -> None:
    assert parse_next("Next: gui\n\n\n").action == "gui"
    assert parse_next("Next: gui\nNext steps: none").problem == (
        "line 1: the Next line is not the last non-empty line (line 2)"
    )
    assert parse_next("**Next:** gui\nNext: gui").problem == (
        "line 2: a second Next line (the first is line 1)"
    )
    # a malformed Next-looking line is body text; the last line must still be a Next line
    assert parse_next("Next gui\nNext: cli").action == "cli"
    assert parse_next("plan\n\n下一步：完成\n").action == "done"
    assert parse_next("").problem == (
        "no Next line: the plan must end with 'Next: gui|cli|ask|done|blocked'"
    )
    for action in NEXT_ACTIONS:
        assert parse_next(f"p\nNext: {action.upper()}").action == action


def test_cites_rules() -> None:
    assert parse_cites("Cites: 5, 2, 2\nNext: gui") == (2, 5)
    assert parse_cites("Next: gui\nCites: 7") == (7,)  # anywhere in the plan
    assert parse_cites("引用：3、4") == ()  # the enumeration comma is not a separator
    assert parse_cites("Cites: 1,") == ()
    assert parse_cites("Cites: -1") == ()
    assert parse_cites("Cites: 1 2") == ()
    assert parse_cites("Cites: ١") == ()  # Arabic-Indic digit one: ASCII digits only
    assert parse_cites("Cites: 999, 1000") == (999, 1000)
    assert parse_cites("Cites: 10000") == ()
    assert parse_cites("**Cites: 3**") == (3,)
    assert parse_cites("cites") == ()


def test_effective_status_downgrade() -> None:
    assert effective_status(Header("complete", "clean", "aligned"), ghost=False) == "complete"
    assert effective_status(Header("complete", "clean", "aligned"), ghost=True) == "incomplete"
    assert effective_status(Header("complete", "suspect", "aligned"), ghost=False) == "incomplete"
    assert effective_status(Header("complete", "clean", "unknown"), ghost=False) == "incomplete"
    assert effective_status(Header("incomplete", "clean", "aligned"), ghost=False) == "incomplete"
    assert effective_status(Header("blocked", "clean", "aligned"), ghost=False) == "blocked"
    assert effective_status(REPLACEMENT, ghost=False) == "blocked"
    assert effective_status(VIOLATION, ghost=True) == "blocked"


def test_accept_done() -> None:
    good = Header("complete", "clean", "aligned")
    assert accept_done("complete", good)
    assert not accept_done(None, good)
    assert not accept_done("complete", None)
    assert not accept_done(None, None)
    assert not accept_done("incomplete", good)  # a ghost round
    assert not accept_done("complete", Header("incomplete", "clean", "aligned"))
    assert not accept_done("complete", Header("complete", "suspect", "aligned"))
    assert not accept_done("complete", Header("complete", "clean", "needs_revision"))


# ---- properties -------------------------------------------------------------------------

_SPELL_STATUS = {
    "complete": ["complete", "COMPLETE", "Complete"],
    "incomplete": ["incomplete", "InComplete"],
    "blocked": ["blocked", "BLOCKED"],
}
_SPELL_STATUS_ZH = {"complete": ["完成"], "incomplete": ["未完成"], "blocked": ["阻塞"]}
_SPELL_CONTRACT = {
    "aligned": ["aligned", "ALIGNED"],
    "unknown": ["unknown", "Unknown"],
    "needs_revision": ["needs_revision", "needs-revision", "needs revision", "Needs-Revision"],
    "invalid": ["invalid", "INVALID"],
}
_SPELL_CONTRACT_ZH = {
    "aligned": ["对齐"],
    "unknown": ["未知"],
    "needs_revision": ["需修订", "需要修订"],
    "invalid": ["无效"],
}
_LABELS = {
    "status": (["Status", "STATUS", "status"], ["状态"]),
    "integrity": (["Integrity", "INTEGRITY"], ["完整性"]),
    "contract": (["Contract audit", "CONTRACT AUDIT", "Contract  Audit"], ["契约审计"]),
}
_BOLDS = ["{l}{s} {v}", "**{l}{s}** {v}", "**{l}**{s} {v}", "**{l}{s} {v}**", "  {l} {s}{v}\t"]


@st.composite
def rendered_header(draw: st.DrawFn) -> tuple[str, Header]:
    status = draw(st.sampled_from(STATUSES))
    integrity = draw(st.sampled_from(INTEGRITIES))
    contract = draw(st.sampled_from(CONTRACTS))
    lines = []
    for field, value in (("status", status), ("integrity", integrity), ("contract", contract)):
        zh = draw(st.booleans())
        label = draw(st.sampled_from(_LABELS[field][1 if zh else 0]))
        spellings: list[str]
        if field == "status":
            spellings = _SPELL_STATUS[value] + (_SPELL_STATUS_ZH[value] if zh else [])
        elif field == "contract":
            spellings = _SPELL_CONTRACT[value] + (_SPELL_CONTRACT_ZH[value] if zh else [])
        else:
            spellings = [value, value.upper()]
        spelled = draw(st.sampled_from(spellings))
        sep = draw(st.sampled_from([":", "："]))
        form = draw(st.sampled_from(_BOLDS))
        lines.append(form.format(l=label, s=sep, v=spelled))
        lines.extend([""] * draw(st.integers(0, 2)))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    body = draw(st.text(max_size=40))
    return end.join(lines) + end + body, Header(status, integrity, contract)


@given(rendered_header())
@settings(max_examples=400, deadline=None)
def test_any_allowed_spelling_parses_back(case: tuple[str, Header]) -> None:
    text, expected = case
    assert parse_header(text) == h.HeaderParse(expected, None)


_ALPHABET = st.sampled_from(
    [*list("Sstatu:：*\n\r \tINTEGRITYclean契约审计状态完成下一步Next,1 "), "\u3000", "\ufeff"]
)


@given(st.one_of(st.text(), st.text(alphabet=_ALPHABET, max_size=300)))
@settings(max_examples=600, deadline=None)
def test_parsers_never_raise(text: str) -> None:
    got = parse_header(text)
    assert (got.header is None) != (got.problem is None)
    nxt = parse_next(text)
    assert (nxt.action is None) != (nxt.problem is None)
    assert nxt.action is None or nxt.action in NEXT_ACTIONS
    cites = parse_cites(text)
    assert list(cites) == sorted(set(cites)) and all(1 <= c <= 1000 for c in cites)


def test_parsing_is_bounded_and_linear() -> None:
    """Hostile texts at the limit parse fast: many lines, long lines, many separators."""
    unit = MAX_TEXT_BYTES // 8
    hostile = [
        "\n" * (MAX_TEXT_BYTES - 10) + "Next: gui",
        "**" * (MAX_TEXT_BYTES // 2),
        ":" * MAX_TEXT_BYTES,
        ("Next steps: x\n" * (MAX_TEXT_BYTES // 14)),
        ("**a**:" * (MAX_TEXT_BYTES // 6)),
        "Cites: " + "1," * (unit * 3),
    ]
    for text in hostile:
        start = time.perf_counter()
        parse_header(text)
        parse_next(text)
        parse_cites(text)
        # ~0.1 s here; quadratic work on these inputs would take minutes. The slack is for
        # loaded CI machines and mutmut's instrumented runs.
        assert time.perf_counter() - start < 3.0, text[:20]


@given(
    st.sampled_from(STATUSES),
    st.sampled_from(INTEGRITIES),
    st.sampled_from(CONTRACTS),
    st.booleans(),
)
def test_effective_status_complete_iff_four_conditions(
    status: str, integrity: str, contract: str, ghost: bool
) -> None:
    got = effective_status(Header(status, integrity, contract), ghost=ghost)
    four = status == "complete" and integrity == "clean" and contract == "aligned" and not ghost
    assert (got == "complete") == four
    assert (got == "blocked") == (status == "blocked")
    assert got in STATUSES
