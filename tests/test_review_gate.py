"""The action review gate end to end: real processes, the real hook, the real socket, bwrap.

The fake Claude Code (tests/fakes/claude) calls its PreToolUse hooks as the real CLI does (the
configured command through ``sh -c``, the hook JSON on stdin, the answer on stdout, a denied
tool not run). The runtime gives it the harness's hook (``--settings``), the hook talks to the
batch's review socket bound into the sandbox, and the run loop answers from its tick. Each
test checks the tool's effect in the batch's committed work (present or visibly absent), the
``action.review`` records, and that the exported bundle verifies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.adapters import ADAPTERS, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.review import ENV_SOCKET, ENV_WAIT, ReviewDesk
from harness.orchestrate.review.protocol import MAX_REQUEST, answer_bytes, ask, listen
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings, probe
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.policy import TrustPolicy
from harness.verify.rules import review as rv

FAKES = Path(__file__).parent / "fakes"
BWRAP = probe("bwrap").available
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bubblewrap cannot run here")


@pytest.fixture(autouse=True)
def _restore_adapters() -> Iterator[None]:
    saved = dict(ADAPTERS)
    yield
    ADAPTERS.clear()
    ADAPTERS.update(saved)


def _fake_claude(tmp: Path) -> Path:
    folder = tmp / "bin"
    folder.mkdir()
    for source in FAKES.iterdir():
        if source.is_file():
            shutil.copyfile(source, folder / source.name)
    fake = folder / "claude"
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    register_adapter(dataclasses.replace(ADAPTERS["claude"], executable=str(fake)))
    return fake


def tool(name: str, **tool_input: Any) -> str:
    return "TOOL " + json.dumps({"tool_name": name, "tool_input": tool_input})


BOUNDS = {"explore": [1001, 1001, 1001], "implement": [0, 1001, 1001],
          "integrate": [0, 0, 1001], "converge": [0, 0, 0]}  # fmt: skip
"""The plan's phase bounds that hold the run in one phase from its start (phases.phase_for)."""


def _runtime(
    tmp: Path, prompt: str, *, sandbox: Settings, wait_s: int = 2, phase: str = "implement"
) -> Runtime:
    repo = tmp / "repo"
    make_repo(repo)
    _fake_claude(tmp)
    plan = parse_plan(
        {
            "plan": {
                "name": "review",
                "max_attempts": 1,
                "control": {"phase_bounds": BOUNDS[phase]},
            },
            "task": [
                {
                    "id": "t1",
                    "role": "coder",
                    "adapter": "claude",
                    "prompt": prompt,
                    "scope": ["src/**"],
                    "gates": [
                        {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
                    ],
                }
            ],
        }
    )
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "claude": NO_TAGS}
    )
    runtime = Runtime(
        repo=repo, plan=plan, state_dir=repo / ".harness", keys=init_keys(tmp / "keys"),
        run_id="r1",
        clock=LogicalClock(), capabilities=matrix, git_date="2026-01-01T00:00:00+00:00",
        grace_s=0.5, sandbox=sandbox,
    )  # fmt: skip
    ReviewDesk.of(runtime).wait_s = wait_s
    return runtime


def _audit(runtime: Runtime) -> list[dict[str, Any]]:
    path = runtime.folder / "audit.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def _reviews(runtime: Runtime) -> list[dict[str, Any]]:
    return [r["body"] for r in _audit(runtime) if r["kind"] == "action.review"]


