"""The replay journal: every model call, content-addressed, replayable bit for bit.

Keys. ``call_key`` is the hex SHA-256 of the RFC 8785 canonical JSON of
``{"adapter", "model", "request", "parameters"}``. ``parameters`` must hold *every* input other
than the request text that changes the answer: temperature, top-p, seed, max tokens, stop
sequences, system prompt, tool definitions, response format, CLI flags... A parameter left
out lets two different questions share one answer. Key order never matters (canonical JSON
sorts keys); tuples count as lists; integral floats equal integers (``1.0`` and ``1`` are the
same JSON number); NaN and infinities are refused.

Layout (``Journal(path)``: ``path`` is the journal directory, or its ``journal.jsonl``)::

    <dir>/journal.jsonl       index: one canonical JSON object a line, appended with fsync
    <dir>/blobs/<sha256>      response and request texts (UTF-8), named by their digest

An index line is the body of the replay store's ``model.call`` record
(``{"adapter", "key", "model", "request_sha256", "response_sha256"}``). Blobs are checked
against their digest whenever read: a tampered blob is an error, never an answer. When a key
is recorded twice with different responses (a live re-run of a non-deterministic model), the
latest line wins. Several agent processes may share one journal: appends take an exclusive
``flock`` on the index, reads a shared one, and each process picks up lines appended by others.
A line torn by a crash (no final newline) is ignored by readers and cut off by the next writer.

Modes. ``live``: every call asks the model and records the answer. ``replay``: answers come
from the journal only; a miss raises ``ReplayMissError`` (strict replay), unless
``allow_live_miss`` is set, in which case the model is asked and the answer recorded.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from harness.verify.canonical import canonical_bytes, parse_canonical
from harness.verify.errors import CanonicalEncodingError
from harness.verify.modelkey import call_key as call_key  # noqa: PLC0414 (re-exported)

INDEX_NAME: Final = "journal.jsonl"
BLOBS_NAME: Final = "blobs"
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_FIELDS: Final = ("adapter", "key", "model", "request_sha256", "response_sha256")

Mode = Literal["live", "replay"]


class ReplayError(Exception):
    """Base class of replay journal errors."""


class ReplayMissError(ReplayError):
    """Strict replay found no journaled answer for a call."""

    def __init__(self, message: str, *, key: str, adapter: str, model: str) -> None:
        super().__init__(message)
        self.key = key
        self.adapter = adapter
        self.model = model


class JournalIntegrityError(ReplayError):
    """The journal's index or a blob is damaged or was altered."""


# ---- keys -----------------------------------------------------------------------------------
# ``call_key`` lives in ``harness.verify.modelkey`` (the verifier recomputes keys); re-exported.


