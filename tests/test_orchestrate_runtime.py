"""The runtime end to end with real git worktrees and real subprocesses."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS, Tag
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import demo_plan, make_repo, run_demo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.fsm import TaskState
from harness.verify.policy import TrustPolicy

from .evidence_helpers import make_keys

DATE = "2026-01-01T00:00:00+00:00"


def _records(state: Path, run_id: str, store: str) -> list[dict[str, Any]]:
    path = state / "runs" / run_id / f"{store}.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def _runtime(repo: Path, plan: dict[str, Any], keys: OperatorKeys, run_id: str = "r1",
             **kwargs: Any) -> Runtime:  # fmt: skip
    return Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id=run_id,
        clock=LogicalClock(),
        capabilities=_MATRIX,
        git_date=DATE,
        grace_s=0.5,
        **kwargs,
    )


def _verified(repo: Path, keys: OperatorKeys, tmp: Path) -> Any:
    bundle = export_bundle(repo / ".harness", tmp / "bundle.tar", keys).path
    return verify_bundle(
        bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"), hmac_master=keys.hmac_master
    )


def test_demo_end_to_end(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "demo")
    states = result.summary.states
    assert states == {
        "add-mul": TaskState.DONE,
        "docs": TaskState.DONE,
        "break-add": TaskState.FAILED,
        "exfiltrate": TaskState.DENIED,
        "changelog": TaskState.DONE,
        "guide": TaskState.DONE,
        "ghost": TaskState.BLOCKED,
        "audited": TaskState.BLOCKED,
        "stats": TaskState.DONE,
        "release-notes": TaskState.DONE,
    }
    assert result.report.status.value == "verified", result.report.failure
    repo = result.repo
    assert "def mul" in (repo / "calc.py").read_text()
    assert "a - b" not in (repo / "calc.py").read_text()  # the failed task was not merged
    assert (repo / "CHANGELOG.md").exists() and not (repo / "leak.txt").exists()
    audit = _records(repo / ".harness", "demo-run", "audit")
    spawned = {t for r in audit if r["kind"] == "agent.spawn" for t in r["body"]["tasks"]}
    assert "exfiltrate" not in spawned  # denied before any process started
    assert any(r["kind"] == "capability.denied" for r in audit)
    gates = {r["body"]["task"]: r["body"]["passed"] for r in audit if r["kind"] == "gate.result"}
    assert gates["break-add"] is False and gates["add-mul"] is True
    paths = {r["body"]["path"] for r in _records(repo / ".harness", "demo-run", "lineage")}
    assert {"calc.py", "tests/test_mul.py", "README.md", "docs/usage.md", "CHANGELOG.md"} <= paths
    _demo_control(audit)


def _demo_control(audit: list[dict[str, Any]]) -> None:
    """Issue 13's demo: the stats task fails its gate twice, the I layer switches its agent's
    prompt template (configuration version 2, loaded by the third attempt, which passes); the
    writer's third task reports 6x the tokens of its first two: a CUSUM alarm."""
    decisions = [r["body"] for r in audit if r["kind"] == "control.decision"]
    switch = next(d for d in decisions if d["key"] == "agent:tuner")
    assert (switch["layer"], switch["rule"], switch["action"], switch["config"]) == (
        "I",
        "bucket",
        "template",
        2,
    )
    assert switch["level"] == switch["threshold"] == 20 and switch["class"] == "test"
    versions = [r["body"] for r in audit if r["kind"] == "config.version"]
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[1]["parent"] == versions[0]["sha256"]
    assert versions[1]["document"]["agents"]["tuner"]["template"] == "focused"
    spawns = [
        r["body"] for r in audit if r["kind"] == "agent.spawn" and r["body"]["tasks"] == ["stats"]
    ]
    assert [(s["attempt"], s["config"]) for s in spawns] == [(1, 1), (2, 1), (3, 2)]
    alarm = next(d for d in decisions if d["key"] == "agent:writer:pace_tokens")
    assert (alarm["layer"], alarm["rule"], alarm["action"]) == ("D", "cusum", "warn")
    assert alarm["level"] == 6000 - 1000 - 500 and alarm["threshold"] == 2000
    steps = [r["body"] for r in audit if r["kind"] == "control.sensor"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert [s["class"] for s in steps if s["task"] == "stats"] == ["test", "test", None]


def _command_plan(task_id: str, adapter: str, **task: Any) -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    return {
        "plan": {"name": "p", "settle_ticks": 1},
        "task": [
            {"id": task_id, "role": "r", "prompt": "x", "adapter": adapter, "gates": [gate], **task}
        ],
    }


_TRUSTED_TEST_ADAPTERS: dict[str, frozenset[Tag]] = {}
_MATRIX = DEFAULT_MATRIX


@pytest.fixture(autouse=True)
def _restore_adapter_registry() -> Iterator[None]:
    """``_script`` registers adapters in the process-wide registry: take them out again, so no
    other test sees them (test_orchestrate_adapters checks the registry's exact contents; a
    random test order found the leak)."""
    saved = dict(ADAPTERS)
    yield
    ADAPTERS.clear()
    ADAPTERS.update(saved)


def _script(tmp: Path, name: str, body: str) -> str:
    """Register a command adapter running ``body``; the test matrix gives it no tags."""
    global _MATRIX
    path = tmp / name
    path.write_text(textwrap.dedent(body))
    adapter = f"test-{name.removesuffix('.py')}"
    register_adapter(CommandAdapter.from_template([sys.executable, str(path)], name=adapter))
    _MATRIX = dataclasses.replace(_MATRIX, adapters={**_MATRIX.adapters, adapter: NO_TAGS})
    return adapter


def test_direct_file_writes_are_all_recorded(tmp_path: Path) -> None:
    """An agent that writes files itself (no API of ours) still gets every change recorded."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    adapter = _script(tmp_path, "direct.py", """
        import os, pathlib
        pathlib.Path("notes.txt").write_text("hello\\n")
        os.makedirs("deep/er", exist_ok=True)
        pathlib.Path("deep/er/data.bin").write_bytes(bytes(range(256)))
        os.remove("README.md")
    """)  # fmt: skip
    summary = _runtime(repo, _command_plan("t1", adapter), keys).run()
    assert summary.states["t1"] is TaskState.DONE
    lineage = _records(repo / ".harness", "r1", "lineage")
    kinds = {r["body"]["path"]: r["kind"] for r in lineage}
    assert kinds == {
        "notes.txt": "artifact.write",
        "deep/er/data.bin": "artifact.write",
        "README.md": "artifact.delete",
    }
    import hashlib

    data = next(r for r in lineage if r["body"]["path"] == "deep/er/data.bin")
    assert data["body"]["sha256"] == hashlib.sha256(bytes(range(256))).hexdigest()
    assert _verified(repo, keys, tmp_path).status.value == "verified"


def test_agent_ignoring_sigterm_is_killed_with_its_children(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    pid_file = tmp_path / "child.pid"
    adapter = _script(tmp_path, "stubborn.py", f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """)  # fmt: skip
    started = time.monotonic()
    # Unsandboxed (explicit opt-out): the test watches the child by its host pid and file;
    # the sandboxed kill path is tests/test_sandbox.py.
    summary = _runtime(
        repo, _command_plan("t1", adapter, timeout_s=1), keys, sandbox=Settings(opt_out=True)
    ).run()
    assert time.monotonic() - started < 20
    assert summary.states["t1"] is TaskState.FAILED
    exit_record = next(r for r in _records(repo / ".harness", "r1", "audit")
                       if r["kind"] == "agent.exit")  # fmt: skip
    assert exit_record["body"]["timed_out"] is True
    assert exit_record["body"]["signal"] == "SIGKILL"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Running (a zombie left for a non-reaping init counts as dead: it can do nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_merge_conflict_is_refused_and_recorded(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    # The agent edits calc.py in its worktree while someone commits a conflicting change to
    # the main checkout: the merge gate must detect it and refuse.
    adapter = _script(tmp_path, "racer.py", f"""
        import pathlib, subprocess
        pathlib.Path("calc.py").write_text("def add(a, b):\\n    return b + a  # agent\\n")
        main = pathlib.Path({str(repo)!r})
        (main / "calc.py").write_text("def add(a, b):\\n    return a + b  # human\\n")
        env = {{"GIT_AUTHOR_NAME": "h", "GIT_AUTHOR_EMAIL": "h@x", "GIT_COMMITTER_NAME": "h",
               "GIT_COMMITTER_EMAIL": "h@x", "PATH": "/usr/bin:/bin"}}
        subprocess.run(["git", "-C", str(main), "commit", "-qam", "human"], env=env, check=True)
    """)  # fmt: skip
    # Unsandboxed (explicit opt-out): a sandboxed agent cannot reach the main checkout at all.
    summary = _runtime(
        repo, _command_plan("t1", adapter), keys, sandbox=Settings(opt_out=True)
    ).run()
    assert summary.states["t1"] is TaskState.FAILED
    merge = next(r for r in _records(repo / ".harness", "r1", "audit")
                 if r["kind"] == "merge.result")  # fmt: skip
    assert merge["body"]["merged"] is False
    assert "calc.py" in merge["body"]["reason"]
    assert "# human" in (repo / "calc.py").read_text()
    assert _verified(repo, keys, tmp_path).status.value == "verified"


def test_trifecta_denied_before_any_process(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    marker = tmp_path / "ran"
    adapter = _script(tmp_path, "marker.py", f"open({str(marker)!r}, 'w').write('x')\n")
    plan = _command_plan("t1", adapter, tools=["secrets", "web"])
    summary = _runtime(repo, plan, keys).run()
    assert summary.states["t1"] is TaskState.DENIED
    assert not marker.exists()
    kinds = [r["kind"] for r in _records(repo / ".harness", "r1", "audit")]
    assert "capability.denied" in kinds and "agent.spawn" not in kinds


def _lineage_root(state: Path, run_id: str) -> str:
    report = verify_bundle(
        export_bundle(state, state.parent / "b.tar", _KEYS).path,
        pins=TrustPolicy(frozenset({_KEYS.key_id}), "t"),
    )
    assert report.status.value == "verified", report.failure
    return next(s.root for s in report.stores if s.store == "lineage")


_KEYS = make_keys(4)


def test_replay_reproduces_the_lineage_root(tmp_path: Path) -> None:
    from harness.orchestrate.replay import Journal

    roots = []
    journal_dir = tmp_path / "journal"
    for attempt, mode in enumerate(("live", "replay")):
        repo = tmp_path / f"repo{attempt}"
        make_repo(repo)
        journal = Journal(journal_dir, mode)
        _runtime(repo, demo_plan(), _KEYS, run_id="same", journal=journal).run()
        roots.append(_lineage_root(repo / ".harness", "same"))
    assert roots[0] == roots[1]


def test_replay_miss_aborts(tmp_path: Path) -> None:
    from harness.orchestrate.replay import Journal
    from harness.orchestrate.runtime import RunAbortedError

    repo = tmp_path / "repo"
    make_repo(repo)
    journal = Journal(tmp_path / "empty-journal", "replay")
    with pytest.raises(RunAbortedError, match="replay miss: no journaled answer"):
        _runtime(repo, demo_plan(), _KEYS, journal=journal).run()
    audit = _records(repo / ".harness", "r1", "audit")
    assert audit[-1]["kind"] == "run.end"
    assert audit[-1]["body"]["outcome"] == "aborted: replay miss"
    assert _lineage_root(repo / ".harness", "r1")  # what happened before the miss verifies


def test_crash_mid_run_then_resume(tmp_path: Path) -> None:
    """SIGKILL the runtime while an agent runs; `harness run` then resumes without duplicates."""
    repo = tmp_path / "repo"
    make_repo(repo)
    subprocess.run([sys.executable, "-m", "harness.cli", "init", "--repo", str(repo)], check=True,
                   capture_output=True)  # fmt: skip
    plan = tmp_path / "plan.toml"
    gate = f'{{ name = "ok", command = ["{sys.executable}", "-c", "pass"] }}'
    plan.write_text(textwrap.dedent(f"""
        [plan]
        name = "crashy"
        [[task]]
        id = "slow"
        role = "a"
        prompt = "slow"
        priority = 9
        adapter = "test-sleeper"
        gates = [{gate}]
        timeout_s = 60
        [[task]]
        id = "quick"
        role = "b"
        prompt = "quick"
        gates = [{gate}]
        [[task.edits]]
        path = "quick.txt"
        content = "quick\\n"
    """))  # fmt: skip
    first = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from harness.orchestrate.adapters import ADAPTERS, CommandAdapter, register_adapter
        from dataclasses import replace
        from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
        from harness.orchestrate.clock import wall_clock
        from harness.orchestrate.plan import load_plan
        from harness.orchestrate.runtime import Runtime
        from harness.receipts.keys import default_keys_dir, load_keys
        register_adapter(CommandAdapter.from_template(
            [sys.executable, "-c", "import time; time.sleep(60)"], name="test-sleeper"))
        repo = Path({str(repo)!r})
        adapters = {{**DEFAULT_MATRIX.adapters, "test-sleeper": NO_TAGS}}
        Runtime(repo=repo, plan=load_plan(Path({str(plan)!r})), state_dir=repo / ".harness",
                keys=load_keys(default_keys_dir(repo)), run_id="r1", clock=wall_clock,
                capabilities=replace(DEFAULT_MATRIX, adapters=adapters)).run()
    """)
    proc = subprocess.Popen([sys.executable, "-c", first], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if audit.exists() and b'"in_progress"' in audit.read_bytes():
            break
        time.sleep(0.05)
    else:
        pytest.fail(
            "the agent never started: " + proc.stderr.read().decode() if proc.stderr else ""
        )
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    args = [sys.executable, "-m", "harness.cli", "run", str(plan), "--repo", str(repo),
            "--run", "r1"]  # fmt: skip
    resumed = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    # the resumed run completes, but "slow" failed: exit 1, with the reason per task
    assert resumed.returncode == 1, resumed.stderr
    assert "did not complete: 1 of 2 task(s) not done" in resumed.stderr
    assert "slow" in resumed.stdout and "crash" in resumed.stdout
    records = _records(repo / ".harness", "r1", "audit")
    ends = [
        r["body"]
        for r in records
        if r["kind"] == "task.transition" and r["body"]["to"] in ("done", "failed")
    ]
    assert {e["task"]: e["to"] for e in ends} == {"slow": "failed", "quick": "done"}
    assert len(ends) == 2  # each task ends exactly once
    assert "crash" in next(e["reason"] for e in ends if e["task"] == "slow")
    planned = [r["body"]["task"] for r in records if r["kind"] == "task.planned"]
    assert sorted(planned) == ["quick", "slow"]  # not declared twice on resume
    from harness.orchestrate.sandbox import default_work_root
    from harness.receipts.keys import default_keys_dir, load_keys

    # `harness init` and both runtimes used the temporary XDG folders (tests/conftest.py),
    # never the home of whoever runs the tests.
    assert not default_keys_dir(repo).is_relative_to(Path.home())
    assert not default_work_root(repo).is_relative_to(Path.home())
    keys = load_keys(default_keys_dir(repo))
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure
    assert (repo / "quick.txt").exists()


def test_receipts_vouch_for_merged_content_only(tmp_path: Path) -> None:
    """break-add wrote calc.py but failed its gate: the receipt is for add-mul's merged version."""
    from harness.receipts.bundle import receipt_for_path
    from harness.receipts.keys import load_keys
    from harness.verify.receipt import check_artifact, verify_receipt

    result = run_demo(tmp_path / "demo")
    keys = load_keys(result.keys_dir)
    _, data = receipt_for_path(result.repo / ".harness", keys, "calc.py")
    receipt = verify_receipt(data)
    check_artifact(receipt, (result.repo / "calc.py").read_bytes(), "calc.py")
    assert receipt.record.body["task"] == "add-mul"


def test_commits_made_by_the_agent_are_recorded_and_merged(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    adapter = _script(tmp_path, "committer.py", """
        import pathlib, subprocess
        pathlib.Path("self.txt").write_text("committed by the agent\\n")
        env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a",
               "GIT_COMMITTER_EMAIL": "a@x", "PATH": "/usr/bin:/bin"}
        subprocess.run(["git", "add", "-A"], env=env, check=True)
        subprocess.run(["git", "commit", "-qm", "agent"], env=env, check=True)
    """)  # fmt: skip
    # Unsandboxed (explicit opt-out): in a sandbox the git folder is read-only (decision 0017).
    summary = _runtime(
        repo, _command_plan("t1", adapter), keys, sandbox=Settings(opt_out=True)
    ).run()
    assert summary.states["t1"] is TaskState.DONE
    paths = [r["body"]["path"] for r in _records(repo / ".harness", "r1", "lineage")]
    assert paths == ["self.txt"]
    assert (repo / "self.txt").exists()


def test_a_failing_batch_does_not_take_the_run_down(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    global _MATRIX
    _MATRIX = dataclasses.replace(
        _MATRIX, adapters={**_MATRIX.adapters, "never-registered": NO_TAGS}
    )
    plan = _command_plan("t1", "never-registered")
    plan["task"].append({**plan["task"][0], "id": "t2", "adapter": "scripted", "role": "s"})
    summary = _runtime(repo, plan, keys).run()
    assert summary.states["t1"] is TaskState.CANCELLED
    assert summary.states["t2"] is TaskState.DONE
    reasons = [r["body"]["reason"] for r in _records(repo / ".harness", "r1", "audit")
               if r["kind"] == "task.transition" and r["body"]["task"] == "t1"]  # fmt: skip
    assert any("UnknownAdapterError" in reason for reason in reasons)
    assert _verified(repo, keys, tmp_path).status.value == "verified"
