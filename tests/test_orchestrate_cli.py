"""`harness init / run / status / stop` as a user types them (real subprocesses, real git)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.orchestrate.demo import make_repo
from harness.verify.canonical import parse_canonical


@pytest.fixture(autouse=True)
def _private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys and worktrees go to per-test XDG folders, never the real ~/.config or ~/.cache."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _harness(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=180, env=dict(os.environ),
    )  # fmt: skip


def _keys_dir(repo: Path) -> Path:
    from harness.receipts.keys import default_keys_dir

    return default_keys_dir(repo)


PLAN = textwrap.dedent(
    """
    [plan]
    name = "cli"
    [[task]]
    id = "hello"
    role = "coder"
    prompt = "Say hello."
    gates = [{{ name = "ok", command = ["{python}", "-c", "import hello"] }}]
    [[task.edits]]
    path = "hello.py"
    content = "print('hello')\\n"
    [[task]]
    id = "later"
    role = "writer"
    prompt = "Write notes after hello."
    depends = ["hello"]
    gates = [{{ name = "ok", command = ["{python}", "-c", "pass"] }}]
    [[task.edits]]
    path = "NOTES.md"
    content = "notes\\n"
    """
).format(python=sys.executable)


def test_init_run_status(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    init = _harness("init", cwd=repo)
    assert init.returncode == 0, init.stderr
    assert (_keys_dir(repo) / "signing.key").exists()
    assert not (repo / ".harness" / "keys").exists()  # keys live outside the repository
    assert str(_keys_dir(repo)) in init.stdout
    assert "/.harness/" in (repo / ".git" / "info" / "exclude").read_text()
    status_clean = subprocess.run(["git", "status", "--porcelain"], cwd=repo,
                                  capture_output=True, text=True, check=True)  # fmt: skip
    assert status_clean.stdout == ""  # state and keys never show up as untracked files
    ran = _harness("run", tmp_path / "plan.toml", "--run", "r1", cwd=repo)
    assert ran.returncode == 0, ran.stderr
    assert "hello" in ran.stdout and "done" in ran.stdout
    assert (repo / "hello.py").exists() and (repo / "NOTES.md").exists()
    status = _harness("status", cwd=repo)
    assert "run r1" in status.stdout and "later" in status.stdout and "done" in status.stdout
    out = tmp_path / "bundle.tar"
    exported = _harness("export", out, cwd=repo)
    assert exported.returncode == 0, exported.stderr
    key_id = exported.stdout.rsplit("signer key id ", 1)[1].strip()
    verified = subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", str(out), "--trusted-key", key_id],
        capture_output=True, text=True, check=False, cwd=repo,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_stop_is_honoured_at_the_next_tick(tmp_path: Path) -> None:
    """A stop for a running run is honoured between batches; a stop for a run that does not
    exist (yet) is a usage error that creates nothing (no phantom run)."""
    repo = tmp_path / "repo"
    make_repo(repo)
    slow = PLAN.replace('"-c", "import hello"', '"-c", "import hello, time; time.sleep(3)"')
    (tmp_path / "plan.toml").write_text(slow)
    assert _harness("init", cwd=repo).returncode == 0
    early = _harness("stop", "--run", "r2", cwd=repo)
    assert early.returncode == 2 and "no run 'r2'" in early.stderr, early.stderr
    assert not (repo / ".harness" / "runs" / "r2").exists()
    audit = repo / ".harness" / "runs" / "r2" / "audit.jsonl"
    running = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(tmp_path / "plan.toml"), "--run", "r2"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not audit.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop = _harness("stop", "--run", "r2", cwd=repo)
    assert stop.returncode == 0, stop.stderr
    out, err = running.communicate(timeout=180)
    assert running.returncode == 1, out + err  # stopped: the run did not complete
    assert "did not complete" in err and "operator stop" in out
    records = [parse_canonical(line) for line in audit.read_bytes().splitlines()]
    ends = {r["body"]["task"]: r["body"]["to"] for r in records if r["kind"] == "task.transition"}
    assert ends["later"] == "cancelled" and ends["hello"] in {"done", "cancelled"}
    assert records[-1]["body"] == {"outcome": "stopped"}
    assert not (repo / "NOTES.md").exists()


def test_bad_plan_is_a_clear_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    assert _harness("init", cwd=repo).returncode == 0
    (tmp_path / "bad.toml").write_text('[plan]\nname = "x"\n[[task]]\nid = "a"\nrole = "r"\n'
                                       'prompt = "p"\ndepends = ["nope"]\n')  # fmt: skip
    ran = _harness("run", tmp_path / "bad.toml", cwd=repo)
    assert ran.returncode == 1
    assert "nope" in ran.stderr and "Traceback" not in ran.stderr


def test_usage_mistakes_are_errors_not_tracebacks(tmp_path: Path) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    init = _harness("init", cwd=outside)
    assert init.returncode == 1 and "not a git repository" in init.stderr
    repo = tmp_path / "repo"
    make_repo(repo)
    assert _harness("init", cwd=repo).returncode == 0
    again = _harness("init", cwd=repo)
    assert again.returncode == 1 and "already exists" in again.stderr
    (tmp_path / "plan.toml").write_text(PLAN)
    (tmp_path / "caps.toml").write_text("[tools.edit]\ntags = ['nonsense']\n")
    bad_caps = _harness("run", tmp_path / "plan.toml", "--capabilities", tmp_path / "caps.toml",
                        cwd=repo)  # fmt: skip
    assert bad_caps.returncode == 1 and "capabilities" in bad_caps.stderr
    for result in (init, again, bad_caps):
        assert "Traceback" not in result.stderr


def test_a_finished_run_is_not_resumed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert _harness("init", cwd=repo).returncode == 0
    assert _harness("run", tmp_path / "plan.toml", "--run", "r1", cwd=repo).returncode == 0
    audit = repo / ".harness" / "runs" / "r1" / "audit.jsonl"
    before = audit.read_bytes()
    again = _harness("run", tmp_path / "plan.toml", "--run", "r1", cwd=repo)
    assert again.returncode == 1 and "already ended" in again.stderr
    assert audit.read_bytes() == before


def test_init_and_run_refuse_keys_an_agent_could_reach(tmp_path: Path) -> None:
    """A keys folder inside the repository (or its worktree folder) is refused by init and
    run. (Fails on the old layout, which put the keys in <repo>/.harness/keys.)"""
    from harness.receipts.keys import init_keys

    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    inside = repo / ".harness" / "keys"
    init = _harness("init", "--keys", inside, cwd=repo)
    assert init.returncode == 1 and "inside the repository" in init.stderr, init.stderr
    assert not (inside / "signing.key").exists()
    init_keys(inside)  # made by hand, behind the harness's back
    ran = _harness("run", tmp_path / "plan.toml", "--keys", inside, cwd=repo)
    assert ran.returncode == 1 and "inside the repository" in ran.stderr, ran.stderr
    assert not (repo / ".harness" / "runs").exists()
    from harness.orchestrate.sandbox import default_work_root

    work = default_work_root(repo) / "keys"
    assert _harness("init", "--keys", work, cwd=repo).returncode == 1
    outside = tmp_path / "elsewhere" / "keys"
    assert _harness("init", "--keys", outside, cwd=repo).returncode == 0
    ran = _harness("run", tmp_path / "plan.toml", "--keys", outside, "--run", "r1", cwd=repo)
    assert ran.returncode == 0, ran.stderr


def test_doctor_passes_then_fails_on_exposed_keys(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    missing = _harness("doctor", "--json", cwd=repo)
    assert missing.returncode == 1  # no keys yet
    assert _harness("init", cwd=repo).returncode == 0
    ok = _harness("doctor", "--json", cwd=repo)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    import json

    checks = {c["check"]: c for c in map(json.loads, ok.stdout.splitlines())}
    assert checks["git"]["status"] == "ok" and "git version" in checks["git"]["detail"]
    assert checks["sandbox"]["status"] == "ok" and "bubblewrap" in checks["sandbox"]["detail"]
    assert checks["keys"]["status"] == "ok"
    assert {f"cli:{n}" for n in ("claude", "codex", "gemini", "aider", "goose", "opencode")} <= set(
        checks
    )
    os.chmod(_keys_dir(repo) / "hmac.key", 0o644)
    exposed = _harness("doctor", cwd=repo)
    assert exposed.returncode == 1
    assert "fail  keys:" in exposed.stdout and "mode 644" in exposed.stdout


def test_doctor_fails_without_a_working_sandbox(tmp_path: Path) -> None:
    from harness.orchestrate.doctor import run_checks
    from harness.orchestrate.sandbox import Settings

    repo = tmp_path / "repo"
    make_repo(repo)
    checks = {c.name: c for c in run_checks(repo, settings=Settings(bwrap="no-such-bwrap"))}
    assert checks["sandbox"].status == "fail"
    assert "not found" in checks["sandbox"].detail


def test_doctor_reports_cli_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.orchestrate.doctor import run_checks

    tool = tmp_path / "bin" / "claude"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho '2.0.1 (Claude Code)'\n")
    tool.chmod(0o755)
    repo = tmp_path / "repo"
    make_repo(repo)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    checks = {c.name: c for c in run_checks(repo, clis=("claude",))}
    assert checks["cli:claude"].status == "info"
    assert checks["cli:claude"].detail == f"{tool}: 2.0.1 (Claude Code)"


def test_run_records_the_sandbox_and_the_explicit_opt_out(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert _harness("init", cwd=repo).returncode == 0
    for run_id, flags, kind, opt_out in (("boxed", (), "bwrap", False),
                                         ("open", ("--no-sandbox",), "none", True)):  # fmt: skip
        ran = _harness("run", tmp_path / "plan.toml", "--run", run_id, *flags, cwd=repo)
        assert ran.returncode == 0, ran.stderr
        audit = repo / ".harness" / "runs" / run_id / "audit.jsonl"
        records = [parse_canonical(line) for line in audit.read_bytes().splitlines()]
        spawns = [r["body"]["sandbox"] for r in records if r["kind"] == "agent.spawn"]
        assert spawns and all((s["kind"], s["opt_out"]) == (kind, opt_out) for s in spawns)
