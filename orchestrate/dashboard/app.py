"""The dashboard's ASGI app: routes over the runs of one repository (docs/spec/dashboard.md).

``create_app`` wires the data readers (``index``, ``evidence``, ``gitdiff``), the pages
(``views``) and the request checks (``security.Guard``, outermost). Store reads, git and the
evidence check run in worker threads, never on the event loop. The only write a route can
cause is ``POST /runs/{run}/commands`` (with ``allow_control``): a command appended to the
run's control bus by ``harness.orchestrate.state.request_command``; the runtime answers it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.receipts.keys import OperatorKeys

from . import views
from .data import detail, summary, task_detail
from .evidence import Evidence
from .gitdiff import Differ
from .index import Repository, RunIndex
from .security import MAX_BODY, Access, Guard
from .static import SCRIPT, STYLE

T = TypeVar("T")
POLL_S: Final = 0.2
KEEPALIVE_S: Final = 10.0
RUNS_DEADLINE_S: Final = 2.0
RUNS_TOTAL_S: Final = 10.0
CURSOR_RE: Final = re.compile(r"[0-9]{1,12}")
MAX_TEXT: Final = 16_000
MAX_STREAMS: Final = 32
"""Event streams open at once (each polls its run): more get 503."""
OPERATOR: Final = "dashboard"


class Dashboard:
    """What the routes share: the repository's runs, the evidence checker, the settings."""

    def __init__(
        self, repo: Path, keys: OperatorKeys | None, keys_dir: Path | None, allow_control: bool
    ) -> None:
        self.repo = repo
        self.state = repo / ".harness"
        self.keys = keys
        self.keys_dir = keys_dir
        self.runs = Repository(self.state, keys)
        self.evidence = Evidence(self.state, keys)
        self.differ = Differ(repo)
        self.allow_control = allow_control
        self.csrf = secrets.token_urlsafe(32)
        self.stopping = threading.Event()
        """Set when the server shuts down: live streams end so the shutdown is not held."""
        self.poll_s = POLL_S
        self.streams = 0

    async def index(self, run_id: str, deadline_s: float = 10.0) -> RunIndex | None:
        index = await run_in_threadpool(self.runs.run, run_id)
        if index is not None:
            await run_in_threadpool(index.refresh, deadline_s)
        return index


def _locked(index: RunIndex, build: Callable[..., T], *args: Any) -> T:
    """``build(*args)`` while no refresh of ``index`` runs (a refresh mutates the fold)."""
    with index.lock:
        return build(*args)


