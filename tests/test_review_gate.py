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


# ---- the desk on its own: real sockets, a stand-in for the run's record queue ------------


class _Control:
    phase = "implement"


class _Run:
    def __init__(self, folder: Path, events: list[Any]) -> None:
        self.run_id = "r1"
        self.folder = folder
        self.control = _Control()
        self.events = events
        self.plan = None

    def audit(self, kind: str, body: Any) -> None:
        self.events.append(("audit", kind, dict(body)))

    def flush(self) -> None:
        self.events.append(("flush",))


@dataclasses.dataclass
class _Job:
    lock: list[str]
    released: bool = False


def _desk(tmp: Path, events: list[Any], **kw: Any) -> tuple[ReviewDesk, Path]:
    run = _Run(tmp, events)
    desk = ReviewDesk.of(run)
    assert ReviewDesk.of(run) is desk
    for key, value in kw.items():
        setattr(desk, key, value)
    worktree = tmp / "tree"
    path = desk.open("b0001", ("t1", "t2"), ("src/**",), worktree)
    desk.hold("b0001", _Job(["src/**"]))
    return desk, path


def _send(path: Path, document: Any, raw: bytes | None = None) -> Any:
    import socket as socketlib

    client = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    client.settimeout(5)
    from harness.orchestrate.review.protocol import short_path

    with short_path(str(path)) as address:
        client.connect(address)
    client.sendall(raw if raw is not None else json.dumps(document).encode())
    client.shutdown(socketlib.SHUT_WR)
    return client


def _answer(client: Any) -> bytes:
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    client.close()
    return data


def _call(name: str, **tool_input: Any) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "tool_name": name, "tool_input": tool_input,
            "session_id": "s", "cwd": "/x"}  # fmt: skip


def _poll_until(desk: ReviewDesk, done: Any, limit_s: float = 5.0) -> None:
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        desk.poll()
        time.sleep(0.01)


def test_the_desk_records_and_flushes_before_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.orchestrate.review import desk as desk_module

    events: list[Any] = []
    desk, path = _desk(tmp_path, events)
    sent = desk_module._send

    def spy(sock: Any, decision: str, reason: str, review: str | None) -> None:
        events.append(("send", decision, review))
        sent(sock, decision, reason, review)

    monkeypatch.setattr(desk_module, "_send", spy)
    client = _send(path, _call("Write", file_path=str(tmp_path / "tree" / "src" / "a.py")))
    _poll_until(desk, lambda: any(e[0] == "send" for e in events))
    assert [e[0] for e in events] == ["audit", "flush", "send"]
    kind, body = events[0][1], events[0][2]
    assert kind == "action.review"
    assert body == {
        "task": "t1", "batch": "b0001", "review": 1, "tool": "Write",
        "input_sha256": body["input_sha256"], "target": "src/a.py", "class": "write",
        "phase": "implement", "decision": "allow", "reason": rv.R_WRITE, "approval": None,
    }  # fmt: skip
    import hashlib

    from harness.verify.canonical import jcs_bytes

    tool_input = {"file_path": str(tmp_path / "tree" / "src" / "a.py")}
    assert body["input_sha256"] == hashlib.sha256(jcs_bytes(tool_input)).hexdigest()
    assert _answer(client) == answer_bytes("allow", rv.R_WRITE, "b0001/1")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    desk.close("b0001")
    assert not path.exists()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"x" * (MAX_REQUEST + 1), "request over 1 MiB"),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_name": "Write", '
            b'"tool_input": {}}',
            "malformed hook request",
        ),
        (b"[1]", "not a PreToolUse hook request"),
        (
            b'{"hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {}}',
            "not a PreToolUse hook request",
        ),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "", "tool_input": {}}',
            "not a PreToolUse hook request",
        ),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": []}',
            "not a PreToolUse hook request",
        ),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {"n": NaN}}',
            "malformed hook request",
        ),
    ],
)
def test_requests_that_name_no_call_are_denied_unrecorded(
    tmp_path: Path, raw: bytes, reason: str
) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events)
    sender: list[Any] = []
    thread = threading.Thread(target=lambda: sender.append(_send_lenient(path, raw)))
    thread.start()  # a large request blocks its sender until the desk reads
    _poll_until(desk, lambda: bool(sender))
    thread.join(timeout=5)
    client = sender[0]
    answer: list[bytes] = []
    _poll_until(desk, lambda: answer or (client.settimeout(0.01) or _try(client, answer)))
    decision, said, review = rv_answer(answer[0])
    assert (decision, review) == ("deny", None) and said.startswith(reason), said
    assert [e for e in events if e[0] == "audit"] == []


def _send_lenient(path: Path, raw: bytes) -> Any:
    return _send(path, None, raw=raw)


def _try(client: Any, out: list[bytes]) -> bool:

    try:
        data = client.recv(65536)
    except (TimeoutError, BlockingIOError):
        return False
    out.append(data)
    return True


