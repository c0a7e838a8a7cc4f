"""Hand-built evidence with the event bus records the runtime would add (``with_events``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.orchestrate.events import derive

Row = tuple[str, str, dict[str, Any]]


def with_events(rows: Sequence[Row]) -> list[Row]:
    """``rows`` (store, kind, body, in store order) plus the ``events`` records the runtime's
    bus publishes for their audit records (``orchestrate.events.derive``, the bus's own
    code): a message per cause, each handled by its first answer. Rows that already carry
    events records are returned unchanged (a test that tampers with the bus itself)."""
    if any(store == "events" for store, _, _ in rows):
        return list(rows)
    audit = [(kind, body) for store, kind, body in rows if store == "audit"]
    events = derive((seq, kind, body) for seq, (kind, body) in enumerate(audit))
    return [*rows, *(("events", kind, dict(body)) for kind, body in events)]