def _not_found(what: str) -> Response:
    return JSONResponse({"error": f"no {what}"}, status_code=404)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(
    repo: Path,
    *,
    allow_control: bool,
    token: str | None,
    host: str,
    port: int | None = None,
    keys: OperatorKeys | None = None,
    keys_dir: Path | None = None,
) -> Starlette:
    """The app for ``repo`` (its ``.harness`` state folder). ``keys``: the operator keys
    (they sign the fresh export checked on the run page); None loads them as ``harness``
    does (``keys_dir`` or the default folder), and without them the evidence check and the
    commands are unavailable. ``port``: the bound port, checked in the Host header (the
    server sets it once bound when 0 was asked)."""
    repo = repo.absolute()
    if keys is None:
        from ..state import StateError, load_run_keys

        try:
            keys_dir, keys = load_run_keys(repo, keys_dir)
        except StateError:
            keys = None
    dash = Dashboard(repo, keys, keys_dir, allow_control)

    async def runs_page(request: Request) -> Response:
        return HTMLResponse(views.runs_page(await _runs(), csrf=dash.csrf))

    async def api_runs(request: Request) -> Response:
        return JSONResponse({"runs": await _runs()})

    async def _runs() -> list[dict[str, Any]]:
        """Every run's summary; refreshes share one deadline (a run not reached in time is
        shown as far as it was read, and read further by the next request)."""
        out = []
        stop = time.monotonic() + RUNS_TOTAL_S
        for run_id in await run_in_threadpool(dash.runs.run_ids):
            left = min(RUNS_DEADLINE_S, stop - time.monotonic())
            if left > 0:
                index = await dash.index(run_id, left)
            else:
                index = await run_in_threadpool(dash.runs.run, run_id)
            if index is not None:
                out.append(await run_in_threadpool(_locked, index, summary, index, dash.evidence))
        return out

    async def _detail(request: Request) -> tuple[dict[str, Any], str] | None:
        index = await dash.index(request.path_params["run"])
        if index is None:
            return None
        return await run_in_threadpool(_locked, index, detail, index, dash.evidence)

    async def run_page(request: Request) -> Response:
        found = await _detail(request)
        if found is None:
            return _not_found("such run")
        data, svg = found
        page = views.run_page(data, control_svg=svg, allow_control=allow_control, csrf=dash.csrf)
        return HTMLResponse(page)

    async def api_run(request: Request) -> Response:
        found = await _detail(request)
        return _not_found("such run") if found is None else JSONResponse(found[0])

    async def _task(request: Request) -> dict[str, Any] | None:
        index = await dash.index(request.path_params["run"])
        if index is None:
            return None
        view = index.fold.tasks.get(request.path_params["task"])
        if view is None:
            return None
        return await run_in_threadpool(_locked, index, task_detail, index, view, dash.differ)

    async def task_page(request: Request) -> Response:
        data = await _task(request)
        if data is None:
            return _not_found("such run or task")
        return HTMLResponse(views.task_page(data["run"], data, csrf=dash.csrf))

    async def api_task(request: Request) -> Response:
        data = await _task(request)
        return _not_found("such run or task") if data is None else JSONResponse(data)

    async def events(request: Request) -> Response:
        index = await dash.index(request.path_params["run"])
        if index is None:
            return _not_found("such run")
        raw = request.headers.get("last-event-id") or request.query_params.get("cursor")
        if raw is not None and not CURSOR_RE.fullmatch(raw):
            return _error(400, "the cursor is a record count (digits)")
        generation = request.query_params.get("generation")
        cursor = int(raw) if raw is not None else None
        if dash.streams >= MAX_STREAMS:
            return _error(503, f"{MAX_STREAMS} event streams are open already")
        stream = _stream(dash, index, request, cursor, generation)
        return StreamingResponse(
            stream, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )

    async def command(request: Request) -> Response:
        if not allow_control:
            return _error(403, "read-only dashboard: start it with --allow-control")
        given = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(given.encode(), dash.csrf.encode()):
            return _error(403, "missing or wrong X-CSRF-Token")
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
            return _error(403, "cross-origin request")
        body = await _read_body(request)
        if isinstance(body, Response):
            return body
        parsed = _command_args(body)
        if isinstance(parsed, Response):
            return parsed
        kind, args, command_id = parsed
        run_id = request.path_params["run"]
        if dash.runs.run(run_id) is None:
            return _not_found("such run")
        from ..state import StateError, UsageError, request_command

        try:
            issued = await run_in_threadpool(
                lambda: request_command(
                    dash.repo, run_id, kind, args, OPERATOR, dash.keys_dir, command_id=command_id
                )
            )
        except UsageError as exc:
            return _error(400, str(exc))
        except StateError as exc:
            return _error(409, str(exc))
        return JSONResponse({"command": issued.id, "seq": issued.seq, "replayed": issued.replayed})

    def static(body: str, media: str) -> Any:
        async def serve_static(request: Request) -> Response:
            return Response(body, media_type=media)

        return serve_static

    routes = [
        Route("/", runs_page),
        Route("/api/runs", api_runs),
        Route("/api/runs/{run}", api_run),
        Route("/api/runs/{run}/tasks/{task:path}", api_task),
        Route("/runs/{run}", run_page),
        Route("/runs/{run}/events", events),
        Route("/runs/{run}/commands", command, methods=["POST"]),
        Route("/runs/{run}/tasks/{task:path}", task_page),
        Route("/static/dashboard.js", static(SCRIPT, "text/javascript")),
        Route("/static/dashboard.css", static(STYLE, "text/css")),
    ]
    access = Access(host=host, port=port, token=token)
    app = Starlette(routes=routes, middleware=[Middleware(Guard, access=access)])
    app.state.dashboard = dash
    app.state.access = access  # serve() sets access.port once the socket is bound
    return app


