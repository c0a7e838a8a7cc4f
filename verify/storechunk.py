"""The checks of one chunk of a store, independent of every other chunk.

Why chunks: a store's per-record checks (canonical form, schema, ``seq``, time order, the
record's leaf hash and its HMAC) need nothing from the records before it except two values
the previous line itself states: its time and its MAC. The Merkle tree is made of perfect
subtrees that start at multiples of their own size. So a store cut into chunks that start at
such multiples can be checked chunk by chunk in any process, and the in-order reader
(``storecheck``) joins the verdicts: it checks the two boundary facts, appends each chunk's
subtrees to the running root, and folds the records into the later checks. The verdict says
exactly where the first failure is, so the joined result is the one a single pass over the
records gives, failure for failure (docs/spec/performance.md; tests hold both to the same
reports).

A chunk holds at most ``MAX_CHUNK_RECORDS`` records (a power of two) and starts at a multiple
of its capacity; ``chunk_capacity`` decides it.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from .canonical import canonical_bytes
from .chain import MacChain
from .chunkcore import FOLD_DELETE, FOLD_WRITE, NativeGrammar, load_core, native_grammar
from .errors import ChainError, VerificationError
from .lineage import WRITE_MEMBERS, ArtifactFold, pack_write
from .merkle import prefix_subtrees, subtree_levels
from .records import (
    CAPTURED,
    CanonicalGrammar,
    canonical_grammar,
    canonical_matcher,
    mac_input,
    mac_span,
    match_facts,
    parse_record_line,
)

_Matcher = Callable[[bytes], "re.Match[bytes] | None"]

MAX_CHUNK_RECORDS: Final = 2048
"""Records per chunk at most (a power of two): large enough that a chunk's fixed costs
(a task's transfer, a verdict) vanish per record, small enough to keep memory flat."""
GRAMMAR_MIN_LINES: Final = 256
"""Chunks with fewer lines are checked without the regular expressions (same verdicts)."""
MAX_CHUNK_BYTES: Final = 1 << 20
"""A chunk is cut smaller (to a smaller power of two) rather than exceed this many bytes,
unless one record alone is larger."""


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """What a chunk check needs: the lines, where they start, and the store they belong to.

    ``mac_key`` is the store's derived HMAC key (never the master key), ``prev_mac`` the MAC
    the record before ``start`` states (32 zero bytes before the first record; None when that
    line states none, which only happens when that record fails its own checks first).
    ``cuts`` are the checkpoint sizes in ``(start, start + len(lines)]``. ``artifacts``: fold
    the lineage records into an ``ArtifactFold`` (value: the merged tasks, as
    ``FinalArtifacts`` takes them) instead of leaving them to the reader.
    """

    store: str
    run_id: str
    start: int
    lines: list[bytes]
    mac_key: bytes | None = None
    prev_mac: bytes | None = None
    cuts: tuple[int, ...] = ()
    artifacts: tuple[frozenset[str] | None] | None = None


@dataclass(slots=True)
class ChunkVerdict:
    """The chunk's facts, for the in-order join.

    Records ``start .. start + checked - 1`` passed their own checks (within the chunk: time
    order from its second record on); ``error`` is the first failure, at ``start + checked``:
    the exception's class, its message and the record's ``seq`` when it was read.
    """

    checked: int = 0
    error: tuple[type[VerificationError], str, int | None] | None = None
    first_time: str = ""
    last_time: str = ""
    kinds: Counter[str] = field(default_factory=Counter)
    subtrees: list[tuple[int, bytes]] = field(default_factory=list)
    """Perfect subtrees covering the checked records, largest first."""
    cut_subtrees: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    """For each cut within the checked records: the subtrees covering ``[start, cut)``."""
    mac_mismatch: int | None = None
    """Offset of the first checked record whose MAC does not chain (None: all chain)."""
    artifacts: ArtifactFold | None = None
    """The checked records' effect on the final artifacts, when the task asked for it."""


def chunk_capacity(start: int) -> int:
    """The most records a chunk starting at ``start`` may hold: the largest power of two up to
    ``MAX_CHUNK_RECORDS`` that divides ``start``, so its records form aligned subtrees."""
    capacity = MAX_CHUNK_RECORDS
    while start % capacity:
        capacity >>= 1
    return capacity


def check_chunk(task: ChunkTask) -> ChunkVerdict:
    """Check every record of one chunk, in order, up to the first failure.

    A line the canonical grammar matches (and that is valid UTF-8) is proven canonical and
    schema-valid without being decoded (``records.canonical_grammar``); any other line goes
    through ``parse_record_line``, which decides and names the problem. Where the compiled
    core is present, it proves the lines the grammar would (``chunkcore``), and the lines it
    cannot prove take this same path one by one.
    """
    # A few lines are cheaper decoded than the store's grammars compiled (a small bundle's
    # whole verification would pay for them).
    fast = len(task.lines) >= GRAMMAR_MIN_LINES
    if fast and load_core() is not None:
        folded = _NATIVE_FOLD if task.artifacts and task.store == "lineage" else ()
        native = native_grammar(task.store, task.run_id, task.mac_key, folded)
        if native is not None:
            return _check_chunk_native(task, native)
    verdict = ChunkVerdict()
    store, run_id, start = task.store, task.run_id, task.start
    grammar = canonical_grammar(store, run_id) if fast else _NO_GRAMMAR
    matcher = canonical_matcher(store, run_id) if fast else _no_match
    leaves: list[bytes] = []
    add_leaf = leaves.append
    spans: list[tuple[int, int]] = []
    add_span = spans.append
    kinds = verdict.kinds
    sha256 = hashlib.sha256
    last_time = ""
    fold = _ArtifactsSeen(task.artifacts[0]) if task.artifacts else None
    for offset, line in enumerate(task.lines):
        seq = -1
        try:
            seq, time, kind, span, match, body = _line_facts(
                line, matcher, grammar, store, run_id, fast
            )
            _check_order(seq, start + offset, time, last_time)
            last_time = time
        except VerificationError as exc:
            verdict.error = (type(exc), str(exc), seq if seq >= 0 else None)
            break
        if not offset:
            verdict.first_time = time
        add_leaf(sha256(b"\x00" + line).digest())
        add_span(span)
        kinds[kind] += 1
        if fold is not None and kind in _ARTIFACT_PREFIX:
            if match is not None:
                fold.matched(kind, seq, match)
            else:
                fold.decoded(kind, seq, body)
    checked = verdict.checked = len(leaves)
    if fold is not None:
        verdict.artifacts = fold.summary()
    if not checked:
        return verdict
    verdict.last_time = last_time
    _subtrees(verdict, task, subtree_levels(leaves), checked)
    if task.mac_key is not None:
        verdict.mac_mismatch = _first_mac_mismatch(task, spans)
    return verdict


def _line_facts(
    line: bytes,
    matcher: _Matcher,
    grammar: CanonicalGrammar,
    store: str,
    run_id: str,
    fast: bool,
) -> tuple[int, str, str, tuple[int, int], re.Match[bytes] | None, Mapping[str, Any]]:
    """One line's own checks: ``(seq, time, kind, MAC span, grammar match, decoded body)``
    (the match None when the line was decoded, the body empty when it matched)."""
    match = matcher(line)
    if match is not None:  # proven canonical and valid without decoding it
        seq, time, kind, span = match_facts(grammar, match)
        return seq, time, kind, span, match, _NO_BODY
    record = parse_record_line(line, store, run_id, fast=fast)
    return record.seq, record.time, record.kind, mac_span(line), None, record.body


def _check_order(seq: int, expected: int, time: str, last_time: str) -> None:
    if seq != expected:
        raise ChainError(
            f"seq {seq} where {expected} was expected (record deleted, duplicated or reordered)"
        )
    if time < last_time:
        raise ChainError(f"time {time} is earlier than the previous record")


def _subtrees(
    verdict: ChunkVerdict, task: ChunkTask, levels: Sequence[Sequence[bytes]], checked: int
) -> None:
    verdict.subtrees = prefix_subtrees(levels, checked)
    for cut in task.cuts:
        if cut - task.start <= checked:
            verdict.cut_subtrees[cut] = prefix_subtrees(levels, cut - task.start)


def _check_chunk_native(task: ChunkTask, native: NativeGrammar) -> ChunkVerdict:
    """``check_chunk`` with the compiled core: it proves runs of lines and stops at the first
    it cannot (``_chunkcore.check``); that line takes the pure path's own checks here
    (``_line_facts``, the order, its leaf and MAC), and the core resumes after it."""
    core = load_core()
    assert core is not None
    verdict = ChunkVerdict()
    store, run_id, start, lines = task.store, task.run_id, task.start, task.lines
    count = len(lines)
    leaves = bytearray(32 * count)
    counts = array("I", bytes(4 * len(native.kinds)))
    fold = _ArtifactsSeen(task.artifacts[0]) if task.artifacts else None
    core_fold = None
    if fold is not None and "artifact.write" in native.kinds:
        fold.native(core, native, lines, start)
        core_fold = (fold.last, fold.writes, fold.merged)
    kinds = verdict.kinds
    chaining = task.mac_key is not None and task.prev_mac is not None
    prev_mac = task.prev_mac if chaining else None
    mismatch: int | None = None
    last_time = ""
    first = 0
    while True:
        stop, bad, first_time, seg_last, seg_mac = core.check(
            lines,
            first,
            native.prepared,
            start + first,
            last_time.encode("ascii"),
            prev_mac if mismatch is None else None,
            leaves,
            counts,
            core_fold,
        )
        if stop > first:
            if not first:
                verdict.first_time = first_time.decode("ascii")
            last_time = seg_last.decode("ascii")
            if chaining:
                prev_mac = seg_mac
            if bad >= 0 and mismatch is None:
                mismatch = bad
        if stop == count:
            break
        line = lines[stop]
        seq = -1
        try:
            # decoded: the grammar's regular expression would refuse it as the automaton did
            # (or prove it, only for the order check to fail), so it is not even compiled
            seq, time, kind, span, _, body = _line_facts(
                line, _no_match, _NO_GRAMMAR, store, run_id, True
            )
            _check_order(seq, start + stop, time, last_time)
        except VerificationError as exc:
            verdict.error = (type(exc), str(exc), seq if seq >= 0 else None)
            break
        if not stop:
            verdict.first_time = time
        last_time = time
        leaves[32 * stop : 32 * stop + 32] = hashlib.sha256(b"\x00" + line).digest()
        kinds[kind] += 1
        if fold is not None and kind in _ARTIFACT_PREFIX:
            fold.decoded(kind, seq, body)  # decoded, never matched (above)
        if chaining and mismatch is None:
            chain = MacChain(task.mac_key or b"", prev_mac or b"")
            if chain.chains(mac_input(line, span), line[span[0] : span[1]].decode("ascii")):
                prev_mac = chain.prev
            else:
                mismatch = stop
        first = stop + 1
    checked = verdict.checked = stop
    for index, number in enumerate(counts):
        if number:
            kinds[native.kinds[index]] += number
    if fold is not None:
        verdict.artifacts = fold.summary()
    if not checked:
        return verdict
    verdict.last_time = last_time
    levels = [_PackedLevel(level) for level in core.levels(leaves, checked)]
    _subtrees(verdict, task, levels, checked)
    if task.mac_key is not None:
        verdict.mac_mismatch = 0 if task.prev_mac is None else mismatch
    return verdict


class _PackedLevel(Sequence[bytes]):
    """One level of ``_chunkcore.levels`` (32-byte roots back to back) as a sequence of
    roots, for ``prefix_subtrees``."""

    __slots__ = ("packed",)

    def __init__(self, packed: bytes) -> None:
        self.packed = packed

    def __len__(self) -> int:
        return len(self.packed) // 32

    def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.packed[32 * index : 32 * index + 32]


_ARTIFACT_PREFIX: Final = CAPTURED["lineage"]
_NATIVE_FOLD: Final = (("artifact.delete", FOLD_DELETE), ("artifact.write", FOLD_WRITE))
"""The lineage kinds ``_ArtifactsSeen`` folds, as the compiled core takes them."""


class _ArtifactsSeen:
    """A chunk's lineage writes and deletes, kept as the bytes the records spell.

    A canonical line spells each string one way only, so a path's JSON text is a faithful key,
    and a task's is compared with the merged tasks' texts. Only each path's last write is read
    out (``summary``), and then as the JSON texts of its members: the reader decodes the few
    it reports, never the writes that later ones replace.
    """

    __slots__ = ("last", "merged", "source", "writes")

    def __init__(self, merged_tasks: frozenset[str] | None) -> None:
        self.merged = None if merged_tasks is None else {canonical_bytes(t) for t in merged_tasks}
        self.last: dict[bytes, tuple[int, _Source] | int | None] = {}
        self.source: tuple[ModuleType, bytes, list[bytes], int] | None = None
        self.writes: dict[bytes, int] = {}

    def matched(self, kind: str, seq: int, match: re.Match[bytes]) -> None:
        task_group, path_group = _TASK_PATH_GROUPS[kind]
        if self.merged is not None and match.group(task_group) not in self.merged:
            return
        path = match.group(path_group)
        if kind == "artifact.write":
            self.writes[path] = self.writes.get(path, 0) + 1
            self.last[path] = (seq, match)
        else:
            self.last[path] = None

    def native(
        self, core: ModuleType, native: NativeGrammar, lines: list[bytes], start: int
    ) -> None:
        """Let the compiled core fold the lines it proves: it sets ``last[path]`` to the
        line's offset in ``lines`` (a write) or None, and counts writes, as ``matched`` does;
        ``summary`` packs such a write's members from its line."""
        write = native.members[native.kinds.index("artifact.write")]
        self.source = (core, bytes(write.index(name) for name in WRITE_MEMBERS), lines, start)

    def decoded(self, kind: str, seq: int, body: Mapping[str, Any]) -> None:
        if self.merged is not None and canonical_bytes(body["task"]) not in self.merged:
            return
        path = canonical_bytes(body["path"])
        if kind == "artifact.write":
            self.writes[path] = self.writes.get(path, 0) + 1
            self.last[path] = (seq, body)
        else:
            self.last[path] = None

    def summary(self) -> ArtifactFold:
        fold = ArtifactFold()
        writes, paths = self.writes, fold.paths
        for path, last in self.last.items():
            if last is None:
                paths[path] = (writes.get(path, 0), None)
            elif isinstance(last, int):  # a line the compiled core folded
                assert self.source is not None
                core, members, lines, start = self.source
                paths[path] = (writes[path], (start + last, core.pack(lines[last], members)))
            else:
                paths[path] = (writes.get(path, 0), _packed(*last))
        return fold


_WRITE_GROUPS: Final = tuple("w_" + name for name in WRITE_MEMBERS)
_TASK_PATH_GROUPS: Final = {
    kind: (prefix + "task", prefix + "path") for kind, prefix in _ARTIFACT_PREFIX.items()
}


_Source = re.Match[bytes] | Mapping[str, Any]


def _packed(seq: int, source: _Source) -> tuple[int, bytes]:
    if isinstance(source, re.Match):
        return seq, pack_write(source.group(*_WRITE_GROUPS))
    return seq, pack_write([canonical_bytes(source[name]) for name in WRITE_MEMBERS])


def _no_match(line: bytes) -> None:
    return None


_NO_BODY: Final[Mapping[str, Any]] = {}
_NO_GRAMMAR: Final = CanonicalGrammar(re.compile(rb"(?!)"), {})
"""For chunks that decode their lines: a grammar nothing matches."""


def _first_mac_mismatch(task: ChunkTask, spans: list[tuple[int, int]]) -> int | None:
    """Offset of the first of the checked records whose MAC does not chain, or None: the
    store's ``MacChain`` from the MAC the line before the chunk states, over each line's
    ``mac_input`` at its ``span``."""
    if task.prev_mac is None:
        return 0
    chain = MacChain(task.mac_key or b"", task.prev_mac)
    for offset, (line, span) in enumerate(zip(task.lines, spans, strict=False)):
        claimed = line[span[0] : span[1]].decode("ascii")
        if not chain.chains(mac_input(line, span), claimed):
            return offset
    return None
