"""The dashboard as a server: ``harness dashboard`` in a subprocess on 127.0.0.1, real
sockets, a real run store growing beside it (written with the stores' own writer), and a
real ``harness run`` stopped from the dashboard.

Checked: the one stdout line; server-sent events after a cursor (query or
``Last-Event-ID``), live as the store grows; ``resync`` for a cursor beyond the store, of
another generation, and when the store is replaced under an open stream; a stop POSTed to
the dashboard ends a real run and its receipt arrives (API, page and event stream); exit 0 on
SIGTERM and SIGINT with a stream open; the CLI refuses a non-loopback host without a token.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import make_repo
from harness.receipts.keys import init_keys, load_keys
from harness.receipts.run import RunRecorder

from .dashboard_helpers import parse_html, slow_plan

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
import httpx

RUN = "r1"
CLI = [sys.executable, "-m", "harness.cli"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"))
    env.pop("HARNESS_DASHBOARD_TOKEN", None)
    return env


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise


def _start(repo: Path, env: dict[str, str], *extra: str) -> Server:
    proc = subprocess.Popen(
        [*CLI, "dashboard", "--repo", str(repo), "--port", "0", *extra],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("dashboard: http://"):
        proc.kill()
        raise AssertionError(f"no listening line: {line!r} {proc.communicate()[1][-2000:]}")
    return Server(proc, line.split(" ", 1)[1].strip())


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parsed server-sent events (a read blocks at most the client's read timeout)."""
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "event" in event:
                yield event
            event = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            event[name] = value[1:] if value.startswith(" ") else value


def _until(events: Iterator[dict[str, Any]], name: str, seconds: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    for event in events:
        if event["event"] == name:
            return event
        assert time.monotonic() < deadline, f"no {name!r} event before the deadline"
    raise AssertionError(f"the stream ended before a {name!r} event")


def _planned(run: RunRecorder, task: str) -> None:
    run.record("audit", "task.planned", {
        "task": task, "role": "coder", "priority": 1, "depends": [], "adapter": "scripted",
        "tools": ["edit"],
    })  # fmt: skip


def _move(run: RunRecorder, task: str, old: str, new: str) -> int:
    body = {"task": task, "from": old, "to": new, "reason": "test"}
    return run.record("audit", "task.transition", body) + 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Path, Path, Server]]:
    """A repository with a run store the test appends to, and a dashboard serving it."""
    repo = tmp_path / "repo"
    make_repo(repo)
    keys_dir = tmp_path / "keys"
    keys = init_keys(keys_dir)
    with RunRecorder(repo / ".harness", RUN, keys) as run:
        _planned(run, "t1")
        _planned(run, "t2")
    server = _start(repo, _env(tmp_path), "--keys", str(keys_dir))
    try:
        yield repo, keys_dir, server
    finally:
        server.stop()


