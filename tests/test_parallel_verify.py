"""Parallel store verification gives the sequential verdict, failure for failure (issue 14).

The bundle verifier checks store records in chunks (``harness.verify.storechunk``), either in
this process (``jobs=1``) or in forked worker processes (``harness.verify.storepool``), and
joins the verdicts in order. These tests hold the two to the same report, byte for byte of its
JSON rendering, and the same exit code: on every hostile bundle of the corpus, on tampered
stores whose failing record sits before, on and after chunk boundaries and checkpoint cuts
(with chunks shrunk to a few records so a small store spans many of them), and when a worker
dies or fails.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.receipts.bundle import export_bundle
from harness.receipts.checkpoint import format_checkpoint_body
from harness.receipts.run import RunRecorder
from harness.verify import chunkcore, chunkrun, receiptprefetch, storechunk, storepool
from harness.verify.bundle import verify_bundle
from harness.verify.layout import checkpoint_member
from harness.verify.merkle import CompactRange, leaf_hash
from harness.verify.policy import TrustPolicy
from harness.verify.render import render
from harness.verify.report import Report
from harness.verify.storecheck import checkpoint_origin

from .corpus import Bundle, FixedClock, build_corpus, operator_keys

KEYS = operator_keys()
PINS = TrustPolicy(frozenset({KEYS.key_id}), "--trusted-key")
RUN = "run-1"
LINEAGE_RECORDS = 70
CUTS = (13, 32, 50)
"""Checkpoint sizes of the lineage store besides its end: inside chunks, not on their edges."""


def _report(data: bytes | Path, jobs: int, *, keyed: bool = True) -> tuple[str, int]:
    source = data if isinstance(data, Path) else io.BytesIO(data)
    report: Report = verify_bundle(
        source,
        pins=PINS,
        hmac_master=KEYS.hmac_master if keyed else None,
        jobs=jobs,
        display_name="bundle.tar",
    )
    return render(report, "json"), report.exit_code


@pytest.fixture(autouse=True)
def real_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers really fork here, also under pytest-xdist (whose channel thread would otherwise
    keep the verifier on one process), and really start."""
    monkeypatch.setattr(storepool, "FORK_WITH_THREADS", True)
    pool = storepool.ChunkPool.start(2)
    assert pool is not None
    with pool:
        assert all(process.is_alive() for process in pool._processes)


