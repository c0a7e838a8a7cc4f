"""Shared helpers of the proxy tests: a proxy in front of the fake model server, a raw client."""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.orchestrate.proxy import AllowList, Limits, ProxyServer, Upstream
from harness.orchestrate.replay import Journal

FAKE_CLI = Path(__file__).resolve().parent / "fake_agent_cli.py"
"""The fake agent CLI (stdlib only): installed under a real CLI's name, it speaks that
adapter's output format and calls its model through the base-URL variables."""


def install_fake_cli(folder: Path, names: Sequence[str], monkeypatch: Any) -> Path:
    """Executables ``names`` in the new folder ``folder`` running the fake CLI with this
    Python, and the folder first on ``PATH`` (``monkeypatch``: pytest's)."""
    folder.mkdir()
    source = FAKE_CLI.read_text(encoding="utf-8")
    for name in names:
        path = folder / name
        path.write_text(f"#!{os.path.abspath(sys.executable)}\n{source}", encoding="utf-8")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return folder


ANT_KEY = "sk-ant-proxy-secret"
OAI_KEY = "sk-oai-proxy-secret"

SHAPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "anthropic": (
        "anthropic",
        "/anthropic/v1/messages",
        {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "chat": (
        "openai",
        "/openai/v1/chat/completions",
        {
            "model": "gpt-x",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.2,
            "stream_options": {"include_usage": True},
        },
    ),
    "responses": ("openai", "/openai/v1/responses", {"model": "gpt-x", "input": "hi"}),
}


def allow_list(base: str) -> AllowList:
    return AllowList(
        [
            Upstream("anthropic", "anthropic", base, credential=ANT_KEY),
            Upstream("openai", "openai", base, credential=OAI_KEY),
        ]
    )


def make_proxy(
    base: str, journal_dir: Path, mode: str = "live", *, allow_live_miss: bool = False,
    limits: Limits | None = None,
) -> ProxyServer:  # fmt: skip
    journal = Journal(journal_dir, mode, allow_live_miss=allow_live_miss)  # type: ignore[arg-type]
    return ProxyServer(allow_list(base), journal, limits=limits).start()


def body_of(shape: str, stream: bool, **extra: Any) -> dict[str, Any]:
    body = dict(SHAPES[shape][2], **extra)
    if stream:
        body["stream"] = True
    else:
        body.pop("stream_options", None)
    return body


def call(
    port: int, path: str, body: object, headers: dict[str, str] | None = None,
    method: str = "POST", timeout: float = 20,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return (
            response.status,
            {k.lower(): v for k, v in response.getheaders()},
            response.read(),
        )
    finally:
        connection.close()
