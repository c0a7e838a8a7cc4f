"""Record clocks: wall time, or a logical clock for runs that must replay byte for byte."""

from __future__ import annotations

from harness.receipts.store import utc_now


class LogicalClock:
    """Deterministic record times: one microsecond per reading from a fixed epoch.

    Replayed runs use it so that the same plan and the same journaled model answers give the
    same records, hence the same Merkle roots (times are part of every record).
    """

    def __init__(self, start: str = "2026-01-01T00:00:00") -> None:
        self.start = start
        self.tick = 0

    def __call__(self) -> str:
        self.tick += 1
        seconds, micros = divmod(self.tick, 1_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        date, _, _ = self.start.partition("T")
        return f"{date}T{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}Z"

    def peek(self) -> str:
        """The last reading, without advancing: for a look at the time that records nothing
        (the event bus's tick), so record times never depend on how often the loop ticks."""
        self.tick -= 1
        return self()


def wall_clock() -> str:
    return utc_now()
