"""The dashboard's request checks, as one ASGI middleware in front of every route.

In order (docs/spec/dashboard.md "Security"):

1. **Host** (DNS rebinding): the ``Host`` header must name the bound host or a loopback name
   (``localhost``, ``127.0.0.1``, ``[::1]``), with the bound port once it is known; else
   421 (400 when absent or malformed). A page served to a rebound name never reaches a route.
2. **Token** (when one is set; required for any non-loopback bind): ``Authorization: Bearer
   T`` or the ``token`` cookie, compared with ``hmac.compare_digest``; ``?token=T`` once sets
   the cookie (HttpOnly, SameSite=Strict) and redirects to the same URL without it, so the
   token leaves the address bar and never appears in a Referer. Else 401.
3. **Bodies**: a request with a body must be ``application/json`` (415) of at most 1 MiB by
   its ``Content-Length`` (413); the route reading it enforces the same bound while reading.
4. **Headers** on every response: a Content-Security-Policy with no inline script or style
   (``script-src 'self'``), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy:
   no-referrer``, ``X-Frame-Options: DENY``, ``Cache-Control: no-store``.

CSRF (the per-server token a control POST must echo in ``X-CSRF-Token``) is checked by the
route itself (app.py), after these.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY: Final = 1 << 20
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
COOKIE: Final = "token"
TOKEN_RE: Final = re.compile(r"[A-Za-z0-9._~-]{16,256}")
"""What a token may be: 16-256 URL- and cookie-safe characters (``secrets.token_urlsafe``)."""
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)


def is_loopback(host: str) -> bool:
    """True for loopback names and addresses (``localhost``, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` -> (lower-case name without brackets, port)."""
    value = value.strip()
    if not value or any(c in value for c in "/\\@ \t?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or = value.rpartition(":")
        if not sep:
            name, port_text = value, None
        else:
            port_text = port_text_or
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        return name.lower(), int(port_text)
    return name.lower(), None


class Access:
    """Who may talk to the dashboard: the bound host and port, and the token (if any).
    ``port`` is set by the server once its socket is bound (``--port 0``)."""

    def __init__(self, *, host: str, port: int | None, token: str | None) -> None:
        self.host = host.strip("[]").lower()
        self.port = port
        self.token = token

    def host_allowed(self, value: str | None) -> int:
        """0 when ``value`` is an allowed Host header, else the status to answer."""
        if value is None:
            return 400
        parsed = split_host(value)
        if parsed is None:
            return 400
        name, port = parsed
        if self.port is not None and port is not None and port != self.port:
            return 421
        if name in LOOPBACK_NAMES or name == self.host:
            return 0
        if is_wildcard(self.host) and self.token is not None:
            return 0  # a wildcard bind has no one name; the token is what protects it
        return 421


class Guard:
    """The checks above around ``app``."""

    def __init__(self, app: ASGIApp, *, access: Access) -> None:
        self.app = app
        self.access = access

    @property
    def token(self) -> str | None:
        return self.access.token

    def _token_ok(self, headers: dict[bytes, bytes]) -> bool:
        assert self.token is not None
        wanted = self.token.encode()
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer " and hmac.compare_digest(auth[7:].strip(), wanted):
            return True
        try:
            cookie = SimpleCookie(headers.get(b"cookie", b"").decode("latin-1"))
        except CookieError:
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), wanted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route speaks it: refuse before any check
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(bytes(key).lower(), bytes(value))
        raw_host = headers.get(b"host")
        refused = self.access.host_allowed(
            raw_host.decode("latin-1") if raw_host is not None else None
        )
        if refused:
            await _plain(send, refused, "Host not allowed (the dashboard only answers to its own "
                         "address: DNS rebinding protection)")  # fmt: skip
            return
        if self.token is not None and not self._token_ok(headers):
            query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
            given = [v for k, v in query if k == "token"]
            if given and hmac.compare_digest(given[0].encode(), self.token.encode()):
                rest = urlencode([(k, v) for k, v in query if k != "token"])
                # one leading slash: "//host" would be a redirect to another site
                path = "/" + quote(scope.get("path", "/")).lstrip("/")
                location = path + (f"?{rest}" if rest else "")
                await _redirect(send, location, self.token)
                return
            await _plain(send, 401, "a token is required (Authorization: Bearer, or ?token=)")
            return
        if scope["method"] not in ("GET", "HEAD"):
            length = headers.get(b"content-length")
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
                await _plain(send, 413, "request body over 1 MiB")
                return
            if kind != b"application/json":
                await _plain(send, 415, "request bodies must be application/json")
                return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, secured)


async def _plain(send: Send, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": text.encode() + b"\n"})


async def _redirect(send: Send, location: str, token: str) -> None:
    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode("latin-1", "replace")),
                (b"set-cookie", cookie.encode("latin-1")),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
