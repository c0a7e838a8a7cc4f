"""The control header of an auditor report and the ``Next:`` line of a manager plan.

Issue 12 §1-§2: a round counts as progress only through the auditor's three-line header, and
a plan names its next action only through one ``Next:`` line. Both are read by the runtime when
it decides and re-read by the verifier from the stored texts, so the grammar is one pure
function here, exact and bounded (docs/spec/rounds.md "Grammar"). Nothing is guessed from the
free body: a header that does not parse is invalid, and the runtime replaces it with
``REPLACEMENT`` after one repair attempt.

Decisions (rounds.md): an English label takes English values only; a zh label takes its zh
values or the English ones (Integrity has English values only). Case folding is ASCII only, so
no Unicode case mapping (the Kelvin sign, dotted I) can spell a value. Bold (``**``) may wrap
the label (``**Status:**`` or ``**Status**:``) or the whole line, never the value alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

STATUSES: Final = ("complete", "incomplete", "blocked")
INTEGRITIES: Final = ("clean", "suspect", "violation")
CONTRACTS: Final = ("aligned", "unknown", "needs_revision", "invalid")
NEXT_ACTIONS: Final = ("gui", "cli", "ask", "done", "blocked")

MAX_TEXT_BYTES: Final = 256 * 1024
"""Texts whose UTF-8 encoding is longer are invalid ("too long") without being parsed."""
MAX_CITES: Final = 1000
"""The largest round number a ``Cites:`` line may name (the rounds ceiling)."""

WHITESPACE: Final = " \t\r\f\v\u00a0\u3000"
"""What "surrounding whitespace" means: ASCII space, tab, CR, FF, VT, no-break space and the
ideographic space U+3000 (common in zh text). Nothing else is stripped."""
SEPARATORS: Final = (":", "\uff1a")  # ASCII colon, full-width colon


@dataclass(frozen=True)
class Header:
    """The three values of a control header, normalised to the English vocabulary."""

    status: str
    integrity: str
    contract: str


REPLACEMENT: Final = Header("blocked", "suspect", "unknown")
"""What an invalid header (still invalid after the one repair) is replaced with."""
VIOLATION: Final = Header("blocked", "violation", "unknown")
"""What a report is replaced with when the auditor changed the tree it may only read."""


@dataclass(frozen=True)
class HeaderParse:
    """A parsed header, or None with the problem (line number and what was expected)."""

    header: Header | None
    problem: str | None


@dataclass(frozen=True)
class NextParse:
    """The normalised next action, or None with the problem."""

    action: str | None
    problem: str | None


_UPPER_TO_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_SPACES: Final = re.compile("[" + re.escape(WHITESPACE) + "]+")
_NEEDS_REVISION: Final = re.compile(r"needs[-_ ]revision")

# Labels (ASCII-lowercased, inner whitespace runs collapsed to one space) -> (field, language).
_HEADER_LABELS: Final = {
    "status": ("status", "en"),
    "状态": ("status", "zh"),
    "integrity": ("integrity", "en"),
    "完整性": ("integrity", "zh"),
    "contract audit": ("contract", "en"),
    "契约审计": ("contract", "zh"),
}
_FIELDS: Final = ("status", "integrity", "contract")
_FIELD_NAMES: Final = {"status": "Status", "integrity": "Integrity", "contract": "Contract audit"}
_EN_VALUES: Final = {"status": STATUSES, "integrity": INTEGRITIES, "contract": CONTRACTS}
_ZH_VALUES: Final = {
    "status": {"完成": "complete", "未完成": "incomplete", "阻塞": "blocked"},
    "integrity": {},
    "contract": {
        "对齐": "aligned",
        "未知": "unknown",
        "需修订": "needs_revision",
        "需要修订": "needs_revision",
        "无效": "invalid",
    },
}
_NEXT_LABELS: Final = {"next": "en", "下一步": "zh"}
_NEXT_ZH: Final = {
    "gui任务": "gui",
    "cli任务": "cli",
    "请示用户": "ask",
    "完成": "done",
    "阻塞": "blocked",
}
_CITES_LABELS: Final = ("cites", "引用")
_CITE_NUMBER: Final = re.compile("[1-9][0-9]{0,3}")
_CITE_SEPARATORS: Final = re.compile("[,\uff0c]")


def _lower(text: str) -> str:
    """ASCII-only case folding: A-Z to a-z, every other character unchanged."""
    return text.translate(_UPPER_TO_LOWER)


def _too_long(text: str) -> bool:
    if len(text) > MAX_TEXT_BYTES:  # a UTF-8 encoding is never shorter than the text
        return True
    return len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line stripped of WHITESPACE) for every non-empty line.

    Lines end at LF; a CR before the LF is whitespace and so stripped. One leading U+FEFF
    (a byte-order mark) is dropped. Linear in the text.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(WHITESPACE)
        if line:
            yield number, line


def _split_label(line: str) -> tuple[str, str] | None:
    """``(label, value)`` of a ``Label: value`` line with its allowed bold, or None.

    Forms: ``Label: value``, ``**Label:** value``, ``**Label**: value``, ``**Label: value**``;
    the separator is the first ``:`` or ``：``. Label and value come back stripped; the label
    lowercased (ASCII) with inner whitespace runs collapsed to one space.
    """
    if line.startswith("**"):
        inner = line[2:]
        close = inner.find("**")
        if close < 0:
            return None
        head, rest = inner[:close], inner[close + 2 :]
        if head and head[-1] in SEPARATORS:  # **Label:** value
            label, value = head[:-1], rest
        elif rest.lstrip(WHITESPACE)[:1] in SEPARATORS:
            # **Label**: value
            after = rest.lstrip(WHITESPACE)
            label, value = head, after[1:]
        elif rest == "":  # **Label: value**
            cut = _first_separator(head)
            if cut < 0:
                return None
            label, value = head[:cut], head[cut + 1 :]
        else:
            return None
        if _first_separator(label) >= 0:
            return None
    else:
        cut = _first_separator(line)
        if cut < 0:
            return None
        label, value = line[:cut], line[cut + 1 :]
    label = _SPACES.sub(" ", _lower(label.strip(WHITESPACE)))
    return label, value.strip(WHITESPACE)


def _first_separator(text: str) -> int:
    """Index of the first ``:`` or ``：`` in ``text``, -1 if there is none."""
    ascii_colon = text.find(":")
    wide_colon = text.find("\uff1a")
    if ascii_colon < 0 or 0 <= wide_colon < ascii_colon:
        return wide_colon
    return ascii_colon


CLIP: Final = 32
"""Code points of an untrusted value shown in a problem message."""


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in "'\\":
        return "\\" + ch
    if 0x20 <= code <= 0x7E:
        return ch
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _clip(value: str) -> str:
    """A short, ASCII-only rendering of untrusted text for a problem message (rounds.md §7):
    the first CLIP code points in single quotes, escaped, then ``...`` if there were more."""
    shown = "'" + "".join(_escape(ch) for ch in value[:CLIP]) + "'"
    return shown + ("..." if len(value) > CLIP else "")


def _header_value(field: str, language: str, value: str) -> str | None:
    folded = _lower(value)
    if field == "contract" and _NEEDS_REVISION.fullmatch(folded):
        folded = "needs_revision"
    if folded in _EN_VALUES[field]:
        return folded
    if language == "zh":
        return _ZH_VALUES[field].get(folded)
    return None


def _expected(field: str, language: str) -> str:
    english = "|".join(_EN_VALUES[field])
    if language == "zh" and _ZH_VALUES[field]:
        return "|".join(_ZH_VALUES[field]) + " or " + english
    return english


def parse_header(text: str) -> HeaderParse:
    """Parse the first three non-empty lines of an auditor report (rounds.md "Header")."""
    if _too_long(text):
        return HeaderParse(None, f"report too long (more than {MAX_TEXT_BYTES} bytes)")
    lines = _lines(text)
    values: list[str] = []
    for field in _FIELDS:
        name = _FIELD_NAMES[field]
        got = next(lines, None)
        if got is None:
            return HeaderParse(
                None, f"missing {name} line: the report has only {len(values)} non-empty lines"
            )
        number, line = got
        split = _split_label(line)
        if split is None:
            return HeaderParse(
                None, f"line {number}: expected '{name}: <value>', got {_clip(line)}"
            )
        label, value = split
        known = _HEADER_LABELS.get(label)
        if known is None:
            return HeaderParse(
                None, f"line {number}: expected the {name} label, got label {_clip(label)}"
            )
        found, language = known
        if found != field:
            kind = "duplicate" if found in _FIELDS[: len(values)] else "out of order"
            return HeaderParse(
                None,
                f"line {number}: expected the {name} line, got the "
                f"{_FIELD_NAMES[found]} line ({kind})",
            )
        normal = _header_value(field, language, value)
        if normal is None:
            return HeaderParse(
                None,
                f"line {number}: {name} value {_clip(value)} is not one of "
                f"{_expected(field, language)}",
            )
        values.append(normal)
    return HeaderParse(Header(values[0], values[1], values[2]), None)


def effective_status(header: Header, *, ghost: bool) -> str:
    """The round's status after the downgrade rule: ``complete`` only when the header says
    complete, clean and aligned and the round was no ghost success; blocked stays blocked."""
    if header.status == "blocked":
        return "blocked"
    if (
        header.status == "complete"
        and header.integrity == "clean"
        and header.contract == "aligned"
        and not ghost
    ):
        return "complete"
    return "incomplete"


def _next_value(language: str, value: str) -> str | None:
    folded = _lower(value)
    if folded in NEXT_ACTIONS:
        return folded
    if language == "zh":
        return _NEXT_ZH.get(folded)
    return None


def parse_next(text: str) -> NextParse:
    """The action of a plan's one ``Next:`` line, which must be its last non-empty line."""
    if _too_long(text):
        return NextParse(None, f"plan too long (more than {MAX_TEXT_BYTES} bytes)")
    last: tuple[int, str, str] | None = None  # line number, language, value of the last Next
    final_number = 0  # set by the loop before any use (a text without lines has no Next)
    for number, line in _lines(text):
        final_number = number
        split = _split_label(line)
        if split is None or split[0] not in _NEXT_LABELS:
            continue
        if last is not None:
            return NextParse(
                None, f"line {number}: a second Next line (the first is line {last[0]})"
            )
        last = (number, _NEXT_LABELS[split[0]], split[1])
    if last is None:
        return NextParse(
            None, "no Next line: the plan must end with 'Next: gui|cli|ask|done|blocked'"
        )
    number, language, value = last
    if number != final_number:
        return NextParse(
            None,
            f"line {number}: the Next line is not the last non-empty line (line {final_number})",
        )
    action = _next_value(language, value)
    if action is None:
        allowed = "|".join(NEXT_ACTIONS)
        if language == "zh":
            allowed = "|".join(_NEXT_ZH) + " or " + allowed
        return NextParse(None, f"line {number}: Next value {_clip(value)} is not one of {allowed}")
    return NextParse(action, None)


