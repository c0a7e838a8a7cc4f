"""The canonical grammar of a store as a deterministic automaton, for the optional native core.

Why: ``records.canonical_grammar`` proves a line canonical and schema-valid with one regular
expression, and CPython's backtracking engine spends about 6 ns a byte on it. The same
language as a DFA table is walked at about a nanosecond a byte by ``_chunkcore`` (the
optional compiled core). The table is built *from the grammar's own regular expressions*, as
Python's ``re`` parser reads them, so the rule still lives once, in ``records``; this module
only changes its representation (Thompson's construction, then the subset construction, over
byte classes). It refuses, rather than approximates, any construct outside the plain regular
subset the grammar uses (look-arounds, anchors, back-references, flags): then the native core
is not used for that store and the regular expression decides, as it does without the core.

Each kind's alternative is compiled with its own accepting tag, so the state a line ends in
names its kind, as ``match.lastindex`` does for the regular expression; a state two kinds
would both accept is not accepting (never the case: each alternative spells its kind).
"""

from __future__ import annotations

import functools
from array import array
from dataclasses import dataclass
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any, Final

from .records import canonical_grammar

__all__ = ["GrammarDfa", "UnsupportedPatternError", "build_dfa", "store_dfa"]

MAX_STATES: Final = 65535
"""States are numbered in 16 bits (0 is the dead state); a larger automaton is refused."""
NO_KIND: Final = 255
"""``accept[state]`` of a state that accepts no kind."""
_ALL: Final = (1 << 256) - 1


class UnsupportedPatternError(ValueError):
    """The pattern uses a construct the automaton does not model (or is too large)."""


@dataclass(frozen=True, slots=True)
class GrammarDfa:
    """A byte-level DFA: ``table[state * classes + byte_class[b]]`` is the next state.

    State 0 is dead (every byte leads back to it), ``start`` the initial state; ``accept``
    gives, per state, the index into ``kinds`` of the kind a line ending there spells, or
    ``NO_KIND``.
    """

    byte_class: bytes
    classes: int
    table: bytes
    """``uint16`` entries in native byte order."""
    accept: bytes
    start: int
    kinds: tuple[str, ...]

    def match(self, line: bytes) -> str | None:
        """The kind ``line`` spells if the automaton accepts it, else None (the reference
        walk, in Python: what the native core computes, and what the tests hold it to)."""
        table = array("H")
        table.frombytes(self.table)
        byte_class, classes = self.byte_class, self.classes
        state = self.start
        for byte in line:
            state = table[state * classes + byte_class[byte]]
            if not state:
                return None
        kind = self.accept[state]
        return None if kind == NO_KIND else self.kinds[kind]


