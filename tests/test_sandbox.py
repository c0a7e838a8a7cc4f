"""The sandbox package: profiles, mounts, environment, refusal and opt-out, signals; with real
bubblewrap (``bwrap``) and real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate import git
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.gates import run_gate
from harness.orchestrate.model import Gate, TaskSpec
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.proc import run_process
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import (
    BatchDirs,
    Bind,
    Sandbox,
    Settings,
    build_profile,
    bwrap_argv,
    default_work_root,
    probe,
    sandbox_env,
)
from harness.orchestrate.sandbox.policy import (
    SandboxUnavailableError,
    batch_network,
    grants_egress,
)
from harness.orchestrate.state import key_layout_problem
from harness.receipts.keys import default_keys_dir, init_keys
from harness.verify.canonical import parse_canonical

from .evidence_helpers import make_keys

needs_bwrap = pytest.mark.skipif(not probe().available, reason=probe().reason)
DATE = "2026-01-01T00:00:00+00:00"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)


def _layout(tmp: Path) -> tuple[Path, Path, Path]:
    repo = tmp / "repo"
    make_repo(repo)
    state = repo / ".harness"
    state.mkdir()
    keys = default_keys_dir(repo)
    init_keys(keys)
    return repo, state, keys


def _batch(repo: Path, tmp: Path, name: str = "b1") -> BatchDirs:
    dirs = BatchDirs(tmp / "work" / name)
    dirs.create()
    git.add_worktree(repo, dirs.tree, f"branch-{name}", "HEAD")
    return dirs


def _inside(sandbox: Sandbox, profile: Any, code: str, env: dict[str, str], cwd: Path) -> Any:
    argv = sandbox.argv(profile, [sys.executable, "-P", "-c", code])
    return run_process(argv, cwd=cwd, timeout_s=60, env=env, sandboxed=True)


@needs_bwrap
def test_agent_sees_worktree_but_not_home_state_or_keys(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=keys)
    dirs = _batch(repo, tmp_path)
    profile, env = sandbox.agent(dirs, programs=[sys.executable], network=False)
    assert (profile.kind, profile.network, profile.private_mounts) == ("bwrap", False, False)
    code = textwrap.dedent(f"""
        import json, os
        paths = {json.dumps([str(state), str(keys), str(keys / "hmac.key"), str(Path.home())])}
        print(json.dumps({{
            "exists": [os.path.exists(p) for p in paths[:3]],
            "home": sorted(os.listdir(paths[3])) if os.path.isdir(paths[3]) else None,
            "cwd": os.getcwd(),
            "write": open("new.txt", "w").write("x"),
            "pid": os.getpid(),
        }}))
    """)
    result = _inside(sandbox, profile, code, env, dirs.tree)
    assert result.exit_code == 0, result.stderr.decode()
    seen = json.loads(result.stdout)
    assert seen["exists"] == [False, False, False]
    home_listing = seen["home"] or []
    assert all(not name.startswith(".config") for name in home_listing)  # keys' parent
    assert seen["cwd"] == str(dirs.tree) and (dirs.tree / "new.txt").read_text() == "x"
    assert seen["pid"] < 10  # a new PID namespace


@needs_bwrap
def test_gate_gets_a_read_only_worktree_and_git(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=keys)
    dirs = _batch(repo, tmp_path)
    write = Gate("w", (sys.executable, "-c", "open('calc.py', 'a').write('# gate')"), 30)
    result = run_gate(write, dirs.tree, sandbox, dirs.gate_home)
    assert not result.passed and "Read-only file system" in result.output_tail
    assert result.sandbox is not None and result.sandbox.role == "gate"
    assert "# gate" not in (dirs.tree / "calc.py").read_text()
    # the same command without a sandbox would have changed the worktree (the check can fail)
    assert run_gate(write, dirs.tree).passed
    assert "# gate" in (dirs.tree / "calc.py").read_text()
    test = Gate("t", (sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."), 60)
    assert run_gate(test, dirs.tree, sandbox, dirs.gate_home).passed  # python and stdlib visible


def test_private_mounts_is_computed_from_the_mounts(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    support = probe()
    if not support.available:
        pytest.skip(support.reason)
    common: dict[str, Any] = {
        "role": "agent", "support": support, "settings": Settings(), "workdir": repo,
        "home": tmp_path / "home", "home_writable": True, "network": False, "env_names": [],
        "hidden": [Path.home(), state, keys], "secret": [keys], "confine": [state, keys],
    }  # fmt: skip
    assert not build_profile(binds=[Bind(repo / "calc.py", False, "x")], **common).private_mounts
    assert build_profile(binds=[Bind(repo, True, "worktree")], **common).private_mounts
    assert build_profile(binds=[Bind(keys / "hmac.key", False, "x")], **common).private_mounts
    # a program whose folder would expose the state folder gets only its own file mounted
    script = tmp_path / "agent.py"
    script.write_text("print('hi')\n")
    script.chmod(0o755)
    profile = build_profile(binds=[], programs=[str(script)], **common)
    sources = [m.source for m in profile.mounts if m.purpose == "executable"]
    assert sources == [str(script)] and not profile.private_mounts
    inside = state / "tool.py"
    inside.write_text("")
    inside.chmod(0o755)
    profile = build_profile(binds=[], programs=[str(inside)], files=[str(inside)], **common)
    assert all(not str(m.source).startswith(str(state)) for m in profile.mounts)


def test_environment_is_allow_listed_and_names_only_are_recorded(tmp_path: Path) -> None:
    _, state, keys = _layout(tmp_path)
    host = {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm", "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s3cret", "ANTHROPIC_API_KEY": "sk-ant", "SSH_AUTH_SOCK": "/x",
    }  # fmt: skip
    env = sandbox_env(host, home=tmp_path / "h")
    assert set(env) == {"PATH", "LANG", "TERM", "HOME", "TMPDIR"}
    assert env["HOME"] == str(tmp_path / "h")
    sandbox = Sandbox(
        Settings(), probe(), (Path.home(), state, keys), (keys,), None, (state, keys), host
    )
    dirs = BatchDirs(tmp_path / "work" / "b1")
    dirs.create()
    profile, env = sandbox.agent(
        dirs, programs=[], network=False, adapter_env=["ANTHROPIC_API_KEY"]
    )
    assert "ANTHROPIC_API_KEY" not in env  # no egress: no API key
    profile, env = sandbox.agent(dirs, programs=[], network=True, adapter_env=["ANTHROPIC_API_KEY"])
    assert env["ANTHROPIC_API_KEY"] == "sk-ant" and "AWS_SECRET_ACCESS_KEY" not in env
    assert profile.env == tuple(sorted(env)) and "sk-ant" not in json.dumps(profile.to_json())


def test_egress_comes_from_the_tasks_tools_not_the_adapter() -> None:
    claude = TaskSpec(id="a", role="r", prompt="p", adapter="claude")
    web = TaskSpec(id="b", role="r", prompt="p", adapter="claude", tools=("web",))
    assert not grants_egress(claude, DEFAULT_MATRIX)  # adapter tags are not a grant
    assert grants_egress(web, DEFAULT_MATRIX)
    assert batch_network([web], DEFAULT_MATRIX)
    assert not batch_network([web, claude], DEFAULT_MATRIX)  # never more than any task's grant


@needs_bwrap
def test_network_flag_is_what_separates_the_listener(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=keys)
    dirs = _batch(repo, tmp_path)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('in')"
    try:
        for network, connected in ((False, False), (True, True)):
            profile, env = sandbox.agent(dirs, programs=[sys.executable], network=network)
            result = _inside(sandbox, profile, code, env, dirs.tree)
            assert (result.exit_code == 0) is connected, result.stderr.decode()
    finally:
        server.close()


@needs_bwrap
def test_sigterm_reaches_the_sandboxed_program_with_its_grace(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=keys)
    dirs = _batch(repo, tmp_path)
    profile, env = sandbox.agent(dirs, programs=[sys.executable], network=False)
    polite = textwrap.dedent("""
        import signal, sys, time
        def bye(*_):
            open("terminated.txt", "w").write("cleaned up")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("ready", flush=True)
        time.sleep(60)
    """)
    argv = sandbox.argv(profile, [sys.executable, "-c", polite])
    result = run_process(argv, cwd=dirs.tree, timeout_s=1.5, grace_s=5, env=env, sandboxed=True)
    assert result.timed_out and (dirs.tree / "terminated.txt").read_text() == "cleaned up"
    assert result.duration_ms < 5000  # it exited within its grace, not at the SIGKILL
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    argv = sandbox.argv(profile, [sys.executable, "-c", stubborn])
    result = run_process(argv, cwd=dirs.tree, timeout_s=1, grace_s=0.5, env=env, sandboxed=True)
    assert result.timed_out and result.signal == signal.Signals.SIGKILL.name


def _plan(adapter: str, **task: Any) -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"]}
    body: dict[str, Any] = {
        "id": "t1", "role": "coder", "prompt": "write x", "adapter": adapter,
        "scope": ["x.txt"], "gates": [gate], **task,
    }  # fmt: skip
    if adapter == "scripted":
        body["edits"] = [{"path": "x.txt", "content": "x\n"}]
    plan: dict[str, Any] = {"plan": {"name": "p"}, "task": [body]}
    if adapter == "mine":
        code = "import pathlib; pathlib.Path('x.txt').write_text('x\\n')"
        plan["adapter"] = {"mine": {"command": [sys.executable, "-c", code]}}
    return plan


def _run(tmp: Path, plan: dict[str, Any], settings: Settings) -> tuple[Runtime, Path]:
    repo = tmp / "repo"
    if not repo.exists():
        make_repo(repo)
    runtime = Runtime(
        repo=repo, plan=parse_plan(plan), state_dir=repo / ".harness", keys=make_keys(),
        run_id="r1", clock=LogicalClock(), capabilities=DEFAULT_MATRIX, git_date=DATE,
        sandbox=settings, keys_dir=tmp / "keys",
    )  # fmt: skip
    return runtime, repo / ".harness" / "runs" / "r1" / "audit.jsonl"


def _audit(path: Path) -> list[dict[str, Any]]:
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def test_without_a_sandbox_a_real_agent_plan_is_refused(tmp_path: Path) -> None:
    """No bubblewrap and no opt-out: refused before anything is recorded."""
    runtime, audit = _run(tmp_path, _plan("mine"), Settings(bwrap="no-such-bwrap"))
    with pytest.raises(SandboxUnavailableError, match="--no-sandbox"):
        runtime.run()
    assert not audit.exists()


def test_without_a_sandbox_the_scripted_agent_runs_and_it_is_recorded(tmp_path: Path) -> None:
    runtime, audit = _run(tmp_path, _plan("scripted"), Settings(bwrap="no-such-bwrap"))
    assert runtime.run().states["t1"].value == "done"
    records = _audit(audit)
    (spawn,) = [r["body"] for r in records if r["kind"] == "agent.spawn"]
    assert spawn["sandbox"]["kind"] == "none" and spawn["sandbox"]["opt_out"] is False
    assert spawn["sandbox"]["private_mounts"] is True and "not found" in spawn["sandbox"]["reason"]


def test_explicit_opt_out_is_recorded(tmp_path: Path) -> None:
    """--no-sandbox is recorded in run.start and every spawn; with nothing physical to lower
    its risks, a real agent is then denied by the trifecta (decided under the recorded
    profile), while the scripted agent runs."""
    plan = _plan("scripted")
    plan["task"].append({**_plan("mine")["task"][0], "id": "t2", "role": "other"})
    plan["adapter"] = _plan("mine")["adapter"]
    plan["task"][1]["scope"] = ["y.txt"]
    runtime, audit = _run(tmp_path, plan, Settings(opt_out=True))
    states = runtime.run().states
    assert (states["t1"].value, states["t2"].value) == ("done", "denied")
    records = _audit(audit)
    (start,) = [r["body"] for r in records if r["kind"] == "run.start"]
    (spawn,) = [r["body"] for r in records if r["kind"] == "agent.spawn"]
    for profile in (start["sandbox"], spawn["sandbox"]):
        assert (profile["kind"], profile["opt_out"], profile["network"]) == ("none", True, True)
    (denied,) = [r["body"] for r in records if r["kind"] == "capability.denied"]
    assert denied["task"] == "t2" and "private_data" in denied["tags"]


@needs_bwrap
def test_scripted_agent_runs_sandboxed_when_bwrap_works(tmp_path: Path) -> None:
    runtime, audit = _run(tmp_path, _plan("scripted"), Settings())
    assert runtime.run().states["t1"].value == "done"
    (spawn,) = [r["body"] for r in _audit(audit) if r["kind"] == "agent.spawn"]
    sandbox = spawn["sandbox"]
    assert sandbox["kind"] == "bwrap" and sandbox["private_mounts"] is False
    purposes = {m["purpose"] for m in sandbox["mounts"]}
    assert {"worktree", "io", "home", "interpreter", "git", "system", "tmp"} <= purposes
    assert set(sandbox["interpreters"]) >= {os.path.realpath(sys.base_prefix)}
    assert not spawn["worktree"].startswith(str(tmp_path / "repo"))


def test_argv_is_a_pure_function_of_the_profile(tmp_path: Path) -> None:
    repo, state, keys = _layout(tmp_path)
    support = probe()
    if not support.available:
        pytest.skip(support.reason)
    sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=keys)
    dirs = BatchDirs(tmp_path / "work" / "b1")
    profile, _ = sandbox.agent(dirs, programs=[], network=False)
    argv = bwrap_argv("/usr/bin/bwrap", profile, ["prog", "arg"])
    assert argv[-3:] == ["--", "prog", "arg"]
    assert "--unshare-net" in argv and "--die-with-parent" in argv and "--new-session" in argv
    assert ["--bind", str(dirs.tree), str(dirs.tree)] == argv[argv.index(str(dirs.tree)) - 1 :][:3]
    binds = [m.source for m in profile.mounts if m.source]
    assert str(state) not in binds and str(keys) not in binds


def test_default_layout_keeps_keys_and_worktrees_apart(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = default_keys_dir(repo)
    work = default_work_root(repo)
    assert keys.is_relative_to(tmp_path / "config") and work.is_relative_to(tmp_path / "cache")
    assert key_layout_problem(keys, repo) is None
    assert "inside the repository" in str(key_layout_problem(repo / ".harness" / "keys", repo))
    assert "inside the worktree folder" in str(key_layout_problem(work / "k", repo))
    assert "contains the repository" in str(key_layout_problem(tmp_path, repo))
    link = tmp_path / "innocent"
    link.symlink_to(repo / ".harness", target_is_directory=True)
    assert "inside the repository" in str(key_layout_problem(link / "keys", repo))


def test_recorded_profiles_match_the_schema(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads(
        (Path(__file__).parents[1] / "schemas" / "sandbox-profile.schema.json").read_text()
    )
    validator = jsonschema.Draft202012Validator(schema)
    for name, settings in (("a", Settings()), ("b", Settings(opt_out=True))):
        runtime, audit = _run(tmp_path / name, _plan("scripted"), settings)
        runtime.run()
        records = _audit(audit)
        profiles = [
            r["body"]["sandbox"] for r in records if r["kind"] in ("run.start", "agent.spawn")
        ]
        assert len(profiles) == 2
        for profile in profiles:
            validator.validate(profile)
    bad = {**profiles[0], "kind": "none", "network": False}
    assert not validator.is_valid(bad)  # no sandbox can never claim "no network"
