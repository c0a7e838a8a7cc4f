"""The parts of chunked store verification, each against its one-pass definition (issue 14).

* Merkle: subtrees of aligned chunks appended to a ``CompactRange`` give the state appending
  the leaves one by one gives (roots at every size, including cuts inside chunks).
* Line splitting: ``chunks_from_stream`` yields the lines ``iter_store_lines`` yields and fails
  where it fails, with its error; every chunk starts where a perfect subtree of its size may.
* The canonical grammar: a line it accepts is one ``parse_record_line`` accepts, with the same
  facts; valid records of every kind without free-form members take it.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.verify import storechunk
from harness.verify.canonical import canonical_bytes
from harness.verify.errors import SchemaError, VerificationError
from harness.verify.merkle import (
    CompactRange,
    leaf_hash,
    prefix_subtrees,
    subtree_levels,
)
from harness.verify.recordkinds import BODY_SPECS
from harness.verify.records import (
    _WALKED,
    canonical_grammar,
    canonical_line_match,
    json_string,
    match_facts,
    parse_record_line,
)
from harness.verify.storecheck import chunks_from_lines, chunks_from_stream, iter_store_lines
from harness.verify.storechunk import chunk_capacity

from .corpus import Bundle, export_run, operator_keys

# ---------------------------------------------------------------------------- Merkle


def _leaves(count: int) -> list[bytes]:
    return [leaf_hash(b"%d" % index) for index in range(count)]


def _one_pass_roots(leaves: list[bytes]) -> list[bytes]:
    """The root after each number of leaves, appended one by one."""
    tree = CompactRange()
    roots = [tree.root()]
    for leaf in leaves:
        tree.append(leaf)
        roots.append(tree.root())
    return roots


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 150), st.sampled_from([1, 2, 4, 8, 16]))
def test_aligned_chunks_join_to_the_one_pass_tree(count: int, capacity: int) -> None:
    leaves = _leaves(count)
    roots = _one_pass_roots(leaves)
    one_pass = CompactRange()
    joined = CompactRange()
    start = 0
    while start < count:
        size = min(capacity, count - start)
        while start % capacity and size > 0:  # as chunk_capacity: a power of two dividing start
            capacity //= 2
            size = min(capacity, count - start)
        chunk = leaves[start : start + size]
        levels = subtree_levels(chunk)
        for cut in range(1, size + 1):  # every root inside the chunk, as a checkpoint would read
            ahead = joined.copy()
            for height, root in prefix_subtrees(levels, cut):
                ahead.append_subtree(height, root)
            assert ahead.root() == roots[start + cut]
            assert ahead.size == start + cut
        for height, root in prefix_subtrees(levels, size):
            joined.append_subtree(height, root)
        one_pass.extend(chunk)
        assert (joined.size, joined.peaks, joined.root()) == (
            one_pass.size,
            one_pass.peaks,
            one_pass.root(),
        )
        start += size


def test_append_subtree_refuses_a_misaligned_subtree() -> None:
    tree = CompactRange()
    tree.append(leaf_hash(b"a"))
    with pytest.raises(ValueError, match="not a multiple of 2\\*\\*1"):
        tree.append_subtree(1, leaf_hash(b"b"))
    with pytest.raises(ValueError, match="height"):
        tree.append_subtree(-1, leaf_hash(b"b"))
    with pytest.raises(ValueError, match="32"):
        tree.append_subtree(0, b"short")
    tree.append_subtree(0, leaf_hash(b"b"))
    assert tree.size == 2


def test_prefix_subtrees_are_the_bits_of_the_count() -> None:
    levels = subtree_levels(_leaves(7))
    assert [height for height, _ in prefix_subtrees(levels, 7)] == [2, 1, 0]
    assert prefix_subtrees(levels, 4) == [(2, levels[2][0])]
    assert prefix_subtrees(levels, 0) == []
    assert [len(level) for level in levels] == [7, 3, 1]


def test_copy_is_independent() -> None:
    tree = CompactRange()
    tree.extend(_leaves(3))
    other = tree.copy()
    other.append(leaf_hash(b"x"))
    assert (tree.size, other.size) == (3, 4)
    assert tree.root() != other.root()


# ---------------------------------------------------------------------------- line splitting


def _split(data: bytes, limit: int) -> tuple[list[list[bytes]], Any]:
    chunks: list[list[bytes]] = []
    error = None
    for item in chunks_from_stream(io.BytesIO(data), "m.jsonl", limit=limit):
        if isinstance(item, VerificationError):
            error = item
        else:
            chunks.append(item)
    return chunks, error


def _reference(data: bytes, limit: int) -> tuple[list[bytes], Any]:
    lines: list[bytes] = []
    try:
        for line in iter_store_lines(io.BytesIO(data), "m.jsonl", limit=limit):
            lines.append(line)
    except SchemaError as exc:
        return lines, exc
    return lines, None


_LINE_BYTES = st.lists(
    st.one_of(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), st.just(b"x" * 9)),
    max_size=80,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_LINE_BYTES, st.booleans(), st.integers(4, 10), st.sampled_from([2, 4, 2048]))
def test_stream_chunks_are_iter_store_lines(
    lines: list[bytes], terminated: bool, limit: int, capacity: int
) -> None:
    data = b"\n".join(lines) + (b"\n" if terminated and lines else b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(storechunk, "MAX_CHUNK_RECORDS", capacity)
        chunks, error = _split(data, limit)
    expected, expected_error = _reference(data, limit)
    assert [line for chunk in chunks for line in chunk] == expected
    if expected_error is None:
        assert error is None
    else:
        assert type(error) is type(expected_error)
        assert str(error) == str(expected_error)
        assert (error.member, error.line) == (expected_error.member, expected_error.line)
    start = 0
    for chunk in chunks:
        assert 0 < len(chunk) <= chunk_capacity(start) or capacity == 2048
        assert start % (1 << (len(chunk).bit_length() - 1)) == 0
        start += len(chunk)


def test_stream_chunks_across_read_blocks() -> None:
    """Lines that straddle the 1 MiB read blocks are whole, and chunks stay under the byte
    bound (a chunk over it is one record alone)."""
    lines = [b"%07d" % index + b"y" * (index % 700) for index in range(12000)]
    data = b"\n".join(lines) + b"\n"
    chunks, error = _split(data, 1 << 20)
    assert error is None
    assert [line for chunk in chunks for line in chunk] == lines
    assert all(
        sum(len(line) + 1 for line in chunk) <= storechunk.MAX_CHUNK_BYTES for chunk in chunks
    )


def test_lines_api_chunks_the_same_lines() -> None:
    lines = [b"a" * (index % 5) for index in range(5000)]
    chunks = list(chunks_from_lines(iter(lines)))
    assert [line for chunk in chunks for line in chunk if isinstance(chunk, list)] == lines
    assert [len(chunk) for chunk in chunks[:2]] == [2048, 2048]


# ---------------------------------------------------------------------------- canonical grammar

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]) | st.sampled_from('"\\\x00\x1f\x7f/\u2028'),
    min_size=1,
    max_size=12,
)


def _artifact(path: str, step: int, model: str | None) -> dict[str, Any]:
    return {
        "body": {
            "actor": "a",
            "mode": "100644",
            "model": model,
            "parent_mode": None,
            "parents": ["0" * 64],
            "path": path,
            "sha256": "1" * 64,
            "step": step,
            "task": "t",
        },
        "kind": "artifact.write",
        "mac": "2" * 64,
        "run": "run-1",
        "seq": 3,
        "store": "lineage",
        "time": "2026-01-01T00:00:00.000001Z",
        "v": 2,
    }


@given(_TEXT, st.integers(0, 10**15 - 1), st.one_of(st.none(), _TEXT))
def test_canonical_records_take_the_grammar(path: str, step: int, model: str | None) -> None:
    line = canonical_bytes(_artifact(path, step, model))
    match = canonical_line_match(line, "lineage", "run-1")
    assert match is not None
    record = parse_record_line(line, "lineage", "run-1")
    assert match_facts(canonical_grammar("lineage", "run-1"), match) == (
        record.seq,
        record.time,
        record.kind,
    )
    assert json_string(match.group("w_path")) == path
    assert json_string(match.group("w_model")) == model


@settings(max_examples=400)
@given(_TEXT, st.integers(0, 10**15 - 1), st.data())
def test_the_grammar_accepts_nothing_parse_refuses(
    path: str, step: int, data: st.DataObject
) -> None:
    """Soundness: whatever a byte edit makes of a canonical line, if the grammar still accepts
    it, the strict decoder accepts it too, with the same facts."""
    line = bytearray(canonical_bytes(_artifact(path, step, "m")))
    value = line.index(b'"path":"') + len(b'"path":"')  # edits inside a string often still match
    for _ in range(data.draw(st.integers(1, 3))):
        inside = data.draw(st.booleans()) and value < len(line) - 1
        position = data.draw(st.integers(value if inside else 0, len(line) - 1))
        edit = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(
            st.sampled_from(b' "\\,:{}[]0123456789abcdefnrtu-\x00\x1f\x7f\xc3\xa9\xff')
        )
        if edit == "replace":
            line[position] = byte
        elif edit == "insert":
            line.insert(position, byte)
        elif len(line) > 1:
            del line[position]
    candidate = bytes(line)
    match = canonical_line_match(candidate, "lineage", "run-1")
    event(f"grammar {'accepts' if match else 'refuses'}")
    if match is None:
        return  # nothing claimed: the strict decoder decides such lines
    record = parse_record_line(candidate, "lineage", "run-1")  # must not raise
    assert match_facts(canonical_grammar("lineage", "run-1"), match) == (
        record.seq,
        record.time,
        record.kind,
    )


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        (b"\\u0041", False),  # "A" escaped: not canonical
        (b"\\/", False),
        (b"\\u000a", False),  # \n has a short escape
        (b"\\u001F", False),  # upper-case hex
        (b"\\u001f", True),
        (b"\\n", True),
        (b'\\"', True),
        (b"\x7f", True),
        (b"\xc3\xa9", True),
        (b"\xed\xa0\x80", False),  # a UTF-8-encoded surrogate is not UTF-8
        (b"\xff", False),
    ],
)
def test_string_spellings(spelling: bytes, canonical: bool) -> None:
    line = canonical_bytes(_artifact("PATH", 1, None)).replace(b"PATH", b"p" + spelling)
    assert (canonical_line_match(line, "lineage", "run-1") is not None) is canonical
    if canonical:
        parse_record_line(line, "lineage", "run-1")
    else:
        with pytest.raises(VerificationError):
            parse_record_line(line, "lineage", "run-1")


@pytest.mark.parametrize(
    ("number", "matched"),
    [
        (b"0", True),
        (b"-0", False),
        (b"01", False),
        (b"999999999999999", True),
        (b"1000000000000000", False),
    ],
)
def test_integer_spellings(number: bytes, matched: bool) -> None:
    line = canonical_bytes(_artifact("p", 777, None)).replace(b'"step":777', b'"step":' + number)
    assert (canonical_line_match(line, "lineage", "run-1") is not None) is matched


def test_every_typed_kind_takes_the_grammar() -> None:
    """Each kind whose members are all typed and required is proven by the grammar (else the
    fast path would silently be the slow one)."""
    with tempfile.TemporaryDirectory() as folder:
        _, path = export_run(Path(folder), operator_keys())
        bundle = Bundle.from_tar(path.read_bytes(), operator_keys())
    seen = 0
    for store in ("audit", "lineage", "replay", "control"):
        for line in bundle.store(store):
            record = parse_record_line(line, store, "run-1")
            spec = BODY_SPECS[store][record.kind]
            typed = all(required for required, _ in spec.values()) and not any(
                checker in _WALKED for _, checker in spec.values()
            )
            assert (canonical_line_match(line, store, "run-1") is not None) is typed, line
            seen += typed
    assert seen >= 4
