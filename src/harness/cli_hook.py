"""``harness hook pre-tool-use``: the agent CLI's pre-tool hook, a thin client of the runtime.

Claude Code runs this before every tool call (its ``PreToolUse`` hook, passed by the adapter
in ``--settings``; contract: https://code.claude.com/docs/en/hooks): the hook document arrives
on stdin (``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``, ...);
the answer goes to stdout as ``{"hookSpecificOutput": {"hookEventName": "PreToolUse",
"permissionDecision": "allow"|"deny", "permissionDecisionReason": ...}}`` with exit status 0.

It runs inside the agent's sandbox as the agent's child, so it holds no key and writes no
store: it forwards the document over the batch's Unix socket (``$HARNESS_REVIEW_SOCKET``) and
prints what the runtime decided (docs/spec/review.md). It fails closed everywhere: stdin over
1 MiB, no socket, no answer within ``$HARNESS_REVIEW_WAIT_S`` (+10 s), a malformed answer —
each is a deny. Should anything unforeseen go wrong it exits 2, which Claude Code treats as
"block" (any other non-zero status would let the tool run).

``python -m harness.cli_hook pre-tool-use`` is the same command without the rest of the
``harness`` CLI (what the adapter configures: a hook starts once per tool call).
"""

from __future__ import annotations

import json
import os
import sys
from typing import BinaryIO, TextIO

HOOK_EVENT = "PreToolUse"
DEFAULT_WAIT_S = 300


def _read_limited(stream: BinaryIO, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``stream``; None when there are more."""
    data = bytearray()
    while len(data) <= limit:
        chunk = stream.read(min(65536, limit + 1 - len(data)))
        if not chunk:
            return bytes(data)
        data += chunk
    return None


def claude_answer(decision: str, reason: str) -> str:
    """Claude Code's PreToolUse answer (one JSON object)."""
    value = {
        "hookSpecificOutput": {
            "hookEventName": HOOK_EVENT,
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }
    return json.dumps(value, ensure_ascii=False)


def decide_call(request: bytes | None, env: dict[str, str] | os._Environ[str]) -> tuple[str, str]:
    """``(decision, reason)`` for one hook document (None: over the size limit)."""
    from harness.orchestrate.review.hook import client_wait_s
    from harness.orchestrate.review.protocol import ENV_SOCKET, ENV_WAIT, MAX_REQUEST, ask

    if request is None:
        return "deny", f"harness review: the hook request is over {MAX_REQUEST} bytes"
    path = env.get(ENV_SOCKET, "")
    if not path:
        return "deny", f"harness review: no review socket (${ENV_SOCKET} is not set)"
    wait = env.get(ENV_WAIT, "")
    review_wait = int(wait) if wait.isdigit() and 0 < int(wait) <= 86400 else DEFAULT_WAIT_S
    try:
        decision, reason, review = ask(path, request, float(client_wait_s(review_wait)))
    except (OSError, ValueError) as exc:  # TimeoutError is an OSError
        return "deny", f"harness review: no answer from the runtime ({type(exc).__name__}: {exc})"
    label = f" {review}" if review else ""
    return decision, f"harness review{label}: {reason}"


def pre_tool_use(stdin: BinaryIO, stdout: TextIO, env: dict[str, str] | os._Environ[str]) -> int:
    from harness.orchestrate.review.protocol import MAX_REQUEST

    decision, reason = decide_call(_read_limited(stdin, MAX_REQUEST), env)
    stdout.write(claude_answer(decision, reason) + "\n")
    stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harness.cli_hook pre-tool-use``; exit 2 on anything else."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["pre-tool-use"]:
        sys.stderr.write("usage: python -m harness.cli_hook pre-tool-use\n")
        return 2
    try:
        return pre_tool_use(sys.stdin.buffer, sys.stdout, os.environ)
    except BaseException as exc:  # a hook must block, never fail open
        sys.stderr.write(f"harness review: hook failed ({type(exc).__name__}); blocked\n")
        return 2


def register(app: object) -> None:
    """Add ``harness hook pre-tool-use`` to the ``harness`` app."""
    import typer

    hook_app = typer.Typer(help="Agent CLI hooks (run by the agent CLI, not by hand).")

    @hook_app.command("pre-tool-use")
    def _pre_tool_use() -> None:
        """Claude Code's PreToolUse hook: ask the run's review gate (stdin JSON -> stdout JSON)."""
        raise typer.Exit(main(["pre-tool-use"]))

    assert isinstance(app, typer.Typer)
    app.add_typer(hook_app, name="hook")


if __name__ == "__main__":
    sys.exit(main())
