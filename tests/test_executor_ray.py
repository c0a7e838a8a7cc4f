"""The Ray executor against a real local Ray cluster that this module starts on 127.0.0.1
(one head node: 2 CPUs, capacity 2 of ``harness_role_coder``) and stops at the end.

The cluster is stopped by process id, never with ``ray stop`` (which kills every Ray process
of the user, other people's clusters included): ``ray start`` runs in a new session, every
process of the cluster (GCS, raylet, workers, agents) inherits that session, and the fixture
ends exactly the members of that session (plus, as a net, any process naming the cluster's
unique temporary folder), then checks that none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray")

from harness.orchestrate import git
from harness.orchestrate.executors.gitbundle import (
    BundleError,
    apply_branch_bundle,
    base_bundle,
)
from harness.orchestrate.executors.ray_executor import (
    Outcome,
    RayExecutor,
    RayHandle,
    role_resources,
)
from harness.orchestrate.executors.unit import AgentUnit
from harness.orchestrate.sandbox import Settings, probe

DATE = "2024-01-02T03:04:05+00:00"
BWRAP = probe("bwrap").available
CODER = role_resources("coder")
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _members(session: int, marker: str) -> list[int]:
    """Live processes of the cluster: in ``session``, or naming ``marker`` on their cmdline."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if fields[0] in (b"Z", b"X"):
            continue
        if int(fields[3]) == session or marker.encode() in cmdline:
            out.append(int(entry))
    return out


