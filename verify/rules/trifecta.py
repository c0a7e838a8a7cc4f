"""The lethal-trifecta rule: which tasks are refused before any process starts.

A task's *chain* is its adapter plus its tools. Each member carries risk tags:
``private_data`` (it can read data that must not leave), ``untrusted_input`` (it feeds
attacker-controllable content into the agent) and ``external_comm`` (it can send data out).
A name the matrix does not list has all three. The task is **denied iff the union of the
chain's tags holds all three**.

Tags are lowered only by physics, never by say-so (decision 0018, replacing 0014; 0048 for
the proxy): the *adapter's* ``external_comm`` is dropped only when the sandbox profile the
agent runs in has ``network`` false **and** an empty ``egress`` (no model proxy: a proxied
agent can still send data out through its allow-list, so a missing or non-empty ``egress``
lowers nothing), and its ``private_data`` only when the profile has ``private_mounts``
false; a profile whose ``kind`` is missing or ``"none"`` (no sandbox), or an absent profile,
lowers nothing. Tools keep their tags: what a tool is, not where it runs, decides them.

The matrix and the profile are recorded in the evidence (``run.start.capabilities``, the
``sandbox`` of ``run.start`` and ``agent.spawn``), so the verifier recomputes every decision
with this same function and demands the recorded outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Final, Protocol

PRIVATE_DATA: Final = "private_data"
UNTRUSTED_INPUT: Final = "untrusted_input"
EXTERNAL_COMM: Final = "external_comm"
RISKS: Final = (PRIVATE_DATA, UNTRUSTED_INPUT, EXTERNAL_COMM)
"""The three tags, in the order reasons list them."""
ALL_RISKS: Final = frozenset(RISKS)
MCP_PREFIX: Final = "mcp:"
SECTIONS: Final = ("adapters", "mcp", "tools")


class MatrixLike(Protocol):
    """Tags per adapter, tool and MCP server name (orchestrate's CapabilityMatrix fits)."""

    @property
    def tools(self) -> Mapping[str, Set[str]]: ...
    @property
    def adapters(self) -> Mapping[str, Set[str]]: ...
    @property
    def mcp(self) -> Mapping[str, Set[str]]: ...


@dataclass(frozen=True)
class Matrix:
    """A capability matrix as recorded (``run.start.capabilities``)."""

    tools: Mapping[str, frozenset[str]]
    adapters: Mapping[str, frozenset[str]]
    mcp: Mapping[str, frozenset[str]]


class RuleInputError(ValueError):
    """A recorded rule input does not have the documented shape."""


def matrix_object(matrix: MatrixLike) -> dict[str, dict[str, list[str]]]:
    """The JSON object recorded in ``run.start``: section -> name -> sorted tags."""
    return {
        section: {
            str(name): sorted(str(tag) for tag in tags)
            for name, tags in sorted(getattr(matrix, section).items())
        }
        for section in SECTIONS
    }


def matrix_from_object(obj: Any) -> Matrix:
    """Read a recorded matrix object; anything but the documented shape is RuleInputError."""
    if type(obj) is not dict or sorted(obj) != list(SECTIONS):
        raise RuleInputError(f"capabilities must be an object with exactly {list(SECTIONS)}")
    sections: dict[str, dict[str, frozenset[str]]] = {}
    for section in SECTIONS:
        entries = obj[section]
        if type(entries) is not dict:
            raise RuleInputError(f"capabilities.{section} must be an object")
        out: dict[str, frozenset[str]] = {}
        for name, tags in entries.items():
            if (
                type(tags) is not list
                or any(type(tag) is not str or tag not in ALL_RISKS for tag in tags)
                or tags != sorted(set(tags))
            ):
                raise RuleInputError(
                    f"capabilities.{section}.{name} must be a sorted list of distinct tags "
                    f"({', '.join(sorted(ALL_RISKS))})"
                )
            out[name] = frozenset(tags)
        sections[section] = out
    return Matrix(tools=sections["tools"], adapters=sections["adapters"], mcp=sections["mcp"])


def _tags_of(matrix: MatrixLike, ref: str, *, adapter: bool) -> frozenset[str]:
    if adapter:
        found = matrix.adapters.get(ref)
    elif ref.startswith(MCP_PREFIX):
        found = matrix.mcp.get(ref[len(MCP_PREFIX) :])
    else:
        found = matrix.tools.get(ref)
    return ALL_RISKS if found is None else frozenset(str(tag) for tag in found)


def tool_tags(matrix: MatrixLike, tool: str) -> frozenset[str]:
    """The risk tags of one tool (or ``mcp:<server>``); unknown ones carry all three."""
    return _tags_of(matrix, tool, adapter=False)


def guarantees(sandbox: Mapping[str, Any] | None) -> frozenset[str]:
    """The risks a sandbox profile physically rules out for the process inside it."""
    if sandbox is None:
        return frozenset()
    kind = sandbox.get("kind")
    if type(kind) is not str or not kind or kind == "none":
        return frozenset()
    out = set()
    egress = sandbox.get("egress")
    if sandbox.get("network") is False and type(egress) is list and not egress:
        out.add(EXTERNAL_COMM)
    if sandbox.get("private_mounts") is False:
        out.add(PRIVATE_DATA)
    return frozenset(out)


@dataclass(frozen=True)
class Decision:
    """The rule's verdict for one task.

    ``chain``: members that carry tags after lowering, in chain order (``adapter:<name>``
    first, then the tools as written); ``tags``: their union, sorted; ``reason``: the text a
    ``capability.denied`` record carries (empty when allowed).
    """

    denied: bool
    chain: tuple[str, ...]
    tags: tuple[str, ...]
    reason: str


def decide(
    matrix: MatrixLike,
    adapter: str,
    tools: Sequence[str],
    sandbox: Mapping[str, Any] | None,
) -> Decision:
    """Denied iff the chain's tags, the adapter's lowered by ``sandbox``, hold all three."""
    ruled_out = guarantees(sandbox)
    chain = [(f"adapter:{adapter}", _tags_of(matrix, adapter, adapter=True) - ruled_out)]
    chain.extend((tool, _tags_of(matrix, tool, adapter=False)) for tool in tools)
    union: set[str] = set()
    for _, tags in chain:
        union |= tags
    members = tuple(name for name, tags in chain if tags)
    ordered = tuple(sorted(union))
    if union != ALL_RISKS:
        return Decision(False, members, ordered, "")
    sources = "; ".join(
        f"{tag} via {', '.join(name for name, tags in chain if tag in tags)}" for tag in RISKS
    )
    reason = f"lethal trifecta (private data, untrusted input, external communication): {sources}"
    return Decision(True, members, ordered, reason)
