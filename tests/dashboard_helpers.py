"""Helpers for the dashboard tests: a small HTML reader and the hostile strings."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

HOSTILE_TASK = "<script>alert(1)</script>"
HOSTILE_FILE = '"><img src=x onerror=alert(2)>.txt'
HOSTILE_CONTENT = '<script>alert("content")</script>\n'
HOSTILE_TEXT = "<img src=x onerror=alert(3)> and </pre><script>alert(4)</script>"
HOSTILE_REASON = "'><svg onload=alert(5)>"


def slow_plan(
    tasks: int, gate_s: float, content: Callable[[int], str] = lambda i: f"file {i}\n"
) -> str:
    """A plan of chained tasks (each depends on the previous) whose gates each sleep
    ``gate_s``: a real run that stays in progress long enough to be watched."""
    python = json.dumps(sys.executable)
    parts = ['[plan]\nname = "live"\n']
    for i in range(tasks):
        parts += [
            f'[[task]]\nid = "t{i}"\nrole = "coder"\nprompt = "Write file {i}."\n',
            f'depends = ["t{i - 1}"]\n' if i else "",
            f'gates = [{{ name = "slow", command = [{python}, "-c", '
            f'"import time; time.sleep({gate_s})"] }}]\n',
            f'[[task.edits]]\npath = "f{i}.txt"\ncontent = {json.dumps(content(i))}\n',
        ]
    return "".join(parts)


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)
    parent: Element | None = None

    def iter(self) -> list[Element]:
        out = [self]
        for child in self.children:
            out.extend(child.iter())
        return out

    def find_all(self, tag: str, **attrs: str) -> list[Element]:
        return [
            e
            for e in self.iter()[1:]
            if e.tag == tag and all(e.attrs.get(k.rstrip("_")) == v for k, v in attrs.items())
        ]

    def find(self, tag: str, **attrs: str) -> Element:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag} {attrs}>"
        return found[0]

    def by_class(self, tag: str, cls: str) -> Element:
        found = [
            e for e in self.iter()[1:] if e.tag == tag and cls in e.attrs.get("class", "").split()
        ]
        assert found, f"no <{tag} class={cls}>"
        return found[0]

    def full_text(self) -> str:
        return self.text + "".join(c.full_text() for c in self.children)


VOID = {"meta", "link", "input", "br", "img", "hr", "rect", "circle", "line", "polyline"}


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(element)

    def handle_endtag(self, tag: str) -> None:
        probe: Element | None = self.current
        while probe is not None and probe.tag != tag:
            probe = probe.parent
        if probe is not None and probe.parent is not None:
            self.current = probe.parent

    def handle_data(self, data: str) -> None:
        self.current.text += data


def parse_html(text: str) -> Element:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    return tree.root
