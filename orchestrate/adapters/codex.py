"""OpenAI Codex CLI (``codex``), non-interactive ``exec`` mode.

Assumed CLI: codex-cli 0.4x+ (the Rust ``codex-rs``; the JSONL schema of
``codex-rs/exec/src/exec_events.rs``). Invocation::

    codex exec --json --full-auto --skip-git-repo-check [-m M] -  < prompt

* ``exec``: run one task to completion without a UI; the prompt argument ``-`` reads the
  prompt from stdin (never on argv, where ``ps`` shows it);
* ``--json``: JSONL events on stdout (logs go to stderr)::

      {"type": "thread.started", "thread_id": "..."}
      {"type": "turn.started"}
      {"type": "item.started"|"item.updated"|"item.completed",
       "item": {"id": "item_0", "type": "agent_message", "text": "..."}}
         (other item types: reasoning, command_execution, file_change, mcp_tool_call,
          web_search, todo_list, error)
      {"type": "turn.completed", "usage": {"input_tokens": .., "cached_input_tokens": ..,
                                            "output_tokens": ..}}
      {"type": "turn.failed", "error": {"message": "..."}}
      {"type": "error", "message": "..."}

  The final answer is the text of the last completed ``agent_message`` item. The stream
  names no model, so the requested model (or ``unspecified``) is reported;
* ``--full-auto``: sandboxed workspace-write, no approval prompts (the worktree is writable);
* ``--skip-git-repo-check``: do not refuse a directory codex does not take for a trusted repo
  (a linked git worktree);
* ``-m M``: the model.

Role tool policies (docs/spec/runtime.md §22), per ``codex exec --help`` and the config
reference (https://developers.openai.com/codex/config-reference): ``--sandbox read-only``
(instead of ``--full-auto``) for ``write``; ``-c features.shell_tool=false`` (and
``features.unified_exec=false``) for ``shell`` (keys of ``codex-rs/core/src/features.rs``);
``-c features.multi_agent=false -c features.multi_agent_v2=false -c agents.enabled=false``
for ``subagents`` (the model catalog enables multi-agent otherwise, codex 0.145+);
``--ignore-user-config`` for ``mcp`` (openai/codex#18646; ``-c mcp_servers={}`` does not
clear servers, openai/codex#16045).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model import ProcResult
from .base import (
    AgentOutput,
    AgentRequest,
    cli_call,
    clip,
    decode,
    failed,
    hard_stop,
    parse_json_lines,
    process_failure,
    role_denied,
)

CODEX_OVERRIDES: dict[str, tuple[str, ...]] = {
    "shell": ("features.shell_tool=false", "features.unified_exec=false"),
    "subagents": (
        "features.multi_agent=false",
        "features.multi_agent_v2=false",
        "agents.enabled=false",
    ),
}
"""``-c key=value`` config overrides per denied class (codex-rs ``features.rs`` keys)."""


@dataclass(frozen=True)
class CodexAdapter:
    name: str = "codex"
    executable: str = "codex"
    env_names: tuple[str, ...] = ("CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")

    def flags(self, request: AgentRequest) -> list[str]:
        policy = self.policy_flags(request)
        sandbox = [] if "--sandbox" in policy else ["--full-auto"]
        flags = ["exec", "--json", *sandbox, "--skip-git-repo-check"]
        if request.model:
            flags += ["-m", request.model]
        return [*flags, *policy, "-"]

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """``--sandbox read-only`` (instead of ``--full-auto``) for ``write``; feature and
        config overrides for ``shell``, ``subagents`` and ``mcp``.

        ``--sandbox read-only`` makes codex's own sandbox refuse every write, by its shell
        and by ``apply_patch`` alike. ``-c features.shell_tool=false`` removes the shell tool
        and ``features.unified_exec=false`` its PTY variant. Sub-agents (the multi-agent
        ``spawn_agent`` tools) need both feature flags off and, since 0.145, ``agents.enabled``
        false (the model catalog can turn multi-agent on otherwise; an older codex rejects
        the unknown key and exits: fails closed). MCP servers come only from the config files
        (``-c mcp_servers={}`` does not clear them, openai/codex#16045), so
        ``--ignore-user-config`` drops the user's ``$CODEX_HOME/config.toml`` (auth stays).
        """
        classes = role_denied(request.role)
        flags: list[str] = []
        if "write" in classes:
            flags += ["--sandbox", "read-only"]
        if "mcp" in classes:
            flags.append("--ignore-user-config")
        for name in classes:
            for override in CODEX_OVERRIDES.get(name, ()):
                flags += ["-c", override]
        return flags

    def enforces(self, role: str) -> tuple[str, ...]:
        """Every denied class: each has a flag (see ``policy_flags``)."""
        return role_denied(role)

    def argv(self, request: AgentRequest) -> list[str]:
        return [self.executable, *self.flags(request)]

    def stdin(self, request: AgentRequest) -> bytes:
        """The prompt goes to stdin, never on argv (readable by anyone in ``ps``)."""
        return request.prompt.encode("utf-8")

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        stop = hard_stop(self.name, result)
        if stop:
            return failed(stop, result)
        events, error = parse_json_lines(decode(result.stdout), "codex")
        if error:
            return failed(process_failure(self.name, result) or error, result)
        if not events:
            return failed(process_failure(self.name, result) or "codex: no events", result)
        text: str | None = None
        completed = False
        for event in events:
            kind = event.get("type")
            if kind == "turn.failed":
                return failed(f"codex turn failed: {_message(event.get('error'))}", result)
            if kind == "error":
                return failed(f"codex error: {_message(event)}", result)
            if kind == "turn.completed":
                completed = True
            if kind == "item.completed":
                item = event.get("item")
                if isinstance(item, dict) and item.get("type") == "agent_message":
                    if not isinstance(item.get("text"), str):
                        return failed("codex: agent_message item without text", result)
                    text = item["text"]
        problem = process_failure(self.name, result)
        if problem:
            return failed(problem, result)
        if not completed:
            return failed("codex: the stream ended without turn.completed", result)
        if text is None:
            return AgentOutput(ok=True, summary="")
        call = cli_call(self.name, request, text, None, self.flags(request))
        return AgentOutput(ok=True, summary=text, model_calls=(call,))


def _message(node: Any) -> str:
    if isinstance(node, dict) and isinstance(node.get("message"), str):
        return clip(node["message"])
    return "no message"
