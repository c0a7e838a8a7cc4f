"""Write locks: whether two scopes can ever name the same file.

Batches whose scopes intersect must never run at once (issue 11 §2), so the scheduler and the
verifier both need one exact answer to "is there a path both globs match?". Exact means: true
iff some *valid repository path* (``scope.check_rel_path`` accepts it) matches both globs under
the semantics of ``scope.glob_match`` (docs/spec/plan.md "Globs"). An over-approximation would
serialize batches for nothing; an under-approximation would let two agents write one file.

Definition: two product automata (``globs_intersect_dp``, the reference the tests hold the
fast path to).

* Segments. A glob is a sequence of segment tokens. ``**`` in a first or middle position is a
  loop (zero or more whole segments); ``**`` as the last segment is one arbitrary segment
  followed by a loop (one or more). Any other segment consumes exactly one path segment. The
  pair of positions (i, j) in the two globs is a state; from it a loop may be skipped
  (epsilon), or one path segment consumed when the two segment patterns share a valid
  segment. The globs intersect iff (end, end) is reachable. O(len(a) * len(b)) states.
* Characters. Two segment patterns (``*``, ``?``, literals) share a valid segment iff the
  product of their character automata, run alongside a 7-state tracker of the forbidden
  segments (empty, ``.``, ``..``, ``.git`` in any case), reaches (end, end, allowed). Where both
  sides are wildcards the character is free, and a character that is none of ``.``, ``g``,
  ``i``, ``t`` (in any case) is always a best choice (see ``_FREE``). O(len(p) * len(q) * 7)
  states.

Fast path (``globs_intersect``; same answers, memoized per pair): at both levels a pattern is
loop-free pieces between loops (``*`` / ``**``), and ``_pieces_meet`` decides by the pieces —
linear when both sides or neither have a loop, a greedy leftmost search otherwise (C-speed
string or regex search for characters). The automata are kept for what the pieces cannot see:
a star-free segment pattern of at most 4 characters, whose common words could all be
forbidden segments.

Valid paths also exclude backslashes and control characters, but glob literals cannot hold
them (``scope.check_glob``) and wildcards are only ever resolved to the characters above, so
those exclusions need no state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Final

from .scope import check_glob

# Tracker of the segment spelled so far against the segments no valid path has: "" (empty),
# ".", "..", ".git" (any case). States: 0 "", 1 ".", 2 "..", 3 ".g", 4 ".gi", 5 ".git",
# 6 anything else (a prefix of no forbidden segment: every extension is allowed).
_OTHER: Final = 6
_ALLOWED_END: Final = frozenset({3, 4, _OTHER})
_FREE: Final = "a"
"""What a wildcard on both sides spells. It moves the tracker to "other" from every state, and
"other" dominates: it is absorbing and allowed, so whatever the rest of the segment, ending
there is allowed whenever ending in any other state would be. No other choice can help."""


def _track(state: int, ch: str) -> int:
    low = ch.lower()
    if state == 0:
        return 1 if ch == "." else _OTHER
    if state == 1:
        return 2 if ch == "." else 3 if low == "g" else _OTHER
    if state == 3:
        return 4 if low == "i" else _OTHER
    if state == 4:
        return 5 if low == "t" else _OTHER
    return _OTHER  # from "..", ".git" and "other" every extension is allowed


def _moves(pattern: str, pos: int) -> list[tuple[str | None, int]]:
    """Character moves of a segment pattern at ``pos``: (the character it needs, or None for
    any, next position). Epsilon moves are handled by the caller."""
    if pos >= len(pattern):
        return []
    ch = pattern[pos]
    if ch == "*":
        return [(None, pos)]
    if ch == "?":
        return [(None, pos + 1)]
    return [(ch, pos + 1)]


def _closure(pattern: str, pos: int) -> list[int]:
    """Positions reachable from ``pos`` by skipping ``*`` (which may match nothing)."""
    out = [pos]
    while pos < len(pattern) and pattern[pos] == "*":
        pos += 1
        out.append(pos)
    return out


def _segments_intersect_dp(p: str, q: str) -> bool:
    """The character product automaton (the reference): whether some valid path segment
    matches both segment patterns. O(len(p) * len(q)) states; used as is for fixed-length
    patterns of at most 4 characters (where the forbidden segments matter)."""
    end_p, end_q = len(p), len(q)
    seen: set[tuple[int, int, int]] = set()
    stack: list[tuple[int, int, int]] = []

    def push(i: int, j: int, t: int) -> None:
        for ci in _closure(p, i):
            for cj in _closure(q, j):
                state = (ci, cj, t)
                if state not in seen:
                    seen.add(state)
                    stack.append(state)

    push(0, 0, 0)
    while stack:
        i, j, t = stack.pop()
        if i == end_p and j == end_q and t in _ALLOWED_END:
            return True
        for need_p, next_i in _moves(p, i):
            for need_q, next_j in _moves(q, j):
                if need_p is not None and need_q is not None:
                    chars: tuple[str, ...] = (need_p,) if need_p == need_q else ()
                else:
                    fixed = need_p if need_p is not None else need_q
                    chars = (fixed if fixed is not None else _FREE,)
                for ch in chars:
                    push(next_i, next_j, _track(t, ch))
    return False


_Token = tuple[str, bool]
"""(segment pattern, is a loop of zero or more segments)."""


@lru_cache(maxsize=8192)
def _tokens(glob: str) -> tuple[_Token, ...]:
    problem = check_glob(glob)
    if problem is not None:
        raise ValueError(f"bad glob {glob!r}: {problem}")
    parts = glob.split("/")
    out: list[_Token] = []
    for index, segment in enumerate(parts):
        if segment != "**":
            out.append((segment, False))
        elif index < len(parts) - 1:
            out.append(("*", True))
        else:
            out.extend((("*", False), ("*", True)))  # last "**": one or more segments
    return tuple(out)


def globs_intersect_dp(a: str, b: str) -> bool:
    """The segment product automaton over the reference character automaton: the definition
    ``globs_intersect`` must agree with (the tests hold them to it). O(|a| * |b|) states."""
    ta, tb = _tokens(a), _tokens(b)
    end_a, end_b = len(ta), len(tb)
    seen: set[tuple[int, int]] = {(0, 0)}
    stack = [(0, 0)]
    while stack:
        i, j = stack.pop()
        if i == end_a and j == end_b:
            return True
        steps: list[tuple[int, int]] = []
        if i < end_a and ta[i][1]:
            steps.append((i + 1, j))
        if j < end_b and tb[j][1]:
            steps.append((i, j + 1))
        if i < end_a and j < end_b and _segments_intersect_dp(ta[i][0], tb[j][0]):
            steps.append((i if ta[i][1] else i + 1, j if tb[j][1] else j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                stack.append(step)
    return False


def _compatible(x: Sequence[str], y: Sequence[str], same: Callable[[str, str], bool]) -> bool:
    """Position by position (equal lengths), every pair can be the same thing."""
    return all(same(u, v) for u, v in zip(x, y, strict=True))


def _chars_meet(u: str, v: str) -> bool:
    return u in (v, "?") or v == "?"


def _pieces_meet(
    x: Sequence[str],
    y: Sequence[str],
    *,
    loop_x: bool,
    loop_y: bool,
    split: Callable[[Sequence[str]], list[Sequence[str]]],
    same: Callable[[str, str], bool],
    find: Callable[[Sequence[str], Sequence[str], int, int], int],
) -> bool:
    """Whether two patterns share a word, both being sequences of units (characters or
    segments) where some units are loops (``*`` / ``**``: zero or more arbitrary units) and
    ``same(u, v)`` says whether two non-loop units can stand for one unit. ``split`` cuts a
    pattern into its loop-free pieces; ``find`` is the leftmost position >= start where a
    piece fits into a loop-free pattern ending by ``end``, or -1.

    * Both have a loop: iff their first pieces agree on their common length and so do their
      last pieces (from the end). The word: the longer first piece (merged), every middle piece
      of x, every middle piece of y, the longer last piece — each loop absorbs what it must.
    * Neither: same length, agreeing position by position.
    * One (y) has a loop: greedy, leftmost placement of y's middle pieces into x between its
      first and last pieces. Leftmost is never worse: agreement is position by position.
    """
    if loop_x and loop_y:
        px, py = split(x), split(y)
        pre = min(len(px[0]), len(py[0]))
        suf = min(len(px[-1]), len(py[-1]))
        return _compatible(px[0][:pre], py[0][:pre], same) and _compatible(
            px[-1][len(px[-1]) - suf :], py[-1][len(py[-1]) - suf :], same
        )
    if not loop_x and not loop_y:
        return len(x) == len(y) and _compatible(x, y, same)
    if loop_x:
        x, y = y, x
    pieces = split(y)
    first, last, n = pieces[0], pieces[-1], len(x)
    if len(first) + len(last) > n:
        return False
    if not (
        _compatible(x[: len(first)], first, same) and _compatible(x[n - len(last) :], last, same)
    ):
        return False
    pos, end = len(first), n - len(last)
    for piece in pieces[1:-1]:
        if piece:
            at = find(x, piece, pos, end)
            if at < 0:
                return False
            pos = at + len(piece)
    return True


def _find_chars(text: Sequence[str], piece: Sequence[str], start: int, end: int) -> int:
    assert isinstance(text, str) and isinstance(piece, str)
    if "?" not in piece and "?" not in text[start:end]:
        return text.find(piece, start, end)  # C speed
    found = _piece_regex(piece).search(text, start, end)  # a '?' of the text meets anything
    return -1 if found is None else found.start()


@lru_cache(maxsize=1024)
def _piece_regex(piece: str) -> re.Pattern[str]:
    """A fixed-length regex finding where ``piece`` meets a text that may hold ``?``."""
    return re.compile(
        "".join("." if ch == "?" else f"[{re.escape(ch)}?]" for ch in piece), re.DOTALL
    )


def _split_chars(pattern: Sequence[str]) -> list[Sequence[str]]:
    assert isinstance(pattern, str)
    return list(pattern.split("*"))


@lru_cache(maxsize=8192)
def _segments_intersect(p: str, q: str) -> bool:
    """Whether some valid path segment matches both segment patterns ``p`` and ``q``.

    By pieces (``_pieces_meet``), except where a forbidden segment could be the only common
    word: every common word has the length of a star-free pattern, so a star-free pattern of
    at most 4 characters goes to the reference automaton (a tiny one). Otherwise the common
    words are all at least 5 long (one side star-free and longer) or can be made so (both
    sides have a star: pad inside the stars), and no forbidden segment is that long.
    """
    if p > q:
        p, q = q, p  # symmetric: one cache entry per unordered pair
    star_p, star_q = "*" in p, "*" in q
    if (not star_p and len(p) <= 4) or (not star_q and len(q) <= 4):
        return _segments_intersect_dp(p, q)
    return _pieces_meet(
        p, q, loop_x=star_p, loop_y=star_q, split=_split_chars, same=_chars_meet,
        find=_find_chars,
    )  # fmt: skip


def _segment_meets(u: str, v: str) -> bool:
    return _segments_intersect(u, v)


def _split_segments(pattern: Sequence[str]) -> list[Sequence[str]]:
    pieces: list[Sequence[str]] = [[]]
    for unit in pattern:
        if unit == "**":
            pieces.append([])
        else:
            assert isinstance(pieces[-1], list)
            pieces[-1].append(unit)
    return pieces


def _find_segments(text: Sequence[str], piece: Sequence[str], start: int, end: int) -> int:
    for at in range(start, end - len(piece) + 1):
        if _compatible(text[at : at + len(piece)], piece, _segment_meets):
            return at
    return -1


@lru_cache(maxsize=65536)
def globs_intersect(a: str, b: str) -> bool:
    """True iff some valid repository path matches both globs; ValueError on a bad glob.

    Symmetric, and ``globs_intersect(g, g)`` is true exactly when ``g`` matches some valid
    path (``.git/**`` matches none: every path inside ``.git`` is refused). Memoized: the
    scheduler asks the same pairs tick after tick.

    Segments are units and ``**`` a loop (``_pieces_meet``); a last ``**`` is one arbitrary
    segment and a loop. A glob with a segment pattern no valid segment matches matches
    nothing, and otherwise every segment a loop absorbs can be any valid one, so the piece
    rules hold. Cost: linear in the globs when both or neither have ``**`` (plus the segment
    pairs compared), else the greedy search's at most (segments of one) * (segments of the
    other) segment comparisons, each memoized; per segment pair likewise in characters.
    """
    if a > b:
        a, b = b, a
    units = []
    for glob in (a, b):
        tokens = _tokens(glob)
        if not all(loop or _segments_intersect(pattern, "*") for pattern, loop in tokens):
            return False  # some segment of the glob can be no valid segment
        units.append(["**" if loop else pattern for pattern, loop in tokens])
    ua, ub = units
    return _pieces_meet(
        ua, ub, loop_x="**" in ua, loop_y="**" in ub, split=_split_segments,
        same=_segment_meets, find=_find_segments,
    )  # fmt: skip


def scopes_intersect(a: Iterable[str], b: Iterable[str]) -> bool:
    """True iff some glob of ``a`` intersects some glob of ``b`` (an empty scope: never)."""
    right = tuple(b)
    return any(globs_intersect(x, y) for x in a for y in right)


def lock_of(scopes: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """A batch's lock: the sorted union of its tasks' scope globs (``agent.spawn.lock``)."""
    return tuple(sorted({glob for scope in scopes for glob in scope}))
