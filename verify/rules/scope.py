"""Globs, repository paths and record times: the vocabulary the capsule rule speaks.

Semantics (docs/spec/plan.md, "Globs"): repository-relative POSIX patterns matched against
whole normalized paths, case-sensitively. ``*`` matches any run of characters within one
segment (a leading dot included), ``?`` one character within a segment, and a segment that
is exactly ``**`` matches any number of whole segments (zero or more; as the last segment,
one or more, so ``src/**`` matches ``src/a/b.py`` but not ``src``). Everything else is
literal. A glob must not be empty, absolute, contain ``\\``, a control character, an empty
segment, a ``.``/``..`` segment, or ``**`` inside a longer segment. Paths follow the same
rules without wildcards and must not have a ``.git`` segment (any case).

Times are ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (UTC, six fractional digits), checked with integer
calendar arithmetic (no clock, no datetime): such strings compare correctly as strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Final

TIME_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")
_DAYS: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _text_problem(text: str, what: str) -> str | None:
    """The problems globs and paths share: empty, absolute, backslash, control character,
    empty, ``.`` or ``..`` segment."""
    if not text:
        return f"{what} is empty"
    if text.startswith("/"):
        return f"{what} is absolute (starts with '/')"
    if "\\" in text:
        return f"{what} contains a backslash"
    if _CONTROL_RE.search(text):
        return f"{what} contains a control character"
    for segment in text.split("/"):
        if segment == "":
            return f"{what} has an empty segment"
        if segment in {".", ".."}:
            return f"{what} has a {segment!r} segment"
    return None


@lru_cache(maxsize=4096)
def check_glob(glob: str) -> str | None:
    """Why ``glob`` is not an acceptable scope glob, or None if it is."""
    problem = _text_problem(glob, "glob")
    if problem is None and any("**" in seg and seg != "**" for seg in glob.split("/")):
        return "'**' must be a whole path segment"
    return problem


def check_rel_path(path: str) -> str | None:
    """Why ``path`` is not a normalized repository-relative POSIX path, or None if it is."""
    problem = _text_problem(path, "path")
    if problem is None and any(seg.lower() == ".git" for seg in path.split("/")):
        return "path is inside .git"
    return problem


def _segment_regex(segment: str) -> str:
    out = []
    for ch in segment:
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(ch))
    return "".join(out)


@lru_cache(maxsize=4096)
def _glob_regex(glob: str) -> re.Pattern[str]:
    problem = check_glob(glob)
    if problem is not None:
        raise ValueError(f"bad glob {glob!r}: {problem}")
    parts = glob.split("/")
    last = len(parts) - 1
    pieces = []
    for i, segment in enumerate(parts):
        if segment == "**":
            pieces.append("[^/]+(?:/[^/]+)*" if i == last else "(?:[^/]+/)*")
        else:
            pieces.append(_segment_regex(segment) + ("" if i == last else "/"))
    return re.compile("".join(pieces))


def glob_match(glob: str, path: str) -> bool:
    """Whether the whole of ``path`` matches ``glob``; ``glob`` must be valid (else
    ValueError), ``path`` is matched as given (check it with ``check_rel_path`` first)."""
    return _glob_regex(glob).fullmatch(path) is not None


def in_scope(path: str, scope: Iterable[str]) -> bool:
    """Whether ``path`` matches at least one glob of ``scope`` (an empty scope holds nothing)."""
    return any(glob_match(glob, path) for glob in scope)


@lru_cache(maxsize=4096)
def check_time(value: str) -> str | None:
    """Why ``value`` is not a valid ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` UTC time, or None.

    The calendar check is integer arithmetic: month 1..12, day within the month (Gregorian
    leap years), hour < 24, minute < 60, second < 60 (no leap seconds: records never carry
    one).
    """
    if not TIME_RE.fullmatch(value):
        return "time must be YYYY-MM-DDTHH:MM:SS.ffffffZ (UTC, six fractional digits)"
    year, month, day = int(value[0:4]), int(value[5:7]), int(value[8:10])
    hour, minute, second = int(value[11:13]), int(value[14:16]), int(value[17:19])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = 0 if not 1 <= month <= 12 else _DAYS[month - 1] + (1 if month == 2 and leap else 0)
    if year < 1 or not 1 <= day <= days or hour > 23 or minute > 59 or second > 59:
        return "time is not a valid calendar date and time"
    return None
