"""The adapter contract: how the runtime starts an agent CLI and reads what it said.

An adapter is two pure functions around one process the runtime spawns:

* ``argv(request)`` -> the exact argument vector (never a shell string: every element reaches
  the program verbatim). It never holds the prompt: a command line is readable by every local
  user (``ps``, ``/proc/PID/cmdline``);
* ``stdin(request)`` -> the bytes written to the process's stdin (the prompt, for CLIs that
  read it there) or None (the CLI reads the prompt file instead);
* ``env_names`` -> environment variable names the CLI may get (its model API key), passed
  only when the task is granted network egress (``harness.orchestrate.sandbox.env``);
* ``parse(request, result)`` -> ``AgentOutput`` (ok, summary, model calls, error) read from
  the process's stdout/stderr/exit status. Malformed output is ``ok=False`` with a precise
  ``error``, never an exception.

The adapter never writes files and never decides anything: the runtime writes the prompt file
(and, for the scripted agent, the workfile), spawns ``argv`` in the batch's sandbox
(``harness.orchestrate.sandbox``) with ``harness.orchestrate.proc.run_process`` in the batch's
worktree, and computes lineage from the worktree's git diff afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from harness.verify.rules.roles import denied

from ..model import Batch, ModelCall, ProcResult, TaskSpec

SUMMARY_LIMIT = 2048
"""Bytes of output kept as a plain-text summary (the tail: agents print conclusions last)."""

ERROR_DETAIL_LIMIT = 500
"""Characters of stderr / offending output quoted in an error message."""

UNSPECIFIED_MODEL = "unspecified"
"""Model name reported when neither the request nor the CLI's output names one (the CLI then
used its own configured default)."""

PROMPT_PLACEHOLDER = "{prompt}"
"""Stands for the prompt in the flags an adapter reports as model-call parameters."""


class AdapterError(Exception):
    """Base class of adapter errors (configuration and lookup, never output parsing)."""


class UnknownAdapterError(AdapterError, LookupError):
    """No adapter of that name is registered."""


class AdapterConfigError(AdapterError, ValueError):
    """An adapter cannot build a command line from this configuration or request."""


@dataclass(frozen=True)
class AgentRequest:
    """Everything an adapter may use to build a command line for one batch."""

    batch: Batch
    tasks: tuple[TaskSpec, ...]
    worktree: Path
    """The batch's git worktree; the process runs with it as its working directory."""
    prompt: str
    """The combined prompt of the batch's tasks."""
    prompt_file: Path
    """The runtime writes ``prompt`` there (UTF-8) before spawning; outside the worktree."""
    model: str | None = None
    journal_file: Path | None = None
    """The replay journal (``Journal.path``) for agents that route model calls through it."""
    workfile: Path | None = None
    """Scripted agent only: JSON of the tasks' prompts and edits, written by the runtime with
    ``harness.orchestrate.scripted_agent.write_scripted_workfile``; outside the worktree."""
    journal_mode: Literal["live", "replay"] = "live"
    """Mode the agent opens ``journal_file`` in (pass ``Journal.mode``)."""
    allow_live_miss: bool = False
    """Replay mode: call the model on a journal miss instead of aborting (pass
    ``Journal.allow_live_miss``)."""
    role: str = "agent"
    """The round role the process runs as (``harness.verify.rules.roles.ROLES``): the
    adapter adds the flags that deny the role's tool classes (``policy_flags``). ``agent``
    (a plain task) adds none: its command line is exactly what it was before roles."""


@dataclass(frozen=True)
class AgentOutput:
    """What an adapter read from a finished agent process."""

    ok: bool
    summary: str
    model_calls: tuple[ModelCall, ...] = ()
    error: str | None = None


class Adapter(Protocol):
    """An agent CLI: how to start it, how to read it."""

    @property
    def name(self) -> str: ...

    @property
    def executable(self) -> str:
        """Program to run: a name looked up on PATH or a path (overridable per instance)."""
        ...

    @property
    def env_names(self) -> tuple[str, ...]: ...

    def argv(self, request: AgentRequest) -> list[str]: ...

    def stdin(self, request: AgentRequest) -> bytes | None: ...

    def parse(self, request: AgentRequest, result: ProcResult) -> AgentOutput: ...


class RoleAware(Protocol):
    """An adapter that maps role tool policies onto its CLI's flags (docs/spec/runtime.md §22).

    * ``policy_flags(request)`` -> the flags in ``argv(request)`` that deny the tool classes
      of ``denied(request.role)``; ``[]`` for role ``agent``; ``AdapterConfigError`` for an
      unknown role;
    * ``enforces(role)`` -> the classes of ``denied(role)`` those flags (or the program's
      construction: a CLI without any MCP client cannot call MCP tools) really deny, sorted.
      A denied class missing here is enforced by the sandbox or the role is refused
      (``harness.orchestrate.adapters.roles.uncovered``).
    """

    def policy_flags(self, request: AgentRequest) -> list[str]: ...

    def enforces(self, role: str) -> tuple[str, ...]: ...


