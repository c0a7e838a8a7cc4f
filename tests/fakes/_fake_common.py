"""Shared helpers of the fake agent CLIs in this folder (imported from the script's folder).

Every fake: validates its command line like the real CLI (exit 2 with a usage error on
anything it does not know or on a missing required flag), edits one file in its working
directory (``FAKE_<NAME>.md``), prints output in the real CLI's format, and obeys
``FAKE_MODE``: ``fail`` (the CLI's own error report), ``garbage`` (output the parser cannot
read), ``slow`` (sleeps 30 s first, for time-out tests).

Role tool policies (docs/spec/runtime.md §22): each fake also derives, from its command line
and the way the real CLI documents it, which tool classes the run could use, and writes them
as JSON to ``$FAKE_REPORT`` when that is set: ``{"mcp": [servers], "shell": bool,
"subagents": bool, "write": bool}`` (``write`` is true when any tool, the shell included,
could change files). ``$FAKE_MCP_SERVERS`` (comma-separated) stands for MCP servers found in
the user's own configuration, which the real CLIs load unless told not to.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

MODES = ("", "ok", "fail", "garbage", "slow")


def usage(program: str, message: str) -> NoReturn:
    sys.stderr.write(f"{program}: error: {message}\nusage: see the fake's docstring\n")
    sys.exit(2)


def mode(program: str) -> str:
    value = os.environ.get("FAKE_MODE", "")
    if value not in MODES:
        usage(program, f"FAKE_MODE must be one of {', '.join(m or '(empty)' for m in MODES)}")
    if value == "slow":
        time.sleep(30)
    return value


def marker(name: str) -> str:
    return f"FAKE_{name.upper()}.md"


def write_marker(name: str, prompt: str) -> str:
    path = Path.cwd() / marker(name)
    path.write_text(f"# written by fake {name}\n\n{prompt}\n", encoding="utf-8")
    return path.name


def read_stdin() -> str:
    """The prompt piped on stdin ("" when stdin is a terminal or empty), as the CLIs read it."""
    if sys.stdin is None or sys.stdin.isatty():
        return ""
    return sys.stdin.read()


def ambient_mcp() -> list[str]:
    """MCP servers "configured" in the user's settings (``$FAKE_MCP_SERVERS``)."""
    return sorted(n.strip() for n in os.environ.get("FAKE_MCP_SERVERS", "").split(",") if n.strip())


def report(*, mcp: list[str], shell: bool, subagents: bool, write: bool) -> None:
    """Write the run's usable tool classes to ``$FAKE_REPORT`` (if set)."""
    target = os.environ.get("FAKE_REPORT")
    if target:
        value = {"mcp": sorted(mcp), "shell": shell, "subagents": subagents, "write": write}
        Path(target).write_text(json.dumps(value), encoding="utf-8")


def emit(value: Any) -> None:
    sys.stdout.write(json.dumps(value) + "\n")


def take_value(program: str, args: list[str], index: int, flag: str) -> tuple[str, int]:
    """The value of ``flag`` at ``args[index]`` (``--flag=value`` or ``--flag value``)."""
    current = args[index]
    if "=" in current and current.startswith("--"):
        return current.split("=", 1)[1], index + 1
    if index + 1 >= len(args):
        usage(program, f"option '{flag}' needs a value")
    return args[index + 1], index + 2
