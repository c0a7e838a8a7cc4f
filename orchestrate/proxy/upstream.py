"""Where the proxy may forward: the upstream allow-list and the per-family header policy.

The proxy is the agent's only way out of its sandbox, so what it forwards to is a recorded,
closed list fixed when it starts: each ``Upstream`` is one route prefix on the proxy
(``/<route>/...``) bound to one endpoint (scheme, host, port, path prefix) of one API family.
A request whose route is not listed, whose path leaves the upstream's prefix, or that asks the
proxy to tunnel or forward elsewhere (``CONNECT``, an absolute URI) is refused: nothing but
the listed model endpoints is reachable (docs/spec/proxy.md §2).

Credentials never come from the agent: the proxy drops every credential header a request
carries (and counts it), and the credential query parameter of the Gemini API (``?key=``,
``modelkey.without_url_credentials``) before the path is keyed, forwarded or recorded, and
sets the upstream's own (``x-api-key`` for Anthropic, ``Authorization: Bearer`` for OpenAI,
``x-goog-api-key`` for Google) from what it was given at start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from harness.verify.modelkey import FAMILIES, Family

DEFAULT_PREFIX: Final[dict[Family, str]] = {
    "anthropic": "/v1/",
    "openai": "/v1/",
    "google": "/v1beta/",
}
"""The path prefix of an upstream whose base has no path: the family's API version (the
Gemini API's SDK default is ``v1beta``)."""


def forwarded_prefix(family: Family, base: str, path_prefix: str | None) -> str:
    """The path prefix every forwarded path must start with: ``path_prefix`` when given, else
    the base's path + ``/``, else the family's ``DEFAULT_PREFIX`` (one rule for the plan's
    routes and the proxy's upstreams)."""
    if path_prefix is not None:
        return path_prefix
    base_path = urlsplit(base).path.rstrip("/")
    return (base_path + "/") if base_path else DEFAULT_PREFIX[family]


_ROUTE: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")

# Request headers that carry a credential: always dropped from what the agent sends.
CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"}
)
# Hop-by-hop and framing headers the proxy sets itself (RFC 9110 §7.6.1), plus those that
# would make the recorded bytes depend on transport (compression) or name the proxy.
_NOT_FORWARDED: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "expect",
    }
)
# The replay key's headers and unkeyed body members: harness.verify.modelkey (shared with
# the verifier, which recomputes every key).


@dataclass(frozen=True)
class Upstream:
    """One allowed model endpoint, reached through the proxy route ``/<route>``.

    ``base`` is ``scheme://host[:port][/prefix]``; a request ``/<route>/<rest>`` goes to
    ``<prefix>/<rest>`` on that host, and only if that path stays under ``path_prefix``
    (default: the base's own path, or ``/v1/``).
    """

    route: str
    family: Family
    base: str
    credential: str | None = field(default=None, repr=False)
    path_prefix: str | None = None

    def __post_init__(self) -> None:
        if not _ROUTE.fullmatch(self.route):
            raise ValueError(f"route {self.route!r}: lowercase letters, digits and '-'")
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not one of {', '.join(FAMILIES)}")
        parts = urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream base {self.base!r} must be an http(s) URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"upstream base {self.base!r} must not hold a query or userinfo")
        if self.credential is not None and (
            not self.credential or any(c in self.credential for c in "\r\n\0")
        ):
            raise ValueError("an upstream credential must be one non-empty header value")

    @property
    def scheme(self) -> str:
        return urlsplit(self.base).scheme

    @property
    def host(self) -> str:
        host = urlsplit(self.base).hostname
        assert host is not None  # checked in __post_init__
        return host

    @property
    def port(self) -> int:
        port = urlsplit(self.base).port
        return port if port is not None else (443 if self.scheme == "https" else 80)

    @property
    def base_path(self) -> str:
        return urlsplit(self.base).path.rstrip("/")

    @property
    def prefix(self) -> str:
        """The path prefix every forwarded path must start with (``forwarded_prefix``)."""
        return forwarded_prefix(self.family, self.base, self.path_prefix)

    def describe(self) -> dict[str, object]:
        """The recordable allow-list entry (never the credential)."""
        return {
            "route": self.route,
            "family": self.family,
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "path_prefix": self.prefix,
            "credential": self.credential is not None,
        }

    def credential_header(self) -> tuple[str, str] | None:
        if self.credential is None:
            return None
        if self.family == "anthropic":
            return ("x-api-key", self.credential)
        if self.family == "google":
            return ("x-goog-api-key", self.credential)
        return ("Authorization", f"Bearer {self.credential}")


class AllowList:
    """The upstreams a proxy may forward to, by route (fixed at start)."""

    def __init__(self, upstreams: list[Upstream]) -> None:
        self._by_route: dict[str, Upstream] = {}
        for upstream in upstreams:
            if upstream.route in self._by_route:
                raise ValueError(f"route {upstream.route!r} is listed twice")
            self._by_route[upstream.route] = upstream

    def route(self, name: str) -> Upstream | None:
        return self._by_route.get(name)

    def describe(self) -> list[dict[str, object]]:
        return [self._by_route[name].describe() for name in sorted(self._by_route)]


def split_target(target: str) -> tuple[str, str] | None:
    """``/<route>/<rest>`` as (route, ``/<rest>`` with its query), or None."""
    if not target.startswith("/"):
        return None
    route, slash, rest = target[1:].partition("/")
    if not route:
        return None
    return route, "/" + rest if slash else "/"


def normalized_path(path: str) -> str | None:
    """``path`` (query kept) if it holds no dot segment, encoded slash or control byte."""
    bare = path.partition("?")[0]
    if any(segment in (".", "..") for segment in bare.split("/")):
        return None
    lowered = bare.lower()
    if "%2f" in lowered or "%2e" in lowered or "%5c" in lowered or "\\" in bare:
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in path):
        return None
    return path


def forwarded_headers(
    headers: list[tuple[str, str]], upstream: Upstream
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """The headers sent upstream and the names of the credential headers dropped."""
    out: list[tuple[str, str]] = []
    dropped: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower in CREDENTIAL_HEADERS:
            dropped.append(lower)
        elif lower not in _NOT_FORWARDED:
            out.append((name, value))
    out.append(("Accept-Encoding", "identity"))
    credential = upstream.credential_header()
    if credential is not None:
        out.append(credential)
    return out, tuple(dropped)
