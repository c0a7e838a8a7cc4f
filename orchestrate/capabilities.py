"""The capability matrix: which risks each adapter and tool brings, and the trifecta check.

Every adapter, tool and MCP server carries a set of tags:

* ``private_data`` (PRIVATE_DATA) — it can read data that must not leave (secrets, credentials,
  private documents);
* ``untrusted_input`` (UNTRUSTED_INPUT) — it feeds content an attacker may control into the
  agent's context (web pages, issue text, command output);
* ``external_comm`` (EXTERNAL_COMM) — it can send data out (network requests, messages).

A task's *chain* is its adapter plus its tools. When the union of the chain's tags holds all
three (the "lethal trifecta": an injected instruction can read private data and send it out),
``check_task`` returns a ``Denial`` and the runtime refuses the task before any process starts
(FSM state DENIED). Two tags are allowed. Anything not in the matrix gets all three tags, so an
unknown tool can never complete a chain silently. The decision itself is the verifier's rule
(``harness.verify.rules.trifecta``): the runtime records the effective matrix in ``run.start``
and the verifier re-decides every task from it.

An adapter's tags are lowered only by its sandbox (decision 0018): ``external_comm`` is dropped
when the agent's recorded sandbox profile has no network **and** an empty ``egress`` (a
proxied agent still reaches its model routes through the recording proxy, decision 0048: its
external channel is that allow-list, recorded in the profile), ``private_data`` when it has no
private mounts (the operator's home, the state folder, the keys). The runtime decides each
spawn with the profile that spawn really gets (``egress`` filled for a proxied batch,
``harness.orchestrate.runner.job``), promotion with the run's default (``egress`` empty).
A configuration file may add tags to an adapter but never drop one the built-in matrix gives
it (for an unknown adapter: all three).

Built-in defaults (``DEFAULT_MATRIX``; a configuration file replaces them per name):

=====================  ===========================================  =======================
adapter / tool          tags                                         why
=====================  ===========================================  =======================
adapter ``scripted``    none                                         deterministic, no model
adapter ``command``     all three                                    runs an arbitrary program
adapters ``claude``,    all three                                    real CLIs browse, read
``codex``, ``gemini``,                                               files and call out
``aider``, ``opencode``
tool ``edit``           none                                         writes inside the task
                                                                     worktree only
tool ``shell``          untrusted_input, external_comm               output is untrusted; it
                                                                     can open connections
tools ``web``,          untrusted_input, external_comm               fetches pages
``fetch``, ``browser``
tool ``secrets``        private_data                                 reads credentials
any other / ``mcp:*``   all three                                    unknown
=====================  ===========================================  =======================

``shell`` is not tagged ``private_data``: the runtime starts agents in a worktree with no
credentials in their environment, so private data enters a task only through a tool tagged
``private_data``. Where agents run with access to private files or credentials, configure
``[tools.shell] tags = ["private_data", "untrusted_input", "external_comm"]``.

Configuration file (``capabilities.toml``, TOML 1.0; ``load_capabilities``)::

    [tools.shell]
    tags = ["untrusted_input"]          # replaces the built-in entry for "shell"

    [adapters.scripted]
    tags = ["untrusted_input"]          # adapters: add tags only (the sandbox lowers them)

    [mcp.github]                        # referenced by tasks as tool "mcp:github"
    tags = ["untrusted_input", "external_comm"]

Only the tables ``tools``, ``adapters`` and ``mcp`` are allowed; each entry is a table with
exactly one key, ``tags``: an array of distinct tag names (possibly empty). Entry names match
``[A-Za-z0-9][A-Za-z0-9._-]{0,63}``. Anything else is a ``CapabilityError`` naming the key path.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from harness.verify.rules import trifecta

from .model import TaskSpec
from .planfields import MCP_PREFIX, NAME_RE


class Tag(StrEnum):
    PRIVATE_DATA = "private_data"
    UNTRUSTED_INPUT = "untrusted_input"
    EXTERNAL_COMM = "external_comm"


ALL_TAGS: Final = frozenset(Tag)
NO_TAGS: Final[frozenset[Tag]] = frozenset()
_WEB: Final = frozenset({Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM})
_SECTIONS: Final = ("tools", "adapters", "mcp")


class CapabilityError(ValueError):
    """A capability configuration is not valid; the message names the key path."""

    def __init__(self, key: str, message: str, *, source: str | None = None) -> None:
        self.key = key
        self.message = message
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class CapabilityMatrix:
    """Tags per adapter, tool and MCP server name; a name not listed has all three tags."""

    tools: Mapping[str, frozenset[Tag]] = field(default_factory=dict)
    adapters: Mapping[str, frozenset[Tag]] = field(default_factory=dict)
    mcp: Mapping[str, frozenset[Tag]] = field(default_factory=dict)

    def adapter_tags(self, name: str) -> frozenset[Tag]:
        return self.adapters.get(name, ALL_TAGS)

    def tool_tags(self, ref: str) -> frozenset[Tag]:
        """Tags of a task's tool reference: a tool name, or ``mcp:<server>``."""
        if ref.startswith(MCP_PREFIX):
            return self.mcp.get(ref[len(MCP_PREFIX) :], ALL_TAGS)
        return self.tools.get(ref, ALL_TAGS)


