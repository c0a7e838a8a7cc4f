"""Issue 12 end to end: audited rounds with real processes, sandboxes, git and the control bus.

Every assertion reads the evidence the run wrote (audit records and the rounds texts), and
each run is exported and verified by the standalone verifier.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import make_repo
from harness.orchestrate.rounds.texts import load_text
from harness.receipts.keys import init_keys
from harness.verify.fsm import TaskState
from harness.verify.rules.header import parse_header

from .test_orchestrate_runtime import (  # the shared adapter registry guard and helpers
    _records,
    _restore_adapter_registry,  # noqa: F401
    _runtime,
    _verified,
)

S = TaskState
GATE = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 60}


def _plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"plan": {"name": "p", "settle_ticks": 1, "max_batch": 1}, "task": list(tasks)}


def _rounds_task(task_id: str, steps: int = 2, **rounds: Any) -> dict[str, Any]:
    return {
        "id": task_id,
        "role": f"r-{task_id}",
        "prompt": f"Write {task_id}/ in {steps} steps.",
        "scope": [f"{task_id}/**"],
        "gates": [GATE],
        "rounds": {
            "max_rounds": rounds.pop("max_rounds", 6),
            "steps": [
                {"say": f"part {i}", "edits": [{"path": f"{task_id}/p{i}.md", "content": f"{i}\n"}]}
                for i in range(steps)
            ],
            **rounds,
        },
    }


def _kinds(records: list[dict[str, Any]], kind: str, task: str | None = None) -> list[Any]:
    return [
        r["body"]
        for r in records
        if r["kind"] == kind and (task is None or r["body"].get("task") == task)
    ]


def _keys(tmp: Path) -> Any:
    return init_keys(tmp / "keys")


def test_a_task_completes_over_several_audited_rounds(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    summary = _runtime(repo, _plan(_rounds_task("t", steps=3)), keys).run()
    assert summary.states["t"] is S.DONE
    audit = _records(repo / ".harness", "r1", "audit")
    ends = _kinds(audit, "round.end", "t")
    assert [e["outcome"] for e in ends] == ["continue", "continue", "continue", "done"]
    plans = _kinds(audit, "round.plan", "t")
    assert [p["next"] for p in plans] == ["cli", "cli", "cli", "done"]
    assert plans[2]["cites"] == [1, 2]  # the Manager builds on the earlier reports
    folder = repo / ".harness" / "runs" / "r1"
    for body in _kinds(audit, "round.audit", "t"):
        header = parse_header(load_text(folder, body["text"])).header
        assert header is not None and header.status == body["status"] == "complete"
        assert body["tree_before"] == body["tree_after"] and not body["ghost"]
    for i in range(3):
        assert (repo / "t" / f"p{i}.md").read_text() == f"{i}\n"  # merged
    statuses = [b["status"] for b in _kinds(audit, "run.status")]
    assert statuses == ["creating", "starting", "running", "completed"]
    roles = _kinds(audit, "round.roles", "t")[0]["roles"]
    assert roles["manager"]["denied"] == ["mcp", "shell", "subagents", "write"]
    assert roles["auditor"]["denied"] == ["subagents", "write"]
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_ghost_success_never_counts_as_progress(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    summary = _runtime(repo, _plan(_rounds_task("g", ghost=True, max_rounds=2)), keys).run()
    assert summary.states["g"] is S.BLOCKED
    audit = _records(repo / ".harness", "r1", "audit")
    steps = _kinds(audit, "round.step", "g")
    assert all(s["claims_success"] and not s["changed"] for s in steps)
    audits = _kinds(audit, "round.audit", "g")
    assert all(a["ghost"] and a["effective"] == "incomplete" for a in audits)
    assert [e["failing"] for e in _kinds(audit, "round.end", "g")] == [1, 2]
    assert _kinds(audit, "run.status")[-1]["status"] == "incomplete"
    assert not (repo / "g").exists()
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_an_auditor_that_writes_is_refused_and_never_merged(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    task = _rounds_task("a", steps=1, auditor_writes="a/p0.md")
    summary = _runtime(repo, _plan(task), keys).run()
    audit = _records(repo / ".harness", "r1", "audit")
    body = _kinds(audit, "round.audit", "a")[0]
    sandboxed = _kinds(audit, "agent.spawn")[0]["sandbox"]["kind"] == "bwrap"
    if sandboxed:  # the read-only mount refused the write: the auditor died of it
        assert body["exit_code"] != 0 and body["integrity"] == "suspect"
        assert body["tree_before"] == body["tree_after"]
        assert summary.states["a"] is S.BLOCKED
    else:  # no sandbox: the tree digest caught the change
        assert body["integrity"] == "violation" and body["tree_before"] != body["tree_after"]
        assert summary.states["a"] is S.FAILED
    assert not (repo / "a").exists()  # nothing of the task merged
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_without_a_sandbox_the_tree_digest_catches_the_auditor(tmp_path: Path) -> None:
    from harness.orchestrate.sandbox import Settings

    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    task = _rounds_task("a", steps=1, auditor_writes="a/note.md")
    runtime = _runtime(repo, _plan(task), keys, sandbox=Settings(opt_out=True))
    summary = runtime.run()
    assert summary.states["a"] is S.FAILED
    audit = _records(repo / ".harness", "r1", "audit")
    body = _kinds(audit, "round.audit", "a")[0]
    assert body["integrity"] == "violation" and body["status"] == "blocked"
    assert _kinds(audit, "round.end", "a")[0]["outcome"] == "violation"
    failed = _kinds(audit, "attempt.failed", "a")[0]
    assert failed["anomaly"] == "integrity" and not failed["retry"]
    assert not (repo / "a").exists()
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_an_invalid_header_gets_one_repair(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    summary = _runtime(repo, _plan(_rounds_task("h", steps=1, bad_header=True)), keys).run()
    assert summary.states["h"] is S.DONE
    audit = _records(repo / ".harness", "r1", "audit")
    body = _kinds(audit, "round.audit", "h")[0]
    folder = repo / ".harness" / "runs" / "r1"
    assert parse_header(load_text(folder, body["text"])).header is None
    assert body["repair"] is not None and body["header_valid"]
    assert parse_header(load_text(folder, body["repair"])).header is not None
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


# -- the control bus while rounds run -----------------------------------------------------


PLAN_TOML = """
[plan]
name = "p"
settle_ticks = 1