@pytest.fixture(autouse=True, params=["pure", "native", "native-threads"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with the pure-Python chunk checks (``jobs=2``: worker processes) and with the
    compiled core where it is built: ``jobs=2`` then checks chunks in worker processes
    (``native``) or, as by default, in threads of the verifier's process (``native-threads``)."""
    native = request.param != "pure"
    if native and chunkcore._import_core() is None:
        pytest.skip("the compiled core is not built here")
    monkeypatch.setattr(chunkcore, "ENABLED", native)
    monkeypatch.setattr(chunkrun, "CORE_IN_READER", request.param == "native-threads")
    return str(request.param)


@pytest.fixture(params=[4, 2048], ids=["chunks-of-4", "chunks-of-2048"])
def chunk_records(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunk capacity for the test (the workers are forked after it is set). Chunks of 4 take
    the canonical grammar (as big stores do), chunks of 2048 of these small stores decode
    their lines (as small bundles do)."""
    monkeypatch.setattr(storechunk, "MAX_CHUNK_RECORDS", request.param)
    if request.param == 4:  # and receipts checked by the workers, three at a time
        monkeypatch.setattr(storechunk, "GRAMMAR_MIN_LINES", 1)
        monkeypatch.setattr(receiptprefetch, "PARALLEL_MIN_RECEIPTS", 1)
        monkeypatch.setattr(receiptprefetch, "RECEIPT_BATCH", 3)
    return int(request.param)


@pytest.fixture(scope="module")
def base() -> bytes:
    """A run with 70 lineage records sealed at 13, 32 and 50 (and the end), and 40 audit
    events; exported by the real writers."""
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "state"
        with RunRecorder(state, RUN, KEYS, clock=FixedClock()) as run:
            signer = KEYS.note_signer()
            lineage = run.store("lineage")
            for index in range(LINEAGE_RECORDS):
                run.record("lineage", "artifact.write", _write(index))
                if index + 1 in CUTS:
                    lineage.checkpoint(signer)
            for index in range(40):
                run.record("audit", "event", {"name": f"e{index}", "data": {"i": index}})
        out = Path(folder) / "bundle.tar"
        export_bundle(state, out, KEYS)
        data = out.read_bytes()
    assert _report(data, 1)[1] == 0
    return data


def _write(index: int) -> dict[str, object]:
    return {
        "actor": "agent",
        "model": None if index % 3 else "m",
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "path": f"src/f{index % 9}.py" if index % 11 else 'src/q"u\\o\ttes.py',
        "sha256": f"{index:064x}",
        "step": index,
        "task": "t1",
    }


def _tampered(base: bytes, change: Callable[[list[bytes]], list[bytes]], store: str) -> bytes:
    bundle = Bundle.from_tar(base, KEYS)
    bundle.set_store(store, change(bundle.store(store, RUN)), RUN)
    return bundle.resign()


def _edit(
    index: int, edit: Callable[[dict[str, object]], None]
) -> Callable[[list[bytes]], list[bytes]]:
    def change(lines: list[bytes]) -> list[bytes]:
        record = orjson.loads(lines[index])
        edit(record)
        lines[index] = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
        return lines

    return change


def _set(member: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(record: dict[str, object]) -> None:
        record[member] = value

    return edit


def _set_body(member: str, value: object) -> Callable[[dict[str, object]], None]:
    def edit(record: dict[str, object]) -> None:
        body = record["body"]
        assert isinstance(body, dict)
        body[member] = value

    return edit


def _flip_mac(record: dict[str, object]) -> None:
    mac = str(record["mac"])
    record["mac"] = ("1" if mac[0] == "0" else "0") + mac[1:]


def _line_change(
    index: int, change: Callable[[bytes], bytes]
) -> Callable[[list[bytes]], list[bytes]]:
    def apply(lines: list[bytes]) -> list[bytes]:
        lines[index] = change(lines[index])
        return lines

    return apply


def _swap(index: int) -> Callable[[list[bytes]], list[bytes]]:
    def change(lines: list[bytes]) -> list[bytes]:
        lines[index], lines[index + 1] = lines[index + 1], lines[index]
        return lines

    return change


INDICES = (0, 1, 3, 4, 7, 8, 12, 13, 31, 32, 33, 49, 50, 63, 64, 69)
"""Records just before, on and after chunk edges (chunks of 4, 8, 32, 64) and cuts."""

TAMPERS: dict[str, Callable[[int], Callable[[list[bytes]], list[bytes]]]] = {
    "seq": lambda i: _edit(i, _set("seq", i + 1)),
    "time-earlier": lambda i: _edit(i, _set("time", "2000-01-01T00:00:00.000000Z")),
    "mac": lambda i: _edit(i, _flip_mac),
    "body-edited": lambda i: _edit(i, _set_body("step", 10**6 + i)),
    "schema": lambda i: _edit(i, _set_body("step", "one")),
    "big-integer": lambda i: _edit(i, _set_body("step", 10**15)),
    "not-canonical": lambda i: _line_change(i, lambda line: line.replace(b'","', b'", "', 1)),
    "not-utf8": lambda i: _line_change(i, lambda line: line.replace(b"agent", b"ag\xffnt", 1)),
    "deleted": lambda i: lambda lines: lines[:i] + lines[i + 1 :],
    "duplicated": lambda i: lambda lines: lines[: i + 1] + lines[i:],
    "swapped": lambda i: _swap(min(i, LINEAGE_RECORDS - 2)),
    "empty-line": lambda i: lambda lines: [*lines[:i], b"", *lines[i:]],
    "too-long": lambda i: lambda lines: [*lines[:i], b"x" * ((1 << 20) + 2), *lines[i:]],
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampered_lineage_same_verdict_in_parallel(
    base: bytes, chunk_records: int, tamper: str
) -> None:
    for index in INDICES:
        data = _tampered(base, TAMPERS[tamper](index), "lineage")
        sequential = _report(data, 1)
        assert sequential[1] != 0, (tamper, index)
        assert _report(data, 2) == sequential, (tamper, index)
        assert _report(data, 2, keyed=False) == _report(data, 1, keyed=False), (tamper, index)


@pytest.mark.parametrize(
    ("tamper", "check", "line"),
    [
        ("seq", "records", "line 33 (seq 33)"),
        ("time-earlier", "records", "line 33 (seq 32)"),
        ("not-canonical", "records", "line 33:"),
        ("mac", "merkle-roots", "line 50 (seq 49)"),
        ("deleted", "records", "line 33 (seq 33)"),
    ],
)
def test_the_failure_names_the_first_bad_record(
    base: bytes, chunk_records: int, tamper: str, check: str, line: str
) -> None:
    """Not only equal: right (record 32 sits on a chunk edge for chunks of 4)."""
    data = _tampered(base, TAMPERS[tamper](32), "lineage")
    report = verify_bundle(io.BytesIO(data), pins=PINS, hmac_master=KEYS.hmac_master, jobs=2)
    assert report.failure is not None
    assert report.failure.check == check
    assert line in report.failure.reason


def test_mac_only_tamper_is_an_hmac_failure_at_its_record(base: bytes, chunk_records: int) -> None:
    """A record re-chained by nobody: its MAC alone edited in a store re-sealed around it is
    found by the keyed chain, at that record, in both paths."""
    bundle = Bundle.from_tar(base, KEYS)
    lines = bundle.store("audit", RUN)
    record = orjson.loads(lines[21])
    _flip_mac(record)
    lines[21] = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    bundle.set_store("audit", lines, RUN)
    data = _reseal(bundle, "audit", lines)
    for jobs in (1, 2):
        report = verify_bundle(io.BytesIO(data), pins=PINS, hmac_master=KEYS.hmac_master, jobs=jobs)
        assert report.failure is not None, jobs
        assert report.failure.check == "hmac-chain", (jobs, report.failure)
        assert "line 22 (seq 21)" in report.failure.reason
    assert _report(data, 2) == _report(data, 1)


def _reseal(bundle: Bundle, store: str, lines: list[bytes]) -> bytes:
    """Re-sign the store's checkpoint over the edited records (what a holder of the signing
    key who lacks the HMAC key could do): only the keyed chain can tell."""
    tree = CompactRange()
    for line in lines:
        tree.append(leaf_hash(line))
    name = checkpoint_member(RUN, store, tree.size)
    assert name in bundle.members
    body = format_checkpoint_body(checkpoint_origin(RUN, store), tree.size, tree.root())
    bundle.members[name] = KEYS.note_signer().sign(body)

    def claim(manifest: dict[str, Any]) -> None:
        manifest["runs"][0]["stores"][store]["root"] = tree.root().hex()

    return bundle.resign(update=claim)


def _corpus_cases() -> Iterator[tuple[str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="corpus-"))
    for case in build_corpus(folder):
        if not case.bomb:
            yield case.name, case.path


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, Path]]:
    return list(_corpus_cases())


def test_every_corpus_case_same_report_in_parallel(
    corpus: list[tuple[str, Path]], chunk_records: int
) -> None:
    assert len(corpus) > 50
    for name, path in corpus:
        assert _report(path, 2) == _report(path, 1), name


def test_a_dead_worker_changes_nothing(base: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storechunk, "MAX_CHUNK_RECORDS", 4)
    data = _tampered(base, TAMPERS["seq"](45), "lineage")
    expected = _report(data, 1)
    started = storepool.ChunkPool.start

    def start_and_kill(workers: int) -> storepool.ChunkPool | None:
        pool = started(workers)
        assert pool is not None
        for process in pool._processes:
            process.kill()
        return pool

    monkeypatch.setattr(storepool.ChunkPool, "start", staticmethod(start_and_kill))
    assert _report(data, 2) == expected


def test_a_worker_failure_is_rechecked_here(base: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk a worker cannot check (any exception) is checked by the reader: same report."""
    monkeypatch.setattr(storechunk, "MAX_CHUNK_RECORDS", 4)
    monkeypatch.setattr(_Flaky, "parent", os.getpid())
    for data in (base, _tampered(base, TAMPERS["time-earlier"](20), "lineage")):
        expected = _report(data, 1)
        monkeypatch.setattr(storepool, "check_chunk", _flaky_check_chunk)
        assert _report(data, 2) == expected
        monkeypatch.setattr(storepool, "check_chunk", storechunk.check_chunk)


class _Flaky:
    parent = 0


def _flaky_check_chunk(task: storechunk.ChunkTask) -> storechunk.ChunkVerdict:
    """Module level, so a worker gets it by name: fails in workers on every other chunk."""
    if os.getpid() != _Flaky.parent and task.start % 8 == 4:
        raise MemoryError("worker out of memory")
    return storechunk.check_chunk(task)


def test_cli_jobs_option(base: bytes, tmp_path: Path) -> None:
    """``--jobs N`` reaches the verifier (same report as ``--jobs 1``); 0 is a usage error."""
    path = tmp_path / "bundle.tar"
    path.write_bytes(_tampered(base, TAMPERS["seq"](40), "lineage"))
    key = tmp_path / "hmac.key"
    key.write_text(KEYS.hmac_master.hex() + "\n")

    def run(*jobs: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "harness.verify.cli", str(path), "--trusted-key", KEYS.key_id,
             "--hmac-key", str(key), "--format", "json", "--quiet", *jobs],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    one, two, default = run("--jobs", "1"), run("--jobs", "2"), run()
    assert one.returncode == two.returncode == default.returncode == 1
    assert one.stdout == two.stdout == default.stdout
    assert "line 41 (seq 41)" in one.stdout
    refused = run("--jobs", "0")
    assert refused.returncode == 2
    assert "--jobs" in refused.stderr


@pytest.mark.parametrize("tamper", ["leaf-index", "swapped", "not-canonical", "truncated"])
def test_tampered_receipts_same_verdict_in_parallel(
    base: bytes, chunk_records: int, tamper: str
) -> None:
    """Each receipt edited in turn (the manifest re-signed around it): the receipts check
    names the same receipt, checked in worker batches, verified by the workers as they were
    read (``receiptprefetch``) or one by one. A swapped receipt verifies on its own and fails
    only its match with the lineage log; the others fail their own verification."""
    bundle = Bundle.from_tar(base, KEYS)
    names = sorted(name for name in bundle.members if "/receipts/" in name)
    assert len(names) >= 9
    for index, name in enumerate(names):
        tampered = bundle.copy()
        if tamper == "leaf-index":
            receipt = orjson.loads(tampered.members[name])
            receipt["leaf_index"] += 1
            tampered.members[name] = orjson.dumps(receipt, option=orjson.OPT_SORT_KEYS)
        elif tamper == "swapped":
            other = names[(index + 1) % len(names)]
            tampered.members[name] = bundle.members[other]
        elif tamper == "not-canonical":
            tampered.members[name] = bundle.members[name].replace(b'":', b'": ', 1)
        else:
            tampered.members[name] = bundle.members[name][:-9]
        data = tampered.resign()
        sequential = _report(data, 1)
        assert sequential[1] != 0, name
        assert name in sequential[0]
        assert _report(data, 2) == sequential, name
