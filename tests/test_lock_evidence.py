"""The verifier's write-lock check, end to end: runs recorded with the project's own writers.

A lawful run (docs/spec/runtime.md, "Write locks") has two batches in flight at once with
disjoint locks (``src/**`` and ``README.md`` + ``tests/**``), a batch on ``src/a.py`` that
acquires only after the ``src/**`` lock is released, and a ``**`` batch alone at the end;
every write and delete falls under its batch's lock. Each other test breaks one rule in one
record and is refused by the semantics check, naming the record and the batches. A real
parallel run verifies, and a copy of its records re-signed with one release moved is refused.
The fold itself is also driven directly for the crash cases (no ``run.end``).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, matrix_object
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.fsm import TaskState
from harness.verify.lockcheck import LockCheck, LockError, lock_check
from harness.verify.policy import TrustPolicy
from harness.verify.records import Record
from harness.verify.runchecks import run_checks

from .evidence_helpers import make_keys, with_control
from .test_orchestrate_runtime import (  # the adapter registry guard and the runtime helpers
    _records,
    _restore_adapter_registry,  # noqa: F401  (autouse fixture: unregisters test adapters)
    _runtime,
    _script,
    _verified,
)

RUN = "r1"
BASE = "1" * 40
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
NO_LIMIT = {"wall_ms": None, "tokens": None, "cost_micros": None}
PLAN = parse_plan(
    {
        "plan": {"name": "p", "concurrency": {"coder": 2, "tester": 1}},
        "task": [
            {"id": "t1", "role": "coder", "prompt": "a", "scope": ["src/**"]},
            {"id": "t2", "role": "tester", "prompt": "b", "scope": ["tests/**", "README.md"]},
            {"id": "t3", "role": "coder", "prompt": "c", "scope": ["src/a.py"]},
            {"id": "t4", "role": "docs", "prompt": "d"},
        ],
    }
)
LOCKS = {"b0001": ["src/**"], "b0002": ["README.md", "tests/**"], "b0003": ["src/a.py"],
         "b0004": ["**"]}  # fmt: skip
TASK_OF = {"b0001": "t1", "b0002": "t2", "b0003": "t3", "b0004": "t4"}
ROLE_OF = {"t1": "coder", "t2": "tester", "t3": "coder", "t4": "docs"}
Body = dict[str, Any]
Row = tuple[str, str, Body]
Records = list[Row]


def _move(task: str, a: str, b: str) -> Row:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": "r"})


def _acquire(batch: str, globs: list[str] | None = None) -> Row:
    return ("audit", "lock.acquire", {"batch": batch, "globs": LOCKS[batch] if globs is None
                                      else globs})  # fmt: skip


def _release(batch: str, reason: str = "retired") -> Row:
    return ("audit", "lock.release", {"batch": batch, "reason": reason})


def _spawn(batch: str) -> Row:
    task = TASK_OF[batch]
    body = {
        "batch": batch,
        "tasks": [task],
        "adapter": "scripted",
        "branch": f"harness/{RUN}/{batch}",
        "worktree": "/w",
        "timeout_ms": 1000,
        "sandbox": NO_SANDBOX,
        "env": ["PATH"],
        "supervisor": f"role:{ROLE_OF[task]}",
        "attempt": 1,
        "idle_ms": None,
        "lifetime_ms": 1000,
        "grace_ms": 2000,
        "lock": LOCKS[batch],
        "budget": NO_LIMIT,
        "config": 1,
    }
    return ("audit", "agent.spawn", body)


def _exit(batch: str) -> Row:
    body = {"batch": batch, "exit_code": 0, "signal": None, "timed_out": False,
            "duration_ms": 10, "anomaly": None, "usage": None}  # fmt: skip
    return ("audit", "agent.exit", body)


def _artifact(task: str, path: str, step: int, kind: str = "artifact.write") -> Row:
    if kind == "artifact.delete":
        body: Body = {"path": path, "parents": ["ab" * 32], "parent_mode": "100644",
                      "actor": "scripted", "task": task, "step": step, "model": None}  # fmt: skip
    else:
        body = {"path": path, "sha256": "ab" * 32, "mode": "100644", "parents": [],
                "parent_mode": None, "actor": "scripted", "task": task, "step": step,
                "model": None}  # fmt: skip
    return ("lineage", kind, body)


def _start(batch: str) -> Records:
    task = TASK_OF[batch]
    return [_move(task, "open", "claimed"), _acquire(batch), _spawn(batch),
            _move(task, "claimed", "in_progress")]  # fmt: skip


def _end(batch: str) -> Records:
    return [_exit(batch), _move(TASK_OF[batch], "in_progress", "failed"), _release(batch)]


def lawful() -> Records:
    start = {
        "plan": "p",
        "plan_sha256": hashlib.sha256(plan_bytes(PLAN)).hexdigest(),
        "producer": "harness test",
        "harness_version": "0",
        "base_commit": BASE,
        "repository_roots": [BASE],
        "capabilities": matrix_object(DEFAULT_MATRIX),
        "capsule": None,
        "sandbox": NO_SANDBOX,
    }
    planned = [
        ("audit", "task.planned", {"task": t.id, "role": t.role, "priority": t.priority,
         "depends": list(t.depends), "adapter": t.adapter, "tools": list(t.tools)})
        for t in PLAN.tasks
    ]  # fmt: skip
    return [
        ("audit", "run.start", start),
        *planned,
        *[_move(t.id, "planned", "open") for t in PLAN.tasks],
        *_start("b0001"),
        *_start("b0002"),  # in flight together with b0001: the locks are disjoint
        _artifact("t2", "tests/test_a.py", 0),
        _artifact("t2", "README.md", 1, "artifact.delete"),
        *_end("b0002"),
        _artifact("t1", "src/x/y.py", 2),
        *_end("b0001"),
        *_start("b0003"),  # src/a.py: only once src/** is released
        _artifact("t3", "src/a.py", 3),
        *_end("b0003"),
        *_start("b0004"),
        _artifact("t4", "docs/new.md", 4),
        *_end("b0004"),
        ("audit", "run.end", {"outcome": "completed"}),
    ]


def _verify(tmp_path: Path, records: Records) -> Any:
    keys = make_keys()
    state = tmp_path / "state"
    with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(plan_bytes(PLAN))
        for store, kind, body in with_control(records, plan_bytes(PLAN)):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def _index(records: Records, kind: str, batch: str) -> int:
    return next(i for i, r in enumerate(records) if r[1] == kind and r[2].get("batch") == batch)


def test_lawful_run_with_parallel_locks_verifies(tmp_path: Path) -> None:
    report = _verify(tmp_path, lawful())
    assert report.status.value == "verified", report.failure


def test_the_lock_check_is_registered() -> None:
    assert any(isinstance(check, LockCheck) for check in run_checks(RUN, None))


# --- each rule, broken in one record -------------------------------------------------------


def _overlap(records: Records) -> Records:
    """b0003 (src/a.py) acquires while b0001 (src/**) still holds its lock."""
    block = records[_index(records, "lock.acquire", "b0003") - 1 :][:4]
    rest = [r for r in records if r not in block]
    at = _index(rest, "agent.exit", "b0001")
    return rest[:at] + block + rest[at:]


def _spawn_without_lock(records: Records) -> Records:
    del records[_index(records, "lock.acquire", "b0002")]
    return records


def _spawn_after_release(records: Records) -> Records:
    release = records.pop(_index(records, "lock.release", "b0002"))
    records.insert(_index(records, "lock.acquire", "b0002") + 1, release)
    return records


def _spawn_lock_differs(records: Records) -> Records:
    at = _index(records, "agent.spawn", "b0002")
    store, kind, body = records[at]
    records[at] = (store, kind, {**body, "lock": ["tests/**"]})
    return records


def _lock_not_the_plan_scope(records: Records) -> Records:
    for kind, member in (("lock.acquire", "globs"), ("agent.spawn", "lock")):
        at = _index(records, kind, "b0003")
        store, k, body = records[at]
        records[at] = (store, k, {**body, member: ["src/**"]})
    return records


def _release_not_held(records: Records) -> Records:
    records.insert(_index(records, "lock.release", "b0002") + 1, _release("b0002"))
    return records


def _acquire_twice(records: Records) -> Records:
    records.insert(_index(records, "lock.acquire", "b0001") + 1, _acquire("b0001"))
    return records


def _write_outside(records: Records) -> Records:
    at = next(i for i, r in enumerate(records) if r[2].get("path") == "tests/test_a.py")
    records[at] = _artifact("t2", "src/evil.py", 0)
    return records


def _delete_outside(records: Records) -> Records:
    at = next(i for i, r in enumerate(records) if r[2].get("path") == "src/a.py")
    records[at] = _artifact("t3", "src/b.py", 3, "artifact.delete")
    return records


def _end_while_held(records: Records) -> Records:
    del records[_index(records, "lock.release", "b0004")]
    return records


def _bad_glob(records: Records) -> Records:
    at = _index(records, "lock.acquire", "b0002")
    records[at] = _acquire("b0002", ["../x"])
    return records


def _unsorted(records: Records) -> Records:
    at = _index(records, "lock.acquire", "b0002")
    records[at] = _acquire("b0002", ["tests/**", "README.md"])
    return records


CASES: list[tuple[str, Callable[[Records], Records], list[str]]] = [
    ("intersecting locks held at once", _overlap,
     ["batch 'b0003' acquires a lock that intersects the lock batch 'b0001' holds",
      "'src/a.py' and 'src/**'"]),
    ("spawn without a lock", _spawn_without_lock,
     ["batch 'b0002' is spawned without holding its lock"]),
    ("spawn after the lock was released", _spawn_after_release,
     ["batch 'b0002' is spawned without holding its lock"]),
    ("spawn lock differs from the acquired globs", _spawn_lock_differs,
     ["batch 'b0002' is spawned with lock ['tests/**'] but acquired ['README.md', 'tests/**']"]),
    ("lock is not the tasks' plan scopes", _lock_not_the_plan_scope,
     ["batch 'b0003' locks ['src/**'], but the union of its tasks' scopes in the plan is "
      "['src/a.py']"]),
    ("release of a lock not held", _release_not_held,
     ["batch 'b0002' releases a lock it does not hold"]),
    ("acquire twice without release", _acquire_twice,
     ["batch 'b0001' acquires a lock again without releasing the one it acquired at"]),
    ("write outside the lock", _write_outside,
     ["artifact 'src/evil.py' of task 't2' is outside the lock of every batch the task ran in",
      "'b0002' ['README.md', 'tests/**']"]),
    ("delete outside the lock", _delete_outside,
     ["artifact 'src/b.py' of task 't3' is outside the lock", "'b0003' ['src/a.py']"]),
    ("run ends while a lock is held", _end_while_held,
     ["the run ends while batches still hold locks: 'b0004' (acquired at"]),
    ("a bad glob", _bad_glob, ["batch 'b0002' locks a bad glob '../x'"]),
    ("unsorted globs", _unsorted, ["batch 'b0002' lock globs must be sorted without repeats"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "breaks", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_is_refused(
    tmp_path: Path, name: str, breaks: Callable[[Records], Records], expected: list[str]
) -> None:
    report = _verify(tmp_path, breaks(lawful()))
    assert report.status.value == "invalid", name
    assert report.failure.check == "semantics", report.failure
    reason = report.failure.reason
    for text in expected:
        assert text in reason, reason
    where = "lineage" if "artifact" in expected[0] else "audit"
    assert reason.startswith(f"runs/{RUN}/stores/{where}.jsonl line "), reason  # the record


# --- crashes: the fold driven directly -------------------------------------------------------


def _as_records(rows: Records) -> list[tuple[Record, str]]:
    out = []
    for seq, (store, kind, body) in enumerate(rows):
        record = Record(store, RUN, seq, "2026-01-01T00:00:00.000000Z", kind, body, "")
        out.append((record, f"runs/{RUN}/{store}.jsonl:{seq + 1}"))
    return out


def _fold(rows: Records) -> LockCheck:
    check = lock_check(RUN, plan_bytes(PLAN))
    for record, where in _as_records(rows):
        (check.audit if record.store == "audit" else check.lineage)(record, where)
    check.finish()
    return check


def test_a_crashed_run_may_end_with_locks_held() -> None:
    rows = [r for r in lawful() if r[0] == "audit" and r[1] != "run.end"]
    del rows[_index(rows, "lock.release", "b0004")]
    assert sorted(_fold(rows).held) == ["b0004"]


def test_the_resumed_runtime_releases_the_crashed_lock_first() -> None:
    rows = [r for r in lawful() if r[0] == "audit" and r[1] != "run.end"]
    at = _index(rows, "lock.release", "b0004")
    rows[at] = _release("b0004", "runtime crash")
    rows.append(("audit", "run.end", {"outcome": "completed"}))
    assert _fold(rows).held == {}


def test_without_a_plan_member_the_lock_is_not_bound_to_scopes() -> None:
    rows = _lock_not_the_plan_scope(lawful())
    check = lock_check(RUN, None)
    for record, where in _as_records(rows):
        (check.audit if record.store == "audit" else check.lineage)(record, where)
    with pytest.raises(LockError, match="batch 'b0003' locks"):
        _fold(rows)


def test_a_write_falls_under_some_batch_of_its_task() -> None:
    """A task spawned twice (two attempts, two batches): a write under either lock passes, a
    write under neither names both."""
    check = LockCheck(RUN, None)
    rows: Records = [
        _acquire("b0001", ["a/**"]),
        ("audit", "agent.spawn", {**_spawn("b0001")[2], "lock": ["a/**"]}),
        _release("b0001"),
        _acquire("b0002", ["b/**"]),
        ("audit", "agent.spawn", {**_spawn("b0002")[2], "tasks": ["t1"], "lock": ["b/**"]}),
        _release("b0002"),
        _artifact("t1", "a/x", 0),
        _artifact("t1", "b/y", 1),
        _artifact("t9", "z", 2),  # never spawned: the semantics check's to refuse
    ]
    for record, where in _as_records(rows):
        (check.audit if record.store == "audit" else check.lineage)(record, where)
    with pytest.raises(LockError, match=r"'b0001' \['a/\*\*'\], 'b0002' \['b/\*\*'\]"):
        check.lineage(*_as_records([_artifact("t1", "c/z", 3)])[0])


# --- a real run: the runtime's own lock records ----------------------------------------------


def _rerecord(state: Path, tmp: Path, keys: Any, audit: list[Body], lineage: list[Body]) -> Any:
    """The records of a real run written again by the project's writer (so a forged copy is
    signed as the operator would sign it) and verified."""
    out = tmp / "state"
    plan = (state / "runs" / RUN / "plan.json").read_bytes()
    with RunRecorder(out, RUN, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(plan)
        for record in audit:
            recorder.record("audit", record["kind"], record["body"])
        for record in lineage:
            recorder.record("lineage", record["kind"], record["body"])
        recorder.checkpoint_all()
    bundle = export_bundle(out, tmp / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def test_a_real_parallel_run_verifies_and_a_forged_overlap_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    adapter = _script(tmp_path, "lockwriter.py", """
        import pathlib, sys, time
        task = sys.stdin.read().split("]", 1)[0].lstrip("[")
        target = {"wide": "shared/wide.txt", "narrow": "shared/n.txt", "other": "other/o.txt"}
        time.sleep(0.4)
        path = pathlib.Path(target[task])
        path.parent.mkdir(exist_ok=True)
        path.write_text(task + "\\n")
    """)  # fmt: skip
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 60}
    tasks = [
        {"id": "wide", "role": "r", "prompt": "x", "adapter": adapter, "priority": 3,
         "scope": ["shared/**"], "gates": [gate]},
        {"id": "narrow", "role": "r", "prompt": "x", "adapter": adapter, "priority": 2,
         "scope": ["shared/n.txt"], "gates": [gate]},
        {"id": "other", "role": "r", "prompt": "x", "adapter": adapter, "priority": 1,
         "scope": ["other/**"], "gates": [gate]},
    ]  # fmt: skip
    plan = {"plan": {"name": "p", "settle_ticks": 1, "max_batch": 1, "max_in_flight": 3,
                     "concurrency": {"r": 3}}, "task": tasks}  # fmt: skip
    states = _runtime(repo, plan, keys, sandbox=Settings(opt_out=True)).run().states
    assert set(states.values()) == {TaskState.DONE}, states
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure

    state = repo / ".harness"
    audit = _records(state, RUN, "audit")
    lineage = _records(state, RUN, "lineage")
    batch = {r["body"]["tasks"][0]: r["body"]["batch"] for r in audit if r["kind"] == "agent.spawn"}
    seq = {(r["kind"], r["body"].get("batch")): i for i, r in enumerate(audit)}
    span = {t: (seq["lock.acquire", b], seq["lock.release", b]) for t, b in batch.items()}
    assert span["wide"][1] < span["narrow"][0]  # shared/n.txt waited for shared/**
    assert span["other"][0] < span["wide"][1]  # other/** ran beside it
    assert [r["body"]["lock"] for r in audit if r["kind"] == "agent.spawn"] == [
        ["shared/**"],
        ["other/**"],
        ["shared/n.txt"],
    ]

    copy = _rerecord(state, tmp_path / "copy", keys, audit, lineage)
    assert copy.status.value == "verified", copy.failure
    # forged: wide's lock released only at the end, so narrow acquired while wide held shared/**
    release = audit.pop(span["wide"][1])
    audit.insert(len(audit) - 1, release)
    forged = _rerecord(state, tmp_path / "forged", keys, audit, lineage)
    assert forged.status.value == "invalid"
    reason = forged.failure.reason
    assert f"batch {batch['narrow']!r} acquires a lock that intersects the lock batch " in reason
    assert f"{batch['wide']!r} holds" in reason and "'shared/n.txt' and 'shared/**'" in reason