[[task]]
id = "g"
role = "rounder"
prompt = "Write g/ (the executor is a ghost: every round fails)."
scope = ["g/**"]
gates = [{{ name = "ok", command = ["{python}", "-c", "pass"], timeout_s = 60 }}]

[task.rounds]
max_rounds = {max_rounds}
ghost = {ghost}
gate_wait_s = 60
steps = [{{ say = "one", edits = [{{ path = "g/a.md", content = "a" }}] }},
         {{ say = "two", edits = [{{ path = "g/b.md", content = "b" }}] }}]
"""


def _harness(*args: Any, cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300, **kwargs,
    )  # fmt: skip


def _start(repo: Path, plan: Path, *, own_group: bool = False) -> subprocess.Popen[str]:
    """``harness run PLAN --run r1`` in the background (its own process group when asked,
    so a test can kill the runtime and everything it started at once)."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(plan), "--run", "r1"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=own_group,
    )  # fmt: skip


def _export_and_verify(repo: Path, out: Path) -> None:
    """``harness export`` then the standalone ``harness-verify`` pinned to the signer: exit 0."""
    exported = _harness("export", out, cwd=repo)
    assert exported.returncode == 0, exported.stderr
    key_id = exported.stdout.rsplit("signer key id ", 1)[1].strip()
    check = subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", str(out), "--trusted-key", key_id],
        capture_output=True, text=True, check=False, cwd=repo,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def _wait_for(path: Path, needle: str, proc: subprocess.Popen[str], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {needle!r}: {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared in {path}")


def _setup_cli(tmp_path: Path, *, max_rounds: int, ghost: bool) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    make_repo(repo)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        PLAN_TOML.format(python=sys.executable, max_rounds=max_rounds, ghost=str(ghost).lower())
    )
    assert _harness("init", cwd=repo).returncode == 0
    return repo, plan


def test_three_failing_rounds_open_a_gate_an_approve_closes(tmp_path: Path) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=4, ghost=True)
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    proc = _start(repo, plan)
    try:
        _wait_for(audit, '"status":"waiting_approval"', proc)
        early = _harness("answer", "--run", "r1", "--text", "x", "--id", "a1", cwd=repo)
        assert early.returncode == 0, early.stderr  # recorded, then rejected: wrong gate kind
        first = _harness("approve", "--run", "r1", "--id", "ok-1", cwd=repo)
        again = _harness("approve", "--run", "r1", "--id", "ok-1", cwd=repo)
        assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
        assert "replayed" in again.stdout and "replayed" not in first.stdout
        clash = _harness("approve", "--run", "r1", "--id", "ok-1", "--text", "no", cwd=repo)
        assert clash.returncode == 1 and "another payload" in clash.stderr
        proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    records = _records(repo / ".harness", "r1", "audit")
    control = _records(repo / ".harness", "r1", "control")
    assert [c["body"]["id"] for c in control] == ["a1", "ok-1"]  # the replay appended nothing
    receipts = {r["id"]: r for r in _kinds(records, "command.receipt")}
    assert receipts["a1"]["outcome"] == "rejected"
    assert receipts["ok-1"]["outcome"] == "applied"
    seq_of = {r["body"].get("id"): r["seq"] for r in records if r["kind"] == "command.receipt"}
    effects = [r for r in records if r["body"].get("command") == "ok-1"]
    assert effects and all(r["seq"] > seq_of["ok-1"] for r in effects)  # receipt first
    ends = _kinds(records, "round.end", "g")
    assert [e["outcome"] for e in ends] == ["continue", "continue", "gate", "incomplete"]
    assert [e["failing"] for e in ends] == [1, 2, 3, 1]  # the approve reset the streak
    assert [i["kind"] for i in _kinds(records, "round.input", "g")] == ["approve"]