DEFAULT_MATRIX: Final = CapabilityMatrix(
    tools={
        "edit": NO_TAGS,
        "shell": _WEB,
        "web": _WEB,
        "fetch": _WEB,
        "browser": _WEB,
        "secrets": frozenset({Tag.PRIVATE_DATA}),
    },
    adapters={
        "scripted": NO_TAGS,
        "command": ALL_TAGS,
        "claude": ALL_TAGS,
        "codex": ALL_TAGS,
        "gemini": ALL_TAGS,
        "aider": ALL_TAGS,
        "opencode": ALL_TAGS,
    },
    mcp={},
)


@dataclass(frozen=True)
class Denial:
    """Why a task is refused before spawn.

    ``tools`` is the part of the chain that carries tags, in chain order: the adapter as
    ``adapter:<name>``, then the task's tools as written (``mcp:<server>`` for MCP servers).
    ``tags`` is the union of their tags (sorted by value).
    """

    task: str
    tools: tuple[str, ...]
    tags: tuple[str, ...]
    reason: str


def check_task(
    task: TaskSpec, matrix: CapabilityMatrix, sandbox: Mapping[str, Any] | None = None
) -> Denial | None:
    """A Denial if the task's chain holds all three tags, else None.

    The decision is the verifier's rule (``harness.verify.rules.trifecta.decide``): the
    adapter's tags are lowered only by what ``sandbox`` (the profile the agent runs in)
    physically guarantees; None lowers nothing.
    """
    decision = trifecta.decide(matrix, task.adapter, task.tools, sandbox)
    if not decision.denied:
        return None
    return Denial(task=task.id, tools=decision.chain, tags=decision.tags, reason=decision.reason)


def matrix_object(matrix: CapabilityMatrix) -> dict[str, dict[str, list[str]]]:
    """The effective matrix as recorded in ``run.start.capabilities``."""
    return trifecta.matrix_object(matrix)


def parse_capabilities(
    data: Mapping[str, Any], *, base: CapabilityMatrix = DEFAULT_MATRIX
) -> CapabilityMatrix:
    """Check a decoded configuration; its entries replace those of ``base`` name by name."""
    if not isinstance(data, Mapping):
        raise CapabilityError("", "configuration must be a table")
    merged: dict[str, dict[str, frozenset[Tag]]] = {
        "tools": dict(base.tools),
        "adapters": dict(base.adapters),
        "mcp": dict(base.mcp),
    }
    for section, entries in data.items():
        if section not in _SECTIONS:
            raise CapabilityError(str(section), f"unknown key (allowed: {', '.join(_SECTIONS)})")
        if not isinstance(entries, Mapping):
            raise CapabilityError(section, "must be a table")
        for name, entry in entries.items():
            key = f"{section}.{_quote(str(name))}"
            if not NAME_RE.fullmatch(str(name)):
                raise CapabilityError(key, f"{name!r} is not a valid name ({NAME_RE.pattern})")
            tags = _parse_entry(entry, key)
            if section == "adapters":
                floor = base.adapter_tags(str(name))
                dropped = sorted(tag.value for tag in floor - tags)
                if dropped:
                    raise CapabilityError(
                        f"{key}.tags",
                        f"cannot drop {', '.join(dropped)} from an adapter: only the recorded "
                        "sandbox lowers an adapter's risks (decision 0018)",
                    )
            merged[section][str(name)] = tags
    return CapabilityMatrix(tools=merged["tools"], adapters=merged["adapters"], mcp=merged["mcp"])


def _quote(name: str) -> str:
    """A TOML key as written in a dotted key path (quoted unless bare)."""
    if name and all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_entry(entry: object, key: str) -> frozenset[Tag]:
    if not isinstance(entry, Mapping):
        raise CapabilityError(key, "must be a table with a tags array")
    for name in entry:
        if name != "tags":
            raise CapabilityError(f"{key}.{name}", "unknown key (allowed: tags)")
    if "tags" not in entry:
        raise CapabilityError(f"{key}.tags", "required key is missing")
    tags = entry["tags"]
    if not isinstance(tags, list | tuple):
        raise CapabilityError(f"{key}.tags", "must be an array of tag names")
    out: set[Tag] = set()
    allowed = ", ".join(tag.value for tag in Tag)
    for i, tag in enumerate(tags):
        item_key = f"{key}.tags[{i}]"
        if not isinstance(tag, str) or tag not in {t.value for t in Tag}:
            raise CapabilityError(item_key, f"unknown tag {tag!r} (allowed: {allowed})")
        if Tag(tag) in out:
            raise CapabilityError(item_key, f"tag {tag!r} repeats")
        out.add(Tag(tag))
    return frozenset(out)


def load_capabilities(path: Path, *, base: CapabilityMatrix = DEFAULT_MATRIX) -> CapabilityMatrix:
    """Read ``capabilities.toml`` over ``base``; errors are ``CapabilityError`` naming the file."""
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CapabilityError("", f"not valid UTF-8 at byte {exc.start}", source=source) from None
    except tomllib.TOMLDecodeError as exc:
        raise CapabilityError("", f"invalid TOML: {exc}", source=source) from None
    try:
        return parse_capabilities(data, base=base)
    except CapabilityError as exc:
        raise CapabilityError(exc.key, exc.message, source=source) from None