def parse_cites(text: str) -> tuple[int, ...]:
    """Sorted distinct round numbers of the plan's one optional ``Cites: 1, 3`` line.

    ``()`` when there is no Cites line, and also when it is malformed, when there are several,
    or when the text is too long: a citation only widens what the executor is shown, so a bad
    one shows nothing rather than failing the plan (rounds.md "Cites").
    """
    if _too_long(text):
        return ()
    found: str | None = None
    for _number, line in _lines(text):
        split = _split_label(line)
        if split is None or split[0] not in _CITES_LABELS:
            continue
        if found is not None:
            return ()
        found = split[1]
    if not found:
        return ()
    numbers: set[int] = set()
    for part in _CITE_SEPARATORS.split(found):
        item = part.strip(WHITESPACE)
        if not _CITE_NUMBER.fullmatch(item) or int(item) > MAX_CITES:
            return ()
        numbers.add(int(item))
    return tuple(sorted(numbers))


def accept_done(latest_effective: str | None, latest: Header | None) -> bool:
    """Whether a plan's ``Next: done`` may end the task: only after a latest audit whose
    effective status is complete and whose header is complete, clean and aligned."""
    return (
        latest is not None
        and latest_effective == "complete"
        and latest.status == "complete"
        and latest.integrity == "clean"
        and latest.contract == "aligned"
    )
