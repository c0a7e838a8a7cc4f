"""``check_chunk`` with the compiled core gives the pure path's verdict (issue 14).

Chunks of a lineage store (writes and deletes, escapes and non-ASCII in paths, a 16-digit
step the grammar leaves to the decoder) and of an audit store whose typed kinds the core proves
and whose free-form kinds go back to the pure path line by line, interleaved: edited in every
way a chunk can be wrong (bytes anywhere, UTF-8 of every kind, time and MAC changes, deletes,
duplicates, swaps, a line over the limit), from any start, keyed or not, with the lineage fold
or not. Both paths must give the same ``ChunkVerdict``, field by field. (The same on every
store of a real runtime run: test_chunkcore.py.)
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.verify import chunkcore, storechunk
from harness.verify.chain import GENESIS_MAC, derive_store_key
from harness.verify.merkle import leaf_hash
from harness.verify.records import split_mac

CORE = chunkcore._import_core()
needs_core = pytest.mark.skipif(CORE is None, reason="the compiled core is not built here")
MASTER = bytes(range(32))
RUN = "run-1"
_EDIT_BYTES = b' "\\,:{}[]0123456789abcdefnrtu-\x00\x1f\x7f\xc3\xa9\xff'


def edited(line: bytes, data: st.DataObject) -> bytes:
    """One to three bytes of ``line`` replaced, inserted or deleted, chosen among JSON's
    syntax, escapes, digits, controls and UTF-8 lead, continuation and invalid bytes."""
    out = bytearray(line)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, max(len(out) - 1, 0)))
        edit = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.sampled_from(_EDIT_BYTES))
        if edit == "replace" and out:
            out[position] = byte
        elif edit == "insert":
            out.insert(position, byte)
        elif len(out) > 1:
            del out[position]
    return bytes(out)


def verdict_facts(verdict: storechunk.ChunkVerdict) -> tuple[object, ...]:
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


def both_paths(task: storechunk.ChunkTask) -> tuple[tuple[object, ...], tuple[object, ...]]:
    saved = (chunkcore.ENABLED, storechunk.GRAMMAR_MIN_LINES)
    storechunk.GRAMMAR_MIN_LINES = 1
    try:
        chunkcore.ENABLED = False
        pure = verdict_facts(storechunk.check_chunk(task))
        chunkcore.ENABLED = True
        native = verdict_facts(storechunk.check_chunk(task))
    finally:
        chunkcore.ENABLED, storechunk.GRAMMAR_MIN_LINES = saved
    return pure, native


def chunk_task(
    store: str,
    run: str,
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
        run,
        start,
        lines,
        mac_key=derive_store_key(master, store, run) if keyed else None,
        prev_mac=prev_mac,
        cuts=cuts,
        artifacts=None if merged is False else (merged,),  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def keyed_lines() -> dict[str, list[bytes]]:
    """Stores written with ``MASTER`` as their HMAC key, so MACs chain here: a lineage store
    of writes and deletes over a few paths (one with escapes, one non-ASCII) in two tasks, and
    an audit store whose typed kinds (locks) the core proves and whose free-form kind (event)
    it leaves to the pure path, interleaved."""
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
        path = Path(folder) / "audit.jsonl"
        with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER) as writer:
            for index in range(40):
                batch = f"b{index // 3}"
                if index % 3 == 0:
                    writer.append("lock.acquire", {"batch": batch, "globs": ["src/**", "p0"]})
                elif index % 3 == 1:
                    data = {"i": index, "t\u00e9xt": ["caf\u00e9", None, -index]}
                    writer.append("event", {"name": f"e{index}", "data": data})
                else:
                    writer.append("lock.release", {"batch": batch, "reason": "retired"})
        out["audit"] = path.read_bytes().splitlines()
    return out


def mutated(lines: list[bytes], data: st.DataObject) -> list[bytes]:
    lines = list(lines)
    for _ in range(data.draw(st.integers(0, 2))):
        index = data.draw(st.integers(0, len(lines) - 1))
        change = data.draw(st.sampled_from(_CHANGES))
        if change == "edit":
            lines[index] = edited(lines[index], data)
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
    keyed_lines: dict[str, list[bytes]], data: st.DataObject
) -> None:
    store = data.draw(st.sampled_from(sorted(keyed_lines)))
    source = keyed_lines[store]
    start = data.draw(st.integers(0, len(source) - 1))
    lines = mutated(source[start:], data)
    keyed = data.draw(st.booleans())
    prev = GENESIS_MAC if start == 0 else bytes.fromhex(split_mac(source[start - 1])[0])
    prev_mac = data.draw(st.sampled_from([prev, None, bytes(32)])) if keyed else prev
    merged = data.draw(
        st.sampled_from([False, None, frozenset({"t1"}), frozenset({"t1", "t2"}), frozenset()])
    )
    cuts = tuple(
        sorted(set(data.draw(st.lists(st.integers(start + 1, start + len(lines)), max_size=3))))
    )
    task = chunk_task(
        store, RUN, lines, start, keyed=keyed, prev_mac=prev_mac, merged=merged, cuts=cuts
    )
    pure, native = both_paths(task)
    event(f"error: {pure[1] is not None}, mismatch: {pure[7] is not None}")
    assert native == pure


@needs_core
@pytest.mark.parametrize("spelling", _UTF8_SPELLINGS)
def test_utf8_in_a_path_as_the_pure_path_decides(
    keyed_lines: dict[str, list[bytes]], spelling: bytes
) -> None:
    lines = [line.replace(b'"p0"', b'"p' + spelling + b'"', 1) for line in keyed_lines["lineage"]]
    task = chunk_task("lineage", RUN, lines, 0, keyed=True, prev_mac=GENESIS_MAC, merged=None)
    pure, native = both_paths(task)
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
    task = chunk_task(
        "lineage", RUN, keyed_lines["lineage"], 0, keyed=True, prev_mac=GENESIS_MAC, merged=None
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


@needs_core
@pytest.mark.parametrize("bad", [0, 15, 16, 17, 47, 48, 49, 111, 112, 113, 129])
def test_a_line_the_core_leaves_around_its_gathering_blocks(bad: int) -> None:
    """The core gathers lines in blocks of 16, 32, 64, ... while every line is proven: a line
    it leaves to the pure path just before, on or after a block's edge gives the pure verdict,
    and the lines after it are proven again (one decoded line, a 16-digit step, is valid)."""
    from harness.receipts.store import StoreWriter

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lineage.jsonl"
        with StoreWriter(path, store="lineage", run_id=RUN, hmac_master=MASTER) as writer:
            for index in range(130):
                step = 10**15 if index == bad else index
                writer.append("artifact.write", {
                    "actor": "a", "model": None, "mode": "100644", "parents": [],
                    "parent_mode": None, "path": f"p{index % 7}", "sha256": f"{index:064x}",
                    "step": step, "task": "t1",
                })  # fmt: skip
        lines = path.read_bytes().splitlines()
    task = chunk_task("lineage", RUN, lines, 0, keyed=True, prev_mac=GENESIS_MAC, merged=None)
    pure, native = both_paths(task)
    assert native == pure and pure[0] == 130 and pure[1] is None and pure[7] is None
    broken = [*lines[:bad], lines[bad].replace(b'"step":', b'"step": ', 1), *lines[bad + 1 :]]
    task = chunk_task("lineage", RUN, broken, 0, keyed=True, prev_mac=GENESIS_MAC, merged=None)
    pure, native = both_paths(task)
    assert native == pure and pure[0] == bad and pure[1] is not None
