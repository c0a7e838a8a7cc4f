"""A proxied batch: its own recording proxy, the agent's variables, and what is recorded.

A real CLI calls its model itself; for a *proxied* adapter (``harness.orchestrate.modelroutes``)
the runtime starts one ``ProxyServer`` per batch (so every exchange belongs to exactly one
batch) with the batch's routes as the allow-list and the run's journal in the run's mode, and
points the agent at it (docs/spec/runtime.md §11a, decision 0047):

* sandboxed without network (bwrap ``--unshare-net``): the proxy listens on ``<io>/model.sock``
  and the agent runs below the bridge (``harness.orchestrate.proxy.bridge``), which listens on
  ``127.0.0.1:8377`` inside the sandbox's own network namespace: the agent's only way out;
* otherwise (no sandbox, or a batch granted the network): the proxy listens on
  ``127.0.0.1:<any free port>``.

The agent's environment holds the base URL of each family's first route, a placeholder key
(``harness-proxy`` behind the bridge; on a loopback port a fresh random access token, the only
credential that proxy admits, so no other local process can spend the operator's key; either
way the proxy drops it and injects the operator's key, read from the route's ``key_env`` in
the runtime's environment), and the proxy variables (``HTTP_PROXY`` ... pointing
at the proxy, so a client that honours them sends off-list requests there, to be refused and
recorded; ``NO_PROXY`` names the loopback host only, so the base URLs themselves are reached
directly and not as absolute-URI proxy requests, which the proxy refuses).

After the agent exits the proxy is drained (``wait_idle``) and closed; retirement writes one
``model.exchange`` (replay store, ``seq`` order) per exchange and one ``model.source`` (audit
store, before ``agent.exit``) per answered one; the batch's token usage is the exchanges' sum.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..modelroutes import PLACEHOLDER_KEY, ModelRoute, resolve
from ..proxy import AllowList, Exchange, ProxyServer, Upstream
from ..replay import Journal
from ..usage import MAX_FIGURE, Usage, UsageMeter

if TYPE_CHECKING:
    from .core import RunCore

__all__ = [
    "BRIDGE_PORT",
    "BatchProxy",
    "ProxiedMeter",
    "agent_env",
    "exchange_body",
    "exchange_tokens",
    "first_miss",
    "open_proxy",
    "source_body",
]

BRIDGE_PORT: Final = 8377
"""The port the in-sandbox bridge listens on (the sandbox's own loopback)."""
SOCKET_NAME: Final = "model.sock"
LOOPBACK: Final = "127.0.0.1"
DRAIN_S: Final = 10.0
"""How long a finished agent's exchanges in flight may take to be reported."""


@dataclass
class BatchProxy:
    """One batch's proxy, from before the spawn until its agent exits."""

    server: ProxyServer
    routes: tuple[ModelRoute, ...]
    bridged: bool
    socket: Path | None
    env: dict[str, str]
    exchanges: list[Exchange] = field(default_factory=list)
    closed: bool = False
    bridge_env: dict[str, str] | None = None
    """A remote batch's (Ray executor): the agent's variables behind a worker's bridge
    (base URLs on ``127.0.0.1:BRIDGE_PORT``, the access token as key); ``env`` is then the
    direct one (base URLs on the proxy's ``host:port``)."""

    @property
    def address(self) -> str:
        """``host:port`` of a TCP proxy (what a worker's relay connects to)."""
        return f"{self.server.host}:{self.server.port}"

    @property
    def egress(self) -> list[dict[str, object]]:
        """The allow-list as the profile records it (``AllowList.describe()``, by route)."""
        return self.server.allow.describe()

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The agent's argv, below the bridge when sandboxed without network."""
        if not self.bridged:
            return list(argv)
        from ..proxy.bridge import bridge_argv

        assert self.socket is not None
        return bridge_argv(os.path.abspath(sys.executable), self.socket, BRIDGE_PORT, argv)

    def stop(self) -> list[Exchange]:
        """After the agent exited: wait for exchanges in flight, close, keep the records."""
        if not self.closed:
            self.closed = True
            self.server.wait_idle(DRAIN_S)
            self.server.close()
            self.exchanges = self.server.exchanges()
        return self.exchanges


def _journal(run: RunCore) -> Journal:
    """A journal object of the batch's own on the run's journal folder (the appends of
    several proxies and processes are serialised by the journal's lock on its index)."""
    if run.journal is not None:
        return Journal(
            run.journal.directory, run.journal.mode, allow_live_miss=run.journal.allow_live_miss
        )
    return Journal(run.state_dir / "journals" / run.run_id, "live")


def upstream_of(route: ModelRoute, host_env: Mapping[str, str]) -> Upstream:
    """The proxy's upstream for a route: its origin, its path prefix, and the operator's key
    from ``key_env`` (unset or empty: no credential is injected)."""
    key = host_env.get(route.key_env) if route.key_env else None
    return Upstream(
        route.route, route.family, route.origin, credential=key or None, path_prefix=route.prefix
    )


SECRET_MARKERS: Final = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
"""An adapter variable whose name holds one of these is a credential: never passed to a
proxied agent (the proxy holds the key)."""


ENDPOINT_MARKERS: Final = ("BASE_URL", "API_BASE", "_HOST", "PROXY")
"""Endpoint variables are the proxy's to set: never passed through from the runtime."""


def is_secret_name(name: str) -> bool:
    """A credential, or an endpoint (the runtime's would bypass the proxy)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS + ENDPOINT_MARKERS)


def agent_env(
    routes: Sequence[ModelRoute],
    port: int,
    *,
    adapter: str = "",
    passthrough: Mapping[str, str] | None = None,
    key: str = PLACEHOLDER_KEY,
    host: str = LOOPBACK,
) -> dict[str, str]:
    """The proxied agent's variables (no secret of the operator's in any of them).

    ``host``: where the proxy listens (a Ray worker's agent reaches the coordinator's proxy
    at its network address; ``NO_PROXY`` then names it too).

    ``key``: the placeholder key the agent's SDKs send; on a loopback port the proxy's
    access token (it admits only requests that carry it).

    ``passthrough``: the adapter's own variables that are configuration, not credentials
    (``GOOSE_PROVIDER``, ``GOOSE_MODEL``), as the runtime has them; the proxy's variables
    win over them. Per adapter, the names its CLI reads the endpoint from besides the SDKs'
    (assumed, see the adapter modules): aider (litellm) ``ANTHROPIC_API_BASE`` and
    ``OPENAI_API_BASE``; goose ``ANTHROPIC_HOST`` / ``OPENAI_HOST``, URLs it joins its API
    paths to (``v1/messages``, ``v1/chat/completions``): the route's URL with a trailing
    ``/`` and without the base path's final ``/v1``.
    """
    listen = host  # (the loop below reuses the name ``host`` for goose's variables)
    proxy = f"http://{listen}:{port}"
    env: dict[str, str] = {
        name: value for name, value in (passthrough or {}).items() if not is_secret_name(name)
    }
    seen: set[str] = set()
    for route in routes:
        if route.family in seen:
            continue
        seen.add(route.family)
        base = f"{proxy}/{route.route}{route.base_path}"
        host = f"{proxy}/{route.route}{route.base_path.removesuffix('/v1')}/"
        if route.family == "anthropic":
            env["ANTHROPIC_BASE_URL"] = base
            env["ANTHROPIC_API_KEY"] = key
            if adapter == "aider":
                env["ANTHROPIC_API_BASE"] = base
            elif adapter == "goose":
                env["ANTHROPIC_HOST"] = host
        elif route.family == "google":
            # not a documented flag: the Gemini CLI's source reads it (contentGenerator.ts)
            # and makes it the @google/genai SDK's base URL
            env["GOOGLE_GEMINI_BASE_URL"] = base
            env["GEMINI_API_KEY"] = key
        else:
            env["OPENAI_BASE_URL"] = base
            env["OPENAI_API_KEY"] = env["CODEX_API_KEY"] = key
            if adapter == "aider":
                env["OPENAI_API_BASE"] = base
            elif adapter == "goose":
                env["OPENAI_HOST"] = host
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env[name] = proxy
    direct = f"{LOOPBACK},localhost" if listen == LOOPBACK else f"{listen},{LOOPBACK},localhost"
    env["NO_PROXY"] = env["no_proxy"] = direct
    return env


def open_proxy(
    run: RunCore,
    io: Path,
    route_names: Sequence[str],
    *,
    bridged: bool,
    adapter: str = "",
    adapter_env: Sequence[str] = (),
    remote_host: str | None = None,
) -> BatchProxy:
    """Start the batch's proxy (serving before the spawn is recorded). ``adapter_env``: the
    adapter's variable names; those that are not credentials pass through (with their
    runtime values), the credentials never. ``remote_host``: a batch on a remote executor
    (runtime.md §18): TCP on that address with an access token, never bridged here, and
    ``bridge_env`` for a worker that runs the agent behind its bridge and relay."""
    routes = tuple(
        found for found in (resolve(name, run.plan.models) for name in route_names) if found
    )
    allow = AllowList([upstream_of(route, run.sandbox.host_env) for route in routes])
    journal = _journal(run)
    token = None
    if bridged:  # a 0600 socket only this sandbox's bridge reaches: the placeholder will do
        path = io / SOCKET_NAME
        server = ProxyServer(allow, journal, unix_path=path)
        port = BRIDGE_PORT
    else:  # a loopback port any local process can reach: admit only the agent's token
        path = None
        token = f"{PLACEHOLDER_KEY}-{secrets.token_hex(16)}"
        server = ProxyServer(allow, journal, access_token=token, host=remote_host or LOOPBACK)
        port = server.port
    server.start()
    host = run.sandbox.host_env
    passthrough = {name: host[name] for name in adapter_env if name in host}
    key = token or PLACEHOLDER_KEY
    env = agent_env(
        routes, port, adapter=adapter, passthrough=passthrough, key=key,
        host=remote_host or LOOPBACK,
    )  # fmt: skip
    bridge_env = None
    if remote_host is not None:
        bridge_env = agent_env(
            routes, BRIDGE_PORT, adapter=adapter, passthrough=passthrough, key=key
        )
    return BatchProxy(server, routes, bridged, path, env, bridge_env=bridge_env)


# ---- records ---------------------------------------------------------------------------------


def exchange_body(batch: str, exchange: Exchange) -> dict[str, Any]:
    """The ``model.exchange`` record (replay store): what the proxy observed, never its
    ``source`` (that differs between a run and its replay: ``model.source``, audit store)."""
    return {
        "batch": batch,
        "seq": exchange.seq,
        "route": exchange.route,
        "method": exchange.method,
        "path": exchange.path,
        "outcome": exchange.outcome,
        "status": exchange.status,
        "family": exchange.family,
        "api": exchange.api,
        "upstream": exchange.upstream,
        "key": exchange.key,
        "model": exchange.model,
        "stream": exchange.stream,
        "parameters": dict(exchange.parameters) if exchange.parameters is not None else None,
        "request_sha256": exchange.request_sha256,
        "response_sha256": exchange.response_sha256,
        "journaled": exchange.journaled,
        "usage": exchange.usage.body() if exchange.usage is not None else None,
        "dropped_credentials": list(exchange.dropped_credentials),
        "reason": exchange.reason,
        "response_bytes": exchange.response_bytes,
    }


def source_body(batch: str, exchange: Exchange) -> dict[str, Any]:
    """The ``model.source`` record (audit store) of an answered exchange."""
    return {"batch": batch, "seq": exchange.seq, "source": exchange.source}


def exchange_tokens(exchanges: Sequence[Exchange]) -> tuple[int, int]:
    """(input, output) tokens the API reported over a batch's answered exchanges.

    Anthropic's ``input_tokens`` excludes cache traffic, so its ``cache_read`` and
    ``cache_write`` are added (as ``harness.orchestrate.usage`` does for Claude's own
    report); OpenAI's and Google's input already includes its cached part (Google's output
    its thinking tokens: ``proxy.exchange``). Saturates at 2^53 - 1.
    """
    total_in = total_out = 0
    for exchange in exchanges:
        usage = exchange.usage
        if exchange.outcome != "answered" or usage is None:
            continue
        figure = usage.input_tokens or 0
        if exchange.family == "anthropic":
            figure += (usage.cache_read or 0) + (usage.cache_write or 0)
        total_in += figure
        total_out += usage.output_tokens or 0
    return min(total_in, MAX_FIGURE), min(total_out, MAX_FIGURE)


def first_miss(exchanges: Sequence[Exchange]) -> Exchange | None:
    """The first exchange strict replay could not answer (it aborts the run)."""
    return next((e for e in exchanges if e.outcome == "replay-miss"), None)


class ProxiedMeter(UsageMeter):
    """A proxied batch's meter: tokens from the proxy's exchanges so far (what the API
    reported, never the agent), cost from the adapter's own report when it has one (the
    proxy sees no prices)."""

    def __init__(self, proxy: BatchProxy, adapter: UsageMeter | None) -> None:
        super().__init__()
        self.proxy = proxy
        self.adapter = adapter

    def feed(self, stream: str, chunk: bytes) -> None:
        if self.adapter is not None:
            self.adapter.feed(stream, chunk)

    def close(self) -> None:
        if self.adapter is not None:
            self.adapter.close()

    def usage(self) -> Usage:
        exchanges = self.proxy.exchanges if self.proxy.closed else self.proxy.server.exchanges()
        tokens_in, tokens_out = exchange_tokens(exchanges)
        claimed = self.adapter.usage() if self.adapter is not None else None
        cost = claimed.cost_micros if claimed is not None else None
        return Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_micros=cost)
