"""The ``gemini`` adapter through the recording proxy, end to end (its built-in route ``google``).

A fake ``gemini`` executable (tests/fake_agent_cli.py under that name) speaks the Gemini API
as the @google/genai SDK does: ``GOOGLE_GEMINI_BASE_URL``, ``GEMINI_API_KEY`` as
``x-goog-api-key``, the model and the stream in the path; and prints the gemini adapter's
output format with made-up usage. The plan's ``[models.google]`` points at the fake model
server; the operator's key is in ``GEMINI_API_KEY`` (the built-in route's ``key_env``), which
the adapter would otherwise pass to the agent. Real git, processes and sockets.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.capabilities import DEFAULT_MATRIX, Tag
from harness.orchestrate.replay import Journal
from harness.orchestrate.sandbox import Settings
from harness.verify.fsm import TaskState

from .evidence_helpers import make_keys
from .fake_model_server import FakeModelServer
from .proxy_helpers import install_fake_cli
from .test_proxy_run import (
    BWRAP,
    _copy_journal,
    _fresh,
    _kinds,
    _records,
    _runtime,
    _verified,
    kept_io,  # noqa: F401  (a fixture)
)

GEMINI_KEY = "AIza-operator-secret-g2"
GOOGLE_KEY = "AIza-other-operator-secret"
MATRIX = dataclasses.replace(
    DEFAULT_MATRIX,
    adapters={
        **DEFAULT_MATRIX.adapters,
        "gemini": frozenset({Tag.UNTRUSTED_INPUT, Tag.EXTERNAL_COMM}),
    },
)


@pytest.fixture
def gemini_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH folder with the fake ``gemini`` first; the operator's Google keys set."""
    folder = install_fake_cli(tmp_path / "bin", ("gemini",), monkeypatch)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("GOOGLE_API_KEY", GOOGLE_KEY)
    return folder


def _plan(fake: FakeModelServer, *prompts: tuple[str, str]) -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    return {
        "plan": {"name": "p", "settle_ticks": 1, "max_in_flight": 1},
        "models": {"google": {"family": "google", "base": fake.base, "key_env": "GEMINI_API_KEY"}},
        "task": [
            {"id": task, "role": f"r-{task}", "prompt": prompt, "adapter": "gemini",
             "scope": [f"answer-gemini-{task}.txt"], "gates": [gate]}
            for task, prompt in prompts
        ],
    }  # fmt: skip


def test_gemini_is_proxied_recorded_and_holds_no_key(
    tmp_path: Path,
    fake: FakeModelServer,
    gemini_path: Path,
    kept_io: Path,  # noqa: F811
) -> None:
    repo = _fresh(tmp_path / "a")
    keys = make_keys()
    plan = _plan(fake, ("t1", "fix it TWICE OFFLIST STRANGER"), ("t2", "fix STREAM"))
    plan["task"][1]["budget"] = {"tokens": 5000}  # the CLI claims 1999998: the proxy counts
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(repo, plan, keys, journal, capabilities=MATRIX).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.DONE}
    audit, replay = _records(repo, "audit"), _records(repo, "replay")
    by_batch: dict[str, list[dict[str, Any]]] = {}
    for body in _kinds(replay, "model.exchange"):
        by_batch.setdefault(body["batch"], []).append(body)
    first, second = by_batch["b0001"], by_batch["b0002"]
    assert [(e["outcome"], e["api"]) for e in first] == [
        ("answered", "google-generate"), ("answered", "google-generate"),
        ("refused", None), ("refused", None), ("refused", None),
    ]  # fmt: skip
    assert "example.invalid" in first[2]["reason"]
    assert "access token is missing or wrong" in first[4]["reason"]
    assert [(e["api"], e["stream"], e["model"]) for e in second] == [
        ("google-stream", True, "gemini-fake")
    ]
    for body in first[:2] + second:
        assert body["family"] == "google" and body["model"] == "gemini-fake"
        assert body["journaled"] and body["usage"]["output_tokens"] > 4  # words + thoughts
        assert body["dropped_credentials"] == ["x-goog-api-key"]
    assert second[0]["path"] == "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse"
    # the profile's egress is the google route; the upstream saw the operator's key
    egress = [s["sandbox"]["egress"] for s in _kinds(audit, "agent.spawn")]
    assert [[(e["route"], e["family"], e["path_prefix"]) for e in x] for x in egress] == [
        [("google", "google", "/v1beta/")]
    ] * 2
    assert {s.headers["x-goog-api-key"] for s in fake.seen} == {GEMINI_KEY}
    for batch in ("b0001", "b0002"):
        dumped = json.loads((kept_io / f"r1-{batch}" / "agent.json").read_text())
        env = dumped["env"]
        assert GEMINI_KEY not in json.dumps(env) and GOOGLE_KEY not in json.dumps(env)
        assert "GOOGLE_API_KEY" not in env
        assert "OPENAI_BASE_URL" not in env  # the Gemini CLI would take its SGLang backend
        assert env["GEMINI_API_KEY"].startswith("harness-proxy-")
        assert env["GOOGLE_GEMINI_BASE_URL"].startswith("http://127.0.0.1:")
        assert env["GOOGLE_GEMINI_BASE_URL"].endswith("/google")
    dumped = json.loads((kept_io / "r1-b0001" / "agent.json").read_text())
    assert dumped["offlist"] == dumped["offroute"] == dumped["stranger"] == 403
    # budgets: Google's input holds its cached part (nothing added), output its thoughts
    exits = {e["batch"]: e["usage"] for e in _kinds(audit, "agent.exit")}
    for batch, bodies in by_batch.items():
        answered = [b["usage"] for b in bodies if b["outcome"] == "answered"]
        assert exits[batch]["input_tokens"] == sum(u["input_tokens"] for u in answered)
        assert exits[batch]["output_tokens"] == sum(u["output_tokens"] for u in answered)
    assert [c["adapter"] for c in _kinds(replay, "model.call")] == ["gemini", "gemini"]
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure


