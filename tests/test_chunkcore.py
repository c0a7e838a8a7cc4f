"""The optional compiled core of a chunk check, held to the pure path it replaces (issue 14).

Three layers, each against its one definition:

* ``grammardfa``: the automaton accepts exactly the lines the canonical grammar's regular
  expression fully matches, naming the same kind (real lines of every store, byte edits of
  them, small patterns against random strings).
* ``_chunkcore``: Merkle levels and member packing against ``merkle.subtree_levels`` and
  ``lineage.pack_write``; what it refuses (inconsistent tables, short buffers) it refuses
  with an error, never a wrong answer.
* ``check_chunk`` with the core: the same verdict as without it (``ChunkVerdict`` field by
  field) on edited chunks: byte edits anywhere, UTF-8 of every kind, reordered, deleted and
  duplicated records, from any start, keyed or not, with the lineage fold or not.

The whole-bundle equivalence (reports and exit codes) is in test_parallel_verify.py, which
runs every case with and without the core.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.orchestrate.demo import run_demo
from harness.receipts.keys import load_keys
from harness.verify import chunkcore, storecheck, storechunk
from harness.verify.chain import GENESIS_MAC, derive_store_key
from harness.verify.errors import ChainError
from harness.verify.grammardfa import store_dfa
from harness.verify.lineage import WRITE_MEMBERS, pack_write
from harness.verify.merkle import leaf_hash, subtree_levels
from harness.verify.records import canonical_grammar, split_mac

from .corpus import Bundle

CORE = chunkcore._import_core()
needs_core = pytest.mark.skipif(CORE is None, reason="the compiled core is not built here")
MASTER = bytes(range(32))
RUN = "demo-run"
STORES = ("audit", "lineage", "replay", "control", "events")


def test_the_core_is_built_where_it_is_required() -> None:
    """CI builds the core (``.ci/run`` installs OpenSSL's headers and sets this): a build that
    silently fell back to the pure path there would leave the core untested."""
    if os.environ.get("HARNESS_REQUIRE_CORE") == "1":
        assert CORE is not None
    assert (chunkcore.load_core() is None) is (CORE is None or not chunkcore.ENABLED)


@dataclass(frozen=True)
class Demo:
    """The stores of a real runtime run (``harness demo``): every kind it records, typed and
    free-form, interleaved as a run writes them, and the HMAC key they chain under."""

    lines: dict[str, list[bytes]]
    master: bytes


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    result = run_demo(tmp_path_factory.mktemp("core") / "demo")
    keys = load_keys(result.keys_dir)
    bundle = Bundle.from_tar(result.bundle.read_bytes(), keys)
    lines = {store: bundle.store(store, RUN) for store in STORES}
    lines = {store: found for store, found in lines.items() if found}
    assert sum(map(len, lines.values())) > 200 and len(lines) >= 4
    return Demo(lines, keys.hmac_master)


@pytest.fixture(scope="module")
def store_lines(demo: Demo) -> dict[str, list[bytes]]:
    return demo.lines


def _regex_kind(store: str, line: bytes) -> str | None:
    grammar = canonical_grammar(store, RUN)
    match = grammar.pattern.fullmatch(line)
    return None if match is None else grammar.kinds[match.lastindex or 0]


# ------------------------------------------------------------------------------- automaton


def test_the_automaton_is_the_grammar_on_every_real_line(
    store_lines: dict[str, list[bytes]],
) -> None:
    accepted = 0
    for store, lines in store_lines.items():
        dfa = store_dfa(store, RUN)
        assert dfa is not None, store
        for line in lines:
            kind = _regex_kind(store, line)
            assert dfa.match(line) == kind, (store, line)
            accepted += kind is not None
    assert accepted >= 4


_EDIT_BYTES = b' "\\,:{}[]0123456789abcdefnrtu-\x00\x1f\x7f\xc3\xa9\xff'


def _edited(line: bytes, data: st.DataObject) -> bytes:
    edited = bytearray(line)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, max(len(edited) - 1, 0)))
        edit = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.sampled_from(_EDIT_BYTES))
        if edit == "replace" and edited:
            edited[position] = byte
        elif edit == "insert":
            edited.insert(position, byte)
        elif len(edited) > 1:
            del edited[position]
    return bytes(edited)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_automaton_and_the_grammar_agree_on_edited_lines(
    store_lines: dict[str, list[bytes]], data: st.DataObject
) -> None:
    store = data.draw(st.sampled_from(sorted(store_lines)))
    line = _edited(data.draw(st.sampled_from(store_lines[store])), data)
    dfa = store_dfa(store, RUN)
    assert dfa is not None
    kind = _regex_kind(store, line)
    event(f"grammar {'accepts' if kind else 'refuses'}")
    assert dfa.match(line) == kind


# ------------------------------------------------------------------------ the core's parts


@needs_core
@given(st.lists(st.binary(min_size=32, max_size=32), max_size=70))
def test_levels_are_the_merkle_levels(leaves: list[bytes]) -> None:
    assert CORE is not None
    packed = CORE.levels(b"".join(leaves), len(leaves))
    expected = subtree_levels(leaves) if leaves else [[]]
    assert packed == [b"".join(level) for level in expected]


@needs_core
def test_pack_is_pack_write(store_lines: dict[str, list[bytes]]) -> None:
    assert CORE is not None
    from harness.verify.records import parse_record_line

    names = sorted(
        parse_record_line(store_lines["lineage"][0], "lineage", RUN).body  # a write
    )
    positions = bytes(names.index(name) for name in WRITE_MEMBERS)
    match = canonical_grammar("lineage", RUN).pattern.fullmatch
    for line in store_lines["lineage"]:
        found = match(line)
        if found is None or found.lastgroup is None or "w_path" not in found.groupdict():
            continue
        if found.group("w_path") is None:
            continue
        groups = found.group(*("w_" + name for name in WRITE_MEMBERS))
        assert CORE.pack(line, positions) == pack_write(groups)
    with pytest.raises(ValueError, match="body members"):
        CORE.pack(b'{"body":{"a":1},"x":2}', b"\x00")


def _prepared_args(**change: Any) -> tuple[Any, ...]:
    native = chunkcore.native_grammar("audit", RUN, None, ())
    assert native is not None
    dfa = store_dfa("control", RUN)
    assert dfa is not None
    offsets = array("H")
    offsets.frombytes(dfa.table)
    args: dict[str, Any] = {
        "table": array("I", (s * dfa.classes for s in offsets)).tobytes(),
        "byte_class": dfa.byte_class,
        "accept": dfa.accept,
        "classes": dfa.classes,
        "start": dfa.start,
        "folds": bytes(4 * len(dfa.kinds)),
        "seq": 4,
        "time": 6,
        "mac": 2,
        "key": None,
        "max_line": 1 << 20,
    }
    args.update(change)
    return tuple(args.values())


@needs_core
def test_prepare_refuses_inconsistent_tables() -> None:
    assert CORE is not None
    CORE.prepare(*_prepared_args())
    table = bytearray(_prepared_args()[0])
    bad_entry = bytes(table[:-4]) + (len(table)).to_bytes(4, "little")
    bad_class = bytes([255]) + _prepared_args()[1][1:]
    not_dead = bytes([4]) + bytes(table[1:])
    for change in (
        {"table": bad_entry},
        {"table": bytes(table[:-4])},
        {"byte_class": bad_class},
        {"byte_class": b"\x00" * 255},
        {"table": not_dead},
        {"accept": b"\x07" + _prepared_args()[2][1:]},
        {"start": 0},
        {"folds": b"\x01\x02\x00\x01" * (len(_prepared_args()[5]) // 4)},
        {"mac": 0},
        {"seq": 9},
    ):
        with pytest.raises(ValueError):
            CORE.prepare(*_prepared_args(**change))


@needs_core
def test_check_refuses_short_buffers_and_a_mac_without_key(
    store_lines: dict[str, list[bytes]],
) -> None:
    assert CORE is not None
    lines = store_lines["audit"]
    native = chunkcore.native_grammar("audit", RUN, None, ())
    assert native is not None
    counts = array("I", bytes(4 * len(native.kinds)))
    args = (lines, 0, native.prepared, 0, b"")
    with pytest.raises(ValueError, match="leaves"):
        CORE.check(*args, None, bytearray(32 * len(lines) - 1), counts, None)
    with pytest.raises(ValueError, match="needs a key"):
        CORE.check(*args, bytes(32), bytearray(32 * len(lines)), counts, None)
    keyed = chunkcore.native_grammar("audit", RUN, b"k" * 32, ())
    assert keyed is not None
    with pytest.raises(ValueError, match="32 bytes"):
        CORE.check(
            lines, 0, keyed.prepared, 0, b"", bytes(31), bytearray(32 * len(lines)), counts, None
        )
    with pytest.raises(TypeError):
        CORE.check(*args, None, b"read-only" * 100, counts, None)
    with pytest.raises(TypeError, match="fold"):
        CORE.check(*args, None, bytearray(32 * len(lines)), counts, ({}, [], None))


# ------------------------------------------------------------- check_chunk, with and without


def _verdict_facts(verdict: storechunk.ChunkVerdict) -> tuple[object, ...]:
    artifacts = None if verdict.artifacts is None else verdict.artifacts.paths
    return (
        verdict.checked,
        verdict.error,
        verdict.first_time,
        verdict.last_time,
        +verdict.kinds,
        verdict.subtrees,
        verdict.cut_subtrees,
        verdict.mac_mismatch,
        artifacts,
    )


def _both(task: storechunk.ChunkTask) -> tuple[tuple[object, ...], tuple[object, ...]]:
    saved = (chunkcore.ENABLED, storechunk.GRAMMAR_MIN_LINES)
    storechunk.GRAMMAR_MIN_LINES = 1
    try:
        chunkcore.ENABLED = False
        pure = _verdict_facts(storechunk.check_chunk(task))
        chunkcore.ENABLED = True
        native = _verdict_facts(storechunk.check_chunk(task))
    finally:
        chunkcore.ENABLED, storechunk.GRAMMAR_MIN_LINES = saved
    return pure, native


def _task(
    store: str,
    lines: list[bytes],
    start: int,
    *,
    keyed: bool,
    master: bytes = MASTER,
    prev_mac: bytes | None,
    merged: frozenset[str] | bool | None,
    cuts: tuple[int, ...] = (),
) -> storechunk.ChunkTask:
    return storechunk.ChunkTask(
        store,
        RUN,
        start,
        lines,
        mac_key=derive_store_key(master, store, RUN) if keyed else None,
        prev_mac=prev_mac,
        cuts=cuts,
        artifacts=None if merged is False else (merged,),  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def keyed_lines() -> dict[str, list[bytes]]:
    """Stores written with ``MASTER`` as their HMAC key, so MACs chain here: a lineage store
    of writes and deletes over a few paths (one with escapes, one non-ASCII) in two tasks, and
    the corpus run's other stores."""
    from harness.receipts.store import StoreWriter

    out: dict[str, list[bytes]] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lineage.jsonl"
        with StoreWriter(path, store="lineage", run_id=RUN, hmac_master=MASTER) as writer:
            for index in range(48):
                body: dict[str, object] = {
                    "actor": "agent",
                    "model": None if index % 2 else "m",
                    "mode": "100644",
                    "parents": [],
                    "parent_mode": None,
                    "path": ["p0", 'q"\\\t', "caf\u00e9/\U0001f600", f"p{index % 5}"][index % 4],
                    "sha256": f"{index:064x}",
                    "step": 10**15 + index if index == 17 else index,
                    "task": "t1" if index % 3 else "t2",
                }
                if index in (9, 30):
                    del body["sha256"], body["mode"]
                    writer.append("artifact.delete", body)
                else:
                    writer.append("artifact.write", body)
        out["lineage"] = path.read_bytes().splitlines()
    return out


def _mutated(lines: list[bytes], data: st.DataObject) -> list[bytes]:
    lines = list(lines)
    for _ in range(data.draw(st.integers(0, 2))):
        index = data.draw(st.integers(0, len(lines) - 1))
        change = data.draw(st.sampled_from(_CHANGES))
        if change == "edit":
            lines[index] = _edited(lines[index], data)
        elif change == "utf8":
            text = data.draw(st.sampled_from(_UTF8_SPELLINGS))
            lines[index] = lines[index].replace(b'"p0"', b'"p' + text + b'"', 1)
        elif change == "delete" and len(lines) > 1:
            del lines[index]
        elif change == "duplicate":
            lines.insert(index, lines[index])
        elif change == "swap" and index + 1 < len(lines):
            lines[index], lines[index + 1] = lines[index + 1], lines[index]
        elif change == "time":  # earlier or later than its neighbours, or equal to one
            other = _TIME.search(lines[data.draw(st.integers(0, len(lines) - 1))])
            when = data.draw(st.sampled_from([other.group(1) if other else b"", *_TIMES]))
            lines[index] = _TIME.sub(b'"time":"' + when + b'"', lines[index], count=1)
        elif change == "mac":  # one hex digit of the MAC, anywhere in it
            found = _MAC.search(lines[index])
            if found is not None:
                at = found.start(1) + data.draw(st.integers(0, 63))
                line = bytearray(lines[index])
                line[at] = ord("0") if line[at] != ord("0") else ord("f")
                lines[index] = bytes(line)
        elif change == "long":
            lines[index] = lines[index].replace(b'"p0"', b'"p' + b"x" * (1 << 20) + b'"', 1)
    return lines


_CHANGES = ("edit", "utf8", "delete", "duplicate", "swap", "long", "time", "mac")
_TIME = re.compile(rb'"time":"([^"]*)"')
_TIMES = (b"2000-01-01T00:00:00.000000Z", b"2099-01-01T00:00:00.000000Z")
_MAC = re.compile(rb'"mac":"([0-9a-f]{64})"')
_UTF8_SPELLINGS = (
    b"\xc3\xa9",  # é
    b"\xf0\x9f\x98\x80",  # an astral character
    b"\xef\xbf\xbf",  # U+FFFF
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
    b"\xed\x9f\xbf",  # U+D7FF, just below the surrogates
    b"\xed\xa0\x80",  # a surrogate
    b"\xc0\xaf",  # overlong /
    b"\xe0\x80\xaf",  # overlong
    b"\xf0\x80\x80\xaf",  # overlong
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xc3",  # truncated
    b"\xe2\x82",  # truncated
    b"\x80",  # a lone continuation byte
    b"\xff",
)


@needs_core
@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_the_core_gives_the_pure_verdict(
    keyed_lines: dict[str, list[bytes]], demo: Demo, data: st.DataObject
) -> None:
    lineage = data.draw(st.booleans())
    store = "lineage" if lineage else data.draw(st.sampled_from(sorted(demo.lines)))
    source = keyed_lines["lineage"] if lineage else demo.lines[store]
    master = MASTER if lineage else demo.master
    start = data.draw(st.integers(0, len(source) - 1))
    lines = _mutated(source[start:], data)
    keyed = data.draw(st.booleans())
    prev = GENESIS_MAC if start == 0 else bytes.fromhex(split_mac(source[start - 1])[0])
    prev_mac = data.draw(st.sampled_from([prev, None, bytes(32)])) if keyed else prev
    merged = data.draw(
        st.sampled_from([False, None, frozenset({"t1"}), frozenset({"t1", "t2"}), frozenset()])
    )
    cuts = tuple(
        sorted(set(data.draw(st.lists(st.integers(start + 1, start + len(lines)), max_size=3))))
    )
    task = _task(
        store, lines, start, keyed=keyed, master=master, prev_mac=prev_mac, merged=merged, cuts=cuts
    )
    pure, native = _both(task)
    event(f"error: {pure[1] is not None}, mismatch: {pure[7] is not None}")
    assert native == pure


@needs_core
@pytest.mark.parametrize("spelling", _UTF8_SPELLINGS)
def test_utf8_in_a_path_as_the_pure_path_decides(
    keyed_lines: dict[str, list[bytes]], spelling: bytes
) -> None:
    lines = [line.replace(b'"p0"', b'"p' + spelling + b'"', 1) for line in keyed_lines["lineage"]]
    task = _task("lineage", lines, 0, keyed=True, prev_mac=GENESIS_MAC, merged=None)
    pure, native = _both(task)
    assert native == pure
    valid = _is_utf8(spelling)
    assert (pure[1] is None) is valid  # an invalid spelling fails at the first record using it


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@needs_core
def test_the_core_proves_a_whole_real_chunk_itself(
    keyed_lines: dict[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a pure path in disguise: on a store of typed kinds every line is proven by the
    core (the Python per-line checks are never called)."""
    lines = [line for line in keyed_lines["lineage"] if _step(line) < 10**15]
    calls: list[bytes] = []
    original = storechunk._line_facts

    def counted(line: bytes, *args: Any) -> Any:
        calls.append(line)
        return original(line, *args)

    monkeypatch.setattr(storechunk, "_line_facts", counted)
    monkeypatch.setattr(storechunk, "GRAMMAR_MIN_LINES", 1)
    task = _task(
        "lineage", keyed_lines["lineage"], 0, keyed=True, prev_mac=GENESIS_MAC, merged=None
    )
    verdict = storechunk.check_chunk(task)
    assert verdict.error is None and verdict.mac_mismatch is None
    assert verdict.checked == len(keyed_lines["lineage"])
    assert len(calls) == len(keyed_lines["lineage"]) - len(lines)  # the 16-digit step only
    assert verdict.subtrees[0][1] == _root(keyed_lines["lineage"])


def _step(line: bytes) -> int:
    found = re.search(rb'"step":(\d+)', line)
    return int(found.group(1)) if found else 0


def _root(lines: list[bytes]) -> bytes:
    from harness.verify.merkle import CompactRange

    tree = CompactRange()
    for line in lines[:32]:
        tree.append(leaf_hash(line))
    return tree.root()


# ------------------------------------------------------------------------ threads for chunks


def test_threads_give_verdicts_in_order_and_raise_where_run_here_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_threads`` (the core's runner): verdicts in chunk order whatever order the threads
    finish in, a check's exception raised at its chunk, an error of the chunk stream passed
    through after the verdicts before it."""
    tasks = [storechunk.ChunkTask("lineage", RUN, 4 * index, [b"x"]) for index in range(9)]

    def check(task: storechunk.ChunkTask) -> storechunk.ChunkVerdict:
        time.sleep(0.002 * (task.start % 3))  # later chunks often finish first
        if task.start == 20:
            raise MemoryError("chunk 20")
        return storechunk.ChunkVerdict(checked=task.start)

    monkeypatch.setattr(storecheck, "check_chunk", check)
    verdicts = storecheck.run_threads(2, iter(tasks))
    seen = [next(verdicts) for _ in range(5)]
    assert [item[1].checked for item in seen if isinstance(item, tuple)] == [0, 4, 8, 12, 16]
    with pytest.raises(MemoryError, match="chunk 20"):
        next(verdicts)
    error = ChainError("the stream broke")
    out = list(storecheck.run_threads(2, iter([tasks[0], tasks[1], error, tasks[2]])))
    assert out[2] is error and len(out) == 3
    assert [item[1].checked for item in out[:2] if isinstance(item, tuple)] == [0, 4]
