"""The proxy's request handler: route, refuse, key, answer from the journal or forward.

One instance per connection (``http.server``); ``handle_one_request`` runs under the
request deadline, every exchange ends in exactly one ``Exchange`` report to the proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import ssl
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Final

from harness.verify.modelkey import without_url_credentials

from ..replay import JournalIntegrityError, ReplayError
from .exchange import BadRequestError, Exchange, KeyedRequest, Outcome, Source, extract_usage
from .exchange import keyed_request as _keyed
from .upstream import Upstream, forwarded_headers, normalized_path, split_target

if TYPE_CHECKING:
    from .server import _Server

SOURCE_HEADER: Final = "x-harness-source"
KEY_HEADER: Final = "x-harness-replay-key"
_CHUNK: Final = 65536


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    expired = False
    url_credentials: tuple[str, ...] = ()
    """Credential query parameters (``?key=``) removed from the request target, by name."""

    # -- plumbing -----------------------------------------------------------------------------
    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.proxy.limits.request_deadline_s)
        # a response's head and body are separate writes, and a stream is many small ones:
        # with Nagle's algorithm each would wait for the client's delayed ACK (40 ms)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_one_request(self) -> None:
        proxy = self.server.proxy
        proxy.watchdog.arm(self, proxy.limits.request_deadline_s)
        try:
            super().handle_one_request()
        finally:
            proxy.watchdog.disarm(self)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: every exchange is reported as a record instead."""

    def parse_request(self) -> bool:
        """The request line and headers, then the target without its credential query
        parameters (the Gemini API's ``?key=``): from here on ``self.path`` is what may be
        keyed, forwarded and recorded, whatever the outcome (docs/spec/proxy.md §3)."""
        ok = super().parse_request()
        path = getattr(self, "path", None)
        if isinstance(path, str):
            self.path, dropped = without_url_credentials(path)
            self.url_credentials = tuple(f"?{name}" for name in dropped)
        return ok

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors of the request line or headers (414, 431, 400...): JSON, and recorded."""
        reason = message or explain or "malformed request"
        path = getattr(self, "path", None) or "-"
        path = without_url_credentials(path)[0]  # an error before parse_request's own removal
        if not self.expired:
            self.close_connection = True
            self._json_error(code, "invalid_request_error", reason)
        self.server.proxy.report(
            Exchange(
                seq=self.server.proxy.next_seq(),
                route="-",
                method=getattr(self, "command", None) or "-",
                path=path[:200],
                outcome="refused",
                status=code,
                reason=reason,
            )
        )

    def _json_error(self, status: int, kind: str, message: str, key: str | None = None) -> None:
        error: dict[str, str] = {"type": kind, "message": message}
        if key is not None:
            error["key"] = key
        body = {"type": "error", "error": error}
        data = json.dumps(body, sort_keys=True).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-should-retry", "false")  # the SDKs would retry a 5xx
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _refuse(
        self, seq: int, status: int, kind: str, reason: str, outcome: Outcome = "refused", **kw: Any
    ) -> None:
        self._json_error(status, kind, reason, kw.get("key"))
        self.server.proxy.report(
            Exchange(
                seq=seq,
                route=kw.pop("route", "-"),
                method=self.command,
                path=self.path[:2000],
                outcome=outcome,
                status=status,
                reason=reason,
                **kw,
            )
        )

    # -- methods ------------------------------------------------------------------------------
    def do_CONNECT(self) -> None:
        self.close_connection = True
        self._refuse(
            self.server.proxy.next_seq(),
            403,
            "permission_error",
            f"tunnels are refused: CONNECT {self.path[:200]} is not on the allow-list",
        )

    def do_GET(self) -> None:
        with self.server.proxy.in_flight():
            self._exchange()

    def do_POST(self) -> None:
        with self.server.proxy.in_flight():
            self._exchange()

    def _method_not_allowed(self) -> None:
        self.close_connection = True
        self._refuse(self.server.proxy.next_seq(), 405, "invalid_request_error", "GET or POST only")

    def do_PUT(self) -> None:
        self._method_not_allowed()

    def do_DELETE(self) -> None:
        self._method_not_allowed()

    def do_PATCH(self) -> None:
        self._method_not_allowed()

    def do_HEAD(self) -> None:
        self._method_not_allowed()

    def do_OPTIONS(self) -> None:
        self._method_not_allowed()

    # -- one exchange -------------------------------------------------------------------------
    def _has_token(self, token: str) -> bool:
        """Whether a credential header of the request is ``token`` (constant time)."""
        wanted = token.encode()
        found = False
        for name, value in self.headers.items():
            lower = name.lower()
            if lower == "authorization" and value.startswith("Bearer "):
                given = value[7:]
            elif lower in ("x-api-key", "api-key", "x-goog-api-key"):
                given = value
            else:
                continue
            found |= hmac.compare_digest(given.strip().encode("utf-8", "replace"), wanted)
        return found

    def _exchange(self) -> None:
        proxy = self.server.proxy
        seq = proxy.next_seq()
        if self.expired:
            self.close_connection = True
            proxy.report(self._bare(seq, 408, "request not received within the deadline"))
            return
        target = split_target(self.path)
        if target is None:
            self.close_connection = True
            self._refuse(
                seq, 403, "permission_error",
                f"not a proxy route: {self.path[:200]!r} (absolute URIs are refused; "
                "use /<route>/<path>)",
            )  # fmt: skip
            return
        route, rest = target
        upstream = proxy.allow.route(route)
        if upstream is None:
            self.close_connection = True
            self._refuse(seq, 403, "permission_error", f"route {route!r} is not on the allow-list")
            return
        if proxy.access_token is not None and not self._has_token(proxy.access_token):
            self.close_connection = True
            self._refuse(
                seq, 403, "permission_error",
                "the proxy's access token is missing or wrong: only the batch's agent may use "
                "this proxy", route=route,
            )  # fmt: skip
            return
        path = normalized_path(upstream.base_path + rest)
        if path is None or not path.startswith(upstream.prefix):
            self.close_connection = True
            self._refuse(
                seq, 403, "permission_error",
                f"path {rest[:200]!r} is outside {upstream.prefix!r} on the allow-listed "
                f"{upstream.host}", route=route,
            )  # fmt: skip
            return
        body = self._read_body(seq, route)
        if body is None:
            return
        if not proxy.watchdog.disarm(self):
            self.close_connection = True
            proxy.report(self._bare(seq, 408, "request not received within the deadline"))
            return
        headers = {name.lower(): value.strip() for name, value in self.headers.items()}
        try:
            keyed = _keyed(upstream.family, self.command, path, headers, body)
        except BadRequestError as exc:
            self.close_connection = True
            self._refuse(seq, 400, "invalid_request_error", str(exc), route=route)
            return
        sent, dropped = forwarded_headers(list(self.headers.items()), upstream)
        dropped += self.url_credentials
        base = Exchange(
            seq=seq,
            route=route,
            method=self.command,
            path=path,
            outcome="answered",
            status=200,
            family=upstream.family,
            api=keyed.api,
            upstream=f"{upstream.scheme}://{upstream.host}:{upstream.port}",
            key=keyed.key,
            model=keyed.model,
            stream=keyed.stream,
            parameters=keyed.parameters,
            request_sha256=hashlib.sha256(body).hexdigest(),
            dropped_credentials=dropped,
        )
        source: Source = "live"
        if proxy.journal.mode == "replay":
            if self._serve_journal(base, keyed):
                return
            if not proxy.journal.allow_live_miss:
                proxy.report(self._miss(base))
                return
            source = "live-miss"
        self._forward(replace(base, source=source), keyed, upstream, sent, body)

    def _bare(self, seq: int, status: int, reason: str) -> Exchange:
        return Exchange(
            seq=seq,
            route="-",
            method=self.command,
            path=self.path[:2000],
            outcome="refused",
            status=status,
            reason=reason,
        )

    def _read_body(self, seq: int, route: str) -> bytes | None:
        limits = self.server.proxy.limits
        if "transfer-encoding" in {name.lower() for name in self.headers}:
            self.close_connection = True
            self._refuse(
                seq, 411, "invalid_request_error", "send a Content-Length body", route=route
            )
            return None
        raw = self.headers.get_all("Content-Length") or []
        if len(raw) > 1 or (raw and not raw[0].strip().isdigit()):
            self.close_connection = True
            self._refuse(seq, 400, "invalid_request_error", "bad Content-Length", route=route)
            return None
        length = int(raw[0]) if raw else 0
        if length > limits.max_body:
            self.close_connection = True
            self._refuse(
                seq, 413, "request_too_large",
                f"request body of {length} bytes is over the {limits.max_body}-byte cap",
                route=route,
            )  # fmt: skip
            return None
        try:
            body = self.rfile.read(length) if length else b""
        except OSError:
            body = b""
        if len(body) != length:
            self.close_connection = True
            if not self.expired:
                self._refuse(seq, 400, "invalid_request_error", "incomplete body", route=route)
            else:
                self.server.proxy.report(self._bare(seq, 408, "request not received in time"))
            return None
        return body

    def _miss(self, base: Exchange) -> Exchange:
        message = (
            f"replay miss: no journaled answer for key {base.key} (route {base.route}, "
            f"model {base.model}, path {base.path})"
        )
        self._json_error(502, "replay_miss", message, base.key)
        return replace(base, outcome="replay-miss", status=502, reason=message)

    def _serve_journal(self, base: Exchange, keyed: KeyedRequest) -> bool:
        proxy = self.server.proxy
        try:
            with proxy.journal_lock:
                entry = proxy.journal.entry(keyed.key)
                text = None if entry is None else proxy.journal.read_blob(entry.response_sha256)
        except (JournalIntegrityError, ReplayError) as exc:
            self._json_error(502, "journal_integrity", f"journal refused: {exc}", keyed.key)
            proxy.report(replace(base, outcome="error", status=502, reason=str(exc)))
            return True
        if entry is None or text is None:
            return False
        data = text.encode("utf-8")
        self._start_answer(keyed, "journal", None if keyed.stream else len(data))
        ok = self._write_chunk(data, keyed.stream) and self._end_chunks(keyed.stream)
        proxy.report(
            replace(
                base,
                source="journal",
                request_sha256=entry.request_sha256,
                response_sha256=entry.response_sha256,
                journaled=True,
                usage=extract_usage(keyed.api, keyed.stream, data),
                response_bytes=len(data),
                outcome="answered" if ok else "error",
                reason=None if ok else "client went away",
            )
        )
        return True

    def _start_answer(self, keyed: KeyedRequest, source: str, length: int | None) -> None:
        self.send_response(200)
        kind = "text/event-stream; charset=utf-8" if keyed.event_stream else "application/json"
        self.send_header("Content-Type", kind)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
        else:
            self.send_header("Content-Length", str(length))
        self.send_header(SOURCE_HEADER, source)
        self.send_header(KEY_HEADER, keyed.key)
        self.end_headers()

    def _write_chunk(self, data: bytes, chunked: bool) -> bool:
        try:
            if chunked:
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self.wfile.write(data)
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def _end_chunks(self, chunked: bool) -> bool:
        return self._write_chunk(b"", False) if not chunked else self._raw(b"0\r\n\r\n")

    def _raw(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def _forward(
        self,
        base: Exchange,
        keyed: KeyedRequest,
        upstream: Upstream,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        proxy = self.server.proxy
        limits = proxy.limits
        if not proxy.slots.acquire(timeout=limits.queue_wait_s):
            self._json_error(503, "overloaded_error", "too many concurrent model exchanges")
            proxy.report(replace(base, outcome="error", status=503, reason="overloaded"))
            return
        try:
            self._forward_locked(base, keyed, upstream, headers, body)
        finally:
            proxy.slots.release()

    def _forward_locked(
        self,
        base: Exchange,
        keyed: KeyedRequest,
        upstream: Upstream,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        proxy = self.server.proxy
        limits = proxy.limits
        started = time.monotonic()
        connection: http.client.HTTPConnection
        if upstream.scheme == "https":
            connection = http.client.HTTPSConnection(
                upstream.host, upstream.port, timeout=limits.connect_timeout_s,
                context=ssl.create_default_context(),
            )  # fmt: skip
        else:
            connection = http.client.HTTPConnection(
                upstream.host, upstream.port, timeout=limits.connect_timeout_s
            )
        try:
            try:
                connection.putrequest(self.command, base.path, skip_accept_encoding=True)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.putheader("Content-Length", str(len(body)))
                connection.endheaders(body)
                if connection.sock is not None:
                    connection.sock.settimeout(limits.idle_timeout_s)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                reason = f"upstream {upstream.host}:{upstream.port} failed: {exc}"
                self._json_error(502, "upstream_error", reason)
                proxy.report(replace(base, outcome="error", status=502, reason=reason))
                return
            self._relay(base, keyed, response, started, body)
        finally:
            connection.close()

    def _relay(
        self,
        base: Exchange,
        keyed: KeyedRequest,
        response: http.client.HTTPResponse,
        started: float,
        body: bytes,
    ) -> None:
        proxy = self.server.proxy
        limits = proxy.limits
        streaming = response.status == 200 and keyed.stream
        kept: list[bytes] = []
        size = 0
        failure: str | None = None
        if streaming:
            self._start_answer(keyed, base.source or "live", None)
        try:
            while True:
                data = response.read1(_CHUNK)
                if not data:
                    break
                size += len(data)
                if size > limits.max_response:
                    failure = f"response over the {limits.max_response}-byte cap"
                    break
                if time.monotonic() - started > limits.exchange_deadline_s:
                    failure = "exchange deadline exceeded"
                    break
                kept.append(data)
                if streaming and not self._write_chunk(data, True):
                    failure = "client went away"
                    break
        except (OSError, http.client.HTTPException) as exc:
            failure = f"upstream read failed: {exc}"
        data = b"".join(kept)
        if streaming:
            if failure is None:
                self._end_chunks(True)
            else:
                self.close_connection = True  # an unterminated chunked body: the client sees it
        elif failure is not None:
            self._json_error(502, "upstream_error", failure)
        else:
            self._passthrough(keyed, base.source or "live", response, data)
        status = response.status if failure is None else (200 if streaming else 502)
        result = replace(
            base,
            status=status,
            response_bytes=len(data),
            response_sha256=hashlib.sha256(data).hexdigest(),
            usage=extract_usage(keyed.api, keyed.stream, data) if response.status == 200 else None,
            outcome="answered" if failure is None else "error",
            reason=failure if failure is not None else (
                None if response.status == 200 else f"upstream answered {response.status}"
            ),
        )  # fmt: skip
        if failure is None and response.status == 200:
            result = self._journal(result, keyed, body, data)
        proxy.report(result)

    def _passthrough(
        self, keyed: KeyedRequest, source: str, response: http.client.HTTPResponse, data: bytes
    ) -> None:
        if response.status == 200:
            self._start_answer(keyed, source, len(data))
            self._write_chunk(data, False)
            return
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.getheader("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            for name in ("retry-after", "x-should-retry"):
                value = response.getheader(name)
                if value is not None:
                    self.send_header(name, value)
            self.send_header(SOURCE_HEADER, source)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _journal(self, result: Exchange, keyed: KeyedRequest, body: bytes, data: bytes) -> Exchange:
        proxy = self.server.proxy
        try:
            response_text = data.decode("utf-8")
            request_text = body.decode("utf-8")  # strict JSON parsing checked it is UTF-8
        except UnicodeDecodeError:
            return replace(result, reason="response is not UTF-8: not journaled")
        try:
            with proxy.journal_lock:
                entry = proxy.journal.record(
                    keyed.key, keyed.family, keyed.model, request_text, response_text
                )
        except (OSError, ReplayError, ValueError) as exc:
            return replace(result, reason=f"journal write failed: {exc}")
        return replace(
            result,
            journaled=True,
            request_sha256=entry.request_sha256,
            response_sha256=entry.response_sha256,
        )