def _stop_cluster(session: int, marker: str) -> list[int]:
    """SIGTERM, 1 s, SIGKILL for what is left; returns the pids still alive after that.

    (gcs_server and raylet do not exit on SIGTERM within seconds; nothing of the cluster
    needs to be saved, so the grace is short.)"""
    for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        for pid in _members(session, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + wait_s
        while _members(session, marker) and time.monotonic() < end:
            time.sleep(0.1)
    return _members(session, marker)


class Cluster:
    def __init__(self, executor: RayExecutor, temp: Path) -> None:
        self.executor = executor
        self.temp = temp


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    temp = Path(tempfile.mkdtemp(prefix="hr-", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    resources = json.dumps({"harness_role_coder": 2})
    argv = [
        str(Path(sys.executable).parent / "ray"), "start", "--head",
        "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
        "--num-cpus=2", f"--resources={resources}", f"--temp-dir={temp}",
        "--disable-usage-stats",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env)  # fmt: skip
    session = proc.pid
    executor = RayExecutor(f"127.0.0.1:{port}")
    try:
        try:
            out, _ = proc.communicate(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"ray start did not finish in {START_TIMEOUT_S} s")
        assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
        executor.connect()
        yield Cluster(executor, temp)
    finally:
        executor.close()
        left = _stop_cluster(session, str(temp))
        shutil.rmtree(temp, ignore_errors=True)
        assert left == [], f"Ray processes left behind: {left}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "coord"
    git.init_repo(path, date=DATE)
    (path / "README.md").write_text("hello\n")
    git.commit_all(path, "readme", date=DATE)
    return path


def _unit(
    repo: Path, batch: str, code: str, *, args: tuple[str, ...] = (), **kw: object
) -> AgentUnit:
    base = git.head(repo)
    fields: dict[str, object] = {
        "batch": batch,
        "base": base,
        "branch": f"harness/run1/{batch}",
        "base_bundle": base_bundle(repo, base),
        "argv": (sys.executable, "{io}/agent.py", *args),
        "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        "scratch": {"agent.py": code.encode(), "prompt.txt": f"prompt of {batch}".encode()},
        "wall_s": 60.0,
        "grace_s": 0.5,
        "settings": Settings(opt_out=not BWRAP),
        "message": f"{batch}: t1",
        "git_date": DATE,
    }
    fields.update(kw)
    return AgentUnit(**fields)  # type: ignore[arg-type]


def _wait(handle: RayHandle, limit_s: float = 60.0) -> Outcome:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        outcome = handle.step(0.2)
        if outcome is not None:
            assert handle.done
            return outcome
    raise AssertionError(f"unit {handle.unit.batch} did not finish in {limit_s} s")


WRITER = r"""
import sys
from pathlib import Path
Path("out.txt").write_text(Path(sys.argv[1]).read_text() + " -> done\n")
print("wrote out.txt")
print("to stderr", file=sys.stderr)
sys.exit(5)
"""


def test_unit_comes_back_as_a_branch_with_the_expected_tip(
    cluster: Cluster, repo: Path, tmp_path: Path
) -> None:
    unit = _unit(repo, "b1", WRITER, args=("{io}/prompt.txt",))
    handle = cluster.executor.submit(unit, CODER)
    assert handle.identity is None
    outcome = _wait(handle)
    # Exit facts and transcript come back as the worker saw them.
    assert outcome.anomaly is None
    assert (outcome.result.exit_code, outcome.result.signal, outcome.result.timed_out) == (
        5, None, False,
    )  # fmt: skip
    assert outcome.result.stdout == b"wrote out.txt\n"
    assert outcome.result.stderr == b"to stderr\n"
    result = handle.unit_result
    assert result is not None and result.branch_bundle is not None
    assert result.sandbox_profile["kind"] == ("bwrap" if BWRAP else "none")
    # The tip is the commit a local run would make of the same change.
    local = tmp_path / "local"
    git.add_worktree(repo, local, "local", unit.base)
    (local / "out.txt").write_text("prompt of b1 -> done\n")
    expected = git.commit_all(local, "b1: t1", date=DATE)
    tip = apply_branch_bundle(
        repo, result.branch_bundle, branch=unit.branch, base=unit.base, tip=result.tip
    )
    assert tip == result.tip == expected == git.head(repo, f"refs/heads/{unit.branch}")


PID_REPORTER = r"""
import os, sys, time
parent = os.getppid()  # the Ray worker running the unit (no sandbox: opted out)
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(parent))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
end = time.monotonic() + 30
while os.getppid() == parent and time.monotonic() < end:  # leave with the worker
    time.sleep(0.05)
"""


def test_a_worker_killed_mid_task_is_a_crash(cluster: Cluster, repo: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    unit = _unit(repo, "b2", PID_REPORTER, args=(str(pid_file),), settings=Settings(opt_out=True))
    handle = cluster.executor.submit(unit, CODER)
    end = time.monotonic() + 60
    while not pid_file.exists():
        assert handle.step(0.1) is None, "the unit ended before it was killed"
        assert time.monotonic() < end, "the agent never reported its worker"
    worker = int(pid_file.read_text())
    assert b"ray" in Path(f"/proc/{worker}/cmdline").read_bytes().lower()
    os.kill(worker, signal.SIGKILL)
    outcome = _wait(handle)
    assert outcome.anomaly == "crash"
    assert outcome.result.exit_code is None and not outcome.result.timed_out
    assert b"ray executor:" in outcome.result.stderr
    assert handle.unit_result is None


SLEEPER = r"""
import sys, time
print("start", time.time_ns(), flush=True)
time.sleep(float(sys.argv[1]))
print("end", time.time_ns())
"""


BARRIER = r"""
import os, sys, time
from pathlib import Path
started = Path(sys.argv[1])  # shared by the units (no sandbox: opted out)
begin = time.time_ns()
(started / sys.argv[2]).touch()
end = time.monotonic() + 20
while len(os.listdir(started)) < 2 and time.monotonic() < end:  # wait for a second unit
    time.sleep(0.02)
time.sleep(0.5)
print("span", begin, time.time_ns())
"""


def test_role_capacity_limits_how_many_run_at_once(
    cluster: Cluster, repo: Path, tmp_path: Path
) -> None:
    """Capacity 2 of harness_role_coder: two units run at once (each waits until a second one
    has started), a third only after one of them ended."""
    started = tmp_path / "started"
    started.mkdir()
    units = [
        _unit(repo, f"c{i}", BARRIER, args=(str(started), f"c{i}"), settings=Settings(opt_out=True))
        for i in range(3)
    ]
    handles = [cluster.executor.submit(unit, CODER) for unit in units]
    spans = []
    for handle in handles:
        outcome = _wait(handle, 90)
        assert outcome.anomaly is None and outcome.result.exit_code == 0, outcome.result.stderr
        words = outcome.result.stdout.split()
        spans.append((int(words[1]), int(words[2])))
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2, spans


def test_kill_cancels_the_unit_and_reports_why(cluster: Cluster, repo: Path) -> None:
    handle = cluster.executor.submit(_unit(repo, "k1", SLEEPER, args=("30",)), CODER)
    assert handle.step(1.0) is None
    handle.kill("stop")
    outcome = _wait(handle, 30)
    assert outcome.anomaly == "killed:stop"  # as supervise.Supervised.kill reports it
    assert outcome.result.exit_code is None
    handle.kill("stop")  # a finished handle ignores a second kill
    assert handle.step(0) is outcome


def test_a_silent_agent_comes_back_hung_from_the_worker(cluster: Cluster, repo: Path) -> None:
    unit = _unit(repo, "s1", SLEEPER, args=("30",), idle_s=0.5, wall_s=30.0)
    outcome = _wait(cluster.executor.submit(unit, CODER), 30)
    assert outcome.anomaly == "hung" and not outcome.result.timed_out
    assert 500 <= outcome.idle_ms < 10_000
    assert outcome.result.duration_ms < 10_000  # long before the wall-clock limit


HOSTILE = r"""
import os, subprocess
# No sandbox (opted out): the agent rewrites its branch to history unrelated to the base.
env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "x",
       "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"}
def run(*args):
    return subprocess.run(["git", *args], env=env, check=True, capture_output=True,
                          text=True, input="").stdout.strip()
empty = run("hash-object", "-t", "tree", "-w", "--stdin")
evil = run("commit-tree", empty, "-m", "evil root")
run("update-ref", "HEAD", evil)
open("evil.txt", "w").write("evil\n")
"""


def test_a_hostile_branch_bundle_is_refused(cluster: Cluster, repo: Path) -> None:
    unit = _unit(repo, "h1", HOSTILE, settings=Settings(opt_out=True))
    handle = cluster.executor.submit(unit, CODER)
    outcome = _wait(handle)
    assert outcome.result.exit_code == 0, outcome.result.stderr
    result = handle.unit_result
    assert result is not None and result.branch_bundle is not None
    refs_before = sorted(p.name for p in (repo / ".git" / "refs" / "heads").rglob("*"))
    with pytest.raises(BundleError, match="does not descend from the base"):
        apply_branch_bundle(
            repo, result.branch_bundle, branch=unit.branch, base=unit.base, tip=result.tip
        )
    assert not git.branch_exists(repo, unit.branch)
    assert sorted(p.name for p in (repo / ".git" / "refs" / "heads").rglob("*")) == refs_before


def _job(
    repo: Path, tmp_path: Path, batch_id: str, code: str, *, opt_out: bool, extra: Any = ()
) -> Any:
    """A batch prepared on the coordinator as ``runner.job.BatchJob.prepare`` does it (the
    attributes ``RayExecutor.start`` reads), with a plan command adapter and a real sandbox."""
    from harness.orchestrate.adapters.base import AgentRequest
    from harness.orchestrate.adapters.command import CommandAdapter
    from harness.orchestrate.capabilities import CapabilityMatrix
    from harness.orchestrate.model import Batch, TaskSpec
    from harness.orchestrate.sandbox import BatchDirs, Sandbox
    from harness.orchestrate.supervise import Limits

    settings = Settings(opt_out=opt_out or not BWRAP)
    sandbox = Sandbox.for_run(settings, repo=repo, state_dir=tmp_path / "state",
                              keys_dir=tmp_path / "keys")  # fmt: skip
    run = SimpleNamespace(repo=repo, sandbox=sandbox, capabilities=CapabilityMatrix(),
                          git_date=DATE)  # fmt: skip
    task = TaskSpec(id="t1", role="coder", prompt="write it", adapter="mine")
    batch = Batch(id=batch_id, role="coder", adapter="mine", tasks=("t1",))
    dirs = BatchDirs(tmp_path / "work" / batch_id)
    dirs.create()
    base = git.head(repo)
    branch = f"harness/run1/{batch_id}"
    git.add_worktree(repo, dirs.tree, branch, base)
    (dirs.io / "agent.py").write_text(code)
    adapter = CommandAdapter.from_template(
        [os.path.abspath(sys.executable), str(dirs.io / "agent.py"), "{prompt_file}", *extra]
    )
    # harness run always has a journal (live or replay); only the scripted agent names it.
    request = AgentRequest(batch=batch, tasks=(task,), worktree=dirs.tree, prompt="write it",
                           prompt_file=dirs.io / "prompt.txt",
                           journal_file=tmp_path / "state" / "journals" / "run1")  # fmt: skip
    request.prompt_file.write_text(request.prompt)
    _, env = sandbox.agent(dirs, programs=[adapter.executable], network=False)
    return run, SimpleNamespace(
        batch=batch, base=base, branch=branch, dirs=dirs, worktree=dirs.tree, tasks=[task],
        adapter=adapter, request=request, env=env, stdin=adapter.stdin(request),
        limits=Limits(wall_s=60, grace_s=0.5),
    )  # fmt: skip


def test_start_runs_a_prepared_job_and_lands_it_in_its_worktree(
    cluster: Cluster, repo: Path, tmp_path: Path
) -> None:
    run, job = _job(repo, tmp_path, "j1", WRITER, opt_out=False)
    handle = cluster.executor.start(run, job)
    outcome = _wait(handle)
    assert outcome.anomaly is None and outcome.result.exit_code == 5, outcome.result.stderr
    result = handle.unit_result
    assert result is not None
    assert git.head(job.worktree) == result.tip == git.head(repo, job.branch) != job.base
    assert (job.worktree / "out.txt").read_text() == "write it -> done\n"
    assert git.is_clean(job.worktree)
    assert result.sandbox_profile["kind"] == ("bwrap" if BWRAP else "none")


def test_start_turns_a_refused_bundle_into_a_crash(
    cluster: Cluster, repo: Path, tmp_path: Path
) -> None:
    run, job = _job(repo, tmp_path, "j2", HOSTILE, opt_out=True)
    outcome = _wait(cluster.executor.start(run, job))
    assert outcome.anomaly == "crash", outcome.result.stderr.decode()
    assert b"branch bundle refused" in outcome.result.stderr
    assert b"does not descend from the base" in outcome.result.stderr
    assert git.head(job.worktree) == job.base == git.head(repo, job.branch)
    assert git.is_clean(job.worktree)


def test_start_refuses_a_batch_whose_agent_names_the_journal(repo: Path, tmp_path: Path) -> None:
    journal = str(tmp_path / "state" / "journals" / "run1")
    run, job = _job(repo, tmp_path, "j3", WRITER, opt_out=True, extra=("--journal", journal))
    with pytest.raises(ValueError, match="journal is not shipped"):
        RayExecutor("127.0.0.1:1").start(run, job)  # refused before anything is submitted


def test_wait_any_sleeps_on_a_handle_until_its_task_finishes(
    cluster: Cluster, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's ``wait_any`` neither spins on a Ray handle nor oversleeps its end: the
    handle's wake-up pipe becomes readable when Ray completes the task (the backstop poll is
    made 60 s here, so only the pipe can wake it in time)."""
    from harness.orchestrate.executors import ray_executor
    from harness.orchestrate.supervise import wait_any

    monkeypatch.setattr(ray_executor, "POLL_S", 60.0)
    handle = cluster.executor.submit(_unit(repo, "w1", SLEEPER, args=("1.5",)), CODER)
    t0 = time.monotonic()
    wait_any([handle], 0.3)  # type: ignore[list-item]
    assert time.monotonic() - t0 >= 0.25  # slept: nothing was ready
    assert handle.step(0.0) is None
    wait_any([handle], 30.0)  # type: ignore[list-item]
    assert time.monotonic() - t0 < 15.0  # woken by the completion, not the timeout
    outcome = handle.step(0.0)
    assert outcome is not None and outcome.anomaly is None
    assert handle.watch() == []


# -- the whole runtime on Ray (issue 11 §8) -------------------------------------------------


def _runtime_on(cluster: Cluster, tmp_path: Path, plan: dict[str, Any], **kwargs: Any) -> Any:
    from harness.orchestrate.demo import make_repo

    from .test_orchestrate_runtime import _runtime

    repo = tmp_path / "repo"
    make_repo(repo)
    runtime = _runtime(repo, plan, _keys(), **kwargs)
    runtime.executor = cluster.executor
    return repo, runtime


def _keys() -> Any:
    from .evidence_helpers import make_keys

    return make_keys()


def _records_of(repo: Path, store: str = "audit") -> list[dict[str, Any]]:
    from harness.verify.canonical import parse_canonical

    path = repo / ".harness" / "runs" / "r1" / f"{store}.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


TASK_WRITER = r"""
import pathlib, sys
task = sys.stdin.read().split("]", 1)[0].lstrip("[")
pathlib.Path(task).mkdir(exist_ok=True)
pathlib.Path(task, "out.txt").write_text("written on ray by " + task + "\n")
"""


def test_a_run_on_ray_merges_like_a_local_run(cluster: Cluster, tmp_path: Path) -> None:
    from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
    from harness.verify.fsm import TaskState

    from .test_orchestrate_runtime import _verified

    script = tmp_path / "writer.py"
    script.write_text(TASK_WRITER)
    saved = dict(ADAPTERS)
    register_adapter(CommandAdapter.from_template([sys.executable, str(script)], name="rw"))
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 60}
    tasks = [{"id": t, "role": "coder", "prompt": "x", "adapter": "rw", "scope": [f"{t}/**"],
              "gates": [gate]} for t in ("a1", "a2", "a3")]  # fmt: skip
    plan = {"plan": {"name": "p", "settle_ticks": 1, "max_batch": 1, "max_in_flight": 2,
                     "concurrency": {"coder": 2}}, "task": tasks}  # fmt: skip
    import dataclasses

    from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS

    from . import test_orchestrate_runtime as local

    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "rw": NO_TAGS}
    )
    try:
        local._MATRIX = matrix
        repo, runtime = _runtime_on(cluster, tmp_path, plan)
        summary = runtime.run()
    finally:
        local._MATRIX = DEFAULT_MATRIX
        ADAPTERS.clear()
        ADAPTERS.update(saved)
    assert set(summary.states.values()) == {TaskState.DONE}, summary.states
    for task in ("a1", "a2", "a3"):
        assert (repo / task / "out.txt").read_text() == f"written on ray by {task}\n"
    records = _records_of(repo)
    assert [r["kind"] for r in records].count("agent.exit") == 3
    assert not [r for r in records if r["kind"] == "agent.started"]  # no local process
    paths = sorted(r["body"]["path"] for r in _records_of(repo, "lineage"))
    assert paths == ["a1/out.txt", "a2/out.txt", "a3/out.txt"]
    report = _verified(repo, runtime.keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_a_lost_worker_is_a_crash_and_its_batch_restarts(cluster: Cluster, tmp_path: Path) -> None:
    from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
    from harness.orchestrate.sandbox import Settings
    from harness.verify.fsm import TaskState

    from .test_orchestrate_runtime import _verified

    pid_file = tmp_path / "worker.pid"
    script = tmp_path / "once.py"
    # attempt 1 reports its Ray worker and waits to be orphaned; attempt 2 does the work
    script.write_text(
        "import os, pathlib, sys, time\n"
        f"marker = pathlib.Path({str(pid_file)!r})\n"
        "if not marker.exists():\n"
        "    parent = os.getppid()\n"
        "    pathlib.Path(str(marker) + '.tmp').write_text(str(parent))\n"
        "    os.rename(str(marker) + '.tmp', marker)\n"
        "    end = time.monotonic() + 30\n"
        "    while os.getppid() == parent and time.monotonic() < end:\n"
        "        time.sleep(0.05)\n"
        "    sys.exit(3)\n"
        "pathlib.Path('done.txt').write_text('second attempt\\n')\n"
    )
    saved = dict(ADAPTERS)
    register_adapter(CommandAdapter.from_template([sys.executable, str(script)], name="once"))
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 60}
    plan = {"plan": {"name": "p", "settle_ticks": 1, "max_attempts": 2},
            "task": [{"id": "t1", "role": "coder", "prompt": "x", "adapter": "once",
                      "gates": [gate], "timeout_s": 60}]}  # fmt: skip
    import dataclasses
    import threading

    from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS

    from . import test_orchestrate_runtime as local

    def kill_the_worker() -> None:
        end = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < end:
            time.sleep(0.05)
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_the_worker, daemon=True)
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "once": NO_TAGS}
    )
    try:
        local._MATRIX = matrix
        repo, runtime = _runtime_on(cluster, tmp_path, plan, sandbox=Settings(opt_out=True))
        killer.start()
        summary = runtime.run()
    finally:
        local._MATRIX = DEFAULT_MATRIX
        ADAPTERS.clear()
        ADAPTERS.update(saved)
        killer.join(timeout=5)
    assert summary.states["t1"] is TaskState.DONE
    records = _records_of(repo)
    exits = [r["body"]["anomaly"] for r in records if r["kind"] == "agent.exit"]
    assert exits == ["crash", None]
    (failed,) = [r["body"] for r in records if r["kind"] == "attempt.failed"]
    assert (failed["anomaly"], failed["retry"], failed["attempt"]) == ("crash", True, 1)
    assert (repo / "done.txt").read_text() == "second attempt\n"
    report = _verified(repo, runtime.keys, tmp_path)
    assert report.status.value == "verified", report.failure
