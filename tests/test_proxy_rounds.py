"""A rounds task's roles through the batch's one recording proxy (issue 18, runtime.md §11a, §21).

Fake ``claude`` executables (tests/fake_agent_cli.py: it plays the Manager and the Auditor
from their prompts) are the Executor, the Manager and the Auditor of one rounds task; the
plan's ``[models.anthropic]`` points at the fake model server on 127.0.0.1. Real git, real
processes, real sockets, real bubblewrap where it can run.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.replay import Journal
from harness.orchestrate.rounds import roles
from harness.orchestrate.rounds.texts import load_text
from harness.orchestrate.runtime import RunAbortedError, Runtime
from harness.orchestrate.sandbox import Settings, probe
from harness.orchestrate.supervise import Supervised
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.fsm import TaskState
from harness.verify.policy import TrustPolicy

from .evidence_helpers import make_keys
from .fake_model_server import FakeModelServer
from .proxy_helpers import install_fake_cli
from .test_proxy_run import UNSANDBOXED_MATRIX

DATE = "2026-01-01T00:00:00+00:00"
ANT_KEY = "sk-ant-operator-secret-r3"
BWRAP = probe("bwrap")
ROLES = ("manager", "executor", "auditor")


@pytest.fixture
def cli_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH folder with the fake ``claude``, first on PATH; the operator's key set."""
    folder = install_fake_cli(tmp_path / "bin", ("claude",), monkeypatch)
    monkeypatch.setenv("R3_ANT_KEY", ANT_KEY)
    return folder


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every role process the round loop starts: its argv and environment (what the
    process really got, not what a record says)."""
    seen: list[dict[str, Any]] = []
    original = Supervised.start

    def start(argv: Any, **kwargs: Any) -> Any:
        if any(Path(arg).name == "claude" for arg in argv):  # a role, not a quality gate
            seen.append({"argv": list(argv), "env": dict(kwargs.get("env") or {})})
        return original(argv, **kwargs)

    monkeypatch.setattr(roles.Supervised, "start", staticmethod(start))
    return seen


def _plan(fake: FakeModelServer, prompt: str = "Write the answer.") -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    return {
        "plan": {"name": "p", "settle_ticks": 1, "max_batch": 1},
        "models": {
            "anthropic": {"family": "anthropic", "base": fake.base, "key_env": "R3_ANT_KEY"},
        },
        "task": [
            {"id": "t", "role": "r-t", "prompt": prompt, "adapter": "claude",
             "scope": ["answer-claude-x.txt"], "gates": [gate],
             "rounds": {"max_rounds": 3, "manager": "claude", "auditor": "claude",
                        "gate_wait_s": 2}},  # a failing role ends in seconds, never hangs
        ],
    }  # fmt: skip


def _runtime(repo: Path, plan: dict[str, Any], keys: OperatorKeys, mode: str, **kw: Any) -> Any:
    kw.setdefault("sandbox", Settings(opt_out=True))
    kw.setdefault("capabilities", UNSANDBOXED_MATRIX)
    return Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="r1",
        clock=LogicalClock(),
        journal=Journal(repo / ".harness" / "journals" / "r1", mode),
        git_date=DATE,
        grace_s=0.5,
        work_root=repo.parent / "work",
        **kw,
    )


def _records(repo: Path, store: str) -> list[dict[str, Any]]:
    path = repo / ".harness" / "runs" / "r1" / f"{store}.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def _kinds(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record["body"] for record in records if record["kind"] == kind]


def _verified(repo: Path, keys: OperatorKeys, tmp: Path) -> Any:
    bundle = export_bundle(repo / ".harness", tmp / "bundle.tar", keys).path
    pins = TrustPolicy(frozenset({keys.key_id}), "test")
    return verify_bundle(bundle, pins=pins, hmac_master=keys.hmac_master)


def _texts(repo: Path, kind: str) -> list[str]:
    folder = repo / ".harness" / "runs" / "r1"
    return [load_text(folder, body["text"]) for body in _kinds(_records(repo, "audit"), kind)]


def test_every_role_of_a_rounds_task_goes_through_the_batch_proxy(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path, spawned: list[dict[str, Any]]
) -> None:
    repo = tmp_path / "a" / "repo"
    make_repo(repo)
    pristine = tmp_path / "pristine"
    shutil.copytree(repo, pristine, symlinks=True)
    keys = make_keys()
    summary = _runtime(repo, _plan(fake), keys, "live").run()
    assert summary.states == {"t": TaskState.DONE}
    audit, replay = _records(repo, "audit"), _records(repo, "replay")
    # round 1: manager, executor, auditor; round 2: the manager says done
    assert len(spawned) == 4
    for process in spawned:  # no operator key in any role's environment
        assert ANT_KEY not in process["env"].values()
        assert process["env"]["ANTHROPIC_BASE_URL"].endswith("/anthropic")
        assert process["env"]["ANTHROPIC_API_KEY"].startswith("harness-proxy")
    plans, audits = _texts(repo, "round.plan"), _texts(repo, "round.audit")
    assert all("Secrets: none" in text for text in plans + audits)
    # one proxy for the batch: seq 1..4 across the roles, all answered from the fake server
    exchanges = _kinds(replay, "model.exchange")
    assert [(e["batch"], e["seq"], e["outcome"]) for e in exchanges] == [
        ("b0001", n, "answered") for n in (1, 2, 3, 4)
    ]
    assert len(fake.seen) == 4
    assert all(seen.headers.get("x-api-key") == ANT_KEY for seen in fake.seen)
    sources = _kinds(audit, "model.source")
    assert [(s["seq"], s["source"]) for s in sources] == [(n, "live") for n in (1, 2, 3, 4)]
    (spawn,) = _kinds(audit, "agent.spawn")
    assert [item["route"] for item in spawn["sandbox"]["egress"]] == ["anthropic"]
    (exit_,) = _kinds(audit, "agent.exit")
    assert exit_["usage"] is not None  # from the exchanges, not the CLI's 999999 claim
    assert exit_["usage"]["input_tokens"] < 999999
    assert exit_["usage"]["output_tokens"] < 999999
    verdict = _verified(repo, keys, tmp_path / "a")
    assert verdict.status.value == "verified", verdict.failure

    # offline replay, the fake server stopped: byte-identical replay store, verifies
    fake.stop()
    again = tmp_path / "b" / "repo"
    shutil.copytree(pristine, again, symlinks=True)
    shutil.copytree(repo / ".harness" / "journals", again / ".harness" / "journals")
    summary = _runtime(again, _plan(fake), keys, "replay").run()
    assert summary.states == {"t": TaskState.DONE}
    first = (repo / ".harness" / "runs" / "r1" / "replay.jsonl").read_bytes()
    second = (again / ".harness" / "runs" / "r1" / "replay.jsonl").read_bytes()
    assert first == second
    sources = _kinds(_records(again, "audit"), "model.source")
    assert [s["source"] for s in sources] == ["journal"] * 4
    verdict = _verified(again, keys, tmp_path / "b")
    assert verdict.status.value == "verified", verdict.failure


def test_a_scripted_rounds_task_opens_no_proxy(
    tmp_path: Path, fake: FakeModelServer, spawned: list[dict[str, Any]]
) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    plan = _plan(fake)
    task = plan["task"][0]
    task.update(adapter="scripted", scope=["t/**"])
    task["rounds"] = {
        "max_rounds": 3,
        "steps": [{"say": "part 0", "edits": [{"path": "t/p0.md", "content": "0\n"}]}],
    }
    summary = _runtime(repo, plan, make_keys(), "live", capabilities=DEFAULT_MATRIX).run()
    assert summary.states == {"t": TaskState.DONE}
    assert not _kinds(_records(repo, "replay"), "model.exchange")
    (spawn,) = _kinds(_records(repo, "audit"), "agent.spawn")
    assert spawn["sandbox"]["egress"] == []
    assert all("ANTHROPIC_BASE_URL" not in process["env"] for process in spawned)


@pytest.mark.skipif(not BWRAP.available, reason=f"bubblewrap unusable: {BWRAP.reason}")
def test_sandboxed_manager_and_auditor_reach_only_the_proxy(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path, spawned: list[dict[str, Any]]
) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    direct = fake.base.removeprefix("http://")
    plan = _plan(fake, f"Write the answer. DIRECT {direct}")
    summary = _runtime(repo, plan, keys, "live", sandbox=Settings()).run()
    assert summary.states == {"t": TaskState.DONE}
    plans, audits = _texts(repo, "round.plan"), _texts(repo, "round.audit")
    assert plans and audits
    for text in plans + audits:  # they answered through the proxy, yet cannot connect out
        assert "Secrets: none" in text
        assert "Direct: refused" in text
    assert len(spawned) == 4
    for process in spawned:  # every role in bwrap without network, below the bridge
        argv = process["argv"]
        assert "--unshare-net" in argv and "harness.orchestrate.proxy.bridge" in argv
        socket = argv[argv.index("--socket") + 1]
        assert socket.endswith("/io/model.sock")
        assert ANT_KEY not in process["env"].values()
    # the managers and the auditor: the socket file alone, read-only (io is not mounted)
    for process in (spawned[0], spawned[2], spawned[3]):
        argv = process["argv"]
        socket = argv[argv.index("--socket") + 1]
        binds = [argv[i + 1 : i + 3] for i, arg in enumerate(argv) if arg == "--ro-bind"]
        assert [os.path.realpath(socket), socket] in binds
        assert str(Path(socket).parent) not in argv
    exchanges = _kinds(_records(repo, "replay"), "model.exchange")
    assert [e["outcome"] for e in exchanges] == ["answered"] * 4
    verdict = _verified(repo, keys, tmp_path)
    assert verdict.status.value == "verified", verdict.failure


def test_a_gate_profile_with_the_proxy_binds_its_socket_read_only(tmp_path: Path) -> None:
    from harness.orchestrate.sandbox import BatchDirs, Sandbox

    if not BWRAP.available:
        pytest.skip(f"bubblewrap unusable: {BWRAP.reason}")
    sandbox = Sandbox.for_run(
        Settings(), repo=tmp_path / "repo", state_dir=tmp_path / "state", keys_dir=None
    )
    dirs = BatchDirs(tmp_path / "work" / "b0001")
    dirs.create()
    dirs.tree.mkdir()
    socket = dirs.io / "model.sock"
    socket.touch()
    egress = [
        {
            "route": "anthropic",
            "family": "anthropic",
            "scheme": "https",
            "host": "api.anthropic.com",
            "port": 443,
            "path_prefix": "",
            "credential": True,
        }
    ]
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8377/anthropic"}
    profile, got = sandbox.gate(dirs.tree, dirs.gate_home, role="auditor",
                                proxy_socket=socket, proxy_env=env, egress=egress)  # fmt: skip
    record = profile.to_json()
    assert record["egress"] == egress and record["network"] is False
    (mount,) = [m for m in record["mounts"] if m["purpose"] == "proxy"]
    assert mount == {"dest": str(socket), "how": "ro-bind", "purpose": "proxy",
                     "source": os.path.realpath(socket)}  # fmt: skip
    assert got["ANTHROPIC_BASE_URL"] == env["ANTHROPIC_BASE_URL"]
    plain, _ = sandbox.gate(dirs.tree, dirs.gate_home, role="auditor")
    assert plain.to_json()["egress"] == []
    assert not [m for m in plain.to_json()["mounts"] if m["purpose"] == "proxy"]


def test_a_suspended_rounds_task_records_its_exchanges_once(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    """Rounds that end ``incomplete`` suspend the task (kept for a continue): the batch's
    exchanges are recorded at that retirement, once, and the bundle verifies."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys = make_keys()
    plan = _plan(fake)
    plan["task"][0]["rounds"]["max_rounds"] = 1  # round 1 ends with Next: cli -> incomplete
    summary = _runtime(repo, plan, keys, "live").run()
    assert summary.states == {"t": TaskState.BLOCKED}
    audit, replay = _records(repo, "audit"), _records(repo, "replay")
    assert [e["outcome"] for e in _kinds(audit, "round.end")] == ["incomplete"]
    exchanges = _kinds(replay, "model.exchange")
    assert [(e["seq"], e["outcome"]) for e in exchanges] == [(n, "answered") for n in (1, 2, 3)]
    assert [s["seq"] for s in _kinds(audit, "model.source")] == [1, 2, 3]
    kinds = [r["kind"] for r in audit]
    assert kinds.index("model.source") < kinds.index("agent.exit")  # sources before the exit
    assert len(fake.seen) == 3
    verdict = _verified(repo, keys, tmp_path)
    assert verdict.status.value == "verified", verdict.failure


def test_a_strict_replay_miss_in_a_rounds_task_aborts_the_run(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    """A replay with nothing journaled: the Manager's request misses; the run aborts (it is
    not taken for a failing round or a suspension), and nothing reached the model server."""
    repo = tmp_path / "repo"
    make_repo(repo)
    with pytest.raises(RunAbortedError, match="replay miss"):
        _runtime(repo, _plan(fake), make_keys(), "replay").run()
    assert fake.seen == []
    audit, replay = _records(repo, "audit"), _records(repo, "replay")
    assert [e["outcome"] for e in _kinds(replay, "model.exchange")] == ["replay-miss"]
    assert audit[-1]["body"]["outcome"] == "aborted: replay miss"
