"""A small, bounded Chrome DevTools Protocol client for tests: a real headless Chromium.

Why not a browser-automation framework: Debian's ``chromium`` is what the issue asks for, and
the tests need only a handful of CDP calls (navigate, evaluate, click, screenshot, console
events). Playwright/Selenium would bring their own browser builds or drivers; the protocol
itself is a WebSocket carrying JSON, spoken here with ``websockets`` (its sync client).

Every wait has a deadline, and ``Browser`` kills the process group in ``close()`` (use it as a
context manager), so a hung page or browser fails a test instead of hanging it.

Chromium is started with ``--remote-debugging-port=0`` and a private ``--user-data-dir``; the
port it picked is read from ``DevToolsActivePort`` in that folder (line 1: port, line 2: the
browser target's path). One page target is created and attached with ``flatten`` sessions, so
every page command carries that ``sessionId`` over the one browser connection.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

FLAGS = (
    "--headless",
    "--no-sandbox",  # tests run as root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class CDPError(RuntimeError):
    """A CDP command failed, a wait timed out, or the browser went away."""


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page, driven over CDP."""

    def __init__(
        self,
        executable: str,
        profile: Path,
        *,
        timeout: float = 20.0,
        extra_flags: tuple[str, ...] = (),
    ) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._stack = ExitStack()
        self.proc = subprocess.Popen(
            [executable, *FLAGS, *extra_flags, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helpers share the group: killed together
        )
        try:
            port_file = profile / "DevToolsActivePort"
            lines = _wait_for(lambda: _read_port_file(port_file), timeout, "DevToolsActivePort")
            url = f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            self.ws: ClientConnection = self._stack.enter_context(
                connect(
                    url,
                    open_timeout=timeout,
                    close_timeout=2,
                    max_size=64 << 20,
                    proxy=None,
                    compression=None,
                )
            )
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
            self.session: str = attached["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.page(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()
        # The whole group (renderers, zygotes) even if the main process is gone: it is not
        # reaped yet, so its pid (the group's id) cannot have been reused.
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    # -- protocol --------------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 15.0,
    ) -> dict[str, Any]:
        """Send one command and read until its answer (events met meanwhile are kept)."""
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._recv(deadline, method)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def page(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return self.call(method, params, session=self.session, **kw)

    def _recv(self, deadline: float, what: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CDPError(f"timed out waiting for {what}")
        try:
            raw = self.ws.recv(timeout=left)
        except TimeoutError:
            raise CDPError(f"timed out waiting for {what}") from None
        decoded: dict[str, Any] = json.loads(raw)
        return decoded

    def wait_event(self, method: str, *, since: int = 0, timeout: float = 15.0) -> dict[str, Any]:
        """The first event ``method`` at index >= ``since`` in ``events`` (reads on until one)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events[since:]:
                if event["method"] == method and event.get("sessionId") == self.session:
                    return event
            reply = self._recv(deadline, method)
            if "method" in reply:
                self.events.append(reply)

    # -- page helpers ----------------------------------------------------------------------

    def navigate(self, url: str, *, timeout: float = 20.0) -> None:
        since = len(self.events)
        answer = self.page("Page.navigate", {"url": url}, timeout=timeout)
        if answer.get("errorText"):
            raise CDPError(f"navigate {url}: {answer['errorText']}")
        self.wait_event("Page.loadEventFired", since=since, timeout=timeout)

    def evaluate(self, expression: str, *, timeout: float = 10.0) -> Any:
        answer = self.page(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in answer:
            raise CDPError(f"evaluate {expression!r}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 15.0, every: float = 0.1) -> Any:
        """Poll ``expression`` in the page until it is truthy (bounded); return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for {expression!r} (last: {value!r})")
            self.pump(every)

    def pump(self, seconds: float) -> None:
        """Read events for ``seconds`` (a bounded pause that keeps the event log current)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                reply = self._recv(deadline, "events")
            except CDPError:
                return
            if "method" in reply:
                self.events.append(reply)

    def click(self, selector: str) -> None:
        """A real mouse click (press + release) at the centre of the element."""
        rect = self.evaluate(
            "(() => { const e = document.querySelector(" + json.dumps(selector) + ");"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()"
        )
        if not rect:
            raise CDPError(f"no element {selector!r} to click")
        for kind in ("mousePressed", "mouseReleased"):
            self.page(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": rect["x"], "y": rect["y"], "button": "left", "clickCount": 1},
            )

    def screenshot(self, path: Path, width: int, height: int) -> bytes:
        """A PNG of the viewport at exactly ``width`` x ``height`` CSS pixels (scale 1)."""
        self.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        data = base64.b64decode(self.page("Page.captureScreenshot", {"format": "png"})["data"])
        path.write_bytes(data)
        return data

    def problems(self, skip: range = range(0)) -> list[str]:
        """Console errors, uncaught exceptions and CSP/security log entries seen so far (but
        for the events whose index is in ``skip``)."""
        found: list[str] = []
        for index, event in enumerate(self.events):
            if index in skip:
                continue
            params = event.get("params", {})
            if event["method"] == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                found.append("console: " + json.dumps(params.get("args"))[:500])
            elif event["method"] == "Runtime.exceptionThrown":
                found.append("exception: " + json.dumps(params.get("exceptionDetails"))[:500])
            elif event["method"] == "Log.entryAdded":
                entry = params.get("entry", {})
                url = str(entry.get("url", ""))
                if entry.get("source") == "network" and url.endswith("/favicon.ico"):
                    continue  # the browser asks for it on its own; no page refers to it
                if entry.get("level") == "error" or entry.get("source") in (
                    "security",
                    "violation",
                ):
                    found.append(f"log {entry.get('source')}: {entry.get('text')} {url}"[:500])
        return found


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR; raises ValueError if it is not a PNG."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def png_distinct_bytes(data: bytes) -> int:
    """How many distinct byte values the decompressed image data holds (a blank page has ~2)."""
    pos, chunks = 8, []
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            chunks.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return len(set(zlib.decompress(b"".join(chunks))))


def _read_port_file(path: Path) -> list[str] | None:
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return None
    return lines if len(lines) >= 2 else None


def _wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise CDPError(f"timed out waiting for {what}")
