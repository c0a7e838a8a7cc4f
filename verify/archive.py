"""Safe, in-memory, forward-only reading of a bundle archive: never extracted, every byte checked.

Why not ``tarfile``: extraction filters have been bypassed again and again (CVE-2025-4517 and
friends), and ``tarfile`` seeks. Seeking a ``.tar.gz`` backwards re-inflates the stream from
byte 0, so a verifier that reads members in several passes costs the square of the member count
(a 1.5 MB bundle of 4000 receipts took 101 s). This module reads the archive exactly once,
front to back, through one decompressor, and accepts nothing but what the exporter writes:
plain regular files with tame names, each header byte-identical to ``tar_header_bytes(name,
size)``, zero padding, and the exact end-of-archive. Every bound is checked from a header before
any data it announces is read, and inflating is capped by a ratio to what the compressed input
weighs, so a gzip bomb stops after reading little more than its own size.

``ArchiveReader`` is the primitive the verifier drives (one member at a time, in order);
``open_bundle_archive`` is a convenience for tools that want random access to a small bundle:
it makes the same single pass and keeps every member's bytes in memory.
"""

from __future__ import annotations

import gzip
import io
import re
import stat
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Final

from .errors import VerificationError
from .layout import MANIFEST, MANIFEST_SIG, TAR_RECORD_SIZE, member_sort_key, tar_header_bytes


class ArchiveError(VerificationError):
    """The input is not a safe, readable bundle archive (exit code 4)."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what the verifier will read; defaults suit bundles of ~10^7 records."""

    max_members: int = 100_000
    max_member_bytes: int = 4 << 30
    max_total_bytes: int = 16 << 30
    max_inflate_ratio: int = 32
    """A ``.tar.gz`` may inflate to at most ``inflate_floor_bytes`` plus this many times the
    compressed bytes read so far. Honest bundles inflate 3-7x (hex digests, MACs and
    signatures do not compress); a gzip bomb inflates ~1000x."""
    inflate_floor_bytes: int = 1 << 20


MEMBER_NAME_RE: Final = re.compile(
    r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){0,7}"
)
GZIP_MAGIC: Final = b"\x1f\x8b"
BLOCK: Final = tarfile.BLOCKSIZE
PAX_LIMIT: Final = 8 << 10
"""Largest PAX extended header accepted: the exporter writes one only for names over 100
characters (at most 1031), so anything bigger is hostile and is refused before it is read."""
_REGULAR: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)
_KIND_NAMES: Final = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.DIRTYPE: "a directory",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}
_LOW_LEVEL: Final = (OSError, EOFError, zlib.error, ValueError)
"""What a truncated or corrupt (gzip) stream raises while being read; BadGzipFile is an OSError."""


def check_member_name(name: str) -> None:
    """Refuse names that could mean anything but one plain relative path on any system."""
    if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in name):  # surrogateescape'd bytes
        raise ArchiveError(f"member name {name!r} is not valid UTF-8")
    if not MEMBER_NAME_RE.fullmatch(name):
        if name.startswith("/") or re.match(r"[A-Za-z]:", name) or name.startswith("\\"):
            reason = "is an absolute path"
        elif ".." in name.split("/") or ".." in name.split("\\"):
            reason = "climbs out of the archive (..)"
        else:
            reason = "has characters or a shape outside [A-Za-z0-9._-] path segments"
        raise ArchiveError(f"member name {name!r} {reason}")


@dataclass(frozen=True)
class Member:
    name: str
    size: int
    index: int
    """Position in the archive (0 = first member)."""


class _Counted:
    """The raw input, forward only, counting what was read (the compressed size so far)."""

    def __init__(self, inner: IO[bytes], prefix: bytes) -> None:
        self._inner = inner
        self._prefix = prefix
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix, b""
            if 0 <= size < len(data):
                data, self._prefix = data[:size], data[size:]
        else:
            data = self._inner.read(size)
        self.count += len(data)
        return data


