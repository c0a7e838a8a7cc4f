"""Claude Code (``claude``) in print mode.

Assumed CLI: Claude Code 1.x/2.x (``@anthropic-ai/claude-code``). Invocation::

    claude -p --output-format json --permission-mode acceptEdits [--model M]  < prompt

* ``-p``/``--print``: non-interactive, print the answer and exit. With no prompt argument the
  prompt is read from stdin, where the runtime writes it: a prompt on argv would be readable
  by every local user (``ps``, ``/proc/PID/cmdline``);
* ``--output-format json``: one JSON object on stdout when the run ends::

      {"type": "result", "subtype": "success", "is_error": false, "result": "<final text>",
       "session_id": "...", "num_turns": 3, "duration_ms": 1234, "total_cost_usd": 0.01,
       "usage": {...}, "modelUsage": {"<model>": {"inputTokens": ..., "outputTokens": ...}}}

  ``subtype`` is ``error_max_turns`` / ``error_during_execution`` on failure (then no
  ``result``); an API failure is ``is_error: true`` with the message in ``result``.
  ``modelUsage`` exists in recent versions only and is optional here;
* ``--output-format stream-json`` (``output_format="stream-json"``; requires ``--verbose``
  with ``-p``): JSONL messages, first ``{"type": "system", "subtype": "init", "model": ...}``,
  last the same result object as above. Both forms (and the JSON array some versions print
  with ``--verbose``) are parsed;
* ``--permission-mode acceptEdits``: file edits are allowed without a prompt (nobody is there
  to answer); other tools stay under the default policy;
* ``--model M``: an alias (``sonnet``) or a full model name.

Role tool policies (docs/spec/runtime.md §22), per the CLI reference
(https://code.claude.com/docs/en/cli-reference), permissions
(https://code.claude.com/docs/en/permissions) and sub-agents
(https://code.claude.com/docs/en/sub-agents): ``--disallowedTools`` removes built-in tools
whatever the permission mode (``--tools`` replaces the built-in set); the sub-agent tool is
``Agent`` since 2.1.63 (``Task`` before; anthropics/claude-code#29677), both denied;
``--strict-mcp-config --mcp-config '{"mcpServers":{}}'`` loads no MCP server (``mcp__*``
deny patterns are not honoured reliably: anthropics/claude-code#13077).

Action review (docs/spec/review.md, issue 13 §5): with ``review_hook`` set (the runtime sets
it for a batch it serves a review socket for), ``--settings`` adds a ``PreToolUse`` hook for
every tool (matcher ``*``) that runs the harness's hook client, per the hooks reference
(https://code.claude.com/docs/en/hooks): the hook reads the call as JSON on stdin and answers
``hookSpecificOutput.permissionDecision`` allow/deny with exit 0; exit 2 blocks; any other
failure of the hook — including being killed at its ``timeout`` — lets the tool run, so the
hook's time-out is set beyond the client's own wait (the client always answers first).
``--settings`` outranks the project's and the user's settings files, so a repository's
``.claude/settings.json`` cannot switch the hook off (``disableAllHooks`` is set false here
too). Settings merge: the hook is added to whatever hooks the user configured. The
``--settings`` pair is not part of the recorded model-call flags (it holds host paths and the
hook's time-out, not model behaviour).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..model import ProcResult
from .base import (
    AgentOutput,
    AgentRequest,
    busiest_model,
    cli_call,
    clip,
    decode,
    failed,
    hard_stop,
    parse_json_document,
    parse_json_lines,
    process_failure,
    role_denied,
)

CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "mcp": ("ListMcpResourcesTool", "ReadMcpResourceTool"),
    "shell": ("Bash", "BashOutput", "KillBash", "KillShell", "PowerShell"),
    "subagents": ("Agent", "Task"),
    "write": ("Edit", "MultiEdit", "NotebookEdit", "Write"),
}
"""Claude Code's built-in tools per class (settings "Tools available to Claude"; ``Task`` was
renamed ``Agent`` in 2.1.63 and both are listed)."""

READ_ONLY_TOOLS: tuple[str, ...] = ("Glob", "Grep", "Read")
"""The whole built-in tool set (``--tools``) of a role denied every class."""

EMPTY_MCP_CONFIG = '{"mcpServers":{}}'
"""With ``--strict-mcp-config``: load MCP servers from this config only, i.e. none."""


@dataclass(frozen=True)
class ClaudeAdapter:
    name: str = "claude"
    executable: str = "claude"
    output_format: Literal["json", "stream-json"] = "json"
    permission_mode: str = "acceptEdits"
    env_names: tuple[str, ...] = (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
    )
    review_hook: tuple[str, ...] = ()
    """The hook command (argv) for every tool call; empty: no review hook."""
    review_timeout_s: int = 0
    """Claude Code's time-out for that hook, in seconds."""

    def flags(self, request: AgentRequest) -> list[str]:
        return self.model_flags(request) + self.review_flags()

    def model_flags(self, request: AgentRequest) -> list[str]:
        """The flags that select the agent's behaviour (recorded with its model call)."""
        flags = ["-p", "--output-format", self.output_format]
        if self.output_format == "stream-json":
            flags.append("--verbose")
        flags += ["--permission-mode", self.permission_mode]
        if request.model:
            flags += ["--model", request.model]
        return flags + self.policy_flags(request)

    def review_flags(self) -> list[str]:
        """``--settings`` with the PreToolUse review hook (none without ``review_hook``)."""
        if not self.review_hook:
            return []
        hook = {"type": "command", "command": shlex.join(self.review_hook),
                "timeout": self.review_timeout_s}  # fmt: skip
        settings = {"disableAllHooks": False,
                    "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}  # fmt: skip
        return ["--settings", json.dumps(settings, sort_keys=True, separators=(",", ":"))]

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """``--disallowedTools`` with every tool of the denied classes; MCP off entirely.

        Deny rules win over every permission mode (``bypassPermissions`` included). Both
        names of the sub-agent tool are denied (``Task`` before 2.1.63, ``Agent`` since);
        denying a name a version lacks is a no-op. MCP is not denied by tool names (the
        ``mcp__*`` patterns are unreliable, anthropics/claude-code#13077) but by loading no
        server: ``--strict-mcp-config`` with an empty ``--mcp-config``. A role denied every
        class also gets ``--tools Glob,Grep,Read`` (the built-in tool set becomes exactly
        these; a CLI too old for the flag refuses it and exits: fails closed).
        """
        classes = role_denied(request.role)
        tools = sorted({tool for name in classes for tool in CLAUDE_TOOLS[name]})
        flags = ["--disallowedTools", ",".join(tools)] if tools else []
        if set(classes) == set(CLAUDE_TOOLS):
            # Denied every class (the Manager): also replace the built-in tool set by the
            # read-only tools, so a tool added by a later version is not available either.
            flags += ["--tools", ",".join(READ_ONLY_TOOLS)]
        if "mcp" in classes:
            flags += ["--strict-mcp-config", "--mcp-config", EMPTY_MCP_CONFIG]
        return flags

    def enforces(self, role: str) -> tuple[str, ...]:
        """Every denied class, except ``write`` while the shell stays allowed.

        The shell can write files whatever tools are denied, so ``write`` counts as enforced
        by flags only together with ``shell`` (the Manager); the Auditor's ``write`` is the
        sandbox's read-only mount.
        """
        classes = role_denied(role)
        return tuple(c for c in classes if c != "write" or "shell" in classes)

    def argv(self, request: AgentRequest) -> list[str]:
        return [self.executable, *self.flags(request)]

    def stdin(self, request: AgentRequest) -> bytes:
        """The prompt goes to stdin, never on argv (readable by anyone in ``ps``)."""
        return request.prompt.encode("utf-8")

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        stop = hard_stop(self.name, result)
        if stop:
            return failed(stop, result)
        messages, error = _messages(decode(result.stdout))
        final = next((m for m in reversed(messages) if m.get("type") == "result"), None)
        if final is None:
            why = error or "claude: no result object in the output"
            return failed(process_failure(self.name, result) or why, result)
        subtype = final.get("subtype")
        text = final.get("result")
        if final.get("is_error") is True or subtype != "success":
            detail = f": {clip(text)}" if isinstance(text, str) and text.strip() else ""
            return failed(f"claude reported an error ({subtype}){detail}", result)
        if not isinstance(text, str):
            return failed("claude: result object has no text 'result'", result)
        exit_problem = process_failure(self.name, result)
        if exit_problem:
            return failed(exit_problem, result)
        model = _model(messages, final, request.model)
        call = cli_call(self.name, request, text, model, self.model_flags(request))
        return AgentOutput(ok=True, summary=text, model_calls=(call,))


def _messages(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """The output's JSON objects: one object (json), an array (json + verbose), or JSONL."""
    value, error = parse_json_document(text, "claude")
    if error is None:
        if isinstance(value, dict):
            return [value], None
        if isinstance(value, list):
            return [item for item in value if isinstance(item, dict)], None
        return [], "claude: output is JSON but neither an object nor an array"
    if text.strip() and "\n" in text.strip():
        return parse_json_lines(text, "claude")
    return [], error


def _model(
    messages: list[dict[str, Any]], final: dict[str, Any], requested: str | None
) -> str | None:
    for message in messages:
        if message.get("type") == "system" and message.get("subtype") == "init":
            model = message.get("model")
            if isinstance(model, str) and model:
                return model
    usage = final.get("modelUsage")
    if isinstance(usage, Mapping) and usage:
        return busiest_model(usage, requested, ("outputTokens",))
    return None
