"""The display form every report uses for untrusted text (``harness.verify.textsafe``).

Property tests over any text, including lone surrogates (file names that are not UTF-8), plus
the real GitHub Markdown renderer (cmark-gfm) to check that Markdown output carries no live link,
mention, HTML or extra table cell.
"""

from __future__ import annotations

import html
import json
import os
import re
import unicodedata
from typing import Any

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.verify.textsafe import json_safe, md_code, text, unescape, uri

SPECIALS = [
    "\n",
    "\r",
    "\t",
    "\x1b",
    "\x00",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\u202e",
    "\u2066",
    "\u200b",
    "\ufeff",
    "\u00a0",
    "\U000e0041",  # a tag character: invisible "A"
    "\ud800",
    "\udce9",
    "\udcff",
    "\\",
    ":",
    "#",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    "&",
    "|",
    "`",
    "*",
    "_",
    "@",
    "!",
    "~",
    " ",
    "é",
    "🔥",
    "www.",
    "https://",
    "::",
    "##[",
    "a",
]
ANY_CHAR = st.one_of(
    st.sampled_from(SPECIALS),
    st.integers(0, 0x10FFFF).map(chr),
    st.integers(0xDC80, 0xDCFF).map(chr),
    st.characters(),
)
ANY_TEXT = st.lists(ANY_CHAR, max_size=40).map("".join)
ESCAPED = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"}
SETTINGS = settings(max_examples=500, deadline=None)


def is_display_form(shown: str) -> bool:
    """One printable line: nothing the display form escapes, no workflow command."""
    return (
        all(ch == " " or unicodedata.category(ch) not in ESCAPED for ch in shown)
        and "::" not in shown
        and "##[" not in shown
    )


@SETTINGS
@given(ANY_TEXT)
@example("covered\n  covered   A calc.py: forged")
@example("::error file=x::forged")
@example("\x1b[2J\x1b[31mred")
def test_display_form_is_one_safe_line_and_lossless(value: str) -> None:
    shown = text(value)
    assert is_display_form(shown)
    assert len(shown.splitlines()) <= 1
    shown.encode("utf-8")  # no lone surrogate left: every writer accepts it
    assert unescape(shown) == value
    assert text(value) == shown  # deterministic


@SETTINGS
@given(st.binary(max_size=30))
def test_any_file_name_bytes_show_escaped_and_come_back(raw: bytes) -> None:
    name = os.fsdecode(raw) if os.name == "posix" else raw.decode("utf-8", "surrogateescape")
    shown = text(name)
    assert is_display_form(shown)
    assert shown.isascii() or not raw.isascii()
    assert unescape(shown).encode("utf-8", "surrogateescape") == raw


def test_escapes_are_unambiguous() -> None:
    assert text("caf\udce9") == "caf\\xe9"  # the raw byte 0xE9 of a Latin-1 name
    assert text("caf\xe9") == "caf\xe9"  # a real é stays
    assert text("\x85") == "\\u0085"  # the C1 control, not the raw byte 0x85
    assert text("\udc85") == "\\x85"
    assert text("a\\x1b") == "a\\\\x1b"  # a literal backslash is doubled
    assert text("\x1b[31m") == "\\x1b[31m"
    assert text("a::b:::c") == "a\\x3a:b\\x3a\\x3a:c"
    assert text("##[error]x") == "\\x23#[error]x"
    assert text("\U000e0041\u202e") == "\\U000e0041\\u202e"
    assert text("plain/path-1.txt") == "plain/path-1.txt"
    assert text(None) == "None"
    assert unescape("\\x3a\\x23\\\\") == ":#\\"


def test_uri_encodes_bytes_and_colons() -> None:
    assert uri("caf\udce9/a b.txt") == "caf%E9/a%20b.txt"
    assert uri("café") == "caf%C3%A9"
    assert uri("javascript:alert(1)") == "javascript%3Aalert%281%29"
    assert uri("a\n::b") == "a%0A%3A%3Ab"
    assert uri("\ud800") == "%ED%A0%80"


@SETTINGS
@given(st.dictionaries(ANY_TEXT, st.lists(ANY_TEXT | st.integers(), max_size=3), max_size=4))
def test_json_carries_the_display_form_and_round_trips(document: dict[str, Any]) -> None:
    safe = json_safe(document)
    dumped = json.dumps(safe, sort_keys=True, indent=2)
    assert dumped.isascii()
    assert json.loads(dumped) == safe
    assert json.dumps(json_safe(document), sort_keys=True, indent=2) == dumped
    for line in dumped.splitlines():
        assert not line.lstrip().startswith("::")

    def strings(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [s for key, item in node.items() for s in [key, *strings(item)]]
        if isinstance(node, list):
            return [s for item in node for s in strings(item)]
        return []

    assert all(is_display_form(s) for s in strings(json.loads(dumped)))
    back = {
        unescape(key): [unescape(v) if isinstance(v, str) else v for v in items]
        for key, items in safe.items()
    }
    assert back == document


def render_gfm(markdown: str) -> str:
    """HTML as GitHub renders Markdown (cmark-gfm with its extensions, raw HTML allowed)."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)")


def html_tags(rendered: str) -> set[str]:
    return {match.group(2).lower() for match in TAG.finditer(rendered)}


@SETTINGS
@given(ANY_TEXT, ANY_TEXT)
@example("[click](https://evil.example/x)", "<img src=x onerror=alert(1)>")
@example("a@b.com www.evil.com https://x.y @octocat #1", "a|b|c")
@example("`code` ``", "x\\|y")
@example("**bold** _em_ ~~s~~ &amp; &#60;b&#62;", "<!-- c --> <script>x</script>")
def test_markdown_code_spans_are_inert_in_a_table(left: str, right: str) -> None:
    row = f"| {md_code(left, table=True)} | {md_code(right, table=True)} |"
    rendered = render_gfm(f"| A | B |\n| --- | --- |\n{row}\n")
    assert html_tags(rendered) <= {"table", "thead", "tbody", "tr", "th", "td", "code"}
    body = rendered.split("<tbody>")[1] if "<tbody>" in rendered else ""
    cells = re.findall(r"<td>(.*?)</td>", body, re.S)
    assert len(cells) == 2, rendered
    for cell, value in zip(cells, (left, right), strict=True):
        shown = text(value)
        if not shown:
            assert cell == ""
            continue
        inner = re.fullmatch(r"<code>(.*)</code>", cell, re.S)
        assert inner is not None, cell
        if shown.strip(" "):
            assert html.unescape(inner.group(1)) == shown


@SETTINGS
@given(ANY_TEXT)
def test_markdown_code_span_is_inert_in_a_paragraph(value: str) -> None:
    rendered = render_gfm(f"Reason: {md_code(value)}\n")
    assert html_tags(rendered) <= {"p", "code"}
    shown = text(value)
    if shown.strip(" "):
        inner = re.search(r"<code>(.*)</code>", rendered, re.S)
        assert inner is not None
        assert html.unescape(inner.group(1)) == shown


@pytest.mark.parametrize("value", ["", "`", "``", " ", "a ", " `a` "])
def test_markdown_code_span_edges(value: str) -> None:
    span = md_code(value)
    if not value:
        assert span == ""
        return
    rendered = render_gfm(f"x {span}\n")
    assert "<code>" in rendered
