"""The hook command an agent CLI runs before each tool call, and its time-outs.

The command is the running interpreter (an absolute path the sandbox mounts read-only, like
every interpreter folder) with ``-m harness.cli_hook pre-tool-use``: the same code as
``harness hook pre-tool-use``, without loading the whole ``harness`` command line (typer and
rich cost about half a second per start, paid on every tool call).
"""

from __future__ import annotations

import sys

from .protocol import CLIENT_MARGIN_S


def hook_argv() -> tuple[str, ...]:
    return (sys.executable, "-m", "harness.cli_hook", "pre-tool-use")


def client_wait_s(review_wait_s: int) -> int:
    """How long the hook client waits for the runtime's answer."""
    return review_wait_s + CLIENT_MARGIN_S


def hook_timeout_s(review_wait_s: int) -> int:
    """The agent CLI's time-out for the hook: longer than the client's wait, so the client
    always answers (deny) before a CLI that treats a killed hook as "go ahead" could."""
    return client_wait_s(review_wait_s) + CLIENT_MARGIN_S
