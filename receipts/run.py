"""A run's evidence folder: its four stores and their checkpoints, laid out on disk.

Layout (docs/spec/stores.md)::

    <state>/runs/<run id>/<store>.jsonl                 records
    <state>/runs/<run id>/<store>.quarantine.jsonl      torn tails moved aside (if any)
    <state>/runs/<run id>/checkpoints/<store>/<size, 20 digits>.note   signed checkpoints
    <state>/runs/<run id>/plan.json                     the plan document (runtime runs)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.verify.records import STORES

from .keys import OperatorKeys
from .store import StoreWriter, fsync_dir, utc_now

PLAN_FILE = "plan.json"


def run_dir(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id


class RunRecorder:
    """Opens a run's stores on first use and checkpoints them together."""

    def __init__(
        self,
        state_dir: Path,
        run_id: str,
        keys: OperatorKeys,
        clock: Callable[[], str] = utc_now,
    ) -> None:
        self.run_id = run_id
        self.folder = run_dir(state_dir, run_id)
        self._keys = keys
        self._clock = clock
        self._writers: dict[str, StoreWriter] = {}

    def store(self, name: str) -> StoreWriter:
        writer = self._writers.get(name)
        if writer is None:
            writer = StoreWriter(
                self.folder / f"{name}.jsonl",
                store=name,
                run_id=self.run_id,
                hmac_master=self._keys.hmac_master,
                clock=self._clock,
            )
            self._writers[name] = writer
        return writer

    @property
    def plan_path(self) -> Path:
        return self.folder / PLAN_FILE

    def write_plan(self, document: bytes) -> None:
        """Store the plan document durably before ``run.start`` names its digest.

        Written once: a resumed run finds the same bytes (anything else is an error, since
        ``run.start`` already binds the first ones).
        """
        path = self.plan_path
        if path.exists():
            if path.read_bytes() != document:
                raise ValueError(f"{path}: holds another plan than this run's")
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{PLAN_FILE}.tmp")
        with tmp.open("wb") as handle:
            handle.write(document)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(self.folder)

    def record(self, store: str, kind: str, body: Mapping[str, Any]) -> int:
        """Append one record durably; returns its seq."""
        return self.store(store).append(kind, body).seq

    def checkpoint_all(self) -> list[Path]:
        """Sign a checkpoint for every store of the run (all four, empty ones included)."""
        signer = self._keys.note_signer()
        return [self.store(name).checkpoint(signer) for name in STORES]

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
