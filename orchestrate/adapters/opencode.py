"""opencode (``opencode``), non-interactive ``run``.

Assumed CLI: opencode 0.15+/1.x (``run --format json``). Invocation::

    opencode run --format json [--model provider/model]  < prompt

* ``run``: one message, then exit; with no message argument and stdin not a terminal, the
  message is read from stdin (never on argv, where ``ps`` shows it);
* ``--format json``: JSONL events on stdout, each
  ``{"type": ..., "timestamp": <ms>, "sessionID": "...", ...}``::

      {"type": "step_start", "part": {"type": "step-start", ...}}
      {"type": "text", "part": {"type": "text", "text": "...", ...}}
      {"type": "tool_use", "part": {"type": "tool", "tool": "edit", "state": {...}}}
      {"type": "step_finish", "part": {"type": "step-finish", "reason": "stop",
                                       "tokens": {...}, "cost": 0}}
      {"type": "error", "error": {"name": "...", "data": {"message": "..."}}}

  The answer is the text of the last step that produced text. ``run`` may exit 0 after an
  ``error`` event, so the events decide. The stream names no model: the requested one (or
  ``unspecified``) is reported;
* ``--model``/``-m``: ``provider/model``.

Role tool policies (docs/spec/runtime.md §22), per https://opencode.ai/docs/permissions/ and
https://opencode.ai/docs/agents/: ``run`` has no flag that denies a tool; ``--agent plan``
(edit tools denied, ``bash``/``task``/MCP kept) is passed for roles denied ``write`` as
defence in depth, and no class counts as enforced.
"""

from __future__ import annotations

from collections.abc import Mapping
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


@dataclass(frozen=True)
class OpencodeAdapter:
    name: str = "opencode"
    executable: str = "opencode"
    env_names: tuple[str, ...] = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY")

    def flags(self, request: AgentRequest) -> list[str]:
        flags = ["run", "--format", "json"]
        if request.model:
            flags += ["--model", request.model]
        return flags + self.policy_flags(request)

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """``--agent plan`` for a role denied ``write`` (defence in depth, not enforcement).

        The built-in ``plan`` agent's permission rules deny the edit tools, but its ``bash``
        stays allowed (and can write), its ``task`` tool (sub-agents) and every configured MCP
        server stay available; ``opencode run`` has no flag that denies a tool. Permissions
        can only be set in config (``opencode.json``, ``OPENCODE_CONFIG_CONTENT``), so no
        class counts as enforced by these flags.
        """
        return ["--agent", "plan"] if "write" in role_denied(request.role) else []

    def enforces(self, role: str) -> tuple[str, ...]:
        """None: see ``policy_flags``."""
        role_denied(role)
        return ()

    def argv(self, request: AgentRequest) -> list[str]:
        return [self.executable, *self.flags(request)]

    def stdin(self, request: AgentRequest) -> bytes:
        """The prompt goes to stdin, never on argv (readable by anyone in ``ps``)."""
        return request.prompt.encode("utf-8")

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        stop = hard_stop(self.name, result)
        if stop:
            return failed(stop, result)
        events, error = parse_json_lines(decode(result.stdout), "opencode")
        if error:
            return failed(process_failure(self.name, result) or error, result)
        if not events:
            return failed(process_failure(self.name, result) or "opencode: no events", result)
        step: list[str] = []
        answer: str | None = None
        for event in events:
            kind = event.get("type")
            if kind == "error":
                return failed(f"opencode reported an error: {_error(event.get('error'))}", result)
            part = event.get("part")
            if kind == "step_start":
                step = []
            elif kind == "text":
                if not (isinstance(part, Mapping) and isinstance(part.get("text"), str)):
                    return failed("opencode: text event without part.text", result)
                step.append(part["text"])
            elif kind == "step_finish" and step:
                answer = "".join(step)
                step = []
        if step:  # some versions end without the last step_finish
            answer = "".join(step)
        problem = process_failure(self.name, result)
        if problem:
            return failed(problem, result)
        if answer is None:
            return AgentOutput(ok=True, summary="")
        call = cli_call(self.name, request, answer, None, self.flags(request))
        return AgentOutput(ok=True, summary=answer, model_calls=(call,))


def _error(node: Any) -> str:
    if isinstance(node, Mapping):
        data = node.get("data")
        message = data.get("message") if isinstance(data, Mapping) else node.get("message")
        name = node.get("name")
        head = f"{name}: " if isinstance(name, str) else ""
        return head + (clip(message) if isinstance(message, str) else "no message")
    return clip(str(node)) if node is not None else "no details"
