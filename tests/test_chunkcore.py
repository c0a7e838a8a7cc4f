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
import time
from array import array
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.orchestrate.demo import run_demo
from harness.receipts.keys import load_keys
from harness.verify import chunkcore, chunkrun, storechunk
from harness.verify.chain import GENESIS_MAC
from harness.verify.errors import ChainError
from harness.verify.grammardfa import store_dfa
from harness.verify.lineage import WRITE_MEMBERS, pack_write
from harness.verify.merkle import subtree_levels
from harness.verify.records import canonical_grammar, split_mac

from .corpus import Bundle
from .test_chunkcore_paths import both_paths, chunk_task, edited, mutated

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


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_automaton_and_the_grammar_agree_on_edited_lines(
    store_lines: dict[str, list[bytes]], data: st.DataObject
) -> None:
    store = data.draw(st.sampled_from(sorted(store_lines)))
    line = edited(data.draw(st.sampled_from(store_lines[store])), data)
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


@needs_core
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_the_core_gives_the_pure_verdict_on_every_store(demo: Demo, data: st.DataObject) -> None:
    """test_chunkcore_paths.py's equivalence, on every store of a real runtime run (every kind
    it records, typed and free-form, interleaved), keyed with the run's own key."""
    store = data.draw(st.sampled_from(sorted(demo.lines)))
    source = demo.lines[store]
    start = data.draw(st.integers(0, len(source) - 1))
    lines = mutated(source[start:], data)
    keyed = data.draw(st.booleans())
    prev = GENESIS_MAC if start == 0 else bytes.fromhex(split_mac(source[start - 1])[0])
    task = chunk_task(
        store, RUN, lines, start, keyed=keyed, master=demo.master, prev_mac=prev, merged=False
    )
    pure, native = both_paths(task)
    assert native == pure


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

    monkeypatch.setattr(chunkrun, "check_chunk", check)
    verdicts = chunkrun.run_threads(2, iter(tasks))
    seen = [next(verdicts) for _ in range(5)]
    assert [item[1].checked for item in seen if isinstance(item, tuple)] == [0, 4, 8, 12, 16]
    with pytest.raises(MemoryError, match="chunk 20"):
        next(verdicts)
    error = ChainError("the stream broke")
    out = list(chunkrun.run_threads(2, iter([tasks[0], tasks[1], error, tasks[2]])))
    assert out[2] is error and len(out) == 3
    assert [item[1].checked for item in out[:2] if isinstance(item, tuple)] == [0, 4]
