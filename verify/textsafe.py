"""One escaping of untrusted text for every report the verifier writes.

File names (git paths, bundle member names, paths given on the command line) and everything a
bundle carries (run and task ids, record fields quoted in reasons, times, kinds) are written by
someone the reader of a report must not trust: a pull-request author, a prompt-injected agent,
a crafted bundle. Shown raw, such text forges report lines (a newline then ``  covered ...``),
drives the terminal (ANSI escapes), reorders what is seen (bidirectional controls), turns into
live links and HTML in a GitHub job summary, runs GitHub workflow commands (a log line that
starts with ``::`` or contains ``##[``), or crashes the writer (a file name that is not UTF-8
arrives as a ``str`` with lone surrogates, which no UTF-8 encoder accepts).

So every renderer shows such text through this module, in one form, the *display form*
(``text``), which is:

* one line of printable characters: every character whose Unicode general category is
  ``Cc``, ``Cf``, ``Cs``, ``Co``, ``Cn``, ``Zl``, ``Zp``, or ``Zs`` other than U+0020 is
  written as an escape, as is the backslash itself;
* lossless and unambiguous: ``\\\\`` is a backslash; ``\\xHH`` with HH < 80 is that ASCII
  character; ``\\xHH`` with HH >= 80 is the raw byte HH of a name that is not UTF-8 (Python's
  ``surrogateescape`` U+DC80..U+DCFF); ``\\uHHHH`` and ``\\UHHHHHHHH`` are any other code point
  (C1 controls, bidi marks, lone surrogates, unassigned ones). ``unescape`` inverts it exactly;
* free of workflow commands: the first ``:`` of every ``::`` and the first ``#`` of every
  ``##[`` are escaped (``\\x3a``, ``\\x23``), so the display form never contains ``::`` or
  ``##[``.

The form is pure ASCII wherever the input is, keeps printable non-ASCII letters and symbols
(``é``, ``🔥``) as they are, and is deterministic for a given Unicode database version.
Markdown adds a second layer (``md_code``: a code span, in which GitHub renders no link, no
mention, no HTML and no emphasis), and URIs are percent-encoded from the file name's bytes
(``uri``).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final
from urllib.parse import quote

__all__ = ["json_safe", "md_code", "text", "unescape", "uri"]

_ESCAPED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_CANDIDATE: Final = re.compile(r":(?=:)|#(?=#\[)|[^ -\[\]-~]")
"""What may need an escape: the first ``:`` of ``::``, the first ``#`` of ``##[``, and every
character that is not printable ASCII or is the backslash (most of them non-ASCII letters that
stay as they are). Everything else is printable ASCII and is shown as is."""
_ESCAPE: Final = re.compile(r"\\(?:\\|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def _needs_escape(char: str) -> bool:
    if char == "\\":
        return True
    if char == " ":
        return False
    return unicodedata.category(char) in _ESCAPED_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\\":
        return "\\\\"
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a raw byte of a name that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char == ":":
        return "\\x3a"
    if char == "#":
        return "\\x23"
    return _escape(char) if _needs_escape(char) else char


def text(value: object) -> str:
    """``value`` (``str()`` of it) in the display form: one printable line, lossless, with no
    control, format or separator character, no ``::`` and no ``##[``."""
    return _CANDIDATE.sub(_shown, value if isinstance(value, str) else str(value))


def _unescape_one(match: re.Match[str]) -> str:
    byte, short, long = match.groups()
    if byte is not None:
        code = int(byte, 16)
        return chr(code) if code < 0x80 else chr(0xDC00 + code)
    if short is not None:
        return chr(int(short, 16))
    if long is not None:
        return chr(int(long, 16))
    return "\\"


def unescape(shown: str) -> str:
    """The original text of a display form (``unescape(text(s)) == s`` for every ``s``);
    what a consumer of the JSON reports applies to get a file name back."""
    return _ESCAPE.sub(_unescape_one, shown)


def json_safe(value: Any) -> Any:
    """``value`` with every string in it (object keys included) in the display form: what the
    JSON and SARIF reports carry, so any JSON parser reads them and any viewer shows them."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {text(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def md_code(value: object, *, table: bool = False) -> str:
    """``value``'s display form as a Markdown code span (empty text gives ``""``).

    GitHub renders nothing inside a code span: no link, autolink, mention, issue reference,
    HTML, entity or emphasis. The fence is one backtick longer than the longest run of
    backticks in the text; a text that starts or ends with a backtick or a space is padded
    with one space each side (CommonMark strips exactly those). In a table cell (``table``)
    every ``|`` is written ``\\|``, which GFM requires even inside code spans."""
    shown = text(value)
    if not shown:
        return ""
    longest = max((len(run) for run in re.findall("`+", shown)), default=0)
    fence = "`" * (longest + 1)
    if shown[0] in "` " or shown[-1] in "` ":
        shown = f" {shown} "
    if table:
        shown = shown.replace("|", "\\|")
    return f"{fence}{shown}{fence}"


def _path_bytes(path: str) -> bytes:
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
        return path.encode("utf-8", "surrogatepass")


def uri(path: str) -> str:
    """A URI reference for a file name: its bytes (UTF-8, or the raw bytes of a name that is
    not UTF-8) percent-encoded, except unreserved characters, ``/`` and ``@``. A ``:`` is
    encoded too, so that no name reads as a scheme (``javascript:x``) and none holds ``::``."""
    return quote(_path_bytes(path), safe="/@")