async def _read_body(request: Request) -> Any:
    """The JSON body (at most ``MAX_BODY`` bytes, counted while reading), or an error."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return _error(413, "request body over 1 MiB")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body is not JSON")


def _text(body: dict[str, Any], name: str, required: bool) -> str | Response | None:
    value = body.get(name)
    if value is None:
        return _error(400, f"{name!r} is required") if required else None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        return _error(400, f"{name!r} must be a string of at most {MAX_TEXT} characters")
    return value


def _command_args(body: Any) -> tuple[str, dict[str, Any], str | None] | Response:
    """The command kind, its args (as ``harness <kind>`` builds them) and an optional id."""
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    kind = body.get("kind")
    if kind not in views.COMMANDS:
        return _error(400, f"kind must be one of {', '.join(views.COMMANDS)}")
    allowed = {"kind", "id", "text", "task", "review"}
    extra = sorted(set(body) - allowed)
    if extra:
        return _error(400, f"unknown members: {', '.join(extra)}")
    fields: dict[str, str | None] = {}
    for name, required in (
        ("text", kind in ("answer", "instruct")),
        ("task", kind == "instruct"),
        ("review", False),
    ):
        value = _text(body, name, required)
        if isinstance(value, Response):
            return value
        fields[name] = value
    command_id = body.get("id")
    if command_id is not None and not isinstance(command_id, str):
        return _error(400, "id must be a string")
    args: dict[str, Any] = {}
    if kind == "approve":
        if fields["review"] is not None:
            if fields["text"]:
                return _error(400, "approve takes a review or a text, not both")
            args = {"review": fields["review"]}
        elif fields["text"]:
            args = {"text": fields["text"]}
    elif kind == "answer":
        args = {"text": fields["text"]}
    elif kind == "instruct":
        args = {"task": fields["task"], "text": fields["text"]}
    return str(kind), args, command_id


def _sse(event: str, data: Any, event_id: int) -> bytes:
    payload = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return f"id: {event_id}\nevent: {event}\ndata: {payload}\n\n".encode()


async def _stream(
    dash: Dashboard, index: RunIndex, request: Request, cursor: int | None, generation: str | None
) -> AsyncIterator[bytes]:
    """Events after ``cursor`` (an audit record count), then live ones as the store grows.
    ``resync`` when the cursor is beyond the store, older than the events kept, or of
    another generation (the store was replaced or shrank since the client read it)."""
    dash.streams += 1
    try:
        async for chunk in _events(dash, index, request, cursor, generation):
            yield chunk
    finally:
        dash.streams -= 1


async def _events(
    dash: Dashboard, index: RunIndex, request: Request, cursor: int | None, generation: str | None
) -> AsyncIterator[bytes]:
    seen_generation = index.generation
    fold = index.fold
    if cursor is None:
        cursor = fold.count
    elif (
        cursor > fold.count
        or (generation is not None and generation != str(index.generation))
        or _lost(index, cursor)
    ):
        yield _sse("resync", {"records": fold.count, "generation": index.generation}, fold.count)
        cursor = fold.count
    yield b"retry: 1000\n\n"
    last_sent = time.monotonic()
    while not dash.stopping.is_set():
        fold = index.fold
        if index.generation != seen_generation:
            seen_generation = index.generation
            yield _sse(
                "resync", {"records": fold.count, "generation": index.generation}, fold.count
            )
            cursor = fold.count
        out = [_sse(name, data, n) for n, name, data in list(fold.events) if n > cursor]
        if out:
            yield b"".join(out)
            last_sent = time.monotonic()
        cursor = max(cursor, fold.count)
        if time.monotonic() - last_sent > KEEPALIVE_S:
            yield b": keepalive\n\n"
            last_sent = time.monotonic()
        if await request.is_disconnected():
            return
        await asyncio.sleep(dash.poll_s)
        await run_in_threadpool(index.refresh, 1.0)


def _lost(index: RunIndex, cursor: int) -> bool:
    """True when events after ``cursor`` fell out of the kept ring."""
    return cursor < index.fold.dropped_upto
