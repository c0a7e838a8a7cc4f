"""CLIs without machine-readable output: aider and goose.

Their stdout is the transcript; the summary is its last 2 KB, the model call's response the
whole transcript, and success is exit status 0 with some output and no known error marker.

aider — assumed CLI: aider-chat 0.60+. Invocation::

    aider --message-file=<prompt file> --yes-always --no-auto-commits --no-gitignore --no-pretty
          --no-stream --no-check-update --chat-history-file=<scratch>/aider.chat.history.md
          --input-history-file=<scratch>/aider.input.history [--model=M]

* ``--message-file``: process the message in that file (the runtime's prompt file, inside the
  sandbox) and exit; never ``--message``, which would put the prompt on argv where ``ps``
  shows it; ``--yes-always``: answer every confirmation;
* ``--no-auto-commits``: leave changes uncommitted (the runtime commits and computes lineage);
* ``--no-gitignore``: do not add ``.aider*`` to ``.gitignore`` (no stray change in the worktree);
* ``--chat-history-file``/``--input-history-file``: keep aider's history files out of the
  worktree (next to the prompt file); ``--no-pretty``/``--no-stream``: plain, final text;
* output: a banner (``Aider v0.x``, ``Main model: <model> with <format> edit format``, older
  versions ``Model: ...``), then the transcript. API failures print ``litellm.<Name>Error: ...``
  lines, sometimes with exit status 0, so such a line fails the run.

goose — assumed CLI: goose 1.x (block/goose). Invocation::

    goose run --no-session --with-builtin developer [--model M] --instructions -  < prompt

* ``run --instructions -``: execute the instructions read from stdin and exit (never
  ``--text``, which would put the prompt on argv); ``--no-session``: store no session file;
* ``--with-builtin developer``: the file-editing/shell extension, whatever the user config;
* ``--model``: overrides ``GOOSE_MODEL`` (the provider stays the configured one);
* output: plain text, starting with a banner line like
  ``starting session | provider: anthropic model: claude-sonnet-4``. (Recent goose also has
  ``--output-format json``; its schema is not relied upon here.)

Role tool policies (docs/spec/runtime.md §22): aider (https://aider.chat/docs/config/options.html)
gets ``--dry-run`` for ``write`` and ``--no-suggest-shell-commands`` for ``shell``, and has
neither MCP nor sub-agents; goose's tools are MCP extensions loaded from its config, and
``goose run`` has no flag that denies one: nothing is enforced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import ProcResult
from .base import (
    AgentOutput,
    AgentRequest,
    cli_call,
    clip,
    decode,
    failed,
    hard_stop,
    process_failure,
    role_denied,
    tail,
)

_AIDER_MODEL = re.compile(r"^(?:Main model|Model): (\S+)", re.MULTILINE)
_AIDER_ERROR = re.compile(r"^litellm\.\w*Error\b.*$", re.MULTILINE)
_GOOSE_MODEL = re.compile(r"\bprovider: \S+ model: (\S+)")


def _read_plain(
    name: str,
    request: AgentRequest,
    result: ProcResult,
    flags: Sequence[str],
    model_pattern: re.Pattern[str],
    error_pattern: re.Pattern[str] | None,
) -> AgentOutput:
    problem = hard_stop(name, result) or process_failure(name, result)
    if problem:
        return failed(problem, result)
    text = decode(result.stdout).strip()
    if not text:
        return failed(f"{name}: no output", result)
    if error_pattern is not None:
        marker = error_pattern.search(text)
        if marker:
            return failed(f"{name} reported an error: {clip(marker.group(0))}", result)
    found = model_pattern.search(text)
    call = cli_call(name, request, text, found.group(1) if found else None, flags)
    return AgentOutput(ok=True, summary=tail(result.stdout), model_calls=(call,))


@dataclass(frozen=True)
class AiderAdapter:
    name: str = "aider"
    executable: str = "aider"
    env_names: tuple[str, ...] = (
        "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY",
    )  # fmt: skip

    def flags(self, request: AgentRequest) -> list[str]:
        scratch = request.prompt_file.parent
        flags = [
            f"--message-file={request.prompt_file}",
            "--yes-always",
            "--no-auto-commits",
            "--no-gitignore",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            f"--chat-history-file={scratch / 'aider.chat.history.md'}",
            f"--input-history-file={scratch / 'aider.input.history'}",
        ]
        if request.model:
            flags.append(f"--model={request.model}")
        return flags + self.policy_flags(request)

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """``--dry-run`` for ``write`` (no file is modified), ``--no-suggest-shell-commands``
        for ``shell`` (aider runs only commands it suggested, and ``--yes-always`` would
        run them all)."""
        classes = role_denied(request.role)
        flags = ["--dry-run"] if "write" in classes else []
        if "shell" in classes:
            flags.append("--no-suggest-shell-commands")
        return flags

    def enforces(self, role: str) -> tuple[str, ...]:
        """``shell`` by flag, ``write`` by flag only with ``shell`` (a shell command can write
        whatever ``--dry-run`` says); ``mcp`` and ``subagents`` by construction: aider has no
        MCP client and no sub-agents."""
        classes = role_denied(role)
        return tuple(c for c in classes if c != "write" or "shell" in classes)

    def argv(self, request: AgentRequest) -> list[str]:
        return [self.executable, *self.flags(request)]

    def stdin(self, request: AgentRequest) -> None:
        return None  # aider reads the prompt file (--message-file)

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        # The prompt file and history paths are host-specific, not answer-changing: left out
        # of the parameters.
        flags = [
            flag
            for flag in self.flags(request)
            if not flag.startswith(
                ("--chat-history-file=", "--input-history-file=", "--message-file=")
            )
        ]
        return _read_plain(self.name, request, result, flags, _AIDER_MODEL, _AIDER_ERROR)


@dataclass(frozen=True)
class GooseAdapter:
    name: str = "goose"
    executable: str = "goose"
    env_names: tuple[str, ...] = (
        "ANTHROPIC_API_KEY", "GOOSE_MODEL", "GOOSE_PROVIDER", "OPENAI_API_KEY",
    )  # fmt: skip

    def flags(self, request: AgentRequest) -> list[str]:
        flags = ["run", "--no-session", "--with-builtin", "developer"]
        if request.model:
            flags += ["--model", request.model]
        return [*flags, *self.policy_flags(request), "--instructions", "-"]

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """None: goose's tools are its extensions (MCP servers, the configured ones loaded
        whatever the command line says) and ``goose run`` has no flag that denies a tool."""
        role_denied(request.role)
        return []

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
        flags = self.flags(request)
        return _read_plain(self.name, request, result, flags, _GOOSE_MODEL, None)
