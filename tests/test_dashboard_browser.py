"""The dashboard as a user sees it: a real run in progress, a real server, a real Chromium.

``harness run`` runs a plan of chained tasks whose gates are slow (so task states change while
the page is open) in a subprocess; ``harness dashboard --port 0 --allow-control`` serves its
repository in another; Debian's headless ``chromium`` opens the pages, driven over the DevTools
protocol (``tests/cdp.py``). Checked, in one pass (a run can be stopped only once):

* screenshots of the runs page, the run page and a task page are real PNGs of the viewport's
  size (and not blank);
* a task's ``td.state`` changes in the open run page without a reload (a marker set on
  ``window`` survives, no second main-frame navigation), to a state the audit store recorded;
* pressing ``button[data-command="stop"]`` (a real mouse click) ends the ``harness run``
  process; the audit store records ``run.status stopping`` naming the command; its receipt
  shows up in ``#receipts`` as ``applied``, still without a reload;
* the same server reached under another name (a DNS-rebinding attacker's: the browser maps
  ``rebind.test`` to 127.0.0.1) answers with a refusal and no run data;
* a cross-site page's self-submitting form (text/plain ``{"kind": "stop"}``, the classic
  CSRF shape) reaches the server and is refused: no command on the bus, the run goes on;
* agent output holding markup (an ``<img onerror>``) shows on the task page as text: no
  element made of it, no handler run;
* no console error, uncaught exception or CSP violation in any dashboard page; the server
  exits 0 on SIGTERM with a live page connected to its event stream;
* a dashboard started without ``--allow-control`` shows no control and refuses a POST (403);
* a gap in the store (replaced by a shorter copy) makes the open page resync: it reloads and
  shows the store as it now is.

The detectors are checked too: a reload does remove the marker, and a console error is seen.
Skipped where ``chromium`` or the dashboard extra (starlette, uvicorn) is not installed.
"""

from __future__ import annotations

import http.server
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.demo import make_repo

from .cdp import Browser, chromium_path, png_distinct_bytes, png_size
from .dashboard_helpers import slow_plan

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

RUN = "r1"
TASKS = 12  # ~30 s of run: the stop comes long before its end, even on a loaded machine
GATE_S = 1.5
WIDTH, HEIGHT = 1280, 800
TERMINAL = {"done", "failed", "cancelled", "denied"}


HOSTILE = '<img id="pwned" src="x" onerror="window.__pwned = 1"><marquee id="pwned2">hi</marquee>'
"""Agent output (t0's file): shown as text on the task page, never as markup."""


def _content(i: int) -> str:
    return f"file {i}\n" + (HOSTILE + "\n" if i == 0 else "")


