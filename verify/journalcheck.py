"""Bundle check on the journal members: each blob is what the journaled exchanges say it is.

A bundle of runs with proxied batches carries, as ``journal/<sha256>`` members (last in the
tar, docs/spec/bundle.md §8.9), every request and response blob its journaled
``model.exchange`` records name. By the time the first of them arrives, every run's replay
store has been checked and its journaled exchanges collected (``JournalRef``, from the
exchanges check), so each blob is checked as it streams past, one at a time:

* J1 it is referenced: some journaled exchange names it (an unreferenced blob is refused:
  nothing rides along with signed evidence);
* J2 its bytes hash to its name and are UTF-8 (the journal stores texts);
* J3 as a response blob, its length is the exchange's ``response_bytes``;
* J4 as a request blob (read whole, at most ``JOURNAL_REQUEST_MAX_BYTES``, and no denser in
  JSON containers than ``JOURNAL_CONTAINER_DENSITY`` allows, checked before decoding), the
  exchange's ``key`` recomputes from it and the recorded ``parameters``
  (``harness.verify.modelkey``), and the recomputation finds the recorded ``model`` and
  ``stream``;
* J5 at the end, every referenced blob was present.

Response blobs are streamed (a SHA-256 and an incremental UTF-8 decoder), never held.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from .archive import ArchiveError, ArchiveReader, Member
from .bundlehead import HashingMember
from .errors import VerificationError
from .exchangecheck import JournalRef
from .layout import (
    JOURNAL_CONTAINER_DENSITY,
    JOURNAL_REQUEST_MAX_BYTES,
    journal_digest,
    journal_member,
)
from .modelkey import ModelKeyError, exchange_key, recompute_exchange_key

_STEP: Final = 1 << 20


_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _containers(body: bytes) -> int:
    """``[`` and ``{`` outside JSON strings (linear: the string pattern cannot backtrack)."""
    rest = _STRING.sub(b"", body)
    return rest.count(b"[") + rest.count(b"{")


class JournalError(VerificationError):
    """A journal member that no record references, or that is not what its records say."""


def _refuse(name: str, detail: str) -> JournalError:
    return JournalError(f"{name}: breaks rule journal: {detail}", member=name)


@dataclass(eq=False, repr=False)
class _Uses:
    requests: list[JournalRef] = field(default_factory=list)
    responses: list[JournalRef] = field(default_factory=list)


@dataclass(eq=False, repr=False)
class JournalCheck:
    """The referenced blobs of every run (``add``), checked as their members arrive."""

    wanted: dict[str, _Uses] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    blobs: int = 0
    keys: int = 0

    def add(self, refs: Iterable[JournalRef]) -> None:
        for ref in refs:
            self.wanted.setdefault(ref.request_sha256, _Uses()).requests.append(ref)
            self.wanted.setdefault(ref.response_sha256, _Uses()).responses.append(ref)

    def needs_whole(self, digest: str) -> bool:
        """Is the blob a request blob (read whole to recompute keys)?"""
        uses = self.wanted.get(digest)
        return uses is not None and bool(uses.requests)

    def referenced(self, digest: str) -> bool:
        return digest in self.wanted

    def request_limit_problem(self, digest: str, size: int) -> JournalError | None:
        if self.needs_whole(digest) and size > JOURNAL_REQUEST_MAX_BYTES:
            return _refuse(
                journal_member(digest),
                f"request blob of {size} bytes, over the {JOURNAL_REQUEST_MAX_BYTES}-byte limit",
            )
        return None

    def member(self, digest: str, chunks: Iterable[bytes]) -> None:
        """Check one journal member's bytes (J1-J4); raises ``JournalError``."""
        name = journal_member(digest)
        self.seen.add(digest)
        uses = self.wanted.get(digest)
        if uses is None:
            raise _refuse(name, "no journaled model.exchange names this blob")
        sha = hashlib.sha256()
        decoder = codecs.getincrementaldecoder("utf-8")()
        size = 0
        whole: list[bytes] | None = [] if uses.requests else None
        text_ok = True
        for chunk in chunks:
            sha.update(chunk)
            size += len(chunk)
            if whole is not None:
                whole.append(chunk)
            if text_ok:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    text_ok = False
        if text_ok:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                text_ok = False
        actual = sha.hexdigest()
        if actual != digest:
            raise _refuse(name, f"its bytes hash to {actual}, not to its name")
        if not text_ok:
            raise _refuse(name, "not UTF-8 text (the journal stores texts)")
        self.blobs += 1
        for ref in uses.responses:
            if ref.response_bytes != size:
                at = f"{ref.where} (batch {ref.batch!r} exchange {ref.seq})"
                raise _refuse(name, f"{size} bytes, but {at} says {ref.response_bytes}")
        if whole is not None:
            body = b"".join(whole)
            containers = _containers(body)
            if containers > 256 + len(body) // JOURNAL_CONTAINER_DENSITY:
                detail = f"{containers} JSON arrays/objects in {len(body)} bytes"
                raise _refuse(name, f"request blob with {detail}: too dense, not decoded")
            self._keys(name, body, uses.requests)

    def _keys(self, name: str, body: bytes, refs: list[JournalRef]) -> None:
        for ref in refs:
            at = f"{ref.where} (batch {ref.batch!r} exchange {ref.seq})"
            try:
                key = recompute_exchange_key(ref.family, body, ref.parameters)
                found = exchange_key(
                    ref.family,
                    body,
                    ref.parameters["method"],
                    ref.parameters["path"],
                    ref.parameters["headers"],
                )
            except ModelKeyError as exc:
                raise _refuse(name, f"no key for {at}: {exc}") from None
            if key != ref.key:
                raise _refuse(name, f"the key of {at} does not recompute: {key}, not {ref.key}")
            if (found.model, found.stream) != (ref.model, ref.stream):
                raise _refuse(name, f"model/stream of {at} are not the request blob's "
                              f"({found.model!r}, {found.stream})")  # fmt: skip
            self.keys += 1

    def finish(self) -> None:
        """J5: every referenced blob was a member."""
        for digest, uses in sorted(self.wanted.items()):
            if digest in self.seen:
                continue
            ref = (uses.requests or uses.responses)[0]
            role = "request" if uses.requests else "response"
            raise _refuse(
                journal_member(digest),
                f"the {role} blob of {ref.where} (batch {ref.batch!r} exchange {ref.seq}) "
                "is not in the bundle",
            )


@dataclass(frozen=True)
class Streamed:
    """A journal member read off the archive: its digest (for the members check), its bytes
    when the caller keeps members, and the journal rule it broke, if any."""

    sha256: str
    kept: bytes | None
    problem: JournalError | None


def read_journal_member(
    check: JournalCheck | None, reader: ArchiveReader, member: Member, *, keep: bool
) -> Streamed:
    """Stream one ``journal/`` member through ``check`` (None: only hash it).

    A request blob over ``JOURNAL_REQUEST_MAX_BYTES`` is refused before it is read (an
    ``ArchiveError``: unreadable, like any member over its kind's limit).
    """
    raw = HashingMember(reader, member.size, keep=keep)
    problem: JournalError | None = None
    digest = journal_digest(member.name)
    if check is not None and digest is not None:
        limit = check.request_limit_problem(digest, member.size)
        if limit is not None:
            raise ArchiveError(str(limit), member=member.name)
        try:
            check.member(digest, iter(lambda: raw.read(_STEP), b""))
        except JournalError as exc:
            problem = exc
    raw.drain()
    return Streamed(raw.sha.hexdigest(), raw.kept, problem)