def text_sha256(text: str) -> str:
    """Hex SHA-256 of ``text`` in UTF-8 (what ``request_sha256``/``response_sha256`` hold)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---- the journal ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JournalEntry:
    """One index line: the body of a replay ``model.call`` record."""

    key: str
    adapter: str
    model: str
    request_sha256: str
    response_sha256: str

    def body(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _FIELDS}


class Journal:
    """A replay journal directory opened in ``live`` or ``replay`` mode."""

    def __init__(self, path: Path, mode: Mode, *, allow_live_miss: bool = False) -> None:
        if mode not in ("live", "replay"):
            raise ValueError(f"journal mode must be 'live' or 'replay', not {mode!r}")
        if allow_live_miss and mode != "replay":
            raise ValueError("allow_live_miss only applies to replay mode")
        self.path = Path(path)
        """As given: pass it on (``AgentRequest.journal_file``) to open the same journal."""
        self.mode: Mode = mode
        self.allow_live_miss = allow_live_miss
        if self.path.name == INDEX_NAME:
            self.directory = self.path.parent
        else:
            self.directory = self.path
        self.index_path = self.directory / INDEX_NAME
        self.blobs = self.directory / BLOBS_NAME
        self._entries: dict[str, JournalEntry] = {}
        self._order: list[JournalEntry] = []
        self._offset = 0
        self._line = 0
        self._refresh()

    # -- reading ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Read index lines appended since the last look (by this or another process)."""
        try:
            with open(self.index_path, "rb") as handle:
                fcntl.flock(handle, fcntl.LOCK_SH)
                size = os.fstat(handle.fileno()).st_size
                if size < self._offset:
                    raise JournalIntegrityError(
                        f"{self.index_path}: the index shrank ({size} < {self._offset} bytes)"
                    )
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line is not read
        for line in complete.splitlines():
            self._line += 1
            self._add(self._parse_line(line))
        self._offset += len(complete)

    def _parse_line(self, line: bytes) -> JournalEntry:
        where = f"{self.index_path}: line {self._line}"
        try:
            value = parse_canonical(line)
        except CanonicalEncodingError as exc:
            raise JournalIntegrityError(f"{where}: {exc}") from None
        if not isinstance(value, dict) or sorted(value) != sorted(_FIELDS):
            raise JournalIntegrityError(f"{where}: members must be exactly {', '.join(_FIELDS)}")
        if not all(isinstance(value[name], str) and value[name] for name in _FIELDS):
            raise JournalIntegrityError(f"{where}: every member must be a non-empty string")
        for name in ("key", "request_sha256", "response_sha256"):
            if not _HEX64.fullmatch(value[name]):
                raise JournalIntegrityError(f"{where}: {name} is not 64 lowercase hex digits")
        return JournalEntry(**value)

    def _add(self, entry: JournalEntry) -> None:
        self._entries[entry.key] = entry  # the latest line of a key wins
        self._order.append(entry)

    def entry(self, key: str) -> JournalEntry | None:
        """The index entry of ``key`` (latest), or None."""
        if key not in self._entries:
            self._refresh()
        return self._entries.get(key)

    def entries(self) -> list[JournalEntry]:
        """Every index line in order (a key recorded twice appears twice)."""
        self._refresh()
        return list(self._order)

    def __len__(self) -> int:
        self._refresh()
        return len(self._entries)

    def read_blob(self, digest: str) -> str:
        """The text stored under ``digest``, verified against it."""
        if not _HEX64.fullmatch(digest):
            raise JournalIntegrityError(f"not a blob digest: {digest!r}")
        path = self.blobs / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise JournalIntegrityError(f"blob {digest} is missing from {self.blobs}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise JournalIntegrityError(
                f"blob {path} was altered: its content hashes to {actual}, not {digest}"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise JournalIntegrityError(f"blob {path} is not UTF-8 text") from None

    def lookup(self, key: str) -> str | None:
        """The journaled response of ``key`` (hash-verified), or None."""
        found = self.entry(key)
        return None if found is None else self.read_blob(found.response_sha256)

    # -- writing ------------------------------------------------------------------------------
    def _write_blob(self, text: str) -> str:
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        path = self.blobs / digest
        if path.exists():
            self.read_blob(digest)  # refuse to build on an altered blob
            return digest
        if not self.blobs.is_dir():
            self.blobs.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self.directory)
        descriptor, temporary = tempfile.mkstemp(dir=self.blobs, prefix=".tmp-")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _fsync_dir(self.blobs)
        return digest

    def record(
        self, key: str, adapter: str, model: str, request: str, response: str
    ) -> JournalEntry:
        """Store ``response`` (and ``request``) and append the index line for ``key``.

        Recording the same answer again for a key is a no-op.
        """
        if not _HEX64.fullmatch(key):
            raise ValueError(f"not a call key: {key!r}")
        if not (isinstance(adapter, str) and adapter and isinstance(model, str) and model):
            raise ValueError("adapter and model must be non-empty strings")
        if not (isinstance(request, str) and isinstance(response, str)):
            raise TypeError("request and response must be str")
        entry = JournalEntry(
            key=key,
            adapter=adapter,
            model=model,
            request_sha256=self._write_blob(request),
            response_sha256=self._write_blob(response),
        )
        if self.entry(key) == entry:
            return entry
        line = canonical_bytes(entry.body()) + b"\n"
        created = not self.index_path.exists()
        descriptor = os.open(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            size = os.fstat(descriptor).st_size
            if size:
                os.lseek(descriptor, size - 1, os.SEEK_SET)
                if os.read(descriptor, 1) != b"\n":  # a line torn by a crash: cut it off
                    os.lseek(descriptor, 0, os.SEEK_SET)
                    kept = os.read(descriptor, size).rfind(b"\n") + 1
                    os.ftruncate(descriptor, kept)
            os.write(descriptor, line)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)  # releases the lock
        if created:
            _fsync_dir(self.directory)
        self._refresh()
        return entry

    # -- calls --------------------------------------------------------------------------------
    def call(
        self,
        adapter: str,
        model: str,
        request: str,
        parameters: Mapping[str, object],
        live: Callable[[], str],
    ) -> str:
        """Answer one model call: from the model (live) or from the journal (replay)."""
        if not (isinstance(adapter, str) and adapter and isinstance(model, str) and model):
            raise ValueError("adapter and model must be non-empty strings")
        key = call_key(adapter, model, request, parameters)
        if self.mode == "replay":
            found = self.entry(key)
            if found is not None:
                if found.request_sha256 != text_sha256(request):
                    raise JournalIntegrityError(
                        f"journal entry {key} was recorded for a different request"
                    )
                return self.read_blob(found.response_sha256)
            if not self.allow_live_miss:
                raise ReplayMissError(
                    f"replay miss: no journaled answer for key {key} (adapter {adapter!r}, "
                    f"model {model!r}, request {request[:80]!r}) in {self.index_path}; "
                    "re-run live or allow live calls on a miss",
                    key=key,
                    adapter=adapter,
                    model=model,
                )
        response = live()
        if not isinstance(response, str):
            raise TypeError(f"the live model returned {type(response).__name__}, not str")
        self.record(key, adapter, model, request, response)
        return response


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