def test_a_run_killed_mid_round_continues_with_epoch_one(tmp_path: Path) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=5, ghost=False)
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    proc = _start(repo, plan, own_group=True)
    try:
        _wait_for(audit, '"kind":"round.end"', proc)
        _wait_for(audit, '"round":2', proc)  # round 2 has begun: kill mid-round
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    resumed = _harness("resume", plan, "--run", "r1", cwd=repo)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = _records(repo / ".harness", "r1", "audit")
    statuses = [(b["status"], b["epoch"]) for b in _kinds(records, "run.status")]
    assert ("starting", 1) in statuses and statuses[-1] == ("completed", 1)
    ends = _kinds(records, "round.end", "g")
    assert ends[0]["epoch"] == 0 and ends[-1]["epoch"] == 1 and ends[-1]["outcome"] == "done"
    numbers = [e["round"] for e in ends]
    assert numbers == sorted(set(numbers)) and numbers[0] == 1  # rebuilt, not restarted
    assert (repo / "g" / "a.md").read_text() == "a" and (repo / "g" / "b.md").read_text() == "b"
    resume_receipt = next(r for r in _kinds(records, "command.receipt") if r["command"] == "resume")
    assert resume_receipt["outcome"] == "applied"
    out = tmp_path / "bundle.tar"
    _export_and_verify(repo, out)


def test_a_finished_run_cannot_continue_and_commands_to_it_are_refused(tmp_path: Path) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=5, ghost=False)
    assert _harness("run", plan, "--run", "r1", cwd=repo).returncode == 0
    again = _harness("resume", plan, "--run", "r1", cwd=repo)
    assert again.returncode == 1 and "only a blocked or incomplete" in again.stderr
    late = _harness("stop", "--run", "r1", cwd=repo)
    assert late.returncode == 1 and "has ended" in late.stderr
    unknown = _harness("stop", "--run", "nope", cwd=repo)
    assert unknown.returncode == 2 and not (repo / ".harness" / "runs" / "nope").exists()
    assert _records(repo / ".harness", "r1", "control") == []


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_swapped_control_file_stops_the_run_without_hanging(tmp_path: Path, kind: str) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=3, ghost=True)
    folder = repo / ".harness" / "runs" / "r1"
    audit = folder / "audit.jsonl"
    proc = _start(repo, plan)
    try:
        _wait_for(audit, '"kind":"round.plan"', proc)
        control = folder / "control.jsonl"
        control.unlink(missing_ok=True)
        if kind == "symlink":
            (tmp_path / "elsewhere.jsonl").write_text("")
            control.symlink_to(tmp_path / "elsewhere.jsonl")
        else:
            os.mkfifo(control)
        _, err = proc.communicate(timeout=120)  # a FIFO must not hang the run
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "control.jsonl" in err, err


# -- a real CLI's role invocation (fake executable speaking Claude Code's format) -----------