def role_denied(role: str) -> tuple[str, ...]:
    """``denied(role)``, an unknown role raised as ``AdapterConfigError`` (a ValueError)."""
    try:
        return denied(role)
    except ValueError as exc:
        raise AdapterConfigError(str(exc)) from None


def policy_flags(adapter: object, request: AgentRequest) -> list[str]:
    """The adapter's role flags for ``request``; an adapter that knows no roles has none."""
    role_denied(request.role)
    method = getattr(adapter, "policy_flags", None)
    return list(method(request)) if callable(method) else []


def enforces(adapter: object, role: str) -> tuple[str, ...]:
    """The classes of ``denied(role)`` the adapter's flags enforce (none if it knows no roles).

    Clipped to ``denied(role)`` and sorted, whatever the adapter answers, so a record never
    claims enforcement of a class the role was not denied.
    """
    denied_classes = role_denied(role)
    method = getattr(adapter, "enforces", None)
    claimed = set(method(role)) if callable(method) else set()
    return tuple(name for name in denied_classes if name in claimed)


# ---- helpers shared by the adapters ---------------------------------------------------------


def decode(data: bytes) -> str:
    """Process output as text (invalid UTF-8 replaced, never an exception)."""
    return data.decode("utf-8", errors="replace")


def tail(data: bytes, limit: int = SUMMARY_LIMIT) -> str:
    """The last ``limit`` bytes of ``data`` as stripped text (a cut character is dropped)."""
    chunk = data[-limit:] if len(data) > limit else data
    text = chunk.decode("utf-8", errors="replace")
    if len(data) > limit:
        text = text.lstrip("\ufffd")
    return text.strip()


def clip(text: str, limit: int = ERROR_DETAIL_LIMIT) -> str:
    """``text`` stripped and cut to ``limit`` characters (marked with an ellipsis)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def process_failure(name: str, result: ProcResult) -> str | None:
    """Why the process did not exit normally with status 0, or None if it did."""
    if result.timed_out:
        how = f" (stopped with {result.signal})" if result.signal else ""
        return f"{name} timed out after {result.duration_ms} ms{how}"
    if result.exit_code is None:
        return f"{name} was killed by signal {result.signal or 'unknown'}"
    if result.exit_code != 0:
        detail = clip(decode(result.stderr)) or clip(decode(result.stdout))
        return f"{name} exited with status {result.exit_code}" + (f": {detail}" if detail else "")
    return None


def hard_stop(name: str, result: ProcResult) -> str | None:
    """Why the process was stopped (time-out or signal), or None if it exited on its own.

    A stopped process's output is cut short, so adapters do not try to read it.
    """
    if result.timed_out or result.exit_code is None:
        return process_failure(name, result)
    return None


def failed(error: str, result: ProcResult, calls: Sequence[ModelCall] = ()) -> AgentOutput:
    return AgentOutput(ok=False, summary=tail(result.stdout), model_calls=tuple(calls), error=error)


def parse_json_lines(text: str, what: str) -> tuple[list[dict[str, Any]], str | None]:
    """Decode JSONL (blank lines skipped); the error names the first bad line."""
    events: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            return events, f"{what}: line {number} is not JSON ({exc.msg}): {clip(line, 120)!r}"
        except RecursionError:
            return events, f"{what}: line {number} is nested too deeply"
        if not isinstance(value, dict):
            return events, f"{what}: line {number} is not a JSON object: {clip(line, 120)!r}"
        events.append(value)
    return events, None


def parse_json_document(text: str, what: str) -> tuple[Any, str | None]:
    """Decode one JSON document; the error says what was wrong with it."""
    if not text.strip():
        return None, f"{what}: no output"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{what}: output is not JSON ({exc.msg} at char {exc.pos})"
    except RecursionError:
        return None, f"{what}: output JSON is nested too deeply"


def busiest_model(
    models: Mapping[str, Any], preferred: str | None, token_keys: Sequence[str]
) -> str:
    """Pick the model that did the work from a per-model usage map.

    ``preferred`` (the requested model) wins if present; otherwise the model with the most
    tokens under the first of ``token_keys`` found, ties broken by name (deterministic).
    """
    if preferred is not None and preferred in models:
        return preferred

    def weight(name: str) -> int:
        usage = models.get(name)
        if isinstance(usage, Mapping):
            for key in token_keys:
                node: Any = usage
                for part in key.split("."):
                    node = node.get(part) if isinstance(node, Mapping) else None
                if isinstance(node, int) and not isinstance(node, bool):
                    return node
        return 0

    return sorted(models, key=lambda name: (-weight(name), name))[0]


def cli_call(
    adapter: str, request: AgentRequest, response: str, model: str | None, flags: Sequence[str]
) -> ModelCall:
    """The model exchange of one real-CLI run: the prompt in, the final text out.

    ``parameters`` holds the CLI's flags with the prompt as ``{prompt}``: they select the
    agent's behaviour (permissions, output format, model), so they belong in the replay key.
    """
    return ModelCall(
        adapter=adapter,
        model=model or request.model or UNSPECIFIED_MODEL,
        request=request.prompt,
        response=response,
        parameters={"flags": list(flags)},
    )
