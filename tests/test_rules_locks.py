"""Write-lock intersection (harness.verify.rules.locks): exact, symmetric, bounded.

The oracle enumerates every valid path over a tiny alphabet (``scope.check_rel_path``) and
matches both globs with ``scope.glob_match``; the globs drawn are small enough that a path
matching both, if any exists, exists within the enumeration (see ``_segment_bounds``).
"""

from __future__ import annotations

import itertools
import time
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.verify.rules.locks import (
    globs_intersect,
    globs_intersect_dp,
    lock_of,
    scopes_intersect,
)
from harness.verify.rules.scope import check_glob, check_rel_path, glob_match

TABLE = [
    # (a, b, a path matching both, or None and why there is none)
    ("src/**", "src/a.py", "src/a.py"),
    ("src/**", "src", None),  # a last ** needs one segment
    ("src/**", "src/**", "src/a"),
    ("src/**", "**/*.md", "src/a.md"),
    ("src/*", "src/a/b", None),  # * stays within one segment
    ("**", "**", "a"),
    ("**", "a", "a"),
    ("**/**", "a", "a"),  # the first ** takes zero segments
    ("**/**", "a/b", "a/b"),
    ("a/**/b", "a/b", "a/b"),  # a middle ** takes zero
    ("a/**/b", "a/x/y/b", "a/x/y/b"),
    ("a/**/b", "**/c", None),  # the last segment is b or c
    ("**/x/**", "a/**/b", "a/x/b"),
    ("*.md", "docs/*", None),  # one segment against two
    ("*.md", "README.*", "README.md"),
    ("*a*", "*b*", "ab"),
    ("a*", "b*", None),
    ("a*", "*b", "ab"),
    ("?", "??", None),
    ("?a?", "*a", "aaa"),
    ("src/[ab].py", "src/a.py", None),  # brackets are literal
    ("src/[ab].py", "src/?ab?.py", "src/[ab].py"),
    ("Src/**", "src/**", None),  # case-sensitive
    (".*", "*", ".a"),
    (".?", "?.", None),  # only "..", which is no path segment
    (".*", "*.", "..."),
    ("?", "*", "a"),
    (".git", "*", None),  # .git is no path segment
    (".git/**", ".git/**", None),  # nothing inside .git is a path
    (".GIT/**", "**", None),  # .git in any case
    ("a/.Git", "a/*", None),
    (".gi?", "*", ".gia"),
    (".gi?", "*t", None),  # only .git
    (".gi?", "*T", None),  # only .giT
    (".git*", "*", ".gitx"),
    ("*.git", ".*", "..git"),
    (".g*", "*t", ".gat"),
    (".g", "*", ".g"),
    ("x/.gi", "x/*", "x/.gi"),
]


@pytest.mark.parametrize(("a", "b", "witness"), TABLE)
def test_table(a: str, b: str, witness: str | None) -> None:
    assert globs_intersect(a, b) is (witness is not None)
    assert globs_intersect(b, a) is (witness is not None)
    if witness is not None:
        assert check_rel_path(witness) is None
        assert glob_match(a, witness) and glob_match(b, witness)


@pytest.mark.parametrize("bad", ["", "/a", "a//b", "a/../b", "./a", "a**", "a\\b", "a\x00"])
def test_bad_globs_raise(bad: str) -> None:
    with pytest.raises(ValueError, match="bad glob"):
        globs_intersect(bad, "**")
    with pytest.raises(ValueError, match="bad glob"):
        globs_intersect("**", bad)


def test_scopes_and_lock() -> None:
    assert scopes_intersect(["docs/**", "src/a.py"], ["lib/**", "src/*.py"])
    assert not scopes_intersect(["docs/**", "src/a.py"], ["lib/**", "src/b.py"])
    assert not scopes_intersect([], ["**"]) and not scopes_intersect(["**"], [])
    assert scopes_intersect(iter(["a"]), iter(["a"]))  # any iterables, consumed once
    assert lock_of([("src/**", "b.md"), ("a.md", "src/**"), ()]) == ("a.md", "b.md", "src/**")
    assert lock_of([]) == ()


def test_cost_is_polynomial() -> None:
    """Inputs on which backtracking over * and ** explodes: answered at once, correctly."""
    stars = "*a" * 60 + "*"
    started = time.perf_counter()
    assert globs_intersect(stars + "b", stars + "c") is False
    assert globs_intersect(stars + "b", "*" + "a" * 60 + "*b") is True
    deep = "/".join(["**", "a"] * 60)
    assert globs_intersect(deep + "/b", deep + "/c") is False
    assert globs_intersect(deep + "/x", "/".join(["a"] * 60) + "/x") is True
    assert globs_intersect(deep + "/x", "/".join(["a"] * 59) + "/x") is False
    assert time.perf_counter() - started < 5


def test_cost_of_long_globs_stays_small() -> None:
    """Globs near the 1 MiB record limit: the product automata would take hours here (a
    2,000-character star pair already takes them seconds); the piece rules do not."""
    started = time.perf_counter()
    n = 100_000
    assert globs_intersect("*a" * n + "*b", "*a" * n + "*c") is False
    assert globs_intersect("*a" * n + "*b", "*" + "a" * n + "*b") is True
    assert globs_intersect("a" * n + "?b", "*" + "a" * 500 + "c*") is True
    assert globs_intersect("a" * n + "b", "*" + "a" * 1000 + "*c") is False
    loops = "/".join(["**", "a"] * 20_000)
    assert globs_intersect(loops + "/b", loops + "/c") is False
    assert globs_intersect("/".join(["a"] * 20_000) + "/x", loops + "/x") is True
    assert time.perf_counter() - started < 5