class _Inflow:
    """The tar stream (raw or inflated), read strictly forward, within the read budget."""

    def __init__(self, raw: IO[bytes], limits: Limits) -> None:
        magic = raw.read(2)
        self.counted = _Counted(raw, magic)
        self.compressed = magic == GZIP_MAGIC
        self._source: _Counted | gzip.GzipFile = (
            gzip.GzipFile(fileobj=self.counted, mode="rb")  # type: ignore[call-overload]
            if self.compressed
            else self.counted
        )
        self.position = 0
        self._limits = limits
        self._budget = limits.max_total_bytes + (limits.max_members + 1) * (3 * BLOCK + PAX_LIMIT)

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (fewer only at the end of the stream)."""
        try:
            data = self._source.read(size)
            if 0 < len(data) < size:
                parts = [data]
                got = len(data)
                while got < size and (chunk := self._source.read(size - got)):
                    parts.append(chunk)
                    got += len(chunk)
                data = b"".join(parts)
        except _LOW_LEVEL as exc:
            raise ArchiveError(f"archive data is truncated or corrupt: {exc}") from None
        self.position += len(data)
        if self.position > self._budget:
            raise ArchiveError("archive expands beyond the size limit (possible gzip bomb)")
        if self.compressed:
            allowed = (
                self._limits.inflate_floor_bytes
                + self._limits.max_inflate_ratio * self.counted.count
            )
            if self.position > allowed:
                raise ArchiveError(
                    f"archive inflates to more than {self._limits.max_inflate_ratio} times its "
                    f"compressed size ({self.position} bytes from {self.counted.count}): a gzip "
                    "bomb, refused"
                )
        return data


def _octal_field(block: bytes, start: int, width: int) -> int | None:
    field = block[start : start + width].rstrip(b"\x00 ")
    if not field or any(c not in b"01234567" for c in field):
        return None
    return int(field, 8)


class ArchiveReader:
    """Walk a bundle archive once: ``next()`` yields each vetted member header, ``read()`` its
    data. Skipped data is still read (and so checked for being there); nothing is ever sought.
    """

    def __init__(self, raw: IO[bytes], limits: Limits) -> None:
        self._in = _Inflow(raw, limits)
        self.limits = limits
        self.compressed = self._in.compressed
        self.count = 0
        self.total = 0
        self._seen: set[str] = set()
        self._folded: set[str] = set()
        self._previous = ""
        self._current: Member | None = None
        self._remaining = 0
        self._finished = False

    @property
    def inflated(self) -> int:
        """Bytes of tar stream read so far."""
        return self._in.position

    def _exact(self, count: int, what: str) -> bytes:
        data = self._in.read(count)
        if len(data) != count:
            raise ArchiveError(f"archive is truncated in {what}")
        return data

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the current member's data; b"" at its end."""
        size = min(size, self._remaining)
        if size <= 0:
            return b""
        assert self._current is not None
        data = self._in.read(size)
        if len(data) != size:
            raise ArchiveError(
                f"archive is truncated in the data of {self._current.name!r}",
                member=self._current.name,
            )
        self._remaining -= size
        return data

    def _end_member(self) -> None:
        member = self._current
        if member is None:
            return
        while self._remaining:
            self.read(min(self._remaining, 1 << 20))
        padding = -member.size % BLOCK
        if padding and self._exact(padding, f"{member.name} padding").count(0) != padding:
            raise ArchiveError(f"member {member.name!r} is followed by non-zero padding")
        self._current = None

    def next(self) -> Member | None:
        """The next member's header, vetted; None after the (checked) end-of-archive."""
        if self._finished:
            return None
        self._end_member()
        start = self._in.position
        block = self._in.read(BLOCK)
        if not block and self.count == 0:
            raise ArchiveError("not a readable tar archive: the input is empty")
        if len(block) != BLOCK:
            if self.count == 0:
                raise ArchiveError("not a readable tar archive: truncated in the first header")
            raise ArchiveError("archive is truncated in a header (or lacks its end-of-archive)")
        if block.count(0) == BLOCK:
            self._check_trailer(start)
            self._finished = True
            return None
        raw_header = block
        pax: dict[bytes, bytes] = {}
        info = self._parse(block)
        if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE):
            size = _octal_field(block, 124, 12)
            if size is None or size > PAX_LIMIT:
                raise ArchiveError(
                    f"a PAX header of {size if size is not None else 'unreadable'} bytes: "
                    "oversized read refused (malformed or hostile header)"
                )
            data = self._exact(size + (-size % BLOCK), "a PAX header")
            pax = _pax_records(data[:size])
            block = self._exact(BLOCK, "the header after a PAX header")
            raw_header += data + block
            info = self._parse(block)
        return self._vet(info, pax, raw_header)

    def _parse(self, block: bytes) -> tarfile.TarInfo:
        try:
            return tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except (tarfile.HeaderError, ValueError) as exc:
            if self.count == 0:
                raise ArchiveError(f"not a readable tar archive: {exc}") from None
            raise ArchiveError(f"archive is truncated or corrupt: {exc}") from None

    def _vet(self, info: tarfile.TarInfo, pax: dict[bytes, bytes], raw_header: bytes) -> Member:
        name = info.name
        if b"path" in pax:
            try:
                name = pax[b"path"].decode("utf-8")
            except UnicodeDecodeError:
                shown = pax[b"path"].decode("utf-8", "surrogateescape")
                raise ArchiveError(f"member name {shown!r} is not valid UTF-8") from None
        size = info.size
        if b"size" in pax:
            text = pax[b"size"]
            size = int(text) if text.isdigit() else -1
        self.count += 1
        if self.count > self.limits.max_members:
            raise ArchiveError(f"more than {self.limits.max_members} members")
        check_member_name(name)
        if info.type not in _REGULAR:
            kind = _KIND_NAMES.get(info.type, f"of type {info.type!r}")
            raise ArchiveError(f"member {name!r} is {kind}; only regular files are allowed")
        if size > self.limits.max_member_bytes:
            raise ArchiveError(
                f"member {name!r} declares {size} bytes, limit {self.limits.max_member_bytes}"
            )
        if name in self._seen or name.lower() in self._folded:
            raise ArchiveError(f"member {name!r} appears twice (or differs only in case)")
        if size < 0 or raw_header != tar_header_bytes(name, size):
            raise ArchiveError(
                f"member {name!r} has a header the exporter never writes "
                "(mode, owner, time, format or padding differ)"
            )
        self.total += size
        if self.total > self.limits.max_total_bytes:
            raise ArchiveError(f"members add up to more than {self.limits.max_total_bytes} bytes")
        self._check_order(name)
        self._seen.add(name)
        self._folded.add(name.lower())
        member = Member(name, size, self.count - 1)
        self._current = member
        self._remaining = size
        return member

    def _check_order(self, name: str) -> None:
        """manifest.json first, manifest.sig next, then every other name in sorted order, the
        journal members (``layout.member_sort_key``) after all others."""
        if name == MANIFEST:
            ok = self.count == 1
        elif name == MANIFEST_SIG:
            ok = not self._previous and (self.count == 1 or MANIFEST in self._seen)
        else:
            ok = member_sort_key(name) > member_sort_key(self._previous)
            self._previous = name
        if not ok:
            raise ArchiveError(
                "members are not in the exporter's order (manifest.json, manifest.sig, then "
                "names sorted, journal/ members last)"
            )

    def _check_trailer(self, start: int) -> None:
        """The end-of-archive: exactly the zero blocks tarfile writes, up to a whole record.
        Reads one byte past it at most, so appended zeros are never inflated."""
        want = 2 * BLOCK + -(start + 2 * BLOCK) % TAR_RECORD_SIZE
        seen = BLOCK
        while seen <= want:
            chunk = self._in.read(min(want + 1 - seen, 1 << 16))
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                raise ArchiveError("bytes after the last member are not the zero end-of-archive")
            seen += len(chunk)
        if seen != want:
            raise ArchiveError(
                f"archive ends with {seen} zero bytes after the last member, the exporter writes "
                f"exactly {want} (end-of-archive blocks padded to a {TAR_RECORD_SIZE}-byte "
                "record)"
            )


