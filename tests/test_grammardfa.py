"""The canonical grammar's automaton (``verify/grammardfa.py``) against ``re`` (issue 14).

The construction on small patterns against ``re.fullmatch`` on any bytes; what it refuses;
how it names kinds; and the lineage grammar's automaton against its regular expression on
real lines and byte edits of them. (Every store of a real runtime run: test_chunkcore.py.)
"""

from __future__ import annotations

import functools
import itertools
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from harness.verify import grammardfa
from harness.verify.grammardfa import (
    NO_KIND,
    GrammarDfa,
    UnsupportedPatternError,
    build_dfa,
    store_dfa,
)
from harness.verify.records import canonical_grammar

from .test_chunkcore_paths import edited

MASTER = bytes(range(32))


_SMALL_PATTERNS = (
    rb"(?:a|bc){0,3}x*",
    rb'"[^"\\\x00-\x1f]+"',
    rb"(?:0|[1-9][0-9]{0,3})",
    rb"\[(?:ab(?:,ab)*)?\]",
    rb"(?P<g>[a-c]{2})?c.",
    rb"a*?b+?c??",
)


@settings(max_examples=300)
@given(
    st.sampled_from(_SMALL_PATTERNS),
    st.binary(max_size=12) | st.text("abcx0,[]\"'\\9", max_size=12).map(str.encode),
)
def test_the_automaton_of_small_patterns(pattern: bytes, text: bytes) -> None:
    """The construction itself (classes, repeats, branches, groups, lazy repeats), against
    ``re.fullmatch`` on any bytes."""
    dfa = build_dfa((("k", pattern),))
    expected = "k" if re.fullmatch(pattern, text, re.DOTALL * 0) is not None else None
    assert dfa.match(text) == expected


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (rb'"(?!")x', "construct ASSERT_NOT"),
        (rb"(a)\1", "construct GROUPREF"),
        (rb"^a", "construct AT"),
        (rb"a$", "construct AT"),
        (rb"(?<=a)b", "construct ASSERT"),
        (rb"\bx", "construct AT"),
        (rb"(?i)a", "flags"),
        (rb"(?s:.)", "inline flags"),
        (rb"(?-i:a)", "inline flags"),
        (rb"[\d]", "character-class member CATEGORY"),
    ],
)
def test_constructs_outside_the_plain_regular_subset_are_refused(
    pattern: bytes, named: str
) -> None:
    with pytest.raises(UnsupportedPatternError, match=re.escape(named)):
        build_dfa((("k", pattern),))


def test_an_automaton_too_large_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grammardfa, "MAX_STATES", 5)
    assert build_dfa((("k", rb"abcd"),)).match(b"abcd") == "k"  # 5 states: the limit
    with pytest.raises(UnsupportedPatternError, match="more than 5 states"):
        build_dfa((("k", rb"abcde"),))


def test_two_kinds_one_line_is_no_kind() -> None:
    """A state both kinds accept names neither (the grammar's kinds never overlap; were they
    to, the regular expression would decide)."""
    dfa = build_dfa((("a", rb"x+"), ("b", rb"xy?")))
    assert (dfa.match(b"xx"), dfa.match(b"x"), dfa.match(b"xy")) == ("a", None, "b")


@pytest.fixture(scope="module")
def lineage_lines() -> list[bytes]:
    """Writes and deletes by the real writer, with escapes and non-ASCII in their paths."""
    from harness.receipts.store import StoreWriter

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lineage.jsonl"
        with StoreWriter(path, store="lineage", run_id="run-1", hmac_master=MASTER) as writer:
            for index in range(12):
                body: dict[str, object] = {
                    "actor": "agent",
                    "model": None if index % 2 else "m",
                    "mode": "100644",
                    "parents": [f"{index:064x}"] if index % 3 else [],
                    "parent_mode": None if index % 3 else "100755",
                    "path": ["p0", 'q"\\\t', "caf\u00e9/\U0001f600"][index % 3],
                    "sha256": f"{index:064x}",
                    "step": 10**15 + index if index == 7 else index,
                    "task": "t1",
                }
                if index == 5:
                    del body["sha256"], body["mode"]
                    writer.append("artifact.delete", body)
                else:
                    writer.append("artifact.write", body)
        return path.read_bytes().splitlines()


