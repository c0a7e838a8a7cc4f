"""How the runtime groups its audit records into group commits (one fsync each).

Evidence must be cheap enough never to turn off (issue 14): a tick is one group commit (the
last retirement's records, the promotions, every claim, lock and spawn of the decision point),
made before any process starts, and ``agent.started`` one more, before the agent is served:
two commits per batch. A retired batch's worktree is removed once its records are durable
(``RunCore.when_durable``), a merge after its gates' records are. A settling transition is
committed on its own only when it passes a review point: the review's ``elapsed_s`` is read
after the transition is durable, so it lies between the two record times (what the verifier
checks, and does here: the run verifies).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.orchestrate import git as git_module
from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runner.core import RunCore
from harness.orchestrate.runner.job import BatchJob
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts import store as store_module
from harness.receipts.bundle import export_bundle
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.fsm import TaskState
from harness.verify.policy import TrustPolicy
from harness.verify.rules.phases import SETTLED

from .evidence_helpers import make_keys

TASKS = 8  # one per batch: progress 125, 250 (review), 375, 500 (review), ..., 1000


@pytest.fixture(autouse=True)
def _noop_adapter() -> Iterator[None]:
    saved = dict(ADAPTERS)
    register_adapter(
        CommandAdapter.from_template([shutil.which("true") or "/bin/true"], name="noop")
    )
    yield
    ADAPTERS.clear()
    ADAPTERS.update(saved)


def _plan() -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    task = {"role": "r", "prompt": "noop", "adapter": "noop", "gates": [gate]}
    return {
        "plan": {"name": "commits", "max_batch": 1, "max_in_flight": 1, "settle_ticks": 1},
        "task": [{"id": f"t{i}", **task} for i in range(TASKS)],
    }


def _commits(audit: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The audit store cut into group commits: a logical clock gives each commit (one clock
    reading) its own time, shared by all its records."""
    commits: list[list[dict[str, Any]]] = []
    for record in audit:
        if commits and commits[-1][0]["time"] == record["time"]:
            commits[-1].append(record)
        else:
            commits.append([record])
    return commits