def _branch_file(runtime: Runtime, path: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(runtime.repo), "show", f"harness/r1/b0001:{path}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout if done.returncode == 0 else None


def _verified(runtime: Runtime, tmp: Path) -> Any:
    keys = runtime.keys
    bundle = export_bundle(runtime.state_dir, tmp / "bundle.tar", keys).path
    return verify_bundle(
        bundle, pins=TrustPolicy(frozenset({keys.key_id}), "t"), hmac_master=keys.hmac_master
    )


PUSH = "touch src/pushed.txt && git push origin HEAD"
"""An irreversible command whose effect is visible: it creates src/pushed.txt first."""


def _prompt() -> str:
    return "\n".join(
        [
            "Do the work.",
            tool("Read", file_path="src/none.txt"),
            tool("Write", file_path="src/a.txt", content="in scope\n"),
            tool("Write", file_path="docs/b.txt", content="outside the scope\n"),
            tool("Bash", command=PUSH),
        ]
    )


def _settings() -> list[Settings]:
    return [Settings()] if BWRAP else []


@needs_bwrap
def test_an_irreversible_action_without_approval_is_denied_before_it_runs(
    tmp_path: Path,
) -> None:
    runtime = _runtime(tmp_path, _prompt(), sandbox=Settings(), wait_s=1)
    summary = runtime.run()
    reviews = _reviews(runtime)
    assert [(r["review"], r["tool"], r["class"], r["decision"]) for r in reviews] == [
        (1, "Read", "read", "allow"),
        (2, "Write", "write", "allow"),
        (3, "Write", "write", "deny"),
        (4, "Bash", "irreversible", "deny"),
    ]
    assert reviews[3]["reason"] == rv.R_UNAPPROVED and reviews[3]["approval"] is None
    assert reviews[3]["target"] == PUSH
    assert reviews[2]["reason"] == rv.R_OUT and reviews[2]["target"] == "docs/b.txt"
    phases = [r["body"]["phase"] for r in _audit(runtime) if r["kind"] == "control.phase"]
    assert phases[-1] == "implement" and {r["phase"] for r in reviews} == {"implement"}
    # the effects: the allowed write happened, the denied ones visibly did not
    assert _branch_file(runtime, "src/a.txt") == "in scope\n"
    assert _branch_file(runtime, "docs/b.txt") is None
    assert _branch_file(runtime, "src/pushed.txt") is None
    spawn = next(r["body"] for r in _audit(runtime) if r["kind"] == "agent.spawn")
    assert ENV_SOCKET in spawn["env"] and ENV_WAIT in spawn["env"]
    mount = [m for m in spawn["sandbox"]["mounts"] if m["purpose"] == "review"]
    assert mount == [{"dest": "/run/harness/review.sock", "how": "ro-bind", "purpose": "review",
                      "source": mount[0]["source"]}]  # fmt: skip
    assert not Path(mount[0]["source"]).exists()  # the socket is gone with its batch
    assert summary.states["t1"].value == "done"
    report = _verified(runtime, tmp_path)
    assert report.status.value == "verified", report.failure


def _operator(runtime: Runtime, label: str, keys: Path, done: list[str]) -> None:
    """The operator, another process: ``harness approve --review`` once the review waits."""
    batch, _, number = label.partition("/")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        desk = getattr(runtime, "review_desk", None)
        gate = desk.gates.get(batch) if desk is not None else None
        if gate is not None and int(number) in gate.waiting:
            break
        time.sleep(0.05)
    else:
        return
    cli = subprocess.run(
        [sys.executable, "-m", "harness.cli", "approve", "--run", "r1", "--review", label,
         "--repo", str(runtime.repo), "--keys", str(keys), "--id", "ok-push"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    done.append(cli.stdout + cli.stderr)


@needs_bwrap
def test_an_irreversible_action_with_approval_runs(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, _prompt(), sandbox=Settings(), wait_s=60)
    said: list[str] = []
    operator = threading.Thread(
        target=_operator, args=(runtime, "b0001/4", tmp_path / "keys", said), daemon=True
    )
    operator.start()
    summary = runtime.run()
    operator.join(timeout=10)
    assert said and "approve requested" in said[0], said
    reviews = _reviews(runtime)
    push = reviews[3]
    assert (push["class"], push["decision"], push["reason"], push["approval"]) == (
        "irreversible", "allow", rv.R_APPROVED, "ok-push",
    )  # fmt: skip
    audit = _audit(runtime)
    receipt = next(i for i, r in enumerate(audit) if r["kind"] == "command.receipt")
    assert audit[receipt]["body"]["outcome"] == "applied"
    assert audit[receipt]["body"]["reason"] == "approves review b0001/4"
    assert receipt < next(i for i, r in enumerate(audit) if r["body"] == push)
    assert _branch_file(runtime, "src/pushed.txt") == ""  # the approved command ran
    assert summary.states["t1"].value == "done"
    report = _verified(runtime, tmp_path)
    assert report.status.value == "verified", report.failure


@needs_bwrap
def test_approving_a_review_that_does_not_wait_is_rejected(tmp_path: Path) -> None:
    prompt = "Read:\n" + tool("Read", file_path="src/x")
    runtime = _runtime(tmp_path, prompt, sandbox=Settings())
    keys = tmp_path / "keys"
    runtime.run()
    # the run has ended: a late approval is refused by the bus (RunEnded), nothing recorded
    late = subprocess.run(
        [sys.executable, "-m", "harness.cli", "approve", "--run", "r1", "--review", "b0001/1",
         "--repo", str(runtime.repo), "--keys", str(keys)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert late.returncode == 1, late.stdout + late.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "approve", "--run", "r1", "--review", "b0001",
         "--repo", str(runtime.repo), "--keys", str(keys)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--review takes <batch>/<n>" in bad.stderr


@pytest.mark.parametrize("sandbox", [*_settings(), Settings(opt_out=True)],
                         ids=lambda s: "none" if s.opt_out else "bwrap")  # fmt: skip
def test_every_phase_decides_as_its_strictness_says(tmp_path: Path, sandbox: Settings) -> None:
    """The same calls in each phase: loose lets the write outside the scope through, normal
    denies it; strictest denies the approved-looking egress like everything irreversible."""
    prompt = "\n".join(
        ["Work:", tool("Write", file_path="docs/b.txt", content="x"),
         tool("WebFetch", url="https://pypi.org/simple", prompt="p")]
    )  # fmt: skip
    expected = {
        "explore": ["allow", "deny"],
        "implement": ["deny", "deny"],
        "converge": ["deny", "deny"],
    }
    for phase, decisions in expected.items():
        runtime = _runtime(tmp_path / phase, prompt, sandbox=sandbox, wait_s=1, phase=phase)
        runtime.run()
        reviews = _reviews(runtime)
        assert [r["decision"] for r in reviews] == decisions, (phase, reviews)
        assert {r["phase"] for r in reviews} == {phase}
        assert reviews[1]["target"] == "pypi.org" and reviews[1]["class"] == "irreversible"
        if phase == "converge":
            assert reviews[1]["reason"] == rv.R_STRICTEST
        if phase == "explore":  # the loose allow let the write happen; retirement failed it
            assert runtime.states["t1"].value == "failed"
            continue  # its evidence: test_a_loosely_allowed_write_outside_the_scope_verifies
        report = _verified(runtime, tmp_path / phase)
        assert report.status.value == "verified", (phase, report.failure)


@pytest.mark.xfail(
    strict=True,
    reason="pre-existing: retirement records lineage for a failed batch's out-of-scope files, "
    "and the locks check refuses lineage outside the batch's lock (not the review gate's)",
)
def test_a_loosely_allowed_write_outside_the_scope_verifies(tmp_path: Path) -> None:
    prompt = "Work:\n" + tool("Write", file_path="docs/b.txt", content="x")
    runtime = _runtime(tmp_path, prompt, sandbox=Settings(opt_out=True), phase="explore")
    runtime.run()
    assert _reviews(runtime)[0]["decision"] == "allow"
    report = _verified(runtime, tmp_path)
    assert report.status.value == "verified", report.failure


# ---- the hook client on its own (real subprocesses) ----------------------------------------


def _hook(stdin: bytes, env: dict[str, str], timeout: float = 60) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "hook", "pre-tool-use"],
        input=stdin, env={"PATH": os.environ.get("PATH", ""), **env}, capture_output=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, answer.get("hookSpecificOutput", {})


REQUEST = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Read",
                      "tool_input": {"file_path": "x"}}).encode()  # fmt: skip


def test_the_hook_denies_without_a_socket() -> None:
    code, out = _hook(REQUEST, {})
    assert code == 0 and out["permissionDecision"] == "deny"
    assert out["hookEventName"] == "PreToolUse"
    assert "HARNESS_REVIEW_SOCKET is not set" in out["permissionDecisionReason"]


def test_the_hook_denies_a_request_over_one_mib_unsent(tmp_path: Path) -> None:
    server = listen(tmp_path / "s.sock")
    try:
        code, out = _hook(b" " * (MAX_REQUEST + 1), {ENV_SOCKET: str(tmp_path / "s.sock")})
        assert code == 0 and out["permissionDecision"] == "deny"
        assert "over 1048576 bytes" in out["permissionDecisionReason"]
        with pytest.raises(BlockingIOError):
            server.accept()  # it never connected
    finally:
        server.close()


def _serve_once(path: Path, reply: bytes | None, hold_s: float = 0.0) -> threading.Thread:
    server = listen(path)
    server.setblocking(True)

    def run() -> None:
        conn, _ = server.accept()
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        time.sleep(hold_s)
        with contextlib.suppress(OSError):  # the client may have given up
            if reply is not None:
                conn.sendall(reply)
        conn.close()
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("reply", "wanted"),
    [
        (answer_bytes("allow", "read: changes nothing", "b0001/1"), "allow"),
        (answer_bytes("deny", "no", "b0001/2"), "deny"),
        (None, "deny"),  # closed without an answer
        (b'{"decision": "allow"}\n', "deny"),  # not the answer's shape
        (b'{"decision": "allow", "reason": "r", "review": null}', "deny"),  # no line end
        (b'{"decision": "yes", "reason": "r", "review": null}\n', "deny"),
        (b"garbage\n", "deny"),
    ],
)
def test_the_hook_prints_only_a_well_formed_allow(
    tmp_path: Path, reply: bytes | None, wanted: str
) -> None:
    # a deep folder: the socket path is longer than a socket address can hold
    folder = tmp_path / ("d" * 60) / ("e" * 60)
    folder.mkdir(parents=True)
    thread = _serve_once(folder / "s.sock", reply)
    code, out = _hook(REQUEST, {ENV_SOCKET: str(folder / "s.sock"), ENV_WAIT: "1"})
    thread.join(timeout=10)
    assert code == 0 and out["permissionDecision"] == wanted, out
    if wanted == "allow":
        assert out["permissionDecisionReason"] == "harness review b0001/1: read: changes nothing"


def test_the_hook_gives_up_after_its_wait(tmp_path: Path) -> None:
    thread = _serve_once(tmp_path / "s.sock", answer_bytes("allow", "late", None), hold_s=15)
    started = time.monotonic()
    code, out = _hook(REQUEST, {ENV_SOCKET: str(tmp_path / "s.sock"), ENV_WAIT: "1"})
    took = time.monotonic() - started
    assert code == 0 and out["permissionDecision"] == "deny"
    assert "TimeoutError" in out["permissionDecisionReason"]
    assert 10 <= took < 14  # the review wait (1 s) plus the client's margin (10 s)
    thread.join(timeout=10)


def test_ask_reaches_a_socket_deeper_than_an_address_allows(tmp_path: Path) -> None:
    folder = tmp_path / ("x" * 90) / ("y" * 90)
    folder.mkdir(parents=True)
    assert len(str(folder / "s.sock")) > 108
    thread = _serve_once(folder / "s.sock", answer_bytes("deny", "r", "b1/1"))
    assert ask(str(folder / "s.sock"), b"{}", 5.0) == ("deny", "r", "b1/1")
    thread.join(timeout=5)
    assert (
        oct((folder / "s.sock").stat().st_mode & 0o777) == "0o600"
        or not (folder / "s.sock").exists()
    )


def test_the_fake_runs_a_tool_when_its_hook_fails_open(tmp_path: Path) -> None:
    """Why the client never exits 1: Claude Code (and the fake) run the tool when a hook
    exits with anything but 0 or 2."""
    fake = _fake_claude(tmp_path)
    work = tmp_path / "w"
    work.mkdir()
    for command, written in (("exit 1", True), ("exit 2", False), ("sleep 5", True)):
        settings = {"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [
            {"type": "command", "command": command, "timeout": 1}]}]}}  # fmt: skip
        target = work / "f.txt"
        target.unlink(missing_ok=True)
        done = subprocess.run(
            [str(fake), "-p", "--output-format", "json", "--settings", json.dumps(settings)],
            input=tool("Write", file_path=str(target), content="x").encode(), cwd=work,
            capture_output=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert target.exists() is written, command