# --- the oracle ---------------------------------------------------------------------------


def _segment_bounds() -> None:
    """Why the enumeration below is enough (documentation only).

    Multi-segment globs have at most 2 segments, each a pattern of at most 2 characters over
    {a, ., *, ?} or ``**``. A shortest path through the segment product consumes a segment
    only when it advances a non-loop token of at least one glob, and each glob has at most 2,
    so a witness needs at most 4 segments. Within a segment, a shortest witness advances a
    non-``*`` position of a pattern, or escapes a forbidden prefix once: at most 3 characters
    over {a, .}. The .git oracle uses single segments of at most 3 characters over
    {., g, i, t, G, T, *, ?}, so witnesses of at most 5 characters over {., g, i, t, a, G, T}
    (each pattern has at most 2 non-``*`` positions, plus one character to leave a
    forbidden prefix).
    """


def _paths(alphabet: str, max_len: int, max_segments: int) -> tuple[str, ...]:
    segments = [
        "".join(chars)
        for n in range(1, max_len + 1)
        for chars in itertools.product(alphabet, repeat=n)
    ]
    segments = [s for s in segments if check_rel_path(s) is None]
    return tuple(
        "/".join(parts)
        for n in range(1, max_segments + 1)
        for parts in itertools.product(segments, repeat=n)
    )


PATHS = _paths("a.", 3, 4)
SEGMENTS = _paths(".gitaGT", 5, 1)


@cache
def _matches(glob: str, universe: str) -> frozenset[str]:
    paths = PATHS if universe == "paths" else SEGMENTS
    return frozenset(p for p in paths if glob_match(glob, p))


def _oracle(a: str, b: str, universe: str) -> bool:
    return not _matches(a, universe).isdisjoint(_matches(b, universe))


def _valid(glob: str) -> bool:
    return check_glob(glob) is None


segment_pattern = st.text(alphabet="a.*?", min_size=1, max_size=2)
globs = (
    st.lists(st.one_of(st.just("**"), segment_pattern), min_size=1, max_size=2)
    .map("/".join)
    .filter(_valid)
)
git_globs = st.text(alphabet=".gitGT*?", min_size=1, max_size=3).filter(_valid)


def test_oracle_universe() -> None:
    assert len(PATHS) > 20_000 and all(check_rel_path(p) is None for p in PATHS)
    assert ".git" not in SEGMENTS and ".GiT" not in SEGMENTS and "." not in SEGMENTS
    assert ".gi" in SEGMENTS and ".gitG" in SEGMENTS and "..." in SEGMENTS


@settings(max_examples=400, deadline=None)
@given(a=globs, b=globs)
def test_agrees_with_enumeration(a: str, b: str) -> None:
    assert globs_intersect(a, b) is _oracle(a, b, "paths")
    assert globs_intersect(b, a) is globs_intersect(a, b)


@settings(max_examples=400, deadline=None)
@given(a=git_globs, b=git_globs)
def test_agrees_with_enumeration_around_dot_git(a: str, b: str) -> None:
    assert globs_intersect(a, b) is _oracle(a, b, "segments")
    assert globs_intersect(b, a) is globs_intersect(a, b)


@settings(max_examples=200, deadline=None)
@given(g=globs)
def test_a_glob_meets_itself(g: str) -> None:
    assert globs_intersect(g, g) is True  # over {a, ., *, ?} every valid glob matches a path


@settings(max_examples=200, deadline=None)
@given(g=git_globs)
def test_a_glob_meets_itself_iff_it_matches_a_valid_path(g: str) -> None:
    assert globs_intersect(g, g) is bool(_matches(g, "segments"))


def test_self_intersection_of_everyday_globs() -> None:
    for glob in ["**", "src/**", "**/*.py", "docs/**/x.md", "src/?.py", ".github/**", "*"]:
        assert globs_intersect(glob, glob), glob


# --- the fast path against the reference automata ------------------------------------------

big_segment = st.text(alphabet="ab.*?", min_size=1, max_size=8)
big_globs = (
    st.lists(st.one_of(st.just("**"), big_segment), min_size=1, max_size=5)
    .map("/".join)
    .filter(_valid)
)


@settings(max_examples=1500, deadline=None)
@given(a=big_globs, b=big_globs)
def test_pieces_agree_with_the_product_automata(a: str, b: str) -> None:
    """Longer globs than the enumeration can reach: the piece rules (both or neither sides
    with loops, greedy otherwise) give the reference automata's answer."""
    assert globs_intersect(a, b) is globs_intersect_dp(a, b)


@settings(max_examples=1000, deadline=None)
@given(a=git_globs, b=st.text(alphabet=".gitGT*?a", min_size=1, max_size=7).filter(_valid))
def test_pieces_agree_around_dot_git(a: str, b: str) -> None:
    assert globs_intersect(a, b) is globs_intersect_dp(a, b)