def test_a_retirement_is_one_group_commit_unless_a_review_needs_its_settlement(
    tmp_path: Path,
) -> None:
    """Catches a flush per settling transition (or after the merge's records) that is not
    needed: each retirement without a review point is then split into several commits."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "noop": NO_TAGS}
    )
    summary = Runtime(
        repo=repo, plan=parse_plan(_plan()), state_dir=repo / ".harness", keys=keys,
        run_id="r1", clock=LogicalClock(), capabilities=matrix,
        git_date="2026-01-01T00:00:00+00:00", sandbox=Settings(opt_out=True),
    ).run()  # fmt: skip
    assert set(summary.states.values()) == {TaskState.DONE}

    path = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    audit = [parse_canonical(line) for line in path.read_bytes().splitlines()]
    commits = _commits(audit)
    retirements = [c for c in commits if any(r["kind"] == "agent.exit" for r in c)]
    reviewed = [c for c in commits if any(r["kind"] == "control.review" for r in c)]
    assert len(reviewed) == 3  # 25, 50 and 75 %

    whole = 0
    for commit in retirements:
        kinds = [record["kind"] for record in commit]
        settling = [
            r for r in commit if r["kind"] == "task.transition" and r["body"]["to"] in SETTLED
        ]
        assert len(settling) == 1 and "merge.result" in kinds
        if "lock.release" in kinds:  # agent.exit ... merge, done, lock.release, sensors
            whole += 1
        else:  # the settlement passed a review point: committed before the clock is read
            assert kinds[-1] == "task.transition" and commit[-1] is settling[0]
            after = commits[commits.index(commit) + 1]
            assert after[0]["kind"] != "task.transition"
            assert any(r["kind"] == "control.review" for r in after)
    assert whole == TASKS - 3
    assert len(retirements) == TASKS

    bundle = export_bundle(repo / ".harness", tmp_path / "bundle.tar", keys).path
    report = verify_bundle(
        bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"), hmac_master=keys.hmac_master
    )
    assert report.status.value == "verified", report.failure


def _run(tmp_path: Path, plan: dict[str, Any]) -> tuple[Path, Any]:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    matrix = dataclasses.replace(
        DEFAULT_MATRIX,
        adapters={**DEFAULT_MATRIX.adapters, "noop": NO_TAGS, "writer": NO_TAGS},
    )
    summary = Runtime(
        repo=repo, plan=parse_plan(plan), state_dir=repo / ".harness", keys=keys,
        run_id="r1", clock=LogicalClock(), capabilities=matrix,
        git_date="2026-01-01T00:00:00+00:00", sandbox=Settings(opt_out=True),
    ).run()  # fmt: skip
    return repo, summary


def test_a_tick_is_one_group_commit_and_the_agent_start_another(tmp_path: Path) -> None:
    """Catches a flush of its own for a retirement (or for the promotions) that the next
    decision point's flush makes anyway: each batch then costs three commits, not two. The
    tick's commit holds, in order, the previous batch's retirement (its exit and lock
    release) and this batch's claim, lock and spawn; ``agent.started`` is alone in the
    commit right after it (the process runs, so it must be durable before it is served)."""
    repo, summary = _run(tmp_path, _plan())
    assert set(summary.states.values()) == {TaskState.DONE}
    path = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    commits = _commits([parse_canonical(line) for line in path.read_bytes().splitlines()])
    spawns = [i for i, c in enumerate(commits) if any(r["kind"] == "agent.spawn" for r in c)]
    assert len(spawns) == TASKS
    for number, index in enumerate(spawns):
        kinds = [record["kind"] for record in commits[index]]
        assert kinds.count("agent.spawn") == 1  # then its tasks' claimed -> in_progress
        assert all(r["body"]["to"] == "in_progress" for r in commits[index][-1:])
        assert [r["kind"] for r in commits[index + 1]] == ["agent.started"]
        if number:  # the previous batch retired in this very commit, before the claim
            assert kinds.index("lock.release") < kinds.index("lock.acquire")
    opening = spawns[0]  # run.start, plans, config, statuses: before the first spawn
    ending = len(commits) - spawns[-1] - 2  # the last retirement, statuses, run.end
    reviews = 3  # a settlement passing a review point is committed before the review
    assert len(commits) == opening + 2 * TASKS + reviews + ending
    assert ending <= 3


class _Durability:
    """Which records of the audit store are durable: the bytes up to the file's size at its
    last ``fdatasync`` (what a crash keeps), tracked by wrapping the writer's sync."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, audit: Path) -> None:
        self.audit = audit
        self.synced = 0
        real = store_module.os.fdatasync

        def fdatasync(fd: int) -> None:
            real(fd)
            if Path(os.readlink(f"/proc/self/fd/{fd}")) == audit:
                self.synced = os.fstat(fd).st_size

        monkeypatch.setattr(store_module.os, "fdatasync", fdatasync)

    def records(self) -> list[dict[str, Any]]:
        data = self.audit.read_bytes()[: self.synced]
        return [parse_canonical(line) for line in data.splitlines()]

    def has(self, kind: str, **body: Any) -> bool:
        return any(
            r["kind"] == kind and all(r["body"].get(k) == v for k, v in body.items())
            for r in self.records()
        )


WRITER = (
    "import pathlib, re, sys\n"
    "for task in re.findall(r'^\\[(\\w+)\\]', sys.stdin.read(), re.M):\n"
    "    pathlib.Path('out').mkdir(exist_ok=True)\n"
    "    pathlib.Path('out', task + '.txt').write_text(task)\n"
)


def test_every_effect_waits_for_the_records_that_authorise_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches an effect that runs on the strength of records a crash could still lose
    (docs/spec/runtime.md §5), now that a retirement has no flush of its own: a process
    started before its ``agent.spawn`` is synced, an agent served before its
    ``agent.started`` is, a merge before its gates' results are, a worktree removed before
    its batch's ``lock.release`` is. Agents here write files, so batches merge."""
    register_adapter(CommandAdapter.from_template([sys.executable, "-c", WRITER], name="writer"))
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    plan = {
        "plan": {"name": "effects", "max_batch": 1, "max_in_flight": 2, "settle_ticks": 1},
        "task": [
            {"id": f"w{i}", "role": "r", "prompt": "write", "adapter": "writer",
             "scope": [f"out/w{i}.txt"], "gates": [gate]}
            for i in range(6)
        ],
    }  # fmt: skip
    durable = _Durability(
        monkeypatch, tmp_path / "repo" / ".harness" / "runs" / "r1" / "audit.jsonl"
    )
    seen: dict[str, int] = {"start": 0, "step": 0, "merge": 0, "remove": 0}
    start, step, remove = BatchJob.start, BatchJob.step, BatchJob.remove_worktree
    merge = git_module.merge

    def checked_start(job: BatchJob) -> None:
        assert durable.has("agent.spawn", batch=job.batch.id)
        seen["start"] += 1
        start(job)

    def checked_step(job: BatchJob, wait_s: float = 0.0) -> bool:
        if job.proc is not None and not job.done:
            assert durable.has("agent.started", batch=job.batch.id)
            seen["step"] += 1
        return step(job, wait_s)

    def checked_remove(job: BatchJob) -> None:
        assert durable.has("lock.release", batch=job.batch.id)
        seen["remove"] += 1
        remove(job)

    def checked_merge(repo: Path, source: str, message: str, **options: Any) -> str:
        batch = message.rsplit("/", 1)[-1]
        assert durable.has("gate.integrity", batch=batch, intact=True)
        seen["merge"] += 1
        return merge(repo, source, message, **options)

    monkeypatch.setattr(BatchJob, "start", checked_start)
    monkeypatch.setattr(BatchJob, "step", checked_step)
    monkeypatch.setattr(BatchJob, "remove_worktree", checked_remove)
    monkeypatch.setattr(git_module, "merge", checked_merge)
    repo, summary = _run(tmp_path, plan)
    assert set(summary.states.values()) == {TaskState.DONE}
    assert sorted(summary.merged) == [f"w{i}" for i in range(6)]
    assert seen["start"] == seen["merge"] == seen["remove"] == 6 and seen["step"] >= 6
    assert sorted(p.name for p in (repo / "out").iterdir()) == [f"w{i}.txt" for i in range(6)]


