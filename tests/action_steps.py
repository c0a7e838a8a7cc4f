"""The GitHub Action's own steps, read from action.yml, so tests run exactly what runners run."""

from __future__ import annotations

import re
from pathlib import Path

ACTION = Path(__file__).resolve().parents[1] / "action.yml"


def action_step(name: str) -> str:
    """The ``run: |`` script of the composite step called ``name`` in action.yml."""
    text = ACTION.read_text(encoding="utf-8")
    start = text.index(f"- name: {name}")
    match = re.compile(r"\n(\s+)run: \|\n").search(text, start)
    assert match is not None, f"step {name!r} has no run: | block"
    indent = len(match.group(1)) + 2
    lines = []
    for line in text[match.end() :].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        lines.append(line[indent:])
    return "\n".join(lines) + "\n"