def test_gemini_replays_offline_byte_identical(
    tmp_path: Path, fake: FakeModelServer, gemini_path: Path
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", "fix it TWICE"), ("t2", "fix STREAM"))
    pristine = _fresh(tmp_path / "pristine")
    first = _fresh(tmp_path / "a", pristine)
    journal = Journal(first / ".harness" / "journals" / "r1", "live")
    _runtime(first, plan, keys, journal, capabilities=MATRIX).run()
    assert len(fake.seen) == 3
    fake.stop()  # offline from here
    second = _fresh(tmp_path / "b", pristine)
    _copy_journal(first, second)
    journal = Journal(second / ".harness" / "journals" / "r1", "replay")
    summary = _runtime(second, plan, keys, journal, capabilities=MATRIX).run()
    assert summary.states == {"t1": TaskState.DONE, "t2": TaskState.DONE}
    for store in ("lineage", "replay"):
        a = (first / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        b = (second / ".harness" / "runs" / "r1" / f"{store}.jsonl").read_bytes()
        assert a == b, store
    sources = _kinds(_records(second, "audit"), "model.source")
    assert [s["source"] for s in sources] == ["journal"] * 3
    report = _verified(second, keys, tmp_path / "b")
    assert report.status.value == "verified", report.failure


@pytest.mark.skipif(not BWRAP.available, reason=f"no bubblewrap sandbox: {BWRAP.reason}")
def test_sandboxed_gemini_reaches_only_the_proxy(
    tmp_path: Path,
    fake: FakeModelServer,
    gemini_path: Path,
    kept_io: Path,  # noqa: F811
) -> None:
    keys = make_keys()
    plan = _plan(fake, ("t1", f"fix it OFFLIST DIRECT 127.0.0.1:{fake.port}"))
    repo = _fresh(tmp_path / "a")
    journal = Journal(repo / ".harness" / "journals" / "r1", "live")
    summary = _runtime(
        repo, plan, keys, journal, sandbox=Settings(), capabilities=DEFAULT_MATRIX
    ).run()
    assert summary.states == {"t1": TaskState.DONE}
    (spawn,) = _kinds(_records(repo, "audit"), "agent.spawn")
    assert spawn["sandbox"]["kind"] == "bwrap" and spawn["sandbox"]["network"] is False
    assert [e["route"] for e in spawn["sandbox"]["egress"]] == ["google"]
    dumped = json.loads((kept_io / "r1-b0001" / "agent.json").read_text())
    assert dumped["env"]["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8377/google"
    assert dumped["env"]["GEMINI_API_KEY"] == "harness-proxy"
    assert dumped["direct"].startswith("refused") and dumped["offlist"] == 403
    assert GEMINI_KEY not in json.dumps(dumped["env"])
    exchanges = _kinds(_records(repo, "replay"), "model.exchange")
    assert [e["outcome"] for e in exchanges] == ["answered", "refused", "refused"]
    assert fake.seen[0].headers["x-goog-api-key"] == GEMINI_KEY
    report = _verified(repo, keys, tmp_path)
    assert report.status.value == "verified", report.failure
