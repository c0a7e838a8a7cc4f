"""Real CLI agents through the recording proxy, end to end (issue 18 A, B, C).

Fake ``claude`` and ``codex`` executables (tests/fake_agent_cli.py) on a PATH folder speak the
output formats the adapters parse and call their model through ``ANTHROPIC_BASE_URL`` /
``OPENAI_BASE_URL`` as the real CLIs do; the plan's ``[models.*]`` point at the fake model
server on 127.0.0.1. Real git, real processes, real sockets (every port chosen by the kernel:
no fixed port, so no shared xdist scope is needed; the bridge's 8377 lives in each sandbox's
own network namespace).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, Tag
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.replay import Journal
from harness.orchestrate.runner.job import BatchJob
from harness.orchestrate.runtime import RunAbortedError, Runtime
from harness.orchestrate.sandbox import Settings, probe
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import parse_canonical
from harness.verify.compare import compare_bundles
from harness.verify.fsm import TaskState
from harness.verify.policy import TrustPolicy

from .evidence_helpers import make_keys
from .fake_model_server import FakeModelServer
from .proxy_helpers import install_fake_cli

DATE = "2026-01-01T00:00:00+00:00"
ANT_KEY = "sk-ant-operator-secret-r2"
OAI_KEY = "sk-oai-operator-secret-r2"
# Unsandboxed (kind none) lowers no risk: the test matrix gives the fake CLIs two tags only.
UNSANDBOXED_MATRIX = dataclasses.replace(
    DEFAULT_MATRIX,
    adapters={
        **DEFAULT_MATRIX.adapters,
        "claude": frozenset({Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}),
        "codex": frozenset({Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}),
    },
)
BWRAP = probe("bwrap")


@pytest.fixture
def cli_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH folder with executables ``claude`` and ``codex`` (the fake CLI), first on
    PATH; the operator's keys in the runtime's environment."""
    folder = install_fake_cli(tmp_path / "bin", ("claude", "codex"), monkeypatch)
    monkeypatch.setenv("R2_ANT_KEY", ANT_KEY)
    monkeypatch.setenv("R2_OAI_KEY", OAI_KEY)
    return folder


