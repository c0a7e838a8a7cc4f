"""Write locks: whether two scopes can ever name the same file.

Batches whose scopes intersect must never run at once (issue 11 §2), so the scheduler and the
verifier both need one exact answer to "is there a path both globs match?". Exact means: true
iff some *valid repository path* (``scope.check_rel_path`` accepts it) matches both globs under
the semantics of ``scope.glob_match`` (docs/spec/plan.md "Globs"). An over-approximation would
serialize batches for nothing; an under-approximation would let two agents write one file.

Method: two product automata, no regular-expression enumeration.

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
  states, memoized per pair.

Valid paths also exclude backslashes and control characters, but glob literals cannot hold
them (``scope.check_glob``) and wildcards are only ever resolved to the characters above, so
those exclusions need no state.
"""

from __future__ import annotations

from collections.abc import Iterable
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


@lru_cache(maxsize=8192)
def _segments_intersect(p: str, q: str) -> bool:
    """Whether some valid path segment matches both segment patterns ``p`` and ``q``."""
    if p > q:
        p, q = q, p  # symmetric: one cache entry per unordered pair
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


@lru_cache(maxsize=65536)
def globs_intersect(a: str, b: str) -> bool:
    """True iff some valid repository path matches both globs; ValueError on a bad glob.

    Symmetric, and ``globs_intersect(g, g)`` is true exactly when ``g`` matches some valid
    path (``.git/**`` matches none: every path inside ``.git`` is refused). Memoized: the
    scheduler asks the same pairs tick after tick.
    """
    if a > b:
        a, b = b, a
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
        if i < end_a and j < end_b and _segments_intersect(ta[i][0], tb[j][0]):
            steps.append((i if ta[i][1] else i + 1, j if tb[j][1] else j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                stack.append(step)
    return False


def scopes_intersect(a: Iterable[str], b: Iterable[str]) -> bool:
    """True iff some glob of ``a`` intersects some glob of ``b`` (an empty scope: never)."""
    right = tuple(b)
    return any(globs_intersect(x, y) for x in a for y in right)


def lock_of(scopes: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """A batch's lock: the sorted union of its tasks' scope globs (``agent.spawn.lock``)."""
    return tuple(sorted({glob for scope in scopes for glob in scope}))
