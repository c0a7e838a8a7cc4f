"""The recording model proxy (issue 18): the agent's only way out, every answer journaled.

``upstream`` is the allow-list and the header policy, ``exchange`` the replay key, usage and
the exchange record, ``server`` the proxy itself. See docs/spec/proxy.md and decision 0045.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .exchange import (
        BadRequestError,
        Exchange,
        Usage,
        extract_usage,
        keyed_request,
        recompute_key,
    )
    from .server import KEY_HEADER, SOURCE_HEADER, Limits, ProxyServer
    from .upstream import CREDENTIAL_HEADERS, AllowList, Upstream

# Loaded on first use (PEP 562): the in-sandbox bridge (``-m harness.orchestrate.proxy.bridge``,
# standard library only) runs below every proxied agent, and importing the server, the HTTP
# modules and the key code for it cost 0.15 s of each agent's start.
_HOMES = {
    "BadRequestError": "exchange",
    "Exchange": "exchange",
    "Usage": "exchange",
    "extract_usage": "exchange",
    "keyed_request": "exchange",
    "recompute_key": "exchange",
    "KEY_HEADER": "server",
    "SOURCE_HEADER": "server",
    "Limits": "server",
    "ProxyServer": "server",
    "CREDENTIAL_HEADERS": "upstream",
    "AllowList": "upstream",
    "Upstream": "upstream",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "CREDENTIAL_HEADERS",
    "KEY_HEADER",
    "SOURCE_HEADER",
    "AllowList",
    "BadRequestError",
    "Exchange",
    "Limits",
    "ProxyServer",
    "Upstream",
    "Usage",
    "extract_usage",
    "keyed_request",
    "recompute_key",
]