def test_a_cli_manager_gets_its_tool_policy_and_its_answer_is_parsed(tmp_path: Path) -> None:
    import dataclasses
    import shutil
    import stat

    from harness.orchestrate.adapters import ADAPTERS, register_adapter
    from harness.orchestrate.sandbox import Settings

    from . import test_orchestrate_runtime as base

    fake = tmp_path / "bin" / "claude"
    fake.parent.mkdir()
    for source in (Path(__file__).parent / "fakes").iterdir():
        if source.is_file():
            shutil.copyfile(source, fake.parent / source.name)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    register_adapter(dataclasses.replace(ADAPTERS["claude"], executable=str(fake)))
    base._MATRIX = dataclasses.replace(
        base._MATRIX, adapters={**base._MATRIX.adapters, "claude": base.NO_TAGS}
    )
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    task = _rounds_task("m", steps=1, manager="claude", max_rounds=1)
    summary = _runtime(repo, _plan(task), keys, sandbox=Settings(opt_out=True)).run()
    assert summary.states["m"] is S.BLOCKED  # the fake's answer has no Next line
    audit = _records(repo / ".harness", "r1", "audit")
    manager = _kinds(audit, "round.roles", "m")[0]["roles"]["manager"]
    assert manager["adapter"] == "claude" and "--disallowedTools" in manager["flags"]
    assert sorted(manager["enforced_by_flags"]) == ["mcp", "shell", "subagents", "write"]
    plan = _kinds(audit, "round.plan", "m")[0]
    assert plan["exit_code"] == 0 and not plan["valid"] and "Next" in plan["reason"]
    text = load_text(repo / ".harness" / "runs" / "r1", plan["text"])
    assert text  # the result text of the fake's JSON answer
    worktrees = list((tmp_path).rglob("FAKE_CLAUDE.md"))
    assert worktrees == []  # Write was denied: the fake made no edit
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_retry_starts_a_new_run_from_the_recorded_plan_only(tmp_path: Path) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=1, ghost=True)
    first = _harness("run", plan, "--run", "r1", cwd=repo)
    assert first.returncode == 1 and "rounds incomplete" in first.stdout, first.stdout
    changed = tmp_path / "changed.toml"
    changed.write_text(plan.read_text().replace("max_rounds = 1", "max_rounds = 2"))
    refused = _harness("resume", changed, "--run", "r1", "--retry", "--new-run", "r2", cwd=repo)
    assert refused.returncode == 1 and "is not the plan run r1 recorded" in refused.stderr
    assert not (repo / ".harness" / "runs" / "r2").exists()
    retried = _harness("resume", plan, "--run", "r1", "--retry", "--new-run", "r2", cwd=repo)
    assert "run r2" in retried.stdout, retried.stdout + retried.stderr
    digests = {
        run: _kinds(_records(repo / ".harness", run, "audit"), "run.start")[0]["plan_sha256"]
        for run in ("r1", "r2")
    }
    assert digests["r1"] == digests["r2"]
    # and the incomplete r1 itself can still be continued (it is not touched by the retry)
    status = _harness("status", "--run", "r1", cwd=repo)
    assert "run r1: incomplete" in status.stdout, status.stdout


def test_an_operator_path_through_a_link_still_reaches_the_bus(tmp_path: Path) -> None:
    """The operator's own links (a symlinked home) are resolved once; a link swapped in
    below the state folder later is still refused (test above)."""
    from harness.orchestrate.state import request_command

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real, target_is_directory=True)
    repo = tmp_path / "via" / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    summary = _runtime(repo, _plan(_rounds_task("t", steps=1)), keys).run()
    assert summary.states["t"] is S.DONE
    keys_dir = tmp_path / "keys"
    issued = request_command(repo, "r1", "resume", {}, "op", keys_dir)  # allowed after the end
    assert issued.seq == 0 and not issued.replayed
    assert _records(repo / ".harness", "r1", "control")[0]["body"]["command"] == "resume"


def test_a_crash_resume_without_continue_ends_incomplete_and_verifies(tmp_path: Path) -> None:
    repo, plan = _setup_cli(tmp_path, max_rounds=5, ghost=False)
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    proc = _start(repo, plan, own_group=True)
    try:
        _wait_for(audit, '"kind":"round.end"', proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    again = _harness("run", plan, "--run", "r1", cwd=repo)  # a crash resume, same epoch
    assert again.returncode == 1 and "interrupted by a runtime crash" in again.stdout, again.stdout
    records = _records(repo / ".harness", "r1", "audit")
    statuses = [(b["status"], b["epoch"]) for b in _kinds(records, "run.status")]
    assert statuses[-1] == ("incomplete", 0) and ("starting", 1) not in statuses
    out = tmp_path / "bundle.tar"
    _export_and_verify(repo, out)


@pytest.mark.parametrize("damage", ["stray", "altered", "link", "fifo"])
def test_the_exporter_refuses_a_damaged_rounds_folder(tmp_path: Path, damage: str) -> None:
    from harness.receipts.bundle import ExportError, export_bundle

    repo = tmp_path / "repo"
    make_repo(repo)
    keys = _keys(tmp_path)
    _runtime(repo, _plan(_rounds_task("t", steps=1)), keys).run()
    rounds = repo / ".harness" / "runs" / "r1" / "rounds"
    first = sorted(rounds.iterdir())[0]
    if damage == "stray":
        (rounds / "notes.txt").write_text("x")
    elif damage == "altered":
        first.write_text("not what the records bind")
    elif damage == "link":
        data = first.read_bytes()
        first.unlink()
        (tmp_path / "elsewhere").write_bytes(data)
        first.symlink_to(tmp_path / "elsewhere")
    else:
        first.unlink()
        os.mkfifo(first)
    wanted = "its bytes do not hash" if damage == "altered" else "rounds/"
    with pytest.raises(ExportError, match=wanted):
        export_bundle(repo / ".harness", tmp_path / "b.tar", keys)
