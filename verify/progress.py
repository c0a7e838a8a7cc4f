"""Progress of a long verification, on standard error (issue 15 §3: every pass reports).

A verification reads its input once, forward: the share of the input read so far is the
share of the work done, so the percentage and the time left come from the input's position
against its size (the compressed size for ``.tar.gz``), whatever the pass. The passes after
the last byte (the runs' semantics, the receipts, trust) are named as they start. On a
terminal one line is rewritten at most ten times a second; otherwise (a CI log) a plain line
is written every ``interval_s`` seconds, whatever the pass, so a log is never silent for
longer. Nothing here changes a result: progress is display only, and a second verifier may
show it differently (docs/spec/verifier.md §2).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Final, Protocol, TextIO

from . import textsafe

TTY_EVERY_S: Final = 0.1
"""The least time between two rewrites of the terminal line."""
LOG_EVERY_S: Final = 5.0
"""The least time between two plain lines (not a terminal)."""


class ProgressSink(Protocol):
    """What the verifier calls as it works (``verify_bundle(progress=...)``)."""

    def begin(self, size: int | None, position: Callable[[], int]) -> None:
        """The input's size in bytes (None when unknown: a stream) and how far it is read."""

    def step(self, stage: str, detail: str = "", done: int | None = None,
             total: int | None = None) -> None:  # fmt: skip
        """Working on ``stage`` (e.g. ``records``), ``detail`` (a member name), ``done`` of
        ``total`` items of it when counted."""

    def end(self) -> None:
        """The verification is over (clears the terminal line)."""


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _count(done: int | None, total: int | None) -> str:
    if done is None:
        return ""
    return f" {done:,}" + (f"/{total:,}" if total is not None else "")


class Progress:
    """The command line's progress display (a ``ProgressSink``).

    ``step`` only notes where the work is (the hot path pays an assignment); a daemon thread
    started by ``begin`` draws it (``tick``), so a pass that makes no step for a while (the
    semantics of a large run) still shows, and the time left keeps moving.
    """

    def __init__(
        self,
        enabled: bool,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        interval_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        ticker: bool = True,
    ) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self.clock = clock
        self.ticker = ticker
        self.size: int | None = None
        self.position: Callable[[], int] = lambda: 0
        self.started = clock()
        self.shown = clock()  # a log's first line comes after one interval, not at once
        self.current: tuple[str, str, int | None, int | None] | None = None
        self.drawn = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def begin(self, size: int | None, position: Callable[[], int]) -> None:
        self.size = size if size else None
        self.position = position
        self.started = self.shown = self.clock()
        if self.enabled and self.ticker and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        every = TTY_EVERY_S if self.tty else min(self.interval_s, 1.0)
        while not self._stop.wait(every):
            self.tick()

    def _share(self) -> float | None:
        if self.size is None:
            return None
        try:
            read = self.position()
        except (OSError, ValueError):  # the input was closed under us: the work is done
            return 1.0
        return min(1.0, max(0.0, read / self.size))

    def line(self, stage: str, detail: str, done: int | None, total: int | None) -> str:
        """The text shown for a step (also what tests read)."""
        share = self._share()
        elapsed = self.clock() - self.started
        parts = ["verifying"]
        if share is not None:
            parts.append(f"{share * 100:3.0f}%")
        parts.append(stage + (f" {textsafe.text(detail)}" if detail else "") + _count(done, total))
        text = " ".join(parts)
        if share is not None and 0.0 < share < 1.0 and elapsed >= 1.0:
            text += f", about {_duration(elapsed / share - elapsed)} left"
        else:
            text += f", {_duration(elapsed)} so far"
        return text

    def step(self, stage: str, detail: str = "", done: int | None = None,
             total: int | None = None) -> None:  # fmt: skip
        self.current = (stage, detail, done, total)

    def tick(self) -> None:
        """Draw the current step if it is time: on a terminal every ``TTY_EVERY_S``, in a log
        every ``interval_s``."""
        current = self.current
        if not self.enabled or current is None:
            return
        with self._lock:
            now = self.clock()
            if now - self.shown < (TTY_EVERY_S if self.tty else self.interval_s):
                return
            text = self.line(*current)
            if self.tty:
                self.stream.write("\r\033[K" + text)
                self.drawn = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
            self.shown = now

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self.enabled and self.tty and self.drawn:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.drawn = False


class NoProgress:
    """A sink that shows nothing (the library default)."""

    def begin(self, size: int | None, position: Callable[[], int]) -> None:
        return None

    def step(self, stage: str, detail: str = "", done: int | None = None,
             total: int | None = None) -> None:  # fmt: skip
        return None

    def end(self) -> None:
        return None
