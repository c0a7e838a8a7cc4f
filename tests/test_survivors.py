"""Planted one-line bugs that used to survive every related test (issue 20), each killed here.

Each test names the bug it kills. They were checked by planting the bug by hand in a private
copy of the tree, running this file (it fails), and reverting (it passes):

1. the keyed chain comparing only the first 16 of the 32 MAC bytes (verify/chain.py);
2. the semantics rule "a denied task never ran" missing a task denied *after* its spawn
   (verify/semantics.py);
3. the gate counting a deletion as covered by any merged action on the path, even a write;
4. the gate letting the earliest instead of the latest merged action on a path decide, within
   one run (two merged tasks) and across the runs of a bundle;
5. COSE accepting EdDSA with a key that is not Ed25519 (verify/cose.py), without any file
   from outside the repository.

Evidence is made by the project's own writers and runtime (real git, real gates, real
bundles), never hand-written record JSON, so these tests follow format changes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed448, rsa, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.orchestrate import git as hgit
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import DemoResult, _gate, make_repo, run_demo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.bundle import export_bundle
from harness.receipts.checkpoint import format_checkpoint_body
from harness.receipts.cose import sign1
from harness.receipts.keys import OperatorKeys, init_keys
from harness.receipts.merkle import MerkleTree
from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.chain import MacChain, derive_store_key
from harness.verify.checkpoint import Checkpoint
from harness.verify.cose import CoseAlgorithmError, verify_sign1
from harness.verify.errors import ChainError, MacMismatchError
from harness.verify.gate import CONTENT_DIFFERS, DELETION_NOT_ATTESTED, GateReport, run_gate
from harness.verify.merkle import leaf_hash
from harness.verify.policy import TrustPolicy
from harness.verify.records import Record, parse_record_line
from harness.verify.report import ExitCode
from harness.verify.roundcheck import folder_round_texts
from harness.verify.runcheck import open_checkpoints
from harness.verify.semantics import RunSemantics, SemanticsError, check_run_semantics
from harness.verify.storecheck import checkpoint_origin

from .evidence_helpers import event, make_keys, open_writer, verify_bytes

# ---- 1. the HMAC chain compares every byte of the MAC ---------------------------------------


def test_mac_chain_refuses_a_change_in_any_byte_of_the_mac() -> None:
    """Kills: ``compare_digest(expected.hex()[:32], claimed_hex[:32])`` (16 of 32 bytes)."""
    key = derive_store_key(b"k" * 32, "audit", "run-1")
    good = MacChain(key).next_mac(b"record bytes")
    MacChain(key).check_next(b"record bytes", good.hex())
    for index in range(len(good)):
        for mask in (0x01, 0x80):
            bad = bytearray(good)
            bad[index] ^= mask
            with pytest.raises(MacMismatchError, match="does not chain"):
                MacChain(key).check_next(b"record bytes", bad.hex())
    for claimed in (good.hex()[:32], good.hex()[:-2], good.hex() + "00", ""):
        with pytest.raises(MacMismatchError):
            MacChain(key).check_next(b"record bytes", claimed)


def _resign(data: bytes, keys: OperatorKeys) -> list[Checkpoint]:
    """Checkpoint a (forged) store with the real signing key: an insider without the HMAC key."""
    tree = MerkleTree(leaf_hash(line) for line in data.splitlines())
    body = format_checkpoint_body(checkpoint_origin("run-1", "audit"), len(tree), tree.root())
    note = keys.note_signer().sign(body)
    return open_checkpoints([("cp", note)], [keys.note_signer().verifier_key()])


def test_store_mac_changed_only_in_its_last_byte_fails_the_keyed_chain(tmp_path: Path) -> None:
    keys = make_keys()
    with open_writer(tmp_path / "audit.jsonl") as writer:
        writer.append_many([event(i) for i in range(4)])
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines(keepends=True)
    record = parse_canonical(lines[1].rstrip(b"\n"))
    mac = str(record["mac"])
    record["mac"] = mac[:-1] + ("0" if mac[-1] != "0" else "1")  # the last byte only
    lines[1] = canonical_bytes(record) + b"\n"
    forged = b"".join(lines)
    checkpoints = _resign(forged, keys)
    assert verify_bytes(forged, checkpoints, hmac_master=None).size == 4  # the tree is fine
    with pytest.raises(ChainError, match=r"line 2 \(seq 1\): MAC does not chain"):
        verify_bytes(forged, checkpoints)


# ---- shared: one real demo run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"))


def _pins(key_id: str) -> TrustPolicy:
    return TrustPolicy(frozenset({key_id}), "--trusted-key")


def _commit_of(repo: Path, subject: str) -> str:
    for line in hgit._out(repo, "log", "--format=%H %s").splitlines():
        sha, _, text = line.partition(" ")
        if text == subject:
            return sha
    raise AssertionError(f"no commit {subject!r} in {repo}")


def _gate_report(repo: Path, bundle: Path, key_id: str) -> GateReport:
    return run_gate(repo, _commit_of(repo, "initial project"), "HEAD", bundle, _pins(key_id))


def _verdicts(report: GateReport) -> dict[str, tuple[str, str, str | None]]:
    return {e.path: (e.verdict, e.reason, getattr(e, "task", None)) for e in report.files}


# ---- 2. a task denied after it was spawned ---------------------------------------------------


def _audit(demo: DemoResult) -> list[Record]:
    path = demo.repo / ".harness" / "runs" / demo.run_id / "audit.jsonl"
    return [
        parse_record_line(line, "audit", demo.run_id) for line in path.read_bytes().splitlines()
    ]


def _fold(records: list[Record]) -> None:
    """The per-record semantics rules alone: no plan policy (the forged history is not the
    plan's), and no end-of-run pass (it needs that policy; the task ends denied either way)."""
    semantics = RunSemantics(records[0].run)
    for i, record in enumerate(records):
        semantics.audit(record, f"audit seq {i}")


def _with_body(record: Record, **changes: Any) -> Record:
    return record._replace(body={**record.body, **changes})


def test_task_denied_after_its_spawn_breaks_semantics(demo: DemoResult) -> None:
    """Kills: dropping the ``task.spawned`` check when ``capability.denied`` is folded.

    The history is lawful in every other respect: the task is claimed, its batch spawned, then
    a capability denial arrives and the task moves claimed -> denied (a legal transition), with
    no lineage. Only the rule "a denied task never ran" refuses it.
    """
    records = _audit(demo)
    run_folder = demo.repo / ".harness" / "runs" / demo.run_id
    plan = (run_folder / "plan.json").read_bytes()
    where = [(r, f"audit seq {i}") for i, r in enumerate(records)]
    texts = folder_round_texts(run_folder, demo.run_id)
    events_path = run_folder / "events.jsonl"
    events = [
        (parse_record_line(line, "events", demo.run_id), f"events seq {i}")
        for i, line in enumerate(events_path.read_bytes().splitlines())
    ]
    check_run_semantics(demo.run_id, where, [], plan, members=texts, events=events)  # lawful
    by_kind: dict[str, list[Record]] = {}
    for record in records:
        by_kind.setdefault(record.kind, []).append(record)
    spawn = by_kind["agent.spawn"][0]
    task = str(spawn.body["tasks"][0])
    planned = next(r for r in by_kind["task.planned"] if r.body["task"] == task)
    moves = [r for r in by_kind["task.transition"] if r.body["task"] == task]
    to_open = next(r for r in moves if r.body["to"] == "open")
    to_claimed = next(r for r in moves if r.body["to"] == "claimed")
    denial = _with_body(by_kind["capability.denied"][0], task=task)
    to_denied = _with_body(to_claimed, **{"from": "claimed", "to": "denied"})
    history = [
        planned,
        to_open,
        to_claimed,
        _with_body(spawn, tasks=[task]),
        denial,
        to_denied,
    ]
    with pytest.raises(SemanticsError, match=f"task '{task}' denied after it ran"):
        _fold(history)
    # Control: denied before any spawn, the same records are lawful.
    _fold([planned, to_open, to_claimed, denial, to_denied])


# ---- 3. a deletion is covered only by an artifact.delete ---------------------------------------


@pytest.fixture
def clone(demo: DemoResult, tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "clone"
    shutil.copytree(demo.repo, target, ignore=shutil.ignore_patterns(".harness"))
    yield target


def test_deleting_a_file_an_agent_wrote_is_not_attested(demo: DemoResult, clone: Path) -> None:
    """Kills: ``_judge`` covering a deletion by *any* merged action on the path (here a write)."""
    written = "calc.py"
    before = _verdicts(_gate_report(clone, demo.bundle, demo.key_id))
    assert before[written][0] == "covered"  # a merged agent task wrote it
    (clone / written).unlink()
    hgit.commit_all(clone, "delete an agent-written file by hand")
    report = _gate_report(clone, demo.bundle, demo.key_id)
    assert not report.passed
    assert report.exit_code is ExitCode.INVALID
    entry = next(e for e in report.files if e.path == written)
    assert (entry.change, entry.verdict) == ("D", "uncovered")
    assert entry.reason.startswith(DELETION_NOT_ATTESTED)
    assert [e.path for e in report.uncovered] == [written]


# ---- 4. the latest merged action on a path decides ---------------------------------------------

PATH = "README.md"
FIRST = "# calc\n\nfirst version\n"
SECOND = "# calc\n\nsecond version\n"


def _task(task_id: str, content: str, depends: list[str]) -> dict[str, object]:
    return {
        "id": task_id,
        "role": "writer",
        "prompt": f"Rewrite {PATH}.",
        "scope": [PATH],
        "tools": ["edit"],
        "gates": [_gate()],
        "depends": depends,
        "edits": [{"path": PATH, "content": content}],
    }


def _run(repo: Path, keys: OperatorKeys, run_id: str, day: str, tasks: list[Any]) -> None:
    plan = {"plan": {"name": run_id, "max_batch": 1, "settle_ticks": 2}, "task": tasks}
    summary = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id=run_id,
        clock=LogicalClock(f"{day}T00:00:00"),
        capabilities=DEFAULT_MATRIX,
        git_date=f"{day}T00:00:00+00:00",
    ).run()
    assert summary is not None


def _repo(folder: Path) -> tuple[Path, OperatorKeys]:
    repo = folder / "repo"
    make_repo(repo)
    return repo, init_keys(repo / ".harness" / "keys")


def _assert_latest_decides(repo: Path, bundle: Path, keys: OperatorKeys, task: str) -> None:
    assert (repo / PATH).read_text(encoding="utf-8") == SECOND
    report = _gate_report(repo, bundle, keys.key_id)
    assert report.passed, report.reason
    verdict, _, by = _verdicts(report)[PATH]
    assert verdict == "covered"
    if by is not None:
        assert by == task
    # Put back the superseded content by hand: an earlier, overwritten write covers nothing.
    (repo / PATH).write_text(FIRST, encoding="utf-8")
    hgit.commit_all(repo, "restore the first version by hand")
    report = _gate_report(repo, bundle, keys.key_id)
    assert not report.passed
    assert _verdicts(report)[PATH][:2] == ("uncovered", CONTENT_DIFFERS)


def test_latest_of_two_merged_tasks_in_one_run_decides(tmp_path: Path) -> None:
    """Kills: ``attested_actions`` keeping the earliest write of a path (within a run)."""
    repo, keys = _repo(tmp_path)
    tasks = [_task("write-first", FIRST, []), _task("write-second", SECOND, ["write-first"])]
    _run(repo, keys, "one-run", "2026-01-01", tasks)
    bundle = export_bundle(repo / ".harness", tmp_path / "bundle.tar", keys).path
    _assert_latest_decides(repo, bundle, keys, "write-second")


def test_latest_run_of_a_bundle_decides(tmp_path: Path) -> None:
    """Kills: the earliest run's write deciding. The later run's id sorts first, so neither the
    run order in the bundle nor the run id can stand in for "latest"."""
    repo, keys = _repo(tmp_path)
    _run(repo, keys, "zz-earlier", "2026-01-01", [_task("write-first", FIRST, [])])
    _run(repo, keys, "aa-later", "2026-01-02", [_task("write-second", SECOND, [])])
    bundle = export_bundle(repo / ".harness", tmp_path / "bundle.tar", keys).path
    _assert_latest_decides(repo, bundle, keys, "write-second")


# ---- 5. EdDSA needs an Ed25519 key -------------------------------------------------------------


def test_eddsa_message_with_a_key_of_another_type_is_refused() -> None:
    """Kills: COSE EdDSA accepting any key type (no file from outside the repository)."""
    signing = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    message = sign1(b"payload", signing, kid=b"k")
    assert verify_sign1(message, signing.public_key()) == b"payload"
    others: list[Any] = [
        ec.generate_private_key(ec.SECP256R1()).public_key(),
        ec.generate_private_key(ec.SECP384R1()).public_key(),
        ed448.Ed448PrivateKey.generate().public_key(),
        x25519.X25519PrivateKey.generate().public_key(),
        rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key(),
    ]
    for key in others:
        with pytest.raises(CoseAlgorithmError, match=r"EdDSA \(-8\) needs an Ed25519 key, got"):
            verify_sign1(message, key)
