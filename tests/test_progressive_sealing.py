"""Progressive sealing (issue 11 §7): checkpoints during the run, proofs in the bundle, and the
verifier's largest unsealed stretch (docs/spec/checkpoints.md §6.1, bundle.md §8.3-§8.4).

Real stores, real signatures, a real child process killed with SIGKILL. Tampered bundles are
re-signed with the operator key where the point is a check *after* the members check (a key
holder, or a buggy producer, can write any manifest: the per-checkpoint rules must still hold).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.receipts.store import StoreError
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes
from harness.verify.checkpoint import parse_checkpoint
from harness.verify.errors import ConsistencyProofError
from harness.verify.layout import MANIFEST, MANIFEST_SIG, checkpoint_member, consistency_member
from harness.verify.merkle import verify_consistency
from harness.verify.note import open_note_signed_once
from harness.verify.policy import TrustPolicy
from harness.verify.render import render_json, render_text
from harness.verify.report import Report, Status, StoreSummary
from harness.verify.sealing import largest_unsealed

from .corpus import RUN_ID, Bundle, FixedClock, write_tar
from .evidence_helpers import make_keys

ROOT = Path(__file__).resolve().parents[1]
KEYS = make_keys()
TENS = list(range(10, 100, 10))


def _pins() -> TrustPolicy:
    return TrustPolicy(frozenset({KEYS.key_id}), "test")


def _event(n: int, tag: str = "") -> dict[str, Any]:
    return {"name": f"e{n}{tag}", "data": {"n": n}}


def _record(state: Path, count: int, *, tag_from: int | None = None, **sealing: Any) -> None:
    """``count`` audit records (and every fifth also in lineage), then the run-end seal."""
    with RunRecorder(state, RUN_ID, KEYS, clock=FixedClock(), **sealing) as run:
        for n in range(count):
            tag = "-fork" if tag_from is not None and n >= tag_from else ""
            run.record("audit", "event", _event(n, tag))
        run.checkpoint_all()


def _sizes(state: Path, store: str = "audit") -> list[int]:
    folder = state / "runs" / RUN_ID / "checkpoints" / store
    return sorted(int(p.stem) for p in folder.glob("*.note")) if folder.is_dir() else []


def _export(state: Path, out: Path, **options: Any) -> bytes:
    export_bundle(state, out, KEYS, **options)
    return out.read_bytes()


def _verify(data: bytes) -> Report:
    return verify_bundle(data, pins=_pins())


def _store(report: Report, store: str = "audit") -> StoreSummary:
    return next(s for s in report.stores if s.store == store)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """95 audit records sealed every 10: checkpoints 10..90 during the run, 95 at its end."""
    folder = tmp_path_factory.mktemp("sealed")
    _record(folder / "state", 95, seal_every_records=10)
    return folder / "state", _export(folder / "state", folder / "bundle.tar")


# ---------------------------------------------------------------------------- the recorder


def test_every_ten_records_a_checkpoint_then_the_final_one(sealed: tuple[Path, bytes]) -> None:
    state, data = sealed
    assert _sizes(state) == [*TENS, 95]
    for store in ("lineage", "replay", "control"):
        assert _sizes(state, store) == [0]  # untouched stores: only the run-end seal
    manifest = Bundle.from_tar(data, KEYS).manifest
    assert manifest["runs"][0]["stores"]["audit"]["checkpoints"] == [*TENS, 95]
    report = _verify(data)
    assert report.status is Status.VERIFIED, report.failure
    assert report.check("consistency-proofs").detail == "9 consistency proofs verify"
    audit = _store(report)
    assert audit.checkpoints == (*TENS, 95)
    assert audit.largest_unsealed == 10
    assert _store(report, "lineage").largest_unsealed == 0
    assert (
        "at most 10 records unsealed at once (run-1/audit)" in report.check("merkle-roots").detail
    )


def test_report_carries_largest_unsealed_in_json_and_text(sealed: tuple[Path, bytes]) -> None:
    report = _verify(sealed[1])
    doc = json.loads(render_json(report))
    audit = next(s for s in doc["stores"] if s["store"] == "audit")
    assert audit["largest_unsealed"] == 10
    assert audit["checkpoints"] == [*TENS, 95]
    text = render_text(report)
    header = next(line for line in text.splitlines() if "RECORDS" in line)
    assert "MAX-UNSEALED" in header.split()
    row = next(line for line in text.splitlines() if " audit " in line and "run-1" in line)
    assert row.split()[2:5:2] == ["95", "10"]
    assert "(10 checkpoints)" in row


def test_harness_verify_json_and_text_show_it(sealed: tuple[Path, bytes], tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.tar"
    bundle.write_bytes(sealed[1])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "harness.verify.cli", *args, "--trusted-key", KEYS.key_id,
             str(bundle)],
            cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    done = cli("--format", "json")
    assert done.returncode == 0, done.stderr
    stores = {s["store"]: s for s in json.loads(done.stdout)["stores"]}
    assert (stores["audit"]["largest_unsealed"], stores["control"]["largest_unsealed"]) == (10, 0)
    text = cli().stdout
    assert "MAX-UNSEALED" in text
    assert "at most 10 records unsealed at once (run-1/audit)" in text


def test_without_sealing_the_whole_store_was_unsealed(tmp_path: Path) -> None:
    _record(tmp_path / "state", 95)
    assert _sizes(tmp_path / "state") == [95]
    report = _verify(_export(tmp_path / "state", tmp_path / "b.tar"))
    assert report.status is Status.VERIFIED, report.failure
    assert _store(report).checkpoints == (95,)
    assert _store(report).largest_unsealed == 95


def test_sealing_changes_no_record_byte_nor_root(tmp_path: Path) -> None:
    """Sealing instants are not records: the stores and their roots are identical."""
    _record(tmp_path / "plain", 95)
    _record(tmp_path / "sealed", 95, seal_every_records=10, seal_every_s=0.001)
    for store in ("audit", "lineage"):
        plain = (tmp_path / "plain" / "runs" / RUN_ID / f"{store}.jsonl").read_bytes()
        other = (tmp_path / "sealed" / "runs" / RUN_ID / f"{store}.jsonl").read_bytes()
        assert plain == other
    reports = [_verify(_export(tmp_path / s, tmp_path / f"{s}.tar")) for s in ("plain", "sealed")]
    assert _store(reports[0]).root == _store(reports[1]).root
    assert _store(reports[1]).checkpoints != _store(reports[0]).checkpoints


def test_lineage_store_sealed_like_the_others(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with RunRecorder(state, RUN_ID, KEYS, clock=FixedClock(), seal_every_records=3) as run:
        writer = run.store("lineage")
        for n in range(7):
            writer.append("artifact.write", _artifact(n))
        assert _sizes(state, "lineage") == [3, 6]
        assert writer.unsealed == 1
        run.checkpoint_all()
    plain = tmp_path / "plain"
    with RunRecorder(plain, RUN_ID, KEYS, clock=FixedClock()) as run:
        for n in range(7):
            run.store("lineage").append("artifact.write", _artifact(n))
        run.checkpoint_all()
    reports = [_verify(_export(s, tmp_path / f"{s.name}.tar")) for s in (state, plain)]
    assert all(r.status is Status.VERIFIED for r in reports), [r.failure for r in reports]
    lineages = [_store(r, "lineage") for r in reports]
    assert lineages[0].root == lineages[1].root
    assert (lineages[0].largest_unsealed, lineages[1].largest_unsealed) == (3, 7)


def _artifact(n: int) -> dict[str, Any]:
    return {
        "actor": "agent",
        "model": "m",
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "path": f"src/f{n}.py",
        "sha256": hashlib.sha256(b"%d" % n).hexdigest(),
        "step": n,
        "task": "t1",
    }


def test_a_group_commit_is_sealed_once_after_it(tmp_path: Path) -> None:
    """Thresholds are checked after each append call: a batch of 25 gives one checkpoint."""
    state = tmp_path / "state"
    with RunRecorder(state, RUN_ID, KEYS, seal_every_records=10) as run:
        run.store("audit").append_many([("event", _event(n)) for n in range(25)])
        assert _sizes(state) == [25]
        run.store("audit").append_many([("event", _event(n)) for n in range(9)])
        assert _sizes(state) == [25]
        run.record("audit", "event", _event(99))
        assert _sizes(state) == [25, 35]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_time_threshold_on_append_and_on_tick(tmp_path: Path) -> None:
    state = tmp_path / "state"
    clock = _Clock()
    with RunRecorder(state, RUN_ID, KEYS, seal_every_s=5.0, monotonic=clock) as run:
        for n in range(12):  # one record per second
            run.record("audit", "event", _event(n))
            clock.now += 1
        # t=1000 open; appends at 1000..1011: sealed at t=1005 (6 records), t=1010 (11)
        assert _sizes(state) == [6, 11]
        assert run.seal_due() == []  # 1 unsealed, but only 2 s since the last seal
        clock.now += 10
        assert [p.name for p in run.seal_due()] == [f"{12:020d}.note"]
        assert run.seal_due() == []  # nothing new to seal, however long it waits
        clock.now += 100
        assert _sizes(state) == [6, 11, 12]
        assert run.store("control").unsealed == 0


def test_seal_due_is_inert_without_a_time_threshold(tmp_path: Path) -> None:
    clock = _Clock()
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=50, monotonic=clock) as run:
        run.record("audit", "event", _event(0))
        clock.now += 10**6
        assert run.seal_due() == []
        assert _sizes(tmp_path) == []


def test_a_resumed_recorder_counts_from_the_newest_checkpoint_on_disk(tmp_path: Path) -> None:
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=10) as run:
        for n in range(25):
            run.record("audit", "event", _event(n))
    assert _sizes(tmp_path) == [10, 20]
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=10) as run:
        assert run.store("audit").sealed_size == 20
        assert run.store("audit").unsealed == 5
        for n in range(5):
            run.record("audit", "event", _event(n))
    assert _sizes(tmp_path) == [10, 20, 30]


def test_a_store_that_lost_sealed_records_counts_from_what_it_still_has(tmp_path: Path) -> None:
    """Checkpoints beyond the store (its tail was lost under them) are not "sealed so far";
    sealing over one of them is refused, from the append that reaches it."""
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=10) as run:
        for n in range(25):
            run.record("audit", "event", _event(n))
    path = tmp_path / "runs" / RUN_ID / "audit.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:15]))
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=10) as run:
        writer = run.store("audit")
        assert (writer.sealed_size, writer.unsealed) == (10, 5)
        for n in range(4):
            run.record("audit", "event", _event(n, "-other"))
        with pytest.raises(StoreError, match="refusing to replace a signed checkpoint"):
            run.record("audit", "event", _event(4, "-other"))
        assert writer.size == 20  # durable, but the run cannot go on sealed: it must stop


def test_respace_changes_the_record_threshold_from_the_next_append(tmp_path: Path) -> None:
    with RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_records=10) as run:
        for n in range(6):
            run.record("audit", "event", _event(n))
        run.respace(4)  # narrower (after a failure): 6 unsealed >= 4 seals on the next append
        assert run.seal_every_records == 4
        assert _sizes(tmp_path) == []
        run.record("audit", "event", _event(6))
        assert _sizes(tmp_path) == [7]
        run.respace(20)
        for n in range(19):
            run.record("audit", "event", _event(n))
        assert _sizes(tmp_path) == [7]
        run.record("audit", "event", _event(19))
        assert _sizes(tmp_path) == [7, 27]
        with pytest.raises(ValueError, match="seal_every_records"):
            run.respace(0)
    with (
        RunRecorder(tmp_path, RUN_ID, KEYS, seal_every_s=5.0) as run,
        pytest.raises(ValueError, match="does not seal by record count"),
    ):
        run.respace(10)


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("seal_every_records", 0, ValueError),
        ("seal_every_records", -3, ValueError),
        ("seal_every_records", True, TypeError),
        ("seal_every_records", 2.5, TypeError),
        ("seal_every_s", 0, ValueError),
        ("seal_every_s", -0.5, ValueError),
        ("seal_every_s", float("nan"), ValueError),
        ("seal_every_s", "5", TypeError),
    ],
)
def test_thresholds_must_be_positive_numbers(
    tmp_path: Path, option: str, value: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match=option):
        RunRecorder(tmp_path, RUN_ID, KEYS, **{option: value})


# ---------------------------------------------------------------------------- the verifier


def _tampered(data: bytes, edit: Any, *, resign: bool = True) -> Report:
    bundle = Bundle.from_tar(data, KEYS)
    edit(bundle)
    return _verify(bundle.resign() if resign else bundle.tar())


def _failed(report: Report, check: str, pattern: str) -> None:
    assert report.status is Status.INVALID
    assert report.failure is not None
    assert report.failure.check == check, report.failure
    assert pattern in report.failure.reason, report.failure.reason


CP20 = checkpoint_member(RUN_ID, "audit", 20)
CP30 = checkpoint_member(RUN_ID, "audit", 30)
PROOF = consistency_member(RUN_ID, "audit", 20, 30)


def test_deleting_a_middle_checkpoint_fails(sealed: tuple[Path, bytes]) -> None:
    data = sealed[1]
    plain = _tampered(data, lambda b: b.members.pop(CP20), resign=False)
    _failed(plain, "members", f"{CP20}: listed in manifest.json but missing")
    relisted = _tampered(data, lambda b: b.members.pop(CP20))
    _failed(relisted, "members", f"{CP20}: required by the runs but absent")
    assert relisted.failure is not None and relisted.failure.member == CP20


def test_deleting_a_checkpoint_from_the_claim_needs_a_proof_across_the_gap(
    sealed: tuple[Path, bytes],
) -> None:
    def drop(bundle: Bundle) -> None:
        bundle.members.pop(CP20)
        bundle.members.pop(consistency_member(RUN_ID, "audit", 10, 20))
        bundle.members.pop(PROOF)
        claim = bundle.manifest
        claim["runs"][0]["stores"]["audit"]["checkpoints"].remove(20)
        bundle.members[MANIFEST] = canonical_bytes(claim)

    report = _tampered(sealed[1], drop)
    gap = consistency_member(RUN_ID, "audit", 10, 30)
    _failed(report, "members", f"{gap}: required by the runs but absent")


def test_a_flipped_proof_byte_fails(sealed: tuple[Path, bytes]) -> None:
    def flip(bundle: Bundle) -> None:
        doc = json.loads(bundle.members[PROOF])
        first = doc["proof"][0]
        doc["proof"][0] = ("1" if first[0] == "0" else "0") + first[1:]
        bundle.members[PROOF] = canonical_bytes(doc)

    _failed(_tampered(sealed[1], flip, resign=False), "members", f"{PROOF}: SHA-256 differs")
    report = _tampered(sealed[1], flip)
    _failed(report, "consistency-proofs", f"{PROOF}: ")
    assert report.failure is not None and report.failure.member == PROOF
    assert "computed root" in report.failure.reason


def test_a_non_canonical_proof_fails(sealed: tuple[Path, bytes]) -> None:
    def spaced(bundle: Bundle) -> None:
        doc = json.loads(bundle.members[PROOF])
        bundle.members[PROOF] = json.dumps(doc, sort_keys=True, indent=1).encode()

    report = _tampered(sealed[1], spaced)
    _failed(report, "consistency-proofs", f"{PROOF}: ")
    assert "canonical" in report.failure.reason.lower()  # type: ignore[union-attr]


def test_swapped_checkpoints_fail(sealed: tuple[Path, bytes]) -> None:
    def swap(bundle: Bundle) -> None:
        members = bundle.members
        members[CP20], members[CP30] = members[CP30], members[CP20]

    _failed(_tampered(sealed[1], swap, resign=False), "members", f"{CP20}: SHA-256 differs")
    report = _tampered(sealed[1], swap)
    _failed(report, "merkle-roots", f"{CP20}: checkpoint size 30 does not match its name")


def test_members_out_of_order_fail(sealed: tuple[Path, bytes]) -> None:
    bundle = Bundle.from_tar(sealed[1], KEYS)
    head = [(n, bundle.members[n]) for n in (MANIFEST, MANIFEST_SIG)]
    rest = sorted((n, d) for n, d in bundle.members.items() if n not in (MANIFEST, MANIFEST_SIG))
    at = [n for n, _ in rest].index(CP20)
    rest[at], rest[at + 1] = rest[at + 1], rest[at]
    report = _verify(write_tar([*head, *rest]))
    assert report.status is Status.UNREADABLE
    assert report.failure is not None and report.failure.check == "archive"
    assert "not in the exporter's order" in report.failure.reason


def test_an_extra_proof_fails(sealed: tuple[Path, bytes]) -> None:
    extra = consistency_member(RUN_ID, "audit", 10, 30)

    def add(bundle: Bundle) -> None:
        bundle.members[extra] = bundle.members[PROOF]

    _failed(_tampered(sealed[1], add, resign=False), "members", f"{extra}: not listed")
    _failed(_tampered(sealed[1], add), "members", f"{extra}: not a member this bundle's runs")


def _fork_note(tmp_path: Path) -> bytes:
    """The size-50 checkpoint of a fork: same run, key and first 45 records, then others."""
    _record(tmp_path / "fork", 95, tag_from=45, seal_every_records=10)
    return (
        tmp_path / "fork" / "runs" / RUN_ID / "checkpoints" / "audit" / f"{50:020d}.note"
    ).read_bytes()


def test_a_checkpoint_of_a_forked_store_fails(sealed: tuple[Path, bytes], tmp_path: Path) -> None:
    fork = _fork_note(tmp_path)
    name = checkpoint_member(RUN_ID, "audit", 50)
    ours = Bundle.from_tar(sealed[1], KEYS).members[name]
    vkey = [KEYS.note_signer().verifier_key()]
    mine = parse_checkpoint(open_note_signed_once(ours, vkey).text.encode())
    theirs = parse_checkpoint(open_note_signed_once(fork, vkey).text.encode())
    assert (mine.size, mine.origin) == (theirs.size, theirs.origin)
    assert mine.root_hash != theirs.root_hash  # same size, validly signed, different root

    def replace(bundle: Bundle) -> None:
        bundle.members[name] = fork

    report = _tampered(sealed[1], replace)
    _failed(report, "merkle-roots", "Merkle root of the first 50 records is")
    assert report.failure is not None and report.failure.line == 50


def test_a_reader_without_the_records_detects_the_fork_by_its_proofs(
    sealed: tuple[Path, bytes], tmp_path: Path
) -> None:
    """The consistency proofs alone (no records) refuse the forked checkpoint."""
    fork = _fork_note(tmp_path)
    members = Bundle.from_tar(sealed[1], KEYS).members
    vkey = [KEYS.note_signer().verifier_key()]

    def cp(size: int) -> Any:
        note = members[checkpoint_member(RUN_ID, "audit", size)]
        return parse_checkpoint(open_note_signed_once(note, vkey).text.encode())

    forked = parse_checkpoint(open_note_signed_once(fork, vkey).text.encode())
    for older, newer in ((40, 50), (50, 60)):
        doc = json.loads(members[consistency_member(RUN_ID, "audit", older, newer)])
        proof = [bytes.fromhex(h) for h in doc["proof"]]
        roots = [cp(older).root_hash, cp(newer).root_hash]
        verify_consistency(older, newer, proof, *roots)  # the genuine pair is consistent
        roots[roots.index(cp(50).root_hash)] = forked.root_hash
        with pytest.raises(ConsistencyProofError):
            verify_consistency(older, newer, proof, *roots)


def test_largest_unsealed_counts_from_zero_to_the_store_size() -> None:
    assert largest_unsealed([*TENS, 95], 95) == 10
    assert largest_unsealed([95], 95) == 95
    assert largest_unsealed([0], 0) == 0
    assert largest_unsealed([0, 3, 4], 4) == 3
    assert largest_unsealed([2, 40], 40) == 38
    with pytest.raises(ValueError, match="do not rise"):
        largest_unsealed([10, 5], 10)
    with pytest.raises(ValueError, match="do not rise"):
        largest_unsealed([10], 5)


# ---------------------------------------------------------------------------- a crash

_CHILD = """
import sys
from pathlib import Path
from harness.receipts.run import RunRecorder
from harness.receipts.store import StoreError
from tests.evidence_helpers import make_keys

