"""``harness dashboard``: a live, read-only view of runs built on their evidence stores.

What it shows is read from the stores the verifier checks (``.harness/runs/<run>/*.jsonl``),
tailed incrementally; the only thing it may write is an operator command on a run's control
bus (``--allow-control``), through ``harness.orchestrate.state.request_command``: the runtime
answers it with a receipt, the dashboard never changes a run's state itself
(docs/spec/dashboard.md, decision 0044).

This package imports Starlette; nothing else of ours imports it at module level, so the
``dashboard`` extra stays optional. ``create_app`` and ``serve`` are imported lazily here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .server import serve

__all__ = ["create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "serve":
        from .server import serve

        return serve
    raise AttributeError(name)
