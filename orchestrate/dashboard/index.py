"""The dashboard's view of a repository's runs: one incremental reader per run.

``RunIndex.refresh`` tails the run's audit and lineage stores (``tail.StoreTail``) into a
``fold.RunFold`` and polls its control store with the runtime's own reader
(``harness.orchestrate.bus.ControlBus``: MAC-checked, safe opens, shared lock, read-only).
A gap in the audit store (shrunk, replaced, prefix changed) starts the fold again and bumps
``generation``: a live client whose cursor belongs to another generation is told to resync.

Refreshes are serialised per run by a lock and run off the event loop (the app calls them in
a worker thread); each stops at a deadline, so a request never waits unboundedly on a huge
store: what was not read yet is read by the next refresh (``behind`` says how much).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.receipts.keys import OperatorKeys
from harness.receipts.run import run_dir
from harness.verify.records import RUN_ID_RE

from ..bus import BusError, ControlBus
from .fold import RunFold
from .tail import StoreTail, TailError

DEADLINE_S: Final = 10.0
MAX_COMMANDS: Final = 5000
MAX_RUNS: Final = 1000


@dataclass(frozen=True)
class CommandView:
    id: str
    kind: str
    operator: str
    revision: int
    time: str
    seq: int
    args: dict[str, Any]


class RunIndex:
    """Incremental reader of one run's stores (audit, lineage, control)."""

    def __init__(self, state: Path, run_id: str, keys: OperatorKeys | None) -> None:
        self.run_id = run_id
        self.folder = run_dir(state, run_id)
        self._keys = keys
        self.lock = threading.Lock()
        self.generation = 1
        self.fold = RunFold(run_id)
        self._audit = StoreTail(self.folder / "audit.jsonl")
        self._lineage = StoreTail(self.folder / "lineage.jsonl")
        self._bus: ControlBus | None = None
        self.commands: dict[str, CommandView] = {}
        self.error: str | None = None
        self.bus_error: str | None = None
        self.control_cache: tuple[tuple[int, int], dict[str, Any], str] | None = None
        """(generation, control records) -> the control section and its SVG (data.py)."""

    @property
    def behind(self) -> int:
        """Bytes of the audit store not folded yet (the tail of a line being written counts)."""
        return max(0, self._audit.size - self._audit.offset)

    def refresh(self, deadline_s: float = DEADLINE_S) -> None:
        with self.lock:
            stop = time.monotonic() + deadline_s
            self._refresh_store(self._audit, audit=True, stop=stop)
            self._refresh_store(self._lineage, audit=False, stop=stop)
            self._poll_commands()

    def _restart(self) -> None:
        self.generation += 1
        self.fold = RunFold(self.run_id)
        self._lineage = StoreTail(self.folder / "lineage.jsonl")
        self._bus = None
        self.commands = {}

    def _refresh_store(self, tail: StoreTail, *, audit: bool, stop: float) -> None:
        while True:
            try:
                chunk = tail.refresh()
            except TailError as exc:
                self.error = str(exc)
                return
            if chunk.reset and audit:
                self._restart()
            elif chunk.reset:
                self.fold.lineage_count = 0
                for view in self.fold.tasks.values():
                    view.writes.clear()
            take = self.fold.audit_line if audit else self.fold.lineage_line
            for line in chunk.lines:
                take(line)
            if not chunk.lines or tail.offset >= tail.size or time.monotonic() > stop:
                return

    def _poll_commands(self) -> None:
        if self._keys is None:
            return
        if self._bus is None:
            self._bus = ControlBus(self.folder, self.run_id, self._keys.hmac_master)
        try:
            for command in self._bus.poll():
                if len(self.commands) < MAX_COMMANDS:
                    self.commands[command.id] = CommandView(
                        command.id,
                        command.command,
                        command.operator,
                        command.revision,
                        command.time,
                        command.seq,
                        dict(command.args),
                    )
        except BusError as exc:
            self.bus_error = str(exc)

    def receipts(self) -> list[dict[str, Any]]:
        """Every command with its receipt status (``pending`` until the runtime answers),
        oldest first; receipts of commands the control store does not show are listed too."""
        out: list[dict[str, Any]] = []
        for command in sorted(self.commands.values(), key=lambda c: c.seq):
            receipt = self.fold.receipts.get(command.id)
            out.append(
                {
                    "command": command.id,
                    "kind": command.kind,
                    "status": receipt["status"] if receipt else "pending",
                    "reason": receipt["reason"] if receipt else "",
                    "operator": command.operator,
                    "time": command.time,
                }
            )
        for receipt in self.fold.receipts.values():
            if receipt["command"] not in self.commands:
                out.append({**receipt, "operator": None, "time": None})
        return out


class Repository:
    """The runs of one repository's state folder, each with its ``RunIndex`` (created on
    first sight, at most ``MAX_RUNS``)."""

    def __init__(self, state: Path, keys: OperatorKeys | None) -> None:
        self.state = state
        self.keys = keys
        self._runs: dict[str, RunIndex] = {}
        self._lock = threading.Lock()

    def run_ids(self) -> list[str]:
        root = self.state / "runs"
        if not root.is_dir():
            return []
        found = sorted(
            p.name
            for p in root.iterdir()
            if RUN_ID_RE.fullmatch(p.name)
            and not p.is_symlink()
            and p.is_dir()
            and (p / "audit.jsonl").is_file()
        )
        return found[:MAX_RUNS]

    def run(self, run_id: str) -> RunIndex | None:
        """The index of ``run_id`` (refreshed by the caller), or None for no such run."""
        if not RUN_ID_RE.fullmatch(run_id) or run_id not in self.run_ids():
            return None
        with self._lock:
            index = self._runs.get(run_id)
            if index is None:
                index = self._runs[run_id] = RunIndex(self.state, run_id, self.keys)
            return index
