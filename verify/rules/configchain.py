"""The run's control configuration: documents, their hash chain, and which channel a change takes.

Version 1 is ``initial_document()``; every strategy change produces the next version, whose
``parent`` is the SHA-256 of the previous document's canonical JSON (RFC 8785). A document::

    {"format": "harness.control-config/1",
     "agents": {"<role>": {"template": "focused", "add": ["shell"], "drop": [],
                           "gates_in_prompt": true}}}

names only agents (roles) whose entry differs from ``DEFAULT_ENTRY``. An agent's attempts load
the version current at their spawn (``agent.spawn.config``): a change reaches an agent at its
next restart. Its effective tools are its task's tools minus ``drop`` plus ``add``.

Channels (``classify``, ``channel``): a change that only takes permissions away (more
``drop``, less ``add``) is a *contraction* and takes the fast channel: applied at once. Any
change that grants something (``add``, less ``drop``, gates in the prompt) is an
*expansion*, and a template change is *neutral*; both take the slow channel: impact analysis
(the agents whose entry changed), a consistency check (``consistent``: no task of an
affected agent completes the lethal trifecta with its new tools), a snapshot (the HEAD it is
applied at), then apply. An inconsistent change is not applied: the controller escalates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..canonical import canonical_bytes
from .strategy import SWITCHES

FORMAT: Final = "harness.control-config/1"
TEMPLATES: Final = ("default", "focused", "stepwise")
TOOLCHAIN_TOOL: Final = "shell"
DEFAULT_ENTRY: Final[Mapping[str, Any]] = {
    "template": "default",
    "add": [],
    "drop": [],
    "gates_in_prompt": False,
}
ENTRY_MEMBERS: Final = frozenset(DEFAULT_ENTRY)


def initial_document() -> dict[str, Any]:
    return {"format": FORMAT, "agents": {}}


def document_sha256(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(document)).hexdigest()


def document_error(document: Any) -> str | None:
    """Why ``document`` is not a control configuration (None when it is one)."""
    if type(document) is not dict or set(document) != {"format", "agents"}:
        return "an object with exactly format and agents"
    if document["format"] != FORMAT:
        return f"format {FORMAT!r}"
    agents = document["agents"]
    if type(agents) is not dict:
        return "agents: an object"
    for name, entry in agents.items():
        if type(entry) is not dict or set(entry) != ENTRY_MEMBERS:
            return f"agent {name!r}: exactly {sorted(ENTRY_MEMBERS)}"
        if entry["template"] not in TEMPLATES or type(entry["gates_in_prompt"]) is not bool:
            return f"agent {name!r}: a known template and a boolean gates_in_prompt"
        for member in ("add", "drop"):
            tools = entry[member]
            if (
                type(tools) is not list
                or any(type(t) is not str or not t for t in tools)
                or tools != sorted(set(tools))
            ):
                return f"agent {name!r}: {member} a sorted list of distinct tool names"
        if dict(entry) == DEFAULT_ENTRY:
            return f"agent {name!r}: a default entry is left out"
    return None


def entry(document: Mapping[str, Any], agent: str) -> dict[str, Any]:
    found = document["agents"].get(agent)
    return {k: (list(v) if isinstance(v, list) else v) for k, v in (found or DEFAULT_ENTRY).items()}


def effective_tools(tools: Sequence[str], agent_entry: Mapping[str, Any]) -> list[str]:
    """A task's tools under its agent's entry: minus ``drop``, plus ``add``, sorted."""
    return sorted((set(tools) - set(agent_entry["drop"])) | set(agent_entry["add"]))


def apply(
    document: Mapping[str, Any],
    agent: str,
    strategy: str,
    tools: Sequence[str],
    risky: Callable[[str], bool],
) -> dict[str, Any] | None:
    """The document after ``strategy`` for ``agent`` whose tasks use ``tools`` (``risky``:
    whether a tool carries a risk tag), or None when the strategy changes nothing."""
    if strategy not in SWITCHES:
        return None
    new = entry(document, agent)
    if strategy == "template":
        at = TEMPLATES.index(new["template"])
        if at + 1 >= len(TEMPLATES):
            return None
        new["template"] = TEMPLATES[at + 1]
    elif strategy == "toolchain":
        if TOOLCHAIN_TOOL in new["add"] and new["gates_in_prompt"]:
            return None
        new["add"] = sorted(set(new["add"]) | {TOOLCHAIN_TOOL})
        new["drop"] = sorted(set(new["drop"]) - {TOOLCHAIN_TOOL})
        new["gates_in_prompt"] = True
    else:  # scope
        current = effective_tools(tools, new)
        dropping = {tool for tool in current if risky(tool)}
        if not dropping:
            return None
        new["add"] = sorted(set(new["add"]) - dropping)
        new["drop"] = sorted((set(new["drop"]) | dropping) & set(tools))
    agents = dict(document["agents"])
    if new == dict(DEFAULT_ENTRY):
        agents.pop(agent, None)
    else:
        agents[agent] = new
    return {"format": FORMAT, "agents": dict(sorted(agents.items()))}


def impact(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The agents whose entry differs between two documents, sorted."""
    names = set(old["agents"]) | set(new["agents"])
    return sorted(name for name in names if entry(old, name) != entry(new, name))


def classify(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``expand`` when anything is granted, else ``contract`` when anything is taken away,
    else ``neutral`` (a template change)."""
    grants = takes = False
    for name in impact(old, new):
        before, after = entry(old, name), entry(new, name)
        if set(after["add"]) - set(before["add"]) or set(before["drop"]) - set(after["drop"]):
            grants = True
        if set(before["add"]) - set(after["add"]) or set(after["drop"]) - set(before["drop"]):
            takes = True
        if after["gates_in_prompt"] and not before["gates_in_prompt"]:
            grants = True
    if grants:
        return "expand"
    return "contract" if takes else "neutral"


def channel(change: str) -> str:
    return "fast" if change == "contract" else "slow"


def consistent(
    document: Mapping[str, Any],
    agents: Sequence[str],
    tasks: Mapping[str, Sequence[tuple[str, Sequence[str]]]],
    denied: Callable[[str, Sequence[str]], bool],
) -> bool:
    """No task of an affected agent is denied (``denied(adapter, tools)``: the trifecta rule)
    with its effective tools under ``document``. ``tasks``: per agent, (adapter, tools)."""
    for agent in agents:
        agent_entry = entry(document, agent)
        for adapter, tools in tasks.get(agent, ()):
            if denied(adapter, effective_tools(tools, agent_entry)):
                return False
    return True