@pytest.fixture
def kept_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each batch's io folder copied aside before the runtime removes it (what the agent
    wrote there: its environment)."""
    out = tmp_path / "kept-io"
    out.mkdir()
    original = BatchJob.remove_worktree  # what removes the batch folder, io included

    def remove_worktree(self: BatchJob) -> None:
        if self.dirs.io.is_dir():
            target = out / f"{self.run.run_id}-{self.batch.id}"
            skip = shutil.ignore_patterns("*.sock")
            shutil.copytree(self.dirs.io, target, dirs_exist_ok=True, ignore=skip)
        original(self)

    monkeypatch.setattr(BatchJob, "remove_worktree", remove_worktree)
    return out


def _plan(fake: FakeModelServer, *prompts: tuple[str, str, str]) -> dict[str, Any]:
    """Tasks (id, adapter, prompt) with the fake server as both model routes."""
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    return {
        "plan": {"name": "p", "settle_ticks": 1, "max_in_flight": 1},
        "models": {
            "anthropic": {"family": "anthropic", "base": fake.base, "key_env": "R2_ANT_KEY"},
            "openai": {"family": "openai", "base": fake.base + "/v1", "key_env": "R2_OAI_KEY"},
        },
        "task": [
            {"id": task, "role": f"r-{task}", "prompt": prompt, "adapter": adapter,
             "scope": [f"answer-{adapter}-{task}.txt"], "gates": [gate]}
            for task, adapter, prompt in prompts
        ],
    }  # fmt: skip


def _runtime(
    repo: Path, plan: dict[str, Any], keys: OperatorKeys, journal: Journal, **kwargs: Any
) -> Runtime:
    kwargs.setdefault("sandbox", Settings(opt_out=True))
    kwargs.setdefault("capabilities", UNSANDBOXED_MATRIX)
    return Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="r1",
        clock=LogicalClock(),
        journal=journal,
        git_date=DATE,
        grace_s=0.5,
        work_root=repo.parent / "work",
        **kwargs,
    )


def _records(repo: Path, store: str) -> list[dict[str, Any]]:
    path = repo / ".harness" / "runs" / "r1" / f"{store}.jsonl"
    return [parse_canonical(line) for line in path.read_bytes().splitlines()]


def _verified(repo: Path, keys: OperatorKeys, tmp: Path) -> Any:
    bundle = export_bundle(repo / ".harness", tmp / "bundle.tar", keys).path
    pins = TrustPolicy(frozenset({keys.key_id}), "test")
    return verify_bundle(bundle, pins=pins, hmac_master=keys.hmac_master)


def _kinds(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record["body"] for record in records if record["kind"] == kind]


def _fresh(root: Path, like: Path | None = None) -> Path:
    """A new repository, or a copy of ``like`` made before it ran anything (a replay needs the
    same commits: ``git init`` makes one dated now)."""
    repo = root / "repo"
    if like is None:
        make_repo(repo)
    else:
        shutil.copytree(like, repo, symlinks=True)
    return repo


def test_a_proxied_run_records_every_exchange_and_no_key_reaches_the_agent(
    tmp_path: Path,
    fake: FakeModelServer,
    cli_path: Path,
    kept_io: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = _fresh(tmp_path / "a")
    keys = make_keys()
    plan = _plan(
        fake, ("t1", "claude", "fix it TWICE OFFLIST STRANGER"), ("t2", "codex", "fix STREAM")
    )
    # t1 is granted the network (a web tool): unproxied, its adapter's variables would then
    # be copied from the runtime's environment, CLAUDE_CODE_OAUTH_TOKEN among them
    plan["task"][0]["tools"] = ["web"]
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", ANT_KEY)
    # a budget the CLI's own claim (999999 tokens) breaks and the proxy's figures do not
    plan["task"][1]["budget"] = {"tokens": 5000}
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(repo, plan, keys, journal).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.DONE}
    audit, replay = _records(repo, "audit"), _records(repo, "replay")
    exchanges = _kinds(replay, "model.exchange")
    # claude: two answered, one off-list host (absolute URI via HTTP_PROXY), one unknown route
    by_batch: dict[str, list[dict[str, Any]]] = {}
    for body in exchanges:
        by_batch.setdefault(body["batch"], []).append(body)
    assert sorted(by_batch) == ["b0001", "b0002"]
    first, second = by_batch["b0001"], by_batch["b0002"]
    assert [e["seq"] for e in first] == sorted(e["seq"] for e in first)
    outcomes = ["answered", "answered", "refused", "refused", "refused"]
    assert [e["outcome"] for e in first] == outcomes
    assert "example.invalid" in first[2]["reason"] and first[2]["status"] == 403
    assert "'nowhere' is not on the allow-list" in first[3]["reason"]
    # on a loopback port, a request without the agent's token is refused (and recorded)
    assert "access token is missing or wrong" in first[4]["reason"]
    assert [(e["outcome"], e["api"], e["stream"]) for e in second] == [
        ("answered", "openai-responses", True)
    ]
    for body in first[:2] + second:
        assert body["journaled"] is True and body["status"] == 200
        assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0
        assert len(body["key"]) == 64 and body["upstream"] == fake.base
    assert first[0]["dropped_credentials"] == ["x-api-key"]
    # one model.source per answered exchange, before its batch's agent.exit
    kinds = [(r["kind"], r["body"].get("batch")) for r in audit]
    sources = _kinds(audit, "model.source")
    assert [(s["batch"], s["seq"], s["source"]) for s in sources] == [
        (e["batch"], e["seq"], "live") for e in exchanges if e["outcome"] == "answered"
    ]
    for batch in ("b0001", "b0002"):
        exit_at = kinds.index(("agent.exit", batch))
        assert all(i < exit_at for i, k in enumerate(kinds) if k == ("model.source", batch))
    # the profile's egress is the allow-list; network stays what the process can do itself
    spawns = _kinds(audit, "agent.spawn")
    assert [[item["route"] for item in s["sandbox"]["egress"]] for s in spawns] == [
        ["anthropic"],
        ["openai"],
    ]
    assert spawns[0]["sandbox"]["egress"][0]["credential"] is True
    # the upstream saw the operator's keys, the agent only the placeholder
    seen = {s.path: s.headers for s in fake.seen}
    assert seen["/v1/messages"]["x-api-key"] == ANT_KEY
    assert seen["/v1/responses"]["authorization"] == f"Bearer {OAI_KEY}"
    for batch in ("b0001", "b0002"):
        dumped = json.loads((kept_io / f"r1-{batch}" / "agent.json").read_text())
        env = dumped["env"]
        assert ANT_KEY not in json.dumps(env) and OAI_KEY not in json.dumps(env)
        assert "R2_ANT_KEY" not in env and "CLAUDE_CODE_OAUTH_TOKEN" not in env
        assert env["HTTP_PROXY"].startswith("http://127.0.0.1:")
    claude_env = json.loads((kept_io / "r1-b0001" / "agent.json").read_text())
    assert claude_env["env"]["ANTHROPIC_API_KEY"].startswith("harness-proxy-")
    assert claude_env["offlist"] == claude_env["offroute"] == claude_env["stranger"] == 403
    # budgets: the proxy's figures, not the CLI's made-up 999999
    exits = {e["batch"]: e["usage"] for e in _kinds(audit, "agent.exit")}
    for batch, bodies in by_batch.items():
        answered = [b["usage"] for b in bodies if b["outcome"] == "answered"]
        cache = [u["cache_read"] + u["cache_write"] for u in answered] if batch == "b0001" else []
        assert exits[batch]["input_tokens"] == sum(u["input_tokens"] for u in answered) + sum(cache)
        assert exits[batch]["output_tokens"] == sum(u["output_tokens"] for u in answered)
    assert exits["b0001"]["cost_micros"] == 500000  # cost: the CLI's own report (no prices)
    # the adapter's own claims stay model.call records, apart from the observations
    assert [c["adapter"] for c in _kinds(replay, "model.call")] == ["claude", "codex"]
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def _copy_journal(source: Path, target: Path, *, empty: bool = False) -> None:
    journal = Path(".harness") / "journals" / "r1"
    shutil.copytree(source / journal, target / journal)
    if empty:
        (target / journal / "journal.jsonl").write_bytes(b"")


def test_replay_offline_is_byte_identical_and_a_miss_aborts(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", "fix it TWICE"), ("t2", "codex", "fix STREAM"))
    pristine = _fresh(tmp_path / "pristine")
    first = _fresh(tmp_path / "a", pristine)
    _runtime(first, plan, keys, Journal(first / ".harness" / "journals" / "r1", "live")).run()
    assert len(fake.seen) == 3
    fake.stop()  # offline from here: nothing may reach the model
    second = _fresh(tmp_path / "b", pristine)
    _copy_journal(first, second)
    journal = Journal(second / ".harness" / "journals" / "r1", "replay")
    summary = _runtime(second, plan, keys, journal).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.DONE}
    for store in ("lineage", "replay"):
        a = (first / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        b = (second / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        assert a == b, store
    assert {s["source"] for s in _kinds(_records(second, "audit"), "model.source")} == {"journal"}
    report = _verified(second, keys, tmp_path / "b")  # journal sources need the blobs
    assert report.status.value == "verified", report.failure
    original = export_bundle(first / ".harness", tmp_path / "a" / "bundle.tar", keys).path
    comparison = compare_bundles(
        original, tmp_path / "b" / "bundle.tar", pins=TrustPolicy(frozenset({keys.key_id}), "t"),
        hmac_master=keys.hmac_master,
    )  # fmt: skip
    # harness-verify compare: same store roots, same decision sequence
    assert comparison.same, json.dumps(comparison.to_json())[-1500:]
    # a miss: the same plan with an empty journal aborts the run, recorded and sealed
    third = _fresh(tmp_path / "c")
    _copy_journal(first, third, empty=True)
    journal = Journal(third / ".harness" / "journals" / "r1", "replay")
    with pytest.raises(RunAbortedError, match="replay miss"):
        _runtime(third, plan, keys, journal).run()
    audit = _records(third, "audit")
    assert audit[-1]["kind"] == "run.end"
    assert audit[-1]["body"]["outcome"] == "aborted: replay miss"
    exchanges = _kinds(_records(third, "replay"), "model.exchange")
    assert exchanges[0]["outcome"] == "replay-miss" and exchanges[0]["status"] == 502
    assert _kinds(audit, "model.source") == []
    failed = [b for b in _kinds(audit, "task.transition") if b["to"] == "failed"]
    assert failed and "replay miss: " in failed[0]["reason"]
    report = _verified(third, keys, tmp_path / "c")  # an aborted run is verifiable evidence
    assert report.status.value == "verified", report.failure


def test_allow_live_miss_goes_live_and_is_marked(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", "fix it"))
    repo = _fresh(tmp_path / "a")
    journal_dir = repo / ".harness" / "journals" / "r1"
    journal_dir.mkdir(parents=True)
    journal = Journal(journal_dir, "replay", allow_live_miss=True)
    summary = _runtime(repo, plan, keys, journal).run()
    assert summary.states == {"t1": TaskState.DONE}
    sources = _kinds(_records(repo, "audit"), "model.source")
    assert [s["source"] for s in sources] == ["live-miss"]
    assert len(fake.seen) == 1
    assert Journal(journal_dir, "live").entries()  # the live answer was added to that journal
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_sandboxed_agent_reaches_only_the_proxy(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path, kept_io: Path
) -> None:
    keys = make_keys()
    prompt = f"fix it OFFLIST DIRECT 127.0.0.1:{fake.port}"
    plan = _plan(fake, ("t1", "claude", prompt), ("t2", "codex", "fix"))
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(
        repo, plan, keys, journal, sandbox=Settings(), capabilities=DEFAULT_MATRIX
    ).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.DONE}
    audit = _records(repo, "audit")
    spawns = _kinds(audit, "agent.spawn")
    for spawn in spawns:
        assert spawn["sandbox"]["kind"] == "bwrap" and spawn["sandbox"]["network"] is False
        assert "net" in spawn["sandbox"]["namespaces"] and spawn["sandbox"]["egress"]
    dumped = json.loads((kept_io / "r1-b0001" / "agent.json").read_text())
    assert dumped["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8377/anthropic"
    assert dumped["direct"].startswith("refused")  # the host's loopback is not reachable
    assert dumped["offlist"] == 403
    assert ANT_KEY not in json.dumps(dumped["env"])
    exchanges = _kinds(_records(repo, "replay"), "model.exchange")
    assert [e["outcome"] for e in exchanges] == ["answered", "refused", "refused", "answered"]
    assert fake.seen[0].headers["x-api-key"] == ANT_KEY
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_cli_replay_with_the_logical_clock_is_byte_identical(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    """``harness run`` live, then ``harness run --replay RUN --logical-clock`` in a second
    state folder with the same keys and a copy of the journal, the model server stopped."""
    keys_dir = tmp_path / "keys"
    env = {**os.environ}
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(_toml(_plan(fake, ("t1", "claude", "fix it TWICE"))), encoding="utf-8")
    pristine = _fresh(tmp_path / "pristine")
    first = _fresh(tmp_path / "a", pristine)
    harness = [sys.executable, "-c", "from harness.cli import main; main()"]
    init = subprocess.run([*harness, "init", "--repo", str(first), "--keys", str(keys_dir)],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert init.returncode == 0, init.stderr
    live = subprocess.run(
        [*harness, "run", str(plan_file), "--repo", str(first), "--run", "r1",
         "--logical-clock", "--keys", str(keys_dir)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert live.returncode == 0, live.stdout + live.stderr
    fake.stop()
    second = _fresh(tmp_path / "b", pristine)
    _copy_journal(first, second)
    replay = subprocess.run(
        [*harness, "run", str(plan_file), "--repo", str(second), "--replay", "r1",
         "--logical-clock", "--keys", str(keys_dir)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    for store in ("lineage", "replay"):
        a = (first / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        b = (second / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        assert a == b, store


def _toml(doc: dict[str, Any]) -> str:
    """The test plans as TOML (strings, integers, arrays and tables only)."""

    def value(item: Any) -> str:
        if isinstance(item, str):
            return json.dumps(item)
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, int):
            return str(item)
        if isinstance(item, list):
            return "[" + ", ".join(value(x) for x in item) + "]"
        if isinstance(item, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(v)}" for k, v in item.items()) + "}"
        raise TypeError(item)

    lines = ["[plan]"] + [f"{k} = {value(v)}" for k, v in doc["plan"].items()]
    for route, table in doc.get("models", {}).items():
        lines += [f"[models.{route}]"] + [f"{k} = {value(v)}" for k, v in table.items()]
    for task in doc["task"]:
        lines.append("[[task]]")
        lines += [f"{k} = {value(v)}" for k, v in task.items() if k != "gates"]
        for gate in task.get("gates", []):
            lines.append("[[task.gates]]")
            lines += [f"{k} = {value(v)}" for k, v in gate.items()]
    return "\n".join(lines) + "\n"


def test_batches_in_flight_together_each_have_their_own_proxy(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", "one TWICE"), ("t2", "claude", "two"), ("t3", "codex", "x"))
    plan["plan"]["max_in_flight"] = 3
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(repo, plan, keys, journal).run()
    assert set(summary.states.values()) == {TaskState.DONE}
    exchanges = _kinds(_records(repo, "replay"), "model.exchange")
    per_batch = {b: [e["seq"] for e in exchanges if e["batch"] == b] for b in ("b0001", "b0002")}
    assert per_batch == {"b0001": [1, 2], "b0002": [1]}  # each proxy numbers its own
    assert [e["route"] for e in exchanges if e["batch"] == "b0003"] == ["openai"]
    assert _verified(repo, keys, tmp_path).status.value == "verified"


def test_a_token_budget_is_charged_the_proxys_figures(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    """The CLI reports 999999 tokens; a budget of 20 breaks on what the API reported."""
    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", "fix TWICE"))
    plan["task"][0]["budget"] = {"tokens": 20}
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(repo, plan, keys, journal).run()
    assert summary.states["t1"] is TaskState.FAILED
    audit = _records(repo, "audit")
    (kill,) = _kinds(audit, "budget.exceeded")
    exit_usage = _kinds(audit, "agent.exit")[0]["usage"]
    assert kill["decision"] == "kill" and kill["limit"] == 20
    # the kill saw what the proxy had recorded by then: the tokens of the first k answered
    # exchanges (the second may finish before the kill lands); the exit, all of them
    answered = [
        e["usage"]
        for e in _kinds(_records(repo, "replay"), "model.exchange")
        if e["outcome"] == "answered"
    ]
    prefix = [0]
    for usage in answered:
        cache = (usage["cache_read"] or 0) + (usage["cache_write"] or 0)  # Anthropic: not in input
        prefix.append(prefix[-1] + usage["input_tokens"] + cache + usage["output_tokens"])
    assert kill["used"] in prefix[1:] and kill["used"] > 20
    assert exit_usage["input_tokens"] + exit_usage["output_tokens"] == prefix[-1] < 999999
    assert _kinds(audit, "agent.exit")[0]["anomaly"] == "budget"
    assert _verified(repo, keys, tmp_path).status.value == "verified"


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_the_trifecta_sees_the_allow_list(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path
) -> None:
    """Sandboxed without network, a proxied agent still reaches its allow-list: its
    ``external_comm`` stays, so with a ``secrets`` tool the spawn is denied (the run's default
    profile, with no egress, allowed it at promotion)."""
    keys = make_keys()
    marker = tmp_path / "ran"
    plan = _plan(fake, ("t1", "claude", "fix"))
    plan["task"][0]["tools"] = ["secrets"]
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(
        repo, plan, keys, journal, sandbox=Settings(), capabilities=DEFAULT_MATRIX
    ).run()
    assert summary.states["t1"] is TaskState.DENIED
    (denied,) = _kinds(_records(repo, "audit"), "capability.denied")
    assert [item["route"] for item in denied["sandbox"]["egress"]] == ["anthropic"]
    assert "external_comm via adapter:claude" in denied["reason"]
    assert not fake.seen and not marker.exists()
    assert _verified(repo, keys, tmp_path).status.value == "verified"


def test_the_agents_variables_per_adapter_and_route() -> None:
    from harness.orchestrate.modelroutes import BUILTIN_ROUTES, ModelRoute
    from harness.orchestrate.runner.proxied import agent_env

    routes = [BUILTIN_ROUTES["anthropic"], BUILTIN_ROUTES["openai"]]
    host = {"GOOSE_PROVIDER": "anthropic", "GOOSE_MODEL": "m", "ANTHROPIC_API_KEY": "sk-x",
            "CLAUDE_CODE_OAUTH_TOKEN": "t", "ANTHROPIC_BASE_URL": "https://elsewhere"}  # fmt: skip
    env = agent_env(routes, 8377, adapter="goose", passthrough=host)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8377/anthropic"
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8377/openai/v1"
    assert env["ANTHROPIC_HOST"] == "http://127.0.0.1:8377/anthropic/"
    assert env["OPENAI_HOST"] == "http://127.0.0.1:8377/openai/"  # goose adds v1/chat/...
    assert env["ANTHROPIC_API_KEY"] == env["OPENAI_API_KEY"] == "harness-proxy"  # bridged
    assert env["GOOSE_PROVIDER"] == "anthropic" and env["GOOSE_MODEL"] == "m"
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in env
    assert env["NO_PROXY"] == "127.0.0.1,localhost" and env["HTTPS_PROXY"].endswith(":8377")
    # only the first route of a family is the base URL; a narrowed batch gets no other
    fake = ModelRoute("fake", "openai", "http://127.0.0.1:9/custom/v1")
    env = agent_env([fake, routes[1]], 5, adapter="aider", passthrough=host)
    assert env["OPENAI_BASE_URL"] == env["OPENAI_API_BASE"] == "http://127.0.0.1:5/fake/custom/v1"
    assert "ANTHROPIC_BASE_URL" not in env and "ANTHROPIC_API_KEY" not in env


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_a_plan_adapter_with_models_is_proxied(
    tmp_path: Path, fake: FakeModelServer, cli_path: Path, kept_io: Path
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", "mini", "fix"))
    plan["adapter"] = {"mini": {"command": ["claude", "-p"], "models": ["anthropic"]}}
    plan["task"][0]["scope"] = ["answer-claude-t1.txt"]
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(
        repo, plan, keys, journal, sandbox=Settings(), capabilities=DEFAULT_MATRIX
    ).run()
    assert summary.states == {"t1": TaskState.DONE}
    (exchange,) = _kinds(_records(repo, "replay"), "model.exchange")
    assert exchange["outcome"] == "answered" and exchange["route"] == "anthropic"
    assert fake.seen[0].headers["x-api-key"] == ANT_KEY
    assert _verified(repo, keys, tmp_path).status.value == "verified"


def test_a_loopback_proxy_admits_only_its_access_token(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    from harness.orchestrate.proxy import ProxyServer

    from .proxy_helpers import allow_list, body_of, call

    token = "harness-proxy-0123456789abcdef"
    journal = Journal(tmp_path / "journal", "live")
    with ProxyServer(allow_list(fake.base), journal, access_token=token) as proxy:
        body = body_of("anthropic", False)
        for headers in ({}, {"x-api-key": "harness-proxy"}, {"authorization": f"Bearer {token}x"}):
            status, _, answer = call(proxy.port, "/anthropic/v1/messages", body, headers)
            assert status == 403 and b"access token" in answer
        assert call(proxy.port, "/anthropic/v1/messages", body, {"x-api-key": token})[0] == 200
        chat = body_of("chat", False)
        bearer = {"Authorization": f"Bearer {token}"}
        assert call(proxy.port, "/openai/v1/chat/completions", chat, bearer)[0] == 200
        proxy.wait_idle()
        outcomes = [(e.outcome, e.status) for e in proxy.exchanges()]
    assert outcomes == [("refused", 403)] * 3 + [("answered", 200)] * 2
    assert len(fake.seen) == 2  # nothing refused reached the upstream
    assert all(token not in json.dumps(seen.headers) for seen in fake.seen)  # dropped
