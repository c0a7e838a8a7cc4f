"""Sleep until one of many supervised processes needs a step (one selector, no threads)."""

from __future__ import annotations

import selectors
import time
from collections.abc import Sequence

from .process import Supervised

__all__ = ["wait_any"]


def wait_any(procs: Sequence[Supervised], timeout_s: float) -> None:
    """Block until one of ``procs`` has I/O or has exited, one of their limit or probe
    deadlines falls due, or ``timeout_s`` passed: one selector over all of them, so the loop
    neither spins nor oversleeps a limit. Returns at once when none of them is still running
    (done processes are ignored; their outcome is already known to the caller)."""
    live = list({id(p): p for p in procs if not p.done}.values())  # each once
    if not live:
        return
    now = time.monotonic()
    until = now + max(0.0, timeout_s)
    for p in live:
        until = min(until, p.wake_at(now))
    wait = max(0.0, until - now)
    with selectors.DefaultSelector() as sel:
        for p in live:
            for fd, events in p.watch():
                sel.register(fd, events)
        if sel.get_map():
            sel.select(wait)
        elif wait > 0:
            time.sleep(wait)