state = Path(sys.argv[1])
with RunRecorder(state, "run-1", make_keys(), seal_every_records=10) as run:
    n = 0
    while True:
        run.record("audit", "event", {"name": f"e{n}", "data": {"n": n}})
        print(n, flush=True)
        n += 1
"""


def test_a_killed_writer_leaves_a_verifiable_sealed_prefix(tmp_path: Path) -> None:
    state = tmp_path / "state"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(state)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:
        if int(line) >= 36:  # acknowledged 37 records: sealed at 10, 20, 30 at least
            break
    child.send_signal(signal.SIGKILL)  # mid-append, mid-seal or in between: wherever it is
    child.wait(timeout=30)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    sealed_sizes = _sizes(state)
    newest = sealed_sizes[-1]
    assert sealed_sizes == list(range(10, newest + 1, 10)) and newest >= 30
    notes_before = sorted((state / "runs" / RUN_ID / "checkpoints").rglob("*"))

    prefix = _verify(_export(state, tmp_path / "prefix.tar", seal=False))
    assert prefix.status is Status.VERIFIED, prefix.failure
    assert _store(prefix).records == newest
    assert _store(prefix).checkpoints == tuple(sealed_sizes)
    assert _store(prefix).largest_unsealed == 10
    assert _store(prefix, "control").checkpoints == (0,)  # signed in memory, never written
    assert sorted((state / "runs" / RUN_ID / "checkpoints").rglob("*")) == notes_before

    full = _verify(_export(state, tmp_path / "full.tar"))  # recovers a torn tail, then seals
    assert full.status is Status.VERIFIED, full.failure
    audit = _store(full)
    assert audit.records >= 37
    assert audit.checkpoints == (*sealed_sizes, audit.records)
    unsealed_at_crash = audit.records - newest
    # at most 10: the tenth unsealed record triggers the seal before the next append starts,
    # and a torn line (recovered as one store.recovered record) means at most 9 were complete
    assert 0 < unsealed_at_crash <= 10
    assert audit.largest_unsealed == 10
    row = next(line for line in render_text(full).splitlines() if " audit " in line)
    assert row.split()[4] == str(audit.largest_unsealed)
