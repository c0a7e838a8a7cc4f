"""Google Gemini CLI (``gemini``) in headless mode.

Assumed CLI: @google/gemini-cli 0.6+ (``--output-format json`` and ``--approval-mode``).
Invocation::

    gemini --output-format json --approval-mode auto_edit [--model M]  < prompt

* no ``--prompt``: with stdin not a terminal, gemini runs headless with stdin as the prompt,
  answers and exits (the prompt never reaches argv, where ``ps`` shows it);
* ``--output-format json``: one JSON object on stdout::

      {"response": "<final text>",
       "stats": {"models": {"<model>": {"api": {...}, "tokens": {"prompt": .., "candidates": ..,
                                                               "total": .., ...}}},
                 "tools": {...}, "files": {...}},
       "error": {"type": "...", "message": "...", "code": ...}}      (only on failure)

  On failure the error object may be printed on stderr instead; both are read. Exit status
  0 success, 1 general/API error, 42 input error, 53 turn limit exceeded;
* ``--approval-mode auto_edit``: edit tools run without confirmation (headless mode otherwise
  leaves out tools that need one);
* ``--model``/``-m``: the model.

Proxied (docs/spec/runtime.md §11a, route ``google``): the runtime points the CLI at its
recording proxy with ``GOOGLE_GEMINI_BASE_URL`` (not a documented flag: the CLI's source,
``packages/core/src/core/contentGenerator.ts``, reads it and makes it the @google/genai SDK's
base URL; ``OPENAI_BASE_URL`` would switch it to its SGLang backend, so a gemini agent never
gets one) and gives it a placeholder
``GEMINI_API_KEY``; the operator's key stays with the proxy (docs/spec/proxy.md).

Role tool policies (docs/spec/runtime.md §22), per the CLI reference
(https://geminicli.com/docs/cli/cli-reference/) and the policy engine
(https://geminicli.com/docs/reference/policy-engine/): headless, ``ask_user`` is ``deny``,
so ``--approval-mode default`` (instead of ``auto_edit``) leaves out the write tools and
the shell; ``--allowed-mcp-server-names`` naming no server loads none. Sub-agents
(https://geminicli.com/docs/core/subagents) are allowed by the built-in policy and no flag
denies them: not enforced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    process_failure,
    role_denied,
)

NO_MCP_SERVER = "harness-no-mcp-server"
"""The one name on ``--allowed-mcp-server-names`` for a role denied MCP: a non-empty allow-list
that names no configured server loads none."""


@dataclass(frozen=True)
class GeminiAdapter:
    name: str = "gemini"
    executable: str = "gemini"
    approval_mode: str = "auto_edit"
    env_names: tuple[str, ...] = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT")

    def flags(self, request: AgentRequest) -> list[str]:
        policy = self.policy_flags(request)
        approval = [] if "--approval-mode" in policy else ["--approval-mode", self.approval_mode]
        flags = ["--output-format", "json", *approval]
        if request.model:
            flags += ["--model", request.model]
        return flags + policy

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """``--approval-mode default`` for ``write``/``shell``; an MCP allow-list naming no
        server for ``mcp``.

        Headless, a tool that needs confirmation is denied (the policy engine's ``ask_user``
        is ``deny`` in non-interactive mode): in ``default`` mode that is every write tool
        and the shell, so both go together (the Auditor loses the shell too). ``plan`` mode
        would say the same more directly but needs ``experimental.plan`` in the user's
        settings and some versions silently fall back to ``default``. Sub-agents are allowed
        by the built-in policy (``subagents.toml``) and no flag denies them: they are not
        enforced here.
        """
        classes = role_denied(request.role)
        flags: list[str] = []
        if "write" in classes or "shell" in classes:
            flags += ["--approval-mode", "default"]
        if "mcp" in classes:
            flags += ["--allowed-mcp-server-names", NO_MCP_SERVER]
        return flags

    def enforces(self, role: str) -> tuple[str, ...]:
        """The denied classes except ``subagents`` (no flag denies gemini's sub-agents)."""
        return tuple(c for c in role_denied(role) if c != "subagents")

    def argv(self, request: AgentRequest) -> list[str]:
        return [self.executable, *self.flags(request)]

    def stdin(self, request: AgentRequest) -> bytes:
        """The prompt goes to stdin, never on argv (readable by anyone in ``ps``)."""
        return request.prompt.encode("utf-8")

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        stop = hard_stop(self.name, result)
        if stop:
            return failed(stop, result)
        stdout = decode(result.stdout)
        document, error = parse_json_document(stdout, "gemini")
        if error is not None:
            # A failure may be reported as a JSON error object on stderr instead.
            fallback, _ = parse_json_document(decode(result.stderr), "gemini")
            if isinstance(fallback, dict) and fallback.get("error") is not None:
                document, error = fallback, None
        if error is not None:
            return failed(process_failure(self.name, result) or error, result)
        if not isinstance(document, dict):
            return failed("gemini: output is JSON but not an object", result)
        if document.get("error") is not None:
            return failed(f"gemini reported an error: {_error(document['error'])}", result)
        text = document.get("response")
        if not isinstance(text, str):
            return failed("gemini: no text 'response' in the output", result)
        problem = process_failure(self.name, result)
        if problem:
            return failed(problem, result)
        call = cli_call(
            self.name, request, text, _model(document, request.model),
            self.flags(request),
        )  # fmt: skip
        return AgentOutput(ok=True, summary=text, model_calls=(call,))


def _error(node: Any) -> str:
    if isinstance(node, Mapping):
        message = node.get("message")
        parts = [str(node[key]) for key in ("type", "code") if node.get(key) is not None]
        head = f"[{' '.join(parts)}] " if parts else ""
        return head + (clip(message) if isinstance(message, str) else "no message")
    return clip(str(node))


def _model(document: dict[str, Any], requested: str | None) -> str | None:
    stats = document.get("stats")
    models = stats.get("models") if isinstance(stats, Mapping) else None
    if isinstance(models, Mapping) and models:
        return busiest_model(models, requested, ("tokens.total", "tokens.candidates"))
    return None