class _Store:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.commits: list[list[tuple[str, Any]]] = []

    def append_many(self, items: list[tuple[str, Any]]) -> list[Any]:
        if self.fail:
            raise OSError("disk full")
        self.commits.append(list(items))
        return [None] * len(items)


def _core(fail: bool = False) -> tuple[RunCore, _Store]:
    """A RunCore with only what ``flush`` touches: a recorder's audit store and the bus."""
    store = _Store(fail)
    core = RunCore.__new__(RunCore)
    core._pending = []
    core._when_durable = []
    core.recorder = SimpleNamespace(store=lambda name: store)  # type: ignore[assignment]
    core.events = SimpleNamespace(audited=lambda pending, acks: None)  # type: ignore[assignment]
    return core, store


def test_an_effect_waits_for_the_queued_records_and_only_for_them() -> None:
    """Catches an effect run before its records are appended, or after a failed append
    (its records never became durable), and a failing effect that keeps the others from
    running (one batch's worktree removal must not strand the next one's)."""
    core, store = _core()
    done: list[str] = []
    core.when_durable(lambda: done.append("at once"))  # nothing queued: nothing to wait for
    assert done == ["at once"]
    core.audit("lock.release", {"batch": "b1"})
    core.when_durable(lambda: done.append(f"after {len(store.commits)} commit(s)"))
    assert done == ["at once"]
    core.flush()
    assert done == ["at once", "after 1 commit(s)"]
    core.flush()  # nothing queued, nothing waiting
    assert len(store.commits) == 1

    def broken() -> None:
        raise RuntimeError("worktree busy")

    core.audit("lock.release", {"batch": "b2"})
    core.when_durable(broken)
    core.when_durable(lambda: done.append("second"))
    with pytest.raises(RuntimeError, match="worktree busy"):
        core.flush()
    assert done[-1] == "second"

    failing, _ = _core(fail=True)
    failing.audit("lock.release", {"batch": "b3"})
    failing.when_durable(lambda: done.append("never"))
    with pytest.raises(OSError, match="disk full"):
        failing.flush()
    failing.flush()  # the effect was dropped with its records
    assert "never" not in done


def test_an_error_leaving_a_retirement_still_commits_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches the loss of a retirement's records when an error escapes it (and the loop):
    without a flush of its own at the end of every retirement, the one that raises must
    still commit what it recorded before the error propagates, as a crash would not."""
    register_adapter(CommandAdapter.from_template([sys.executable, "-c", WRITER], name="writer"))
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    plan = {
        "plan": {"name": "escape", "max_batch": 1, "max_in_flight": 1, "settle_ticks": 1},
        "task": [
            {"id": "w0", "role": "r", "prompt": "write", "adapter": "writer",
             "scope": ["out/w0.txt"], "gates": [gate]},
        ],
    }  # fmt: skip

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("git exploded")

    monkeypatch.setattr(git_module, "merge_check", broken)
    with pytest.raises(RuntimeError, match="git exploded"):
        _run(tmp_path, plan)
    path = tmp_path / "repo" / ".harness" / "runs" / "r1" / "audit.jsonl"
    kinds = [parse_canonical(line)["kind"] for line in path.read_bytes().splitlines()]
    assert kinds[-1] == "lock.release" and "gate.integrity" in kinds