@functools.cache
def _lineage_dfa() -> GrammarDfa:
    """Built here, not taken from ``store_dfa``'s cache (filled before a mutant is loaded)."""
    return build_dfa(canonical_grammar("lineage", "run-1").alternatives)


def _regex_kind(line: bytes) -> str | None:
    grammar = canonical_grammar("lineage", "run-1")
    match = grammar.pattern.fullmatch(line)
    return None if match is None else grammar.kinds[match.lastindex or 0]


def test_the_lineage_automaton_on_real_lines(lineage_lines: list[bytes]) -> None:
    dfa = _lineage_dfa()
    kinds = [dfa.match(line) for line in lineage_lines]
    assert kinds == [_regex_kind(line) for line in lineage_lines]
    assert kinds.count("artifact.delete") == 1 and kinds.count(None) == 1  # the 16-digit step


@settings(max_examples=500)
@given(st.data())
def test_the_lineage_automaton_on_edited_lines(
    lineage_lines: list[bytes], data: st.DataObject
) -> None:
    line = edited(data.draw(st.sampled_from(lineage_lines)), data)
    dfa = _lineage_dfa()
    kind = _regex_kind(line)
    event(f"grammar {'accepts' if kind else 'refuses'}")
    assert dfa.match(line) == kind


def test_an_automaton_is_per_run() -> None:
    """The run id is part of the grammar: a line of another run is no line of this one."""
    ours, theirs = store_dfa("lineage", "run-1"), store_dfa("lineage", "run-2")
    assert ours is not None and theirs is not None and ours != theirs


@pytest.mark.parametrize(
    "pattern",
    [
        rb"x",
        rb"[a-c]",
        rb"[^a-c]",
        rb"[^x]",
        rb".",
        rb"[\x00-\x1f]",
        rb'[^"\\\x00-\x1f]',
        rb"[ax-z0]",
    ],
)
def test_one_character_patterns_on_every_byte(pattern: bytes) -> None:
    """Classes, ranges, negations, a lone negated byte (``NOT_LITERAL``) and ``.``: every byte
    value, against ``re``; and two bytes never match one character."""
    dfa = build_dfa((("k", pattern),))
    for value in range(256):
        text = bytes([value])
        assert dfa.match(text) == ("k" if re.fullmatch(pattern, text) else None), value
        assert dfa.match(text * 2) is None


@pytest.mark.parametrize(
    "pattern",
    [rb"a{3}", rb"a{2,4}", rb"(?:ab)*", rb"a+b?", rb"(?:a|ab){1,2}b", rb"a*?b{0,2}a"],
)
def test_repeats_on_every_short_string(pattern: bytes) -> None:
    """Exact, bounded, unbounded, optional and lazy repeats of single bytes and groups: every
    string of ``a`` and ``b`` up to 6 bytes, against ``re``."""
    dfa = build_dfa((("k", pattern),))
    for size in range(7):
        for letters in itertools.product(b"ab", repeat=size):
            text = bytes(letters)
            assert dfa.match(text) == ("k" if re.fullmatch(pattern, text) else None), text


def test_the_table_is_what_the_core_reads() -> None:
    """The shape ``_chunkcore.prepare`` checks: 256 byte classes below ``classes``, a ``uint16``
    row per state, the dead state 0 leading to itself, one accepting kind per state; and no
    more classes than the pattern tells apart."""
    dfa = build_dfa((("k", rb"x[a-c]"), ("j", rb"y")))
    assert len(dfa.byte_class) == 256 and max(dfa.byte_class) < dfa.classes == 4
    assert len(dfa.table) == 2 * dfa.classes * len(dfa.accept)
    assert dfa.table[: 2 * dfa.classes] == bytes(2 * dfa.classes)
    assert dfa.start == 1 and dfa.accept[0] == NO_KIND
    assert sorted(k for k in dfa.accept if k != NO_KIND) == [0, 1]
    assert dfa.kinds == ("k", "j")
    assert (dfa.match(b"xb"), dfa.match(b"y"), dfa.match(b"x")) == ("k", "j", None)
