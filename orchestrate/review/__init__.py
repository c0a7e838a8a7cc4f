"""The action review gate's runtime side (issue 13 §5; docs/spec/review.md).

``protocol`` is the wire format of the per-batch Unix socket (shared with the hook client,
``harness.cli_hook``); ``desk`` owns the sockets and answers requests from the run loop's tick
with the pure rule ``harness.verify.rules.review``, recording ``action.review`` before every
answer; ``hook`` is what an adapter needs to wire an agent CLI's pre-tool hook to it.
"""

from __future__ import annotations

from .desk import DEFAULT_WAIT_S, ReviewDesk, review_tick
from .hook import hook_argv, hook_timeout_s
from .protocol import ENV_SOCKET, ENV_WAIT, SANDBOX_SOCKET

__all__ = [
    "DEFAULT_WAIT_S",
    "ENV_SOCKET",
    "ENV_WAIT",
    "SANDBOX_SOCKET",
    "ReviewDesk",
    "hook_argv",
    "hook_timeout_s",
    "review_tick",
]