@dataclass
class Live:
    repo: Path
    env: dict[str, str]
    run: subprocess.Popen[bytes]
    audit: Path

    def records(self) -> list[dict[str, Any]]:
        """The audit store's complete records so far (a torn last line is skipped)."""
        out = []
        for line in self.audit.read_bytes().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """``harness run`` of the slow plan, running in a subprocess, its run.start recorded."""
    if chromium_path() is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    for name in ("XDG_RUNTIME_DIR", "HARNESS_DASHBOARD_TOKEN"):
        env.pop(name, None)
    repo = tmp_path / "repo"
    make_repo(repo)
    (tmp_path / "plan.toml").write_text(slow_plan(TASKS, GATE_S, _content))
    init = subprocess.run([sys.executable, "-m", "harness.cli", "init"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert init.returncode == 0, init.stderr
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(tmp_path / "plan.toml"), "--run", RUN],
        cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    audit = repo / ".harness" / "runs" / RUN / "audit.jsonl"
    state = Live(repo, env, run, audit)
    try:
        deadline = time.monotonic() + 30
        while not (audit.exists() and any(r["kind"] == "run.status" for r in state.records())):
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        yield state
    finally:
        _stop(run)
        log.close()


def _dashboard(live: Live, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``harness dashboard --port 0``; its URL from the one line it prints. Its stderr
    goes to a file (a pipe nobody reads would block a chatty server)."""
    log = live.repo.parent / f"dashboard-{time.monotonic_ns()}.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "dashboard", "--repo", str(live.repo),
             "--port", "0", *extra],
            cwd=live.repo, env=live.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=stderr, text=True,
        )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("dashboard: http://127.0.0.1:"):
        _stop(proc)
        raise AssertionError(f"no listening line: {line!r} {log.read_text()[-2000:]}")
    return proc, line.split(" ", 1)[1].strip()


@contextmanager
def _attacker(target: str) -> Iterator[str]:
    """Another origin (its own port) serving a page whose form posts ``{"kind": "stop"}`` to
    ``target`` as text/plain (no preflight, no custom header) the moment it loads."""
    page = (
        f'<form method="post" action="{target}" enctype="text/plain">'
        '<input name=\'{"kind": "stop", "x": "\' value=\'"}\'></form>'
        "<script>document.forms[0].submit()</script>"
    ).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _check_png(data: bytes, path: Path) -> None:
    assert path.read_bytes() == data
    assert png_size(data) == (WIDTH, HEIGHT)
    assert png_distinct_bytes(data) > 8, f"{path.name} looks blank"


def _main_frame_navigations(browser: Browser, since: int) -> int:
    return sum(
        1
        for e in browser.events[since:]
        if e["method"] == "Page.frameNavigated" and "parentId" not in e["params"]["frame"]
    )


def _state_of(browser: Browser, task: str) -> str:
    value = browser.evaluate(
        f"(document.querySelector('#tasks tr[data-task={json.dumps(task)}] td.state')"
        " || {}).textContent"
    )
    return str(value or "").strip()


def _js(value: object) -> str:
    return json.dumps(value)


def _status_of_navigation(browser: Browser) -> Any:
    return browser.evaluate("performance.getEntriesByType('navigation')[0].responseStatus")


def _runs_page(browser: Browser, url: str, shots: Path) -> None:
    browser.navigate(url)
    row = f"#runs tr[data-run={_js(RUN)}]"
    browser.wait_for(f"!!document.querySelector({_js(row)})")
    cells = browser.evaluate(
        "['state','epoch','outcomes','seal','verification'].map(c => "
        f"!!document.querySelector({_js(row)} + ' td.' + c))"
    )
    assert cells == [True] * 5
    link = f'{row} a[href*="/runs/{RUN}"]'
    assert browser.evaluate(f"!!document.querySelector({_js(link)})")
    shot = shots / "runs.png"
    _check_png(browser.screenshot(shot, WIDTH, HEIGHT), shot)


def _attacks(browser: Browser, url: str, live: Live) -> range:
    """A rebound name and a cross-site form; returns the events they caused (their refusals
    are logged by the browser as failed loads: expected there, nowhere else)."""
    first = len(browser.events)
    browser.navigate(url.replace("127.0.0.1", "rebind.test"))
    assert _status_of_navigation(browser) in (400, 403, 421)
    assert browser.evaluate("document.body.innerText.includes('r1')") is False
    with _attacker(f"{url}runs/{RUN}/commands") as attack_url:
        browser.navigate(attack_url)  # it submits itself: a navigation to the answer
        browser.wait_for("location.pathname.endsWith('/commands')")
        answered = _status_of_navigation(browser)
    assert answered in (403, 415), answered  # the post arrived, and was refused
    bus = live.repo / ".harness" / "runs" / RUN / "control.jsonl"
    assert not bus.exists() or bus.read_bytes() == b""
    assert live.run.poll() is None
    return range(first, len(browser.events))


def _no_reload(browser: Browser, since: int) -> None:
    assert browser.evaluate("window.__d2_marker") == "no reload"
    assert _main_frame_navigations(browser, since) == 0


def _live_update(browser: Browser, url: str, live: Live, shots: Path) -> int:
    """The run page: a task's state cell changes in place. Returns the event index from
    which no main-frame navigation may happen."""
    browser.navigate(f"{url}runs/{RUN}")
    for section in ("#timeline", "#tasks", "#control", "#evidence", "#receipts"):
        assert browser.evaluate(f"!!document.querySelector('{section}')"), section
    assert browser.evaluate("!!document.querySelector('#timeline svg')")
    browser.evaluate("window.__d2_marker = 'no reload'")
    since = len(browser.events)
    states = {f"t{i}": _state_of(browser, f"t{i}") for i in range(TASKS)}
    assert all(states.values()), states  # every task has its row and state cell
    watched = next(t for t, s in states.items() if s not in TERMINAL)
    before = states[watched]
    after = browser.wait_for(
        f"(() => {{ const c = document.querySelector("
        f"'#tasks tr[data-task={_js(watched)}] td.state');"
        f" const s = c && c.textContent.trim();"
        f" return s && s !== {_js(before)} ? s : null; }})()",
        timeout=20,
    )
    _no_reload(browser, since)
    recorded = {
        r["body"]["to"]
        for r in live.records()
        if r["kind"] == "task.transition" and r["body"]["task"] == watched
    }
    assert after in recorded, (watched, before, after, recorded)
    # the row's reason and the run's outcome summary follow too (read in one evaluation,
    # so no event lands between them)
    seen = browser.evaluate(
        "(() => ({ reason: document.querySelector("
        f"'#tasks tr[data-task={_js(watched)}] td.reason').textContent,"
        " summary: document.getElementById('run-outcomes').textContent,"
        " cells: Array.from(document.querySelectorAll('#tasks td.state'),"
        " (c) => c.textContent) }))()"
    )
    reasons = {
        r["body"]["reason"]
        for r in live.records()
        if r["kind"] == "task.transition" and r["body"]["task"] == watched
    }
    assert seen["reason"] in reasons, (seen, reasons)
    cells = seen["cells"]
    assert seen["summary"] == ", ".join(f"{s} {cells.count(s)}" for s in sorted(set(cells)))
    shot = shots / "run.png"
    _check_png(browser.screenshot(shot, WIDTH, HEIGHT), shot)
    return since


def _stop_in_page(browser: Browser, live: Live, since: int) -> None:
    assert live.run.poll() is None, "the run ended before the stop was pressed"
    assert browser.evaluate(
        "!!document.querySelector('#control-form button[data-command=\"stop\"]')"
    )
    browser.click('button[data-command="stop"]')
    receipt = '#receipts li[data-kind="stop"]'
    browser.wait_for(f"!!document.querySelector({_js(receipt)})", timeout=10)
    status = browser.wait_for(
        f"(() => {{ const s = document.querySelector({_js(receipt + ' span.status')});"
        " const t = s && s.textContent.trim(); return t && t !== 'pending' ? t : null; })()",
        timeout=30,
    )
    assert status == "applied"
    command = browser.evaluate(f"document.querySelector({_js(receipt)}).dataset.command")
    assert live.run.wait(timeout=30) == 1  # stopped: the run did not complete
    records = live.records()
    assert any(
        r["kind"] == "run.status"
        and r["body"]["status"] == "stopping"
        and r["body"]["command"] == command
        for r in records
    ), command
    assert any(
        r["kind"] == "command.receipt"
        and r["body"]["id"] == command
        and r["body"]["outcome"] == "applied"
        for r in records
    )
    _no_reload(browser, since)


def _task_page(browser: Browser, url: str, shots: Path) -> None:
    browser.navigate(f"{url}runs/{RUN}/tasks/t0")
    text = browser.evaluate("document.body.innerText")
    assert "t0" in text and "f0.txt" in text and "file 0" in text, text[:2000]
    assert HOSTILE in text  # the agent's bytes, as text
    assert browser.evaluate(
        "!document.getElementById('pwned') && !document.getElementById('pwned2')"
        " && window.__pwned === undefined"
    )
    shot = shots / "task.png"
    _check_png(browser.screenshot(shot, WIDTH, HEIGHT), shot)


def _detectors_detect(browser: Browser, url: str) -> None:
    browser.evaluate("window.__d2_marker = 'set'")
    browser.navigate(f"{url}runs/{RUN}/tasks/t0")  # a reload of the page
    assert browser.evaluate("window.__d2_marker") is None
    browser.evaluate("console.error('probe')")
    browser.pump(0.3)
    assert any("probe" in p for p in browser.problems())


def _read_only(browser: Browser, live: Live) -> None:
    """Without --allow-control: no control in the page, a command POST is refused."""
    server, url = _dashboard(live)
    try:
        browser.navigate(f"{url}runs/{RUN}")
        assert browser.evaluate("!!document.querySelector('#tasks')")
        controls = "document.querySelectorAll('#control-form, button[data-command]').length"
        assert browser.evaluate(controls) == 0
        refused = browser.evaluate(
            f"fetch('/runs/{RUN}/commands', {{method: 'POST', headers: "
            "{'Content-Type': 'application/json'}, body: JSON.stringify({kind: 'stop'})})"
            ".then(r => r.status)"
        )
        assert refused == 403
        _resync(browser, live)
    finally:
        _stop(server)


def _resync(browser: Browser, live: Live) -> None:
    """A gap in the store (here: it is replaced by a shorter copy, cut before t0's first
    transition) makes the open page reload its data: t0 shows ``planned`` again."""
    browser.evaluate("window.__d2_marker = 'no reload'")
    assert _state_of(browser, "t0") != "planned"
    lines = live.audit.read_bytes().splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(lines)
        if json.loads(line)["kind"] == "task.transition" and b'"task":"t0"' in line
    )
    shorter = live.audit.with_name("audit.shorter")
    shorter.write_bytes(b"".join(lines[:cut]))
    os.replace(shorter, live.audit)  # another file: no position to continue from
    browser.wait_for("window.__d2_marker === undefined", timeout=20)
    browser.wait_for(
        "((document.querySelector('#tasks tr[data-task=\"t0\"] td.state') || {})"
        ".textContent || '').trim() === 'planned'",
        timeout=20,
    )


def test_a_live_run_watched_and_stopped_in_chromium(live: Live, tmp_path: Path) -> None:
    browser_path = chromium_path()
    assert browser_path is not None
    server, url = _dashboard(live, "--allow-control")
    # rebind.test resolves to 127.0.0.1 in this browser only: a DNS-rebinding attacker's
    # name, sent as the Host header of a request that really reaches the dashboard
    rules = ("--host-resolver-rules=MAP rebind.test 127.0.0.1",)
    try:
        with Browser(browser_path, tmp_path / "profile", extra_flags=rules) as browser:
            _runs_page(browser, url, tmp_path)
            attacks = _attacks(browser, url, live)
            since = _live_update(browser, url, live, tmp_path)
            _stop_in_page(browser, live, since)
            _task_page(browser, url, tmp_path)
            browser.pump(0.3)
            assert browser.problems(skip=attacks) == []
            _detectors_detect(browser, url)
            # SIGTERM with a live page open (its event stream connected): exit 0
            browser.navigate(f"{url}runs/{RUN}")
            browser.pump(0.5)
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=15) == 0
            _read_only(browser, live)
    finally:
        _stop(server)