def rv_answer(data: bytes) -> tuple[str, str, str | None]:
    from harness.orchestrate.review.protocol import parse_answer

    return parse_answer(data)


def test_an_irreversible_call_waits_for_its_approval(tmp_path: Path) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    client = _send(path, _call("Bash", command="git push"))
    _poll_until(desk, lambda: 1 in desk.gates["b0001"].waiting)
    assert desk.approve("c0", "b0001/2") == ("rejected", "no review b0001/2 waits for approval")
    assert desk.approve("c0", "b0002/1") == ("rejected", "no review b0002/1 waits for approval")
    assert desk.approve("c0", "b0001") == ("rejected", "args.review must be <batch>/<review>")
    assert desk.approve("c0", 7) == ("rejected", "args.review must be <batch>/<review>")
    assert desk.approve("c0", "b0001/x") == ("rejected", "no review b0001/x waits for approval")
    assert [e for e in events if e[0] == "audit"] == []  # nothing decided yet
    assert desk.approve("c1", "b0001/1") == ("applied", "approves review b0001/1")
    assert desk.approve("c2", "b0001/1") == (
        "rejected", "review b0001/1 is already approved by c1",
    )  # fmt: skip
    desk.poll()
    body = next(e[2] for e in events if e[0] == "audit")
    assert (body["decision"], body["reason"], body["approval"]) == ("allow", rv.R_APPROVED, "c1")
    assert _answer(client) == answer_bytes("allow", rv.R_APPROVED, "b0001/1")


def test_no_approval_within_the_wait_is_a_recorded_deny(tmp_path: Path) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=1)
    client = _send(path, _call("WebFetch", url="https://example.org/x", prompt="p"))
    started = time.monotonic()
    _poll_until(desk, lambda: any(e[0] == "audit" for e in events), limit_s=5)
    assert 0.9 <= time.monotonic() - started < 3
    body = next(e[2] for e in events if e[0] == "audit")
    assert (body["target"], body["decision"], body["reason"]) == (
        "example.org", "deny", rv.R_UNAPPROVED,
    )  # fmt: skip
    assert _answer(client) == answer_bytes("deny", rv.R_UNAPPROVED, "b0001/1")


def test_closing_a_batch_denies_what_waits_and_records_it(tmp_path: Path) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    client = _send(path, _call("Bash", command="npm publish"))
    _poll_until(desk, lambda: 1 in desk.gates["b0001"].waiting)
    desk.close("b0001")
    assert [e[0] for e in events] == ["audit", "flush", "flush"]
    assert events[0][2]["decision"] == "deny" and events[0][2]["approval"] is None
    assert _answer(client) == answer_bytes("deny", rv.R_UNAPPROVED, "b0001/1")
    assert not path.exists() and "b0001" not in desk.gates
    desk.close("b0001")  # twice: nothing more
    assert len(events) == 3


def test_an_approval_that_comes_as_the_agent_ends_is_not_used(tmp_path: Path) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    client = _send(path, _call("Bash", command="git push"))
    _poll_until(desk, lambda: 1 in desk.gates["b0001"].waiting)
    assert desk.approve("c1", "b0001/1")[0] == "applied"
    desk.close("b0001")  # before the tick that would have used it
    body = events[0][2]
    assert (body["decision"], body["approval"]) == ("deny", None)
    assert rv_answer(_answer(client))[0] == "deny"


def test_bounds_on_waiting_calls_open_connections_and_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.orchestrate.review import desk as desk_module

    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    clients = [_send(path, _call("Bash", command=f"git push {i}")) for i in range(5)]
    _poll_until(desk, lambda: len([e for e in events if e[0] == "audit"]) == 1)
    assert sorted(desk.gates["b0001"].waiting) == [1, 2, 3, 4]  # MAX_WAITING
    fifth = next(e[2] for e in events if e[0] == "audit")
    assert (fifth["review"], fifth["decision"]) == (5, "deny")
    assert _answer(clients[4]) == answer_bytes("deny", rv.R_UNAPPROVED, "b0001/5")
    # four wait; four more connections fill MAX_OPEN (8), the ninth is closed unanswered
    idle = []
    import socket as socketlib

    for _ in range(5):
        sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(str(path))
        idle.append(sock)
        desk.poll()
    assert len(desk.gates["b0001"].reading) == desk_module.MAX_OPEN - 4
    with contextlib.suppress(ConnectionResetError):  # closed unanswered: the client denies
        assert idle[-1].recv(10) == b""
    for sock in idle:
        sock.close()
    desk.close("b0001")
    monkeypatch.setattr(desk_module, "MAX_REQUESTS", 1)
    events.clear()
    desk2, path2 = _desk(tmp_path / "two", events)
    first = _send(path2, _call("Read", file_path="a"))
    second = _send(path2, _call("Read", file_path="b"))
    _poll_until(desk2, lambda: len([e for e in events if e[0] == "audit"]) == 1)
    _answer(first)
    assert rv_answer(_answer(second)) == ("deny", "more than 1 requests in this batch", None)


