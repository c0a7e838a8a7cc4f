"""A run's evidence folder: its four stores and their checkpoints, laid out on disk.

Layout (docs/spec/stores.md)::

    <state>/runs/<run id>/<store>.jsonl                 records
    <state>/runs/<run id>/<store>.quarantine.jsonl      torn tails moved aside (if any)
    <state>/runs/<run id>/checkpoints/<store>/<size, 20 digits>.note   signed checkpoints
    <state>/runs/<run id>/plan.json                     the plan document (runtime runs)

Progressive sealing (docs/spec/checkpoints.md §6.1): with ``seal_every_records`` or
``seal_every_s``, a store is checkpointed during the run, right after the append that reaches
either threshold since its last checkpoint, so a crash loses at most that much unsealed tail.
Sealing writes checkpoint files only, never records: store bytes and roots do not depend on it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.verify.records import STORES

from .keys import OperatorKeys
from .note import NoteSigner
from .store import StoreWriter, fsync_dir, utc_now

PLAN_FILE = "plan.json"


def run_dir(state_dir: Path, run_id: str) -> Path:
    return state_dir / "runs" / run_id


def _threshold(name: str, value: float | None, *, integer: bool) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'} or None")
    if not value > 0:  # also refuses NaN
        raise ValueError(f"{name} must be positive, got {value!r}")


class RunRecorder:
    """Opens a run's stores on first use, seals them as they grow, and checkpoints them together.

    ``seal_every_records`` (N) and ``seal_every_s`` (T) turn on progressive sealing: after each
    append to a store, a checkpoint of it is signed when N or more records were appended since
    its last checkpoint, or when T seconds (``monotonic`` clock) passed since that checkpoint (or
    since the store was opened) and at least one record is unsealed. The cost is one signature
    and one small durable file per checkpoint, nothing per record (no store is re-read).
    """

    def __init__(
        self,
        state_dir: Path,
        run_id: str,
        keys: OperatorKeys,
        clock: Callable[[], str] = utc_now,
        *,
        seal_every_records: int | None = None,
        seal_every_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _threshold("seal_every_records", seal_every_records, integer=True)
        _threshold("seal_every_s", seal_every_s, integer=False)
        self.run_id = run_id
        self.folder = run_dir(state_dir, run_id)
        self._keys = keys
        self._clock = clock
        self._writers: dict[str, StoreWriter] = {}
        self._seal_records = seal_every_records
        self._seal_s = seal_every_s
        self._monotonic = monotonic
        self._sealed_at: dict[str, float] = {}
        self._signer: NoteSigner | None = None

    @property
    def sealing(self) -> bool:
        """Whether stores are sealed during the run (not only by ``checkpoint_all``)."""
        return self._seal_records is not None or self._seal_s is not None

    def respace(self, seal_every_records: int) -> None:
        """Change the record threshold while the run goes on (the runtime's adaptive
        checkpoint spacing: wider after successes, narrower after failures). Only a recorder
        that seals by records can be respaced."""
        _threshold("seal_every_records", seal_every_records, integer=True)
        if self._seal_records is None:
            raise ValueError("respace: this recorder does not seal by record count")
        self._seal_records = seal_every_records

    def respace_time(self, seal_every_s: float) -> None:
        """Change the time bound while the run goes on (the phase's checkpoint spacing)."""
        _threshold("seal_every_s", seal_every_s, integer=False)
        self._seal_s = seal_every_s

    @property
    def seal_every_records(self) -> int | None:
        return self._seal_records

    @property
    def seal_every_s(self) -> float | None:
        return self._seal_s

    def _note_signer(self) -> NoteSigner:
        if self._signer is None:
            self._signer = self._keys.note_signer()
        return self._signer

    def store(self, name: str) -> StoreWriter:
        writer = self._writers.get(name)
        if writer is None:
            writer = StoreWriter(
                self.folder / f"{name}.jsonl",
                store=name,
                run_id=self.run_id,
                hmac_master=self._keys.hmac_master,
                clock=self._clock,
                after_append=self._after_append if self.sealing else None,
            )
            self._writers[name] = writer
            self._sealed_at[name] = self._monotonic()
        return writer

    def _after_append(self, writer: StoreWriter) -> None:
        """Seal ``writer`` if a threshold is reached (StoreWriter's post-append hook, so at
        least one record is unsealed). A failure to seal (an I/O error, or a store that lost
        records an existing checkpoint covers) propagates from the append call, after its
        records are durable: the run must stop rather than go on unsealed or forked."""
        unsealed = writer.unsealed
        by_count = self._seal_records is not None and unsealed >= self._seal_records
        by_time = self._seal_s is not None and (
            self._monotonic() - self._sealed_at[writer.store] >= self._seal_s
        )
        if by_count or by_time:
            self._seal(writer)

    def _seal(self, writer: StoreWriter) -> None:
        writer.checkpoint(self._note_signer())
        self._sealed_at[writer.store] = self._monotonic()

    def seal_due(self) -> list[Path]:
        """Seal every open store whose time threshold passed with records unsealed.

        Appends check the thresholds themselves; this is for a caller with a periodic tick (the
        runtime's loop), so a store that stops receiving records is still sealed T seconds
        after its last checkpoint. Without ``seal_every_s`` it does nothing.
        """
        if self._seal_s is None:
            return []
        sealed = []
        now = self._monotonic()
        for name, writer in self._writers.items():
            if writer.unsealed > 0 and now - self._sealed_at[name] >= self._seal_s:
                sealed.append(writer.checkpoint(self._note_signer()))
                self._sealed_at[name] = self._monotonic()
        return sealed

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
        signer = self._note_signer()
        done = [self.store(name).checkpoint(signer) for name in STORES]
        now = self._monotonic()
        self._sealed_at.update(dict.fromkeys(STORES, now))
        return done

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
