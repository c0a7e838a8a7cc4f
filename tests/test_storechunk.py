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

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.verify import chunkcore, storechunk
from harness.verify.canonical import canonical_bytes
from harness.verify.errors import ChainError, SchemaError, VerificationError
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
    mac_input,
    mac_span,
    match_facts,
    parse_record_line,
    split_mac,
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
    assert match_facts(canonical_grammar("lineage", "run-1"), match)[:3] == (
        record.seq,
        record.time,
        record.kind,
    )
    assert orjson.loads(match.group("w_path")) == path
    assert orjson.loads(match.group("w_model")) == model
    span = match_facts(canonical_grammar("lineage", "run-1"), match)[3]
    assert span == mac_span(line)  # the grammar's MAC group is where split_mac cuts
    assert (line[span[0] : span[1]].decode(), mac_input(line, span)) == split_mac(line)


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
    assert match_facts(canonical_grammar("lineage", "run-1"), match)[:3] == (
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


# ---------------------------------------------------------------------------- check_chunk

MASTER = bytes(range(32))


@pytest.fixture(scope="module")
def lineage_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """40 lineage records by the real writer: writes over 7 paths (one with escapes), a
    delete, and one write whose step needs the strict decoder (16 digits)."""
    from harness.receipts.store import StoreWriter

    path = tmp_path_factory.mktemp("chunk") / "lineage.jsonl"
    with StoreWriter(path, store="lineage", run_id="run-1", hmac_master=MASTER) as writer:
        for index in range(40):
            body = {
                "actor": "agent",
                "model": None if index % 2 else "m",
                "mode": "100644",
                "parents": [],
                "parent_mode": None,
                "path": f"p{index % 7}" if index % 5 else 'q"\\\t',
                "sha256": f"{index:064x}",
                "step": 10**15 + index if index == 17 else index,
                "task": "t1" if index % 3 else "t2",
            }
            if index == 30:
                body = {key: body[key] for key in ("path", "parents", "parent_mode", "actor",
                                                   "task", "step", "model")}  # fmt: skip
                writer.append("artifact.delete", body)
            else:
                writer.append("artifact.write", body)
    return path.read_bytes().splitlines()


@pytest.fixture(
    params=[(1, False), (10_000, False), (1, True)], ids=["grammar", "decoded", "native"]
)
def path_taken(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Each check_chunk test three times: lines proven by the canonical grammar, decoded (the
    path chunks of fewer than GRAMMAR_MIN_LINES lines take), and proven by the compiled core
    (where it is built)."""
    min_lines, native = request.param
    if native and chunkcore._import_core() is None:
        pytest.skip("the compiled core is not built here")
    monkeypatch.setattr(chunkcore, "ENABLED", native)
    monkeypatch.setattr(storechunk, "GRAMMAR_MIN_LINES", min_lines)
    return int(min_lines)


def _task(lines: list[bytes], start: int = 0, **extra: Any) -> storechunk.ChunkTask:
    from harness.verify.chain import GENESIS_MAC, derive_store_key

    options: dict[str, Any] = {
        "mac_key": derive_store_key(MASTER, "lineage", "run-1"),
        "prev_mac": GENESIS_MAC if start == 0 else bytes.fromhex(split_mac(lines[start - 1])[0]),
        **extra,
    }
    return storechunk.ChunkTask("lineage", "run-1", start, lines[start:], **options)


def test_check_chunk_of_a_valid_store(lineage_lines: list[bytes], path_taken: int) -> None:
    from harness.verify.lineage import FinalArtifacts

    verdict = storechunk.check_chunk(_task(lineage_lines, cuts=(5, 40), artifacts=(None,)))
    assert (verdict.checked, verdict.error, verdict.mac_mismatch) == (40, None, None)
    records = [parse_record_line(line, "lineage", "run-1") for line in lineage_lines]
    assert verdict.first_time == records[0].time
    assert verdict.last_time == records[-1].time
    assert verdict.kinds == {"artifact.write": 39, "artifact.delete": 1}
    roots = _one_pass_roots([leaf_hash(line) for line in lineage_lines])
    joined = CompactRange()
    for height, root in verdict.subtrees:
        joined.append_subtree(height, root)
    assert joined.root() == roots[40]
    for cut in (5, 40):
        ahead = CompactRange()
        for height, root in verdict.cut_subtrees[cut]:
            ahead.append_subtree(height, root)
        assert ahead.root() == roots[cut]
    assert verdict.artifacts is not None
    folded, direct = FinalArtifacts(), FinalArtifacts()
    folded.join(verdict.artifacts)
    for record in records:
        direct.apply(record.kind, record.seq, record.body)
    assert folded.final() == direct.final()
    assert len(direct.final()) == 8  # p0..p6 and the escaped path, written again after its delete


@pytest.mark.parametrize("merged", [frozenset({"t1"}), frozenset({'q"'}), frozenset()])
def test_check_chunk_fold_keeps_only_merged_tasks(
    lineage_lines: list[bytes], merged: frozenset[str], path_taken: int
) -> None:
    from harness.verify.lineage import FinalArtifacts

    for start in (0, 8, 32):
        verdict = storechunk.check_chunk(_task(lineage_lines, start, artifacts=(merged,)))
        assert verdict.artifacts is not None
        folded, direct = FinalArtifacts(merged), FinalArtifacts(merged)
        folded.join(verdict.artifacts)
        for line in lineage_lines[start:]:
            record = parse_record_line(line, "lineage", "run-1")
            direct.apply(record.kind, record.seq, record.body)
        assert folded.final() == direct.final()


def test_check_chunk_from_the_middle(lineage_lines: list[bytes], path_taken: int) -> None:
    verdict = storechunk.check_chunk(_task(lineage_lines, 16, cuts=(20,)))
    assert (verdict.checked, verdict.error, verdict.mac_mismatch) == (24, None, None)
    assert list(verdict.cut_subtrees) == [20]
    assert [height for height, _ in verdict.cut_subtrees[20]] == [2]
    assert [height for height, _ in verdict.subtrees] == [4, 3]
    shifted = storechunk.check_chunk(
        storechunk.ChunkTask("lineage", "run-1", 15, lineage_lines[16:])
    )
    assert shifted.checked == 0
    assert shifted.error == (ChainError, "seq 16 where 15 was expected (record deleted, "
                             "duplicated or reordered)", 16)  # fmt: skip


@pytest.mark.parametrize(
    ("position", "edit", "error", "seq"),
    [
        (9, lambda r: r.update(seq=99), ChainError, 99),
        (9, lambda r: r.update(time="2000-01-01T00:00:00.000000Z"), ChainError, 9),
        (9, lambda r: r["body"].update(step=-1), SchemaError, None),
        (17, lambda r: r["body"].update(step="x"), SchemaError, None),
        (0, lambda r: r.update(run="run-2"), SchemaError, None),
    ],
)
def test_check_chunk_stops_at_the_first_bad_record(
    lineage_lines: list[bytes],
    position: int,
    edit: Any,
    error: type,
    seq: int | None,
    path_taken: int,
) -> None:
    lines = list(lineage_lines)
    record = orjson.loads(lines[position])
    edit(record)
    lines[position] = canonical_bytes(record)
    verdict = storechunk.check_chunk(_task(lines, cuts=(3, 12), artifacts=(None,)))
    assert verdict.checked == position
    assert verdict.error is not None
    assert verdict.error[0] is error
    assert verdict.error[2] == seq
    if error is SchemaError:  # the strict decoder's own message
        with pytest.raises(SchemaError) as raised:
            parse_record_line(lines[position], "lineage", "run-1")
        assert verdict.error[1] == str(raised.value)
    else:
        assert verdict.error[1].startswith(("seq 99 where 9 was expected", "time 2000-01-01"))
    assert all(cut <= position for cut in verdict.cut_subtrees)
    assert verdict.kinds.total() == position


def test_check_chunk_mac_mismatches(lineage_lines: list[bytes], path_taken: int) -> None:
    from harness.verify.chain import derive_store_key

    lines = list(lineage_lines)
    record = orjson.loads(lines[12])
    record["mac"] = "0" * 64
    lines[12] = canonical_bytes(record)
    assert storechunk.check_chunk(_task(lines)).mac_mismatch == 12
    assert storechunk.check_chunk(_task(lineage_lines, prev_mac=None)).mac_mismatch == 0
    other = derive_store_key(MASTER, "audit", "run-1")
    assert storechunk.check_chunk(_task(lineage_lines, mac_key=other)).mac_mismatch == 0
    assert storechunk.check_chunk(_task(lineage_lines, 17)).mac_mismatch is None  # slow path
    wrong_prev = storechunk.check_chunk(_task(lineage_lines, 18, prev_mac=bytes(32)))
    assert wrong_prev.mac_mismatch == 0
    assert storechunk.check_chunk(_task(lineage_lines, mac_key=None)).mac_mismatch is None


def test_chunk_capacity() -> None:
    assert [chunk_capacity(start) for start in (0, 1, 2, 6, 8, 2048, 4096 + 512)] == [
        2048, 1, 2, 2, 8, 2048, 512,
    ]  # fmt: skip


def test_check_chunk_error_at_seq_zero_names_it(
    lineage_lines: list[bytes], path_taken: int
) -> None:
    """A record read as seq 0 where another was expected: the error carries seq 0."""
    verdict = storechunk.check_chunk(storechunk.ChunkTask("lineage", "run-1", 4, lineage_lines[:3]))
    assert verdict.checked == 0
    assert verdict.error is not None
    assert verdict.error[2] == 0


def test_check_chunk_fold_of_a_delete_alone(lineage_lines: list[bytes], path_taken: int) -> None:
    """A chunk that deletes a path it does not write (written in an earlier chunk): the
    joined state is the record-by-record one."""
    from harness.verify.lineage import FinalArtifacts

    direct = FinalArtifacts()
    for line in lineage_lines:
        record = parse_record_line(line, "lineage", "run-1")
        direct.apply(record.kind, record.seq, record.body)
    joined = FinalArtifacts()
    for start, stop in ((0, 26), (26, 34), (34, 40)):  # the delete (30) alone with its path
        task = _task(lineage_lines[:stop], start, artifacts=(None,))
        verdict = storechunk.check_chunk(task)
        assert verdict.checked == stop - start
        assert verdict.artifacts is not None
        joined.join(verdict.artifacts)
    assert joined.final() == direct.final()
