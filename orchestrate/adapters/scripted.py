"""The scripted adapter: runs ``harness.orchestrate.scripted_agent`` (deterministic, offline).

``argv``::

    <python> -P -m harness.orchestrate.scripted_agent --edits <request.workfile>
        [--journal <request.journal_file> --mode <request.journal_mode> [--allow-live-miss]]
        [--model <request.model>] [--sleep S] [--ignore-sigterm]

``-P`` keeps the worktree (the working directory) off ``sys.path``, so a repository with its
own ``harness`` package cannot shadow the agent. The runtime writes the workfile with
``write_scripted_workfile`` before spawning. ``sleep_s``/``ignore_sigterm`` exist for tests of
time-outs and kill escalation (register an instance with them in ``ADAPTERS``).

``parse`` reads the agent's JSON lines: each ``model_call`` becomes a ``ModelCall`` (reported
even when the run failed later: the calls happened and are journaled), the final ``result``
line gives ok/summary/error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from ..model import ModelCall, ProcResult
from .base import (
    AdapterConfigError,
    AgentOutput,
    AgentRequest,
    decode,
    hard_stop,
    parse_json_lines,
    process_failure,
    role_denied,
    tail,
)

AGENT_MODULE = "harness.orchestrate.scripted_agent"


@dataclass(frozen=True)
class ScriptedAdapter:
    name: str = "scripted"
    executable: str = field(default_factory=lambda: sys.executable)
    sleep_s: float = 0.0
    ignore_sigterm: bool = False
    env_names: tuple[str, ...] = ()

    def argv(self, request: AgentRequest) -> list[str]:
        if request.workfile is None:
            raise AdapterConfigError(
                "the scripted adapter needs AgentRequest.workfile (see write_scripted_workfile)"
            )
        argv = [self.executable, "-P", "-m", AGENT_MODULE, "--edits", str(request.workfile)]
        if request.journal_file is not None:
            argv += ["--journal", str(request.journal_file), "--mode", request.journal_mode]
            if request.allow_live_miss and request.journal_mode == "replay":
                argv.append("--allow-live-miss")
        if request.model:
            argv += ["--model", request.model]
        if self.sleep_s:
            argv += ["--sleep", repr(float(self.sleep_s))]
        if self.ignore_sigterm:
            argv.append("--ignore-sigterm")
        return argv

    def stdin(self, request: AgentRequest) -> None:
        return None  # the prompts are in the workfile

    def policy_flags(self, request: AgentRequest) -> list[str]:
        """None needed: see ``enforces``."""
        role_denied(request.role)
        return []

    def enforces(self, role: str) -> tuple[str, ...]:
        """``mcp``, ``shell`` and ``subagents`` by construction: the scripted agent has no MCP
        client, runs no command and spawns nothing. ``write`` is not: it applies the
        workfile's edits, whatever its role (the demo's writing Auditor relies on it)."""
        return tuple(c for c in role_denied(role) if c != "write")

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput:
        events, error = parse_json_lines(decode(result.stdout), "scripted agent")
        calls: list[ModelCall] = []
        final: dict[str, Any] | None = None
        for number, event in enumerate(events, start=1):
            kind = event.get("type")
            if kind == "model_call":
                call = _model_call(event)
                if call is None:
                    error = error or f"scripted agent: malformed model_call event #{number}"
                    continue
                calls.append(call)
            elif kind == "result":
                final = event
            elif kind == "turn.completed":
                pass  # its usage, read by the adapter's meter while the agent runs
            else:
                error = error or f"scripted agent: unknown event type {kind!r} (#{number})"
        summary = tail(result.stdout)
        stop = hard_stop(self.name, result)
        if stop:
            return AgentOutput(False, summary, tuple(calls), stop)
        if error:
            return AgentOutput(False, summary, tuple(calls), error)
        if final is None:
            why = process_failure(self.name, result) or "scripted agent: no result line"
            return AgentOutput(False, summary, tuple(calls), why)
        ok, text, reason = final.get("ok"), final.get("summary"), final.get("error")
        if not isinstance(ok, bool) or not isinstance(text, str):
            return AgentOutput(False, summary, tuple(calls), "scripted agent: malformed result")
        if not ok:
            message = reason if isinstance(reason, str) and reason else "no reason given"
            return AgentOutput(False, text, tuple(calls), f"scripted agent failed: {message}")
        problem = process_failure(self.name, result)
        if problem:
            return AgentOutput(False, text, tuple(calls), problem)
        return AgentOutput(True, text, tuple(calls), None)


def _model_call(event: dict[str, Any]) -> ModelCall | None:
    fields = [event.get(name) for name in ("adapter", "model", "request", "response")]
    parameters = event.get("parameters", {})
    if not all(isinstance(value, str) for value in fields) or not isinstance(parameters, dict):
        return None
    adapter, model, request, response = (str(value) for value in fields)
    return ModelCall(adapter, model, request, response, parameters)