def _pax_records(data: bytes) -> dict[bytes, bytes]:
    """``"<len> <key>=<value>\\n"`` records; any malformation is refused."""
    records: dict[bytes, bytes] = {}
    position = 0
    while position < len(data):
        space = data.find(b" ", position, position + 12)
        length_text = data[position:space] if space > 0 else b""
        if not length_text.isdigit():
            raise ArchiveError("a PAX header is malformed")
        end = position + int(length_text)
        record = data[space + 1 : end]
        if end > len(data) or not record.endswith(b"\n") or b"=" not in record:
            raise ArchiveError("a PAX header is malformed")
        key, value = record[:-1].split(b"=", 1)
        records[key] = value
        position = end
    return records


def open_source(source: Path | BinaryIO | bytes) -> tuple[IO[bytes], bool]:
    """The input as a forward-readable stream, and whether we opened it (and must close it)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return io.BytesIO(source), True
    if isinstance(source, Path):
        try:
            if not stat.S_ISREG(source.stat().st_mode):
                raise ArchiveError(f"{source} is not a regular file (pipe, device or folder)")
            return source.open("rb"), True
        except OSError as exc:
            raise ArchiveError(f"cannot open {source}: {exc.strerror}") from None
    return source, False


# ---- random access for tools (not the verifier) ---------------------------------------------


class MemberStream:
    """A member's bytes as a stream (``read``/``readline``), as tools expect."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(size)

    def readline(self, size: int = -1, /) -> bytes:
        return self._inner.readline(size)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


class BundleArchive:
    """Every member of a vetted archive, in memory (read once, forward)."""

    def __init__(self, members: dict[str, Member], data: dict[str, bytes], compressed: bool):
        self.members = members
        self._data = data
        self.compressed = compressed

    @property
    def names(self) -> list[str]:
        return sorted(self.members)

    def open(self, name: str) -> MemberStream:
        return MemberStream(self._data[name])

    def read_small(self, name: str, limit: int) -> bytes:
        """A whole member, refusing anything over ``limit``."""
        member = self.members[name]
        if member.size > limit:
            raise ArchiveError(
                f"{name}: {member.size} bytes, limit {limit} for this kind of member"
            )
        return self._data[name]


@contextmanager
def open_bundle_archive(
    source: Path | BinaryIO | bytes, limits: Limits | None = None
) -> Iterator[BundleArchive]:
    """Read a tar or tar.gz bundle once, vetting every header; raises ArchiveError when unsafe.

    For tools reading bundles the verifier has already accepted: it holds every member in
    memory. The verifier itself streams (harness.verify.bundle)."""
    stream, owned = open_source(source)
    try:
        reader = ArchiveReader(stream, limits or Limits())
        members: dict[str, Member] = {}
        data: dict[str, bytes] = {}
        while (member := reader.next()) is not None:
            members[member.name] = member
            data[member.name] = reader.read(member.size)
        yield BundleArchive(members, data, reader.compressed)
    finally:
        if owned:
            stream.close()