def test_events_follow_the_store_from_a_cursor(store: tuple[Path, Path, Server]) -> None:
    repo, keys_dir, server = store
    keys = load_keys(keys_dir)
    url = f"{server.url}runs/{RUN}/events"
    with httpx.stream("GET", f"{url}?cursor=2", timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        with RunRecorder(repo / ".harness", RUN, keys) as run:
            first = _move(run, "t1", "planned", "open")
        event = _until(_events(response), "task")
        assert json.loads(event["data"]) == {
            "task": "t1",
            "state": "open",
            "reason": "test",
            "attempts": 0,
        }
        assert event["id"] == str(first) == "3"
    # a reconnect with Last-Event-ID (what EventSource sends) replays what came after it
    with RunRecorder(repo / ".harness", RUN, keys) as run:
        second = _move(run, "t2", "planned", "open")
    headers = {"Last-Event-ID": str(first)}
    with httpx.stream("GET", url, headers=headers, timeout=30) as response:
        event = _until(_events(response), "task")
        assert json.loads(event["data"]) == {
            "task": "t2",
            "state": "open",
            "reason": "test",
            "attempts": 0,
        }
        assert event["id"] == str(second)
    # from the start: every task event, in store order
    with httpx.stream("GET", f"{url}?cursor=0", timeout=30) as response:
        events = _events(response)
        got = [json.loads(_until(events, "task")["data"]) for _ in range(4)]
    assert [(g["task"], g["state"], g["reason"]) for g in got] == [
        ("t1", "planned", ""),
        ("t2", "planned", ""),
        ("t1", "open", "test"),
        ("t2", "open", "test"),
    ]


def test_bad_cursors_get_a_resync(store: tuple[Path, Path, Server]) -> None:
    _, _, server = store
    url = f"{server.url}runs/{RUN}/events"
    with httpx.stream("GET", f"{url}?cursor=99", timeout=30) as response:
        first = next(_events(response))
        assert first["event"] == "resync"
        assert json.loads(first["data"])["records"] == 2
    with httpx.stream("GET", f"{url}?cursor=2&generation=7", timeout=30) as response:
        assert next(_events(response))["event"] == "resync"
    assert httpx.get(f"{url}?cursor=-1", timeout=30).status_code == 400
    assert httpx.get(url, headers={"Last-Event-ID": "x"}, timeout=30).status_code == 400


def test_a_replaced_store_resyncs_an_open_stream(store: tuple[Path, Path, Server]) -> None:
    repo, keys_dir, server = store
    keys = load_keys(keys_dir)
    page = parse_html(httpx.get(f"{server.url}runs/{RUN}", timeout=30).text)
    generation = page.find("body").attrs["data-generation"]
    url = f"{server.url}runs/{RUN}/events?cursor=2&generation={generation}"
    with httpx.stream("GET", url, timeout=30) as response:
        folder = repo / ".harness" / "runs" / RUN
        for name in os.listdir(folder):  # the run is recorded again from scratch
            path = folder / name
            if path.is_file():
                path.unlink()
        with RunRecorder(repo / ".harness", RUN, keys) as run:
            _planned(run, "t9")
        event = _until(_events(response), "resync")
        assert json.loads(event["data"])["generation"] != int(generation)
    data = httpx.get(f"{server.url}api/runs/{RUN}", timeout=30).json()
    assert [t["task"] for t in data["tasks"]] == ["t9"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_exit_0_on_signal_with_a_stream_open(store: tuple[Path, Path, Server], sig: int) -> None:
    _, _, server = store
    with httpx.stream("GET", f"{server.url}runs/{RUN}/events", timeout=30) as response:
        assert response.status_code == 200
        started = time.monotonic()
        assert server.stop(sig) == 0
        assert time.monotonic() - started < 10
    assert server.proc.stdout is not None
    assert server.proc.stdout.read() == ""  # exactly one line on stdout


# ---- the CLI -------------------------------------------------------------------------------


def test_a_non_loopback_host_needs_a_token(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    for host in ("0.0.0.0", "192.0.2.1", "example.org"):
        result = subprocess.run(
            [*CLI, "dashboard", "--repo", str(repo), "--host", host, "--port", "0"],
            env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, result
        assert "token" in result.stderr and "loopback" in result.stderr
        assert result.stdout == ""
    short = subprocess.run(
        [*CLI, "dashboard", "--repo", str(repo), "--token", "short", "--port", "0"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert short.returncode == 2 and "16-256" in short.stderr


def test_a_wildcard_bind_with_a_token_from_the_environment(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    env = {**_env(tmp_path), "HARNESS_DASHBOARD_TOKEN": "env-token-0123456789"}
    server = _start(repo, env, "--host", "0.0.0.0")
    try:
        assert server.url.startswith("http://0.0.0.0:")
        local = server.url.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(local, timeout=30).status_code == 401
        auth = {"Authorization": "Bearer env-token-0123456789"}
        assert httpx.get(local, headers=auth, timeout=30).status_code == 200
    finally:
        assert server.stop() == 0


# ---- control of a real run -----------------------------------------------------------------


def test_stop_from_the_dashboard_ends_a_real_run(tmp_path: Path) -> None:
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(slow_plan(6, 1.5))
    init = subprocess.run([*CLI, "init"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert init.returncode == 0, init.stderr
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen(
        [*CLI, "run", str(tmp_path / "plan.toml"), "--run", RUN], cwd=repo, env=env,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    audit = repo / ".harness" / "runs" / RUN / "audit.jsonl"
    server: Server | None = None
    try:
        deadline = time.monotonic() + 30
        while not (audit.exists() and b'"status":"running"' in audit.read_bytes()):
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        server = _start(repo, env, "--allow-control")
        page = parse_html(httpx.get(f"{server.url}runs/{RUN}", timeout=30).text)
        csrf = next(m.attrs["content"] for m in page.find_all("meta")
                    if m.attrs.get("name") == "csrf-token")  # fmt: skip
        form = page.find("form", id="control-form")
        assert {b.attrs["data-command"] for b in form.find_all("button")} == {
            "stop",
            "approve",
            "answer",
            "instruct",
            "resume",
        }
        cursor = page.find("body").attrs["data-cursor"]
        events = f"{server.url}runs/{RUN}/events?cursor={cursor}"
        with httpx.stream("GET", events, timeout=30) as stream:
            posted = httpx.post(f"{server.url}runs/{RUN}/commands", json={"kind": "stop"},
                                headers={"X-CSRF-Token": csrf}, timeout=30)  # fmt: skip
            assert posted.status_code == 200, posted.text
            command = posted.json()["command"]
            receipt = json.loads(_until(_events(stream), "receipt", 60)["data"])
        assert receipt == {"command": command, "kind": "stop", "status": "applied"}
        assert run.wait(timeout=60) is not None
        records = [json.loads(line) for line in audit.read_bytes().splitlines()]
        receipts = [r["body"] for r in records if r["kind"] == "command.receipt"]
        assert [(r["id"], r["outcome"]) for r in receipts] == [(command, "applied")]
        assert any(r["kind"] == "run.status" and r["body"]["command"] == command
                   for r in records)  # fmt: skip
        data = httpx.get(f"{server.url}api/runs/{RUN}", timeout=30).json()
        assert [(r["command"], r["status"]) for r in data["receipts"]] == [(command, "applied")]
        page = parse_html(httpx.get(f"{server.url}runs/{RUN}", timeout=30).text)
        item = page.find("ul", id="receipts").find("li", **{"data-command": command})
        assert item.attrs["data-kind"] == "stop"
        assert item.by_class("span", "status").full_text() == "applied"
    finally:
        if server is not None:
            server.stop()
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=30)
        log.close()


def _python(code: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=_env(tmp), capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_harness_works_without_the_extra(tmp_path: Path) -> None:
    """Nothing but the dashboard imports starlette or uvicorn: without them ``harness --help``
    and ``harness-verify --help`` work, and ``harness dashboard`` says what to install."""
    block = "import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
    for module, argv in (("harness.cli", ["harness", "--help"]),
                         ("harness.verify.cli", ["harness-verify", "--help"])):  # fmt: skip
        code = f"{block}sys.argv = {argv!r}; import {module} as m; m.main()"
        result = _python(code, tmp_path)
        assert result.returncode == 0, result.stderr
    repo = tmp_path / "repo"
    make_repo(repo)
    code = f"{block}sys.argv = ['harness', 'dashboard', '--repo', {str(repo)!r}]; "
    code += "import harness.cli as m; m.main()"
    result = _python(code, tmp_path)
    assert result.returncode == 2
    assert "harness-verify[dashboard]" in result.stderr


def test_open_event_streams_are_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    """In-process server (uvicorn in a thread, a real socket): past ``MAX_STREAMS`` open
    streams a new one gets 503; closing one makes room."""
    import contextlib
    import threading

    import uvicorn

    from harness.orchestrate.dashboard import app as app_module
    from harness.orchestrate.dashboard.server import bind

    repo = tmp_path / "repo"
    make_repo(repo)
    keys = init_keys(tmp_path / "keys")
    with RunRecorder(repo / ".harness", RUN, keys) as run:
        _planned(run, "t1")
    monkeypatch.setattr(app_module, "MAX_STREAMS", 2)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = app_module.create_app(repo, allow_control=False, token=None, host="127.0.0.1",
                                port=port, keys=keys)  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/runs/{RUN}/events"
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with httpx.Client(timeout=30) as client, contextlib.ExitStack() as stack:
            first = stack.enter_context(client.stream("GET", url))
            second = stack.enter_context(client.stream("GET", url))
            lines = [first.iter_lines(), second.iter_lines()]  # kept: dropping one closes it
            assert all(next(stream) == "retry: 1000" for stream in lines)  # both streaming
            assert client.get(url).status_code == 503
            first.close()
            deadline = time.monotonic() + 10
            while True:  # the server notices the closed stream at its next poll
                with client.stream("GET", url) as third:
                    if third.status_code == 200:
                        break
                assert time.monotonic() < deadline, "the closed stream was never released"
                time.sleep(0.1)
    finally:
        app.state.dashboard.stopping.set()
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
