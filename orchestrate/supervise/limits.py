"""The limits a supervised process runs under, and how its supervision ended.

Why several limits: a wall-clock limit alone cannot tell a hung agent (alive, silent, doing
nothing) from a slow working one until the very end; the idle limit can, much earlier. The
lifetime cap bounds every process whatever its task asks for (issue 11: default and maximum
1800 s), so a plan cannot keep an agent around for hours.

Floats are fine here: these are parameters, never records. Records carry the integer
milliseconds the runtime derives from them (``idle_ms``, ``lifetime_ms``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.orchestrate.model import ProcResult

__all__ = ["ANOMALIES", "MAX_LIFETIME_S", "Limits", "Outcome", "check_why", "exec_failed"]

MAX_LIFETIME_S: Final = 1800.0
ANOMALIES: Final = ("timeout", "hung", "lifetime")
"""Anomalies the supervisor finds by itself; ``kill(why)`` adds ``"killed:<why>"``."""
_WHY: Final = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def _seconds(name: str, value: object, *, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"Limits: {name} must be a number of seconds, not {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"Limits: {name} must be finite and {bound}, not {value!r}")
    return seconds


@dataclass(frozen=True)
class Limits:
    """When a supervised process is ended, and how."""

    wall_s: float
    """Hard wall-clock limit of the task ("timeout")."""
    idle_s: float | None = None
    """No progress (output, file change) for this long: "hung". None: never hung."""
    lifetime_s: float = MAX_LIFETIME_S
    """Absolute cap, default and maximum :data:`MAX_LIFETIME_S` (ValueError above)."""
    grace_s: float = 2.0
    """SIGTERM, then this long to exit, then SIGKILL."""
    probe_s: float = 1.0
    """How often the progress paths are fingerprinted (only when ``idle_s`` is set)."""

    def __post_init__(self) -> None:
        _seconds("wall_s", self.wall_s)
        if self.idle_s is not None:
            _seconds("idle_s", self.idle_s)
        lifetime = _seconds("lifetime_s", self.lifetime_s)
        if lifetime > MAX_LIFETIME_S:
            raise ValueError(
                f"Limits: lifetime_s {self.lifetime_s!r} exceeds the maximum {MAX_LIFETIME_S:g}"
            )
        _seconds("grace_s", self.grace_s, zero_ok=True)
        _seconds("probe_s", self.probe_s)

    @property
    def cap_s(self) -> float:
        """What actually bounds the run: ``min(wall_s, lifetime_s)``."""
        return min(self.wall_s, self.lifetime_s)

    @property
    def capped_by_lifetime(self) -> bool:
        """The lifetime cap, not the task's own wall limit, ends a run that reaches ``cap_s``."""
        return self.lifetime_s < self.wall_s


@dataclass(frozen=True)
class Outcome:
    """How a supervised process ended."""

    result: ProcResult
    """``timed_out`` is True when the wall-clock limit or the lifetime cap ended it."""
    anomaly: str | None
    """None (it exited by itself), "timeout", "hung", "lifetime" or "killed:<why>"."""
    idle_ms: int
    """The longest silence observed (no output and, when probed, no file change), in ms."""


def check_why(why: object) -> str:
    """A reason for ``kill``: a short lowercase token ("budget", "stop"), ValueError else."""
    if not isinstance(why, str) or not _WHY.fullmatch(why):
        raise ValueError(f"kill: reason must be a short lowercase token, not {why!r}")
    return why


def exec_failed(program: str, cwd: Path, exc: OSError, duration_ms: int) -> Outcome:
    """The outcome of a process that could not be started: exit code 127 when the program
    (or ``cwd``) does not exist, 126 when it cannot be run; the reason in ``stderr``."""
    code = 127 if isinstance(exc, FileNotFoundError | NotADirectoryError) else 126
    message = f"cannot execute {program!r} (cwd {str(cwd)!r}): {exc}\n"
    result = ProcResult(
        exit_code=code,
        signal=None,
        timed_out=False,
        duration_ms=duration_ms,
        stdout=b"",
        stderr=message.encode(),
    )
    return Outcome(result=result, anomaly=None, idle_ms=0)
