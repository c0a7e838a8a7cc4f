"""A fake agent CLI (a subprocess) reaches its model only through the proxy's base URL.

The CLI reads ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` as the real ones do; its
environment holds a placeholder key only. A live run records every exchange; a replay with
the fake upstream stopped gives the CLI the same answers (the same stdout); a request the
journal does not hold fails the CLI with ``replay miss``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.orchestrate.proxy import ProxyServer

from .fake_model_server import FakeModelServer
from .proxy_helpers import ANT_KEY, OAI_KEY, make_proxy

CLI = Path(__file__).with_name("fake_model_cli.py")
RUNS = [("anthropic", False), ("anthropic", True), ("chat", False), ("chat", True),
        ("responses", False), ("responses", True)]  # fmt: skip


def agent_env(proxy: ProxyServer) -> dict[str, str]:
    """What the runtime gives the agent: base URLs into the proxy, placeholder keys."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "ANTHROPIC_BASE_URL": proxy.base_url("anthropic"),
        "ANTHROPIC_API_KEY": "placeholder-injected-by-proxy",
        "OPENAI_BASE_URL": proxy.base_url("openai") + "/v1",
        "OPENAI_API_KEY": "placeholder-injected-by-proxy",
    }


def run_cli(
    proxy: ProxyServer, shape: str, stream: bool, prompt: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(CLI), shape, *(["--stream"] if stream else []), prompt]
    env = agent_env(proxy)
    assert ANT_KEY not in str(env) and OAI_KEY not in str(env)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_cli_run_is_recorded_and_replays_offline(tmp_path: Path) -> None:
    fake = FakeModelServer().start()
    with make_proxy(fake.base, tmp_path / "j") as proxy:
        live = [run_cli(proxy, shape, stream, f"task {shape}") for shape, stream in RUNS]
    fake.stop()
    assert [done.returncode for done in live] == [0] * len(RUNS), [d.stderr for d in live]
    assert all(done.stdout.startswith("Answer ") for done in live)
    records = proxy.exchanges()
    assert [(r.source, r.journaled) for r in records] == [("live", True)] * len(RUNS)
    assert all(r.usage is not None and r.usage.output_tokens == 5 for r in records)
    for seen in fake.seen:  # the upstream saw the proxy's keys, never the placeholder
        assert "placeholder" not in str(seen.headers)
        assert seen.headers.get("x-api-key") == ANT_KEY or (
            seen.headers.get("authorization") == f"Bearer {OAI_KEY}"
        )

    with make_proxy(fake.base, tmp_path / "j", "replay") as replay:
        again = [run_cli(replay, shape, stream, f"task {shape}") for shape, stream in RUNS]
        missed = run_cli(replay, "anthropic", False, "a prompt never asked")
    assert [done.stdout for done in again] == [done.stdout for done in live]
    assert [r.source for r in replay.exchanges()[: len(RUNS)]] == ["journal"] * len(RUNS)
    # the CLI's own metadata.user_id differed (its pid) and the key ignored it
    assert [r.key for r in replay.exchanges()[: len(RUNS)]] == [r.key for r in records]
    assert missed.returncode == 1 and "replay miss" in missed.stderr


@pytest.mark.parametrize("variable", ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"])
def test_a_cli_pointed_elsewhere_through_the_proxy_is_refused(
    tmp_path: Path, variable: str
) -> None:
    fake = FakeModelServer().start()
    try:
        with make_proxy(fake.base, tmp_path / "j") as proxy:
            env = agent_env(proxy)
            env[variable] = f"http://127.0.0.1:{proxy.port}/elsewhere"
            shape = "anthropic" if variable.startswith("ANTHROPIC") else "chat"
            done = subprocess.run(
                [sys.executable, str(CLI), shape, "hi"], env=env, capture_output=True,
                text=True, timeout=60, check=False,
            )  # fmt: skip
    finally:
        fake.stop()
    assert done.returncode == 1 and "not on the allow-list" in done.stderr
    assert [r.outcome for r in proxy.exchanges()] == ["refused"]
    assert fake.seen == []