def test_writes_locked_by_another_batch_and_known_hosts(tmp_path: Path) -> None:
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    other = _Job(["docs/**"])
    desk.hold("b0002", other)
    tree = tmp_path / "tree"

    def decide(call: dict[str, Any]) -> dict[str, Any]:
        client = _send(path, call)
        count = len([e for e in events if e[0] == "audit"])
        _poll_until(
            desk,
            lambda: (
                len([e for e in events if e[0] == "audit"]) > count
                or bool(desk.gates["b0001"].waiting)
            ),
        )
        if desk.gates["b0001"].waiting:
            number = next(iter(desk.gates["b0001"].waiting))
            assert desk.approve(f"c{number}", f"b0001/{number}")[0] == "applied"
            desk.poll()
        _answer(client)
        return [e[2] for e in events if e[0] == "audit"][-1]

    locked = decide(_call("Write", file_path=str(tree / "docs" / "x.md")))
    assert (locked["decision"], locked["reason"]) == ("deny", rv.R_LOCKED)
    other.released = True
    freed = decide(_call("Write", file_path=str(tree / "docs" / "x.md")))
    assert (freed["decision"], freed["reason"]) == ("deny", rv.R_OUT)  # normal: out of scope
    assert "b0002" not in desk.jobs
    first = decide(_call("WebFetch", url="https://pypi.org/a", prompt="p"))
    assert (first["decision"], first["approval"]) == ("allow", "c3")
    again = decide(_call("WebFetch", url="https://PYPI.org/b", prompt="p"))
    assert (again["decision"], again["reason"], again["approval"]) == (
        "allow", rv.R_KNOWN_HOST, None,
    )  # fmt: skip
    desk.run.control.phase = "integrate"  # strict: every egress needs an approval
    strict = decide(_call("WebFetch", url="https://pypi.org/c", prompt="p"))
    assert (strict["decision"], strict["approval"], strict["phase"]) == ("allow", "c5", "integrate")


def test_a_call_is_decided_under_the_phase_in_force_when_it_is_decided(tmp_path: Path) -> None:
    """A call waits in integrate (strict: egress needs approval); the run moves to converge
    meanwhile: it is decided, and recorded, as converge (strictest) decides, approval or not."""
    events: list[Any] = []
    desk, path = _desk(tmp_path, events, wait_s=30)
    desk.run.control.phase = "integrate"
    client = _send(path, _call("WebFetch", url="https://pypi.org/x", prompt="p"))
    _poll_until(desk, lambda: 1 in desk.gates["b0001"].waiting)
    assert desk.gates["b0001"].waiting[1].body["phase"] == "integrate"
    assert desk.approve("c1", "b0001/1")[0] == "applied"
    desk.run.control.phase = "converge"
    desk.poll()
    body = next(e[2] for e in events if e[0] == "audit")
    assert (body["phase"], body["decision"], body["reason"], body["approval"]) == (
        "converge", "deny", rv.R_STRICTEST, None,
    )  # fmt: skip
    assert rv_answer(_answer(client))[0] == "deny"


# ---- the Claude adapter's hook settings ----------------------------------------------------


def test_the_claude_adapter_passes_the_hook_in_its_settings(tmp_path: Path) -> None:
    from harness.orchestrate.adapters.claude import ClaudeAdapter
    from harness.orchestrate.model import ProcResult
    from harness.orchestrate.review import hook_argv, hook_timeout_s

    from .test_adapter_roles import request

    made = request(tmp_path)
    plain = ClaudeAdapter()
    wired = dataclasses.replace(plain, review_hook=hook_argv(), review_timeout_s=hook_timeout_s(7))
    assert plain.argv(made) == ["claude", "-p", "--output-format", "json", "--permission-mode",
                                "acceptEdits"]  # fmt: skip
    argv = wired.argv(made)
    assert argv[: len(plain.argv(made))] == plain.argv(made)  # its existing flags, kept
    assert argv[-2] == "--settings"
    settings = json.loads(argv[-1])
    assert settings == {
        "disableAllHooks": False,
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{
            "type": "command", "timeout": 27,
            "command": f"{sys.executable} -m harness.cli_hook pre-tool-use"}]}]},
    }  # fmt: skip
    answer = json.dumps({"type": "result", "subtype": "success", "is_error": False,
                         "result": "ok"}).encode()  # fmt: skip
    output = wired.parse(made, ProcResult(0, None, False, 1, answer, b""))
    assert output.ok
    flags = output.model_calls[0].parameters["flags"]
    assert "--settings" not in flags and flags == plain.flags(made)  # the replay key is unchanged
    manager = request(tmp_path / "m", "manager")
    assert wired.policy_flags(manager) == plain.policy_flags(manager)
