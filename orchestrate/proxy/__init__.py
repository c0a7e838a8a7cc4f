"""The recording model proxy (issue 18): the agent's only way out, every answer journaled.

``upstream`` is the allow-list and the header policy, ``exchange`` the replay key, usage and
the exchange record, ``server`` the proxy itself. See docs/spec/proxy.md and decision 0045.
"""

from __future__ import annotations

from .exchange import BadRequestError, Exchange, Usage, extract_usage, keyed_request, recompute_key
from .server import KEY_HEADER, SOURCE_HEADER, Limits, ProxyServer
from .upstream import CREDENTIAL_HEADERS, AllowList, Upstream

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
