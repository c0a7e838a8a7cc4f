"""Agent adapters: how the runtime starts each agent CLI and reads its output.

``ADAPTERS`` maps a task's ``adapter`` name to a ready instance: the scripted agent and the
real CLIs (claude, codex, gemini, aider, goose, opencode), each running the program of that
name from PATH. The generic ``command`` adapter needs an argv template, so it is registered
by whoever has one (``register_adapter(CommandAdapter(template=(...)))``). To use another
executable (a pinned path, a fake in tests) register a copy:
``register_adapter(dataclasses.replace(ADAPTERS["claude"], executable="/opt/claude"))``.
"""

from __future__ import annotations

from .base import (
    Adapter,
    AdapterConfigError,
    AdapterError,
    AgentOutput,
    AgentRequest,
    UnknownAdapterError,
)
from .claude import ClaudeAdapter
from .codex import CodexAdapter
from .command import CommandAdapter
from .gemini import GeminiAdapter
from .opencode import OpencodeAdapter
from .plaintext import AiderAdapter, GooseAdapter
from .scripted import ScriptedAdapter

ADAPTERS: dict[str, Adapter] = {
    adapter.name: adapter
    for adapter in (
        ScriptedAdapter(),
        ClaudeAdapter(),
        CodexAdapter(),
        GeminiAdapter(),
        AiderAdapter(),
        GooseAdapter(),
        OpencodeAdapter(),
    )
}


def get_adapter(name: str) -> Adapter:
    """The registered adapter called ``name``; ``UnknownAdapterError`` if there is none."""
    try:
        return ADAPTERS[name]
    except KeyError:
        hint = (
            " (the command adapter must be registered with its argv template first)"
            if name == "command"
            else ""
        )
        known = ", ".join(sorted(ADAPTERS))
        raise UnknownAdapterError(f"unknown adapter {name!r}{hint}; known: {known}") from None


def register_adapter(adapter: Adapter) -> None:
    """Add or replace the adapter registered under ``adapter.name``."""
    ADAPTERS[adapter.name] = adapter


__all__ = [
    "ADAPTERS",
    "Adapter",
    "AdapterConfigError",
    "AdapterError",
    "AgentOutput",
    "AgentRequest",
    "AiderAdapter",
    "ClaudeAdapter",
    "CodexAdapter",
    "CommandAdapter",
    "GeminiAdapter",
    "GooseAdapter",
    "OpencodeAdapter",
    "ScriptedAdapter",
    "UnknownAdapterError",
    "get_adapter",
    "register_adapter",
]