class _Nfa:
    """Thompson NFA: per state, its byte-set edges (256-bit masks) and epsilon edges."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int]]] = []
        self.eps: list[list[int]] = []
        self.tag: dict[int, int] = {}

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def sequence(self, items: Any, start: int) -> int:
        for op, arg in items:
            start = self.item(op, arg, start)
        return start

    def item(self, op: Any, arg: Any, start: int) -> int:
        if op is sre.LITERAL:
            return self.byte_edge(start, 1 << arg)
        if op is sre.NOT_LITERAL:
            return self.byte_edge(start, _ALL ^ (1 << arg))
        if op is sre.IN:
            return self.byte_edge(start, _class_mask(arg))
        if op is sre.ANY:
            return self.byte_edge(start, _ALL ^ (1 << ord("\n")))
        if op is sre.SUBPATTERN:
            _group, add_flags, del_flags, items = arg
            if add_flags or del_flags:
                raise UnsupportedPatternError("inline flags")
            return self.sequence(items, start)
        if op is sre.BRANCH:
            end = self.state()
            for items in arg[1]:
                branch = self.state()
                self.eps[start].append(branch)
                self.eps[self.sequence(items, branch)].append(end)
            return end
        if op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            low, high, items = arg
            for _ in range(low):
                start = self.sequence(items, start)
            if high is sre.MAXREPEAT:
                loop = self.state()
                self.eps[start].append(loop)
                self.eps[self.sequence(items, loop)].append(loop)
                return loop
            for _ in range(high - low):
                end = self.state()
                self.eps[start].append(end)
                self.eps[self.sequence(items, start)].append(end)
                start = end
            return start
        raise UnsupportedPatternError(f"regular-expression construct {op}")

    def byte_edge(self, start: int, mask: int) -> int:
        end = self.state()
        self.edges[start].append((mask, end))
        return end


def _class_mask(items: Any) -> int:
    mask = 0
    negate = False
    for op, arg in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            mask |= 1 << arg
        elif op is sre.RANGE:
            low, high = arg
            mask |= ((1 << (high + 1)) - 1) ^ ((1 << low) - 1)
        else:
            raise UnsupportedPatternError(f"character-class member {op}")
    return _ALL ^ mask if negate else mask


def build_dfa(alternatives: tuple[tuple[str, bytes], ...]) -> GrammarDfa:
    """The DFA of the union of ``alternatives`` (kind, full-match pattern), each accepting
    state tagged with its kind."""
    nfa = _Nfa()
    start = nfa.state()
    kinds = tuple(kind for kind, _ in alternatives)
    for index, (_kind, pattern) in enumerate(alternatives):
        entry = nfa.state()
        nfa.eps[start].append(entry)
        parsed = sre_parse.parse(pattern)
        if parsed.state.flags:  # global flags: (?i), (?s), (?m), (?x) ...
            raise UnsupportedPatternError("flags")
        nfa.tag[nfa.sequence(parsed, entry)] = index
    byte_class, class_masks = _byte_classes(nfa)
    classes = len(class_masks)
    # each edge as the set of classes it admits (a bit per class)
    edge_classes = [
        [(sum(1 << c for c, m in enumerate(class_masks) if m & mask), end) for mask, end in out]
        for out in nfa.edges
    ]
    closure = _closures(nfa)
    first = closure[start]
    numbers: dict[frozenset[int], int] = {first: 1}
    order = [first]
    table = array("H", [0] * (2 * classes))
    accept = bytearray([NO_KIND, NO_KIND])
    for current in order:  # grows while it is walked
        tags = {nfa.tag[s] for s in current if s in nfa.tag}
        accept[numbers[current]] = tags.pop() if len(tags) == 1 else NO_KIND
        row = numbers[current] * classes
        targets: list[set[int]] = [set() for _ in range(classes)]
        for s in current:
            for admitted, end in edge_classes[s]:
                reached = closure[end]
                bits = admitted
                while bits:
                    low = bits & -bits
                    targets[low.bit_length() - 1].update(reached)
                    bits ^= low
        for cls, target in enumerate(targets):
            if not target:
                continue
            key = frozenset(target)
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(order) + 1
                if number > MAX_STATES:
                    raise UnsupportedPatternError(f"more than {MAX_STATES} states")
                order.append(key)
                table.extend([0] * classes)
                accept.append(NO_KIND)
            table[row + cls] = number
    return GrammarDfa(bytes(byte_class), classes, table.tobytes(), bytes(accept), 1, kinds)


def _byte_classes(nfa: _Nfa) -> tuple[bytearray, list[int]]:
    """Partition the 256 byte values into classes no edge tells apart."""
    masks = {mask for out in nfa.edges for mask, _ in out}
    signature: dict[tuple[bool, ...], int] = {}
    byte_class = bytearray(256)
    class_masks: list[int] = []
    ordered = sorted(masks)
    for byte in range(256):
        key = tuple(bool(mask >> byte & 1) for mask in ordered)
        cls = signature.get(key)
        if cls is None:
            cls = signature[key] = len(class_masks)
            class_masks.append(0)
        byte_class[byte] = cls
        class_masks[cls] |= 1 << byte
    return byte_class, class_masks


def _closures(nfa: _Nfa) -> list[frozenset[int]]:
    """Each state's epsilon closure (itself included)."""
    out: list[frozenset[int]] = []
    for state in range(len(nfa.eps)):
        seen = {state}
        stack = [state]
        while stack:
            for nxt in nfa.eps[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        out.append(frozenset(seen))
    return out


@functools.lru_cache(maxsize=8)  # a run's stores are checked one after another: a few
def store_dfa(store: str, run: str) -> GrammarDfa | None:
    """The DFA of ``canonical_grammar(store, run)``, or None when it cannot be built (then
    the regular expression decides)."""
    try:
        return build_dfa(canonical_grammar(store, run).alternatives)
    except (UnsupportedPatternError, RecursionError):
        return None
