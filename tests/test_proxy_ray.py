"""Proxied batches on the Ray executor go through the coordinator's proxy (runtime.md §18).

A real local Ray cluster on 127.0.0.1 (the fixture of tests/test_executor_ray.py: one at a
time on the machine, so this file shares its xdist scope, tests/conftest.py), a fake
``claude`` CLI (tests/fake_agent_cli.py) against the fake model server. The worker runs the
agent; the proxy, the operator's key, the journal and every record stay on the coordinator.
The worker's io folder is gone when the unit returns, so the test's ``claude`` also prints
what the fake CLI saw (its ``agent.json``) on its stderr, which comes back in the result.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.executors.ray_executor import RayHandle
from harness.orchestrate.executors.unit import AgentUnit
from harness.orchestrate.replay import Journal
from harness.orchestrate.sandbox import Settings
from harness.verify.fsm import TaskState

from . import test_executor_ray, test_proxy_run
from .evidence_helpers import make_keys
from .fake_model_server import FakeModelServer
from .proxy_helpers import FAKE_CLI
from .test_executor_ray import Cluster
from .test_proxy_run import (
    ANT_KEY,
    BWRAP,
    UNSANDBOXED_MATRIX,
    _fresh,
    _kinds,
    _plan,
    _records,
    _runtime,
    _verified,
)

MARK = "AGENT-JSON "
cluster = test_executor_ray.cluster  # the fixtures, by assignment (not redefined)
cli_path = test_proxy_run.cli_path


@pytest.fixture
def claude(cli_path: Path) -> Path:
    """``claude`` = the fake CLI that also writes what it saw to stderr (one line)."""
    source = FAKE_CLI.read_text(encoding="utf-8")
    tail = "    sys.exit(main())\n"
    assert source.endswith(tail)
    dump = (
        "    _rc = main()\n"
        "    _seen = (Path(os.environ['HOME']).parent / 'io' / 'agent.json').read_text()\n"
        f"    sys.stderr.write({MARK!r} + _seen + '\\n')\n"
        "    sys.exit(_rc)\n"
    )
    path = cli_path / "claude"
    path.write_text(f"#!{sys.executable}\n{source.removesuffix(tail)}{dump}", encoding="utf-8")
    return path


@pytest.fixture
def submitted(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RayHandle]]:
    """Every handle the executor submits (its unit, and the worker's result once back)."""
    handles: list[RayHandle] = []
    executor = cluster.executor
    original = executor.submit

    def submit(unit: AgentUnit, *args: Any, **kwargs: Any) -> RayHandle:
        handle = original(unit, *args, **kwargs)
        handles.append(handle)
        return handle

    monkeypatch.setattr(executor, "submit", submit)
    yield handles


def _seen(handle: RayHandle) -> dict[str, Any]:
    assert handle.unit_result is not None
    for line in handle.unit_result.result.stderr.decode().splitlines():
        if line.startswith(MARK):
            return dict(json.loads(line[len(MARK) :]))
    raise AssertionError(f"no agent.json on stderr: {handle.unit_result.result.stderr[-2000:]!r}")


def _run_on_ray(
    cluster: Cluster,
    tmp_path: Path,
    fake: FakeModelServer,
    prompt: str,
    **kwargs: Any,
) -> tuple[Path, Any, Any]:
    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", prompt))
    plan["task"][0]["role"] = "coder"  # the cluster's role resource
    repo = _fresh(tmp_path / "a")
    runtime = _runtime(repo, plan, keys, Journal(repo / ".harness" / "journals" / "r1", "live"),
                       **kwargs)  # fmt: skip
    runtime.executor = cluster.executor
    return repo, keys, runtime.run()


def _common(repo: Path, handles: list[RayHandle], fake: FakeModelServer) -> dict[str, Any]:
    """What holds sandboxed or not: exchanges recorded on the coordinator, the operator's
    key only upstream, never in the unit or the agent's environment."""
    replay, audit = _records(repo, "replay"), _records(repo, "audit")
    exchanges = _kinds(replay, "model.exchange")
    answered = [e for e in exchanges if e["outcome"] == "answered"]
    assert answered and all(e["batch"] == "b0001" and e["journaled"] for e in answered)
    assert [s["source"] for s in _kinds(audit, "model.source")] == ["live"] * len(answered)
    assert fake.seen[0].headers["x-api-key"] == ANT_KEY  # injected by the coordinator's proxy
    (handle,) = handles
    unit = handle.unit
    assert unit.proxy is not None and ANT_KEY.encode() not in pickle.dumps(unit)
    assert [item["route"] for item in unit.egress] == ["anthropic"]
    seen = _seen(handle)
    assert ANT_KEY not in json.dumps(seen["env"]) and "R2_ANT_KEY" not in seen["env"]
    assert seen["env"]["ANTHROPIC_API_KEY"].startswith("harness-proxy-")  # the access token
    # budgets from the exchanges, not the CLI's made-up 999999
    (usage,) = [e["usage"] for e in _kinds(audit, "agent.exit")]
    assert usage["output_tokens"] == sum(e["usage"]["output_tokens"] for e in answered)
    assert usage["cost_micros"] == 500000  # the cost: the CLI's own report, from its stdout
    spawn = _kinds(audit, "agent.spawn")[0]
    assert [item["route"] for item in spawn["sandbox"]["egress"]] == ["anthropic"]
    assert handle.unit_result is not None
    assert handle.unit_result.sandbox_profile["egress"] == spawn["sandbox"]["egress"]
    return seen


def test_an_unsandboxed_worker_reaches_the_coordinators_proxy(
    cluster: Cluster, tmp_path: Path, fake: FakeModelServer, claude: Path,
    submitted: list[RayHandle],
) -> None:  # fmt: skip
    repo, keys, summary = _run_on_ray(
        cluster, tmp_path, fake, "fix it TWICE STRANGER",
        sandbox=Settings(opt_out=True), capabilities=UNSANDBOXED_MATRIX,
    )  # fmt: skip
    assert summary.states == {"t1": TaskState.DONE}
    seen = _common(repo, submitted, fake)
    proxy = submitted[0].unit.proxy
    assert seen["env"]["ANTHROPIC_BASE_URL"] == f"http://{proxy}/anthropic"  # no bridge
    assert seen["stranger"] == 403  # the proxy admits only the batch's token
    outcomes = [e["outcome"] for e in _kinds(_records(repo, "replay"), "model.exchange")]
    assert outcomes == ["answered", "answered", "refused"]
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_a_sandboxed_worker_agent_reaches_only_the_relay(
    cluster: Cluster, tmp_path: Path, fake: FakeModelServer, claude: Path,
    submitted: list[RayHandle],
) -> None:  # fmt: skip
    prompt = f"fix it OFFLIST DIRECT 127.0.0.1:{fake.port}"
    repo, keys, summary = _run_on_ray(
        cluster, tmp_path, fake, prompt, sandbox=Settings(), capabilities=DEFAULT_MATRIX
    )
    assert summary.states == {"t1": TaskState.DONE}
    seen = _common(repo, submitted, fake)
    assert seen["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8377/anthropic"
    assert seen["direct"].startswith("refused")  # the worker host's loopback: unreachable
    assert seen["offlist"] == 403 and seen["offroute"] == 403  # refused by the proxy
    profile = submitted[0].unit_result.sandbox_profile  # type: ignore[union-attr]
    assert profile["kind"] == "bwrap" and profile["network"] is False
    outcomes = [e["outcome"] for e in _kinds(_records(repo, "replay"), "model.exchange")]
    assert outcomes == ["answered", "refused", "refused"]
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_a_ray_run_replays_offline_from_the_coordinators_journal(
    cluster: Cluster, tmp_path: Path, fake: FakeModelServer, claude: Path,
    submitted: list[RayHandle],
) -> None:  # fmt: skip
    """The journal is the coordinator's: a replay on Ray needs no model, and its replay and
    lineage stores are the live run's bytes (nothing of the worker's in them)."""
    from harness.orchestrate.demo import make_repo

    from .test_proxy_run import _copy_journal

    keys = make_keys()
    plan = _plan(fake, ("t1", "claude", "fix it TWICE"))
    plan["task"][0]["role"] = "coder"
    pristine = tmp_path / "pristine" / "repo"
    make_repo(pristine)
    repos = []
    for name, mode in (("a", "live"), ("b", "replay")):
        repo = _fresh(tmp_path / name, pristine)
        if mode == "replay":
            fake.stop()  # offline from here: nothing may reach the model
            _copy_journal(repos[0], repo)
        journal = Journal(repo / ".harness" / "journals" / "r1", mode)
        runtime = _runtime(repo, plan, keys, journal, sandbox=Settings(opt_out=True),
                           capabilities=UNSANDBOXED_MATRIX)  # fmt: skip
        runtime.executor = cluster.executor
        assert runtime.run().states == {"t1": TaskState.DONE}
        repos.append(repo)
    sources = [s["source"] for s in _kinds(_records(repos[1], "audit"), "model.source")]
    assert sources == ["journal", "journal"]
    for store in ("lineage", "replay"):
        a, b = (r / ".harness" / "runs" / "r1" / f"{store}.jsonl" for r in repos)
        assert a.read_bytes() == b.read_bytes(), store
    report = _verified(repos[1], keys, tmp_path / "b")
    assert report.status.value == "verified", report.failure
