"""Safe, in-memory reading of a bundle archive: never extracted, every member checked.

Why not ``tarfile.extractall`` with a filter: extraction filters have been bypassed again and
again (CVE-2025-4517 and friends). The verifier never touches the file system for members; it
only reads their bytes through ``tarfile``'s stream and accepts nothing but plain regular files
with tame names, within size and count limits. Gzip is detected by its magic number; a gzip
bomb is bounded by the declared-size limits before any data is read.
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
from typing import IO, Any, BinaryIO, Final

from .errors import VerificationError
from .layout import TAR_RECORD_SIZE, canonical_member_order, tar_header_bytes


class ArchiveError(VerificationError):
    """The input is not a safe, readable bundle archive (exit code 4)."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what the verifier will read; defaults suit bundles of ~10^7 records."""

    max_members: int = 100_000
    max_member_bytes: int = 4 << 30
    max_total_bytes: int = 16 << 30


MEMBER_NAME_RE: Final = re.compile(
    r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){0,7}"
)
GZIP_MAGIC: Final = b"\x1f\x8b"
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
    info: tarfile.TarInfo


class BundleArchive:
    """An opened archive whose member table passed every safety check."""

    def __init__(self, tar: tarfile.TarFile, members: dict[str, Member], compressed: bool) -> None:
        self._tar = tar
        self.members = members
        self.compressed = compressed

    @property
    def names(self) -> list[str]:
        return sorted(self.members)

    def open(self, name: str) -> MemberStream:
        """Stream one member's bytes (bounded memory; nothing written anywhere)."""
        member = self.members[name]
        try:
            stream = self._tar.extractfile(member.info)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{name}: cannot read member data: {exc}") from None
        if stream is None:
            raise ArchiveError(f"{name}: not a regular file")
        return MemberStream(stream, name)

    def read_small(self, name: str, limit: int) -> bytes:
        """Read a whole small member (manifest, note, proof), refusing anything over ``limit``."""
        member = self.members[name]
        if member.size > limit:
            raise ArchiveError(
                f"{name}: {member.size} bytes, limit {limit} for this kind of member"
            )
        with self.open(name) as stream:
            data = stream.read(member.size + 1)  # never a limit-sized buffer up front
        if len(data) != member.size:
            raise ArchiveError(f"{name}: archive ended inside the member (truncated)")
        return data


class MemberStream:
    """A member's bytes; low-level decompression/truncation errors become ArchiveError."""

    def __init__(self, inner: IO[bytes], name: str) -> None:
        self._inner = inner
        self._name = name

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{self._name}: archive data unreadable: {exc}") from None

    def readline(self, size: int = -1, /) -> bytes:
        try:
            return self._inner.readline(size)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ArchiveError(f"{self._name}: archive data unreadable: {exc}") from None

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


class _ReadBudget(io.RawIOBase):
    """Caps what tarfile may pull out of the (possibly decompressed) stream.

    tarfile reads PAX and GNU long-name headers whole, with the size the header declares; a
    gzip bomb could declare gigabytes there. Single reads are capped, and no read may go past
    the archive budget (a position in the decompressed stream).
    """

    MAX_SINGLE_READ: Final = (64 << 20) + 1
    """No header we accept comes near; the largest member read whole is the 64 MiB manifest."""

    def __init__(self, inner: Any, budget: int) -> None:
        self._inner = inner
        self._budget = budget

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._inner.seek(offset, whence))

    def tell(self) -> int:
        return int(self._inner.tell())

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > self.MAX_SINGLE_READ:
            raise ArchiveError("archive asks for an oversized read (malformed or hostile header)")
        data: bytes = self._inner.read(size)
        # The budget bounds the position, not the sum of reads: the verifier reads members
        # in several passes, and a genuine bundle must not exhaust it by being re-read.
        if self._inner.tell() > self._budget:
            raise ArchiveError("archive expands beyond the size limit (possible gzip bomb)")
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@contextmanager
def open_bundle_archive(
    source: Path | BinaryIO, limits: Limits | None = None
) -> Iterator[BundleArchive]:
    """Open a tar or tar.gz bundle and vet its member table; raises ArchiveError when unsafe."""
    limits = limits or Limits()
    raw: BinaryIO
    owned = False
    if isinstance(source, Path):
        try:
            if not stat.S_ISREG(source.stat().st_mode):
                raise ArchiveError(f"{source} is not a regular file (pipe, device or folder)")
            raw = source.open("rb")
        except OSError as exc:
            raise ArchiveError(f"cannot open {source}: {exc.strerror}") from None
        owned = True
    else:
        raw = source
    try:
        if not raw.seekable():
            raise ArchiveError("input is not seekable (a pipe or stream): save it to a file")
        magic = raw.read(2)
        raw.seek(0)
        compressed = magic == GZIP_MAGIC
        inner: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        stream = _ReadBudget(inner, limits.max_total_bytes + limits.max_members * 3 * 512)
        try:
            tar = tarfile.open(  # noqa: SIM115 - closed by the ``with tar`` below
                fileobj=stream, mode="r:", encoding="utf-8", errors="surrogateescape"
            )
        except (tarfile.TarError, OSError, EOFError, zlib.error, UnicodeError) as exc:
            raise ArchiveError(f"not a readable tar archive: {exc}") from None
        with tar:
            members = _vet_members(tar, limits)
            _check_canonical_layout(stream, members)
            yield BundleArchive(tar, members, compressed)
    finally:
        if owned:
            raw.close()


def _vet_members(tar: tarfile.TarFile, limits: Limits) -> dict[str, Member]:
    members: dict[str, Member] = {}
    folded: set[str] = set()
    total = 0
    count = 0
    try:
        while True:
            info = tar.next()
            if info is None:
                break
            count += 1
            if count > limits.max_members:
                raise ArchiveError(f"more than {limits.max_members} members")
            name = info.name
            check_member_name(name)
            if info.type not in _REGULAR:
                kind = _KIND_NAMES.get(info.type, f"of type {info.type!r}")
                raise ArchiveError(f"member {name!r} is {kind}; only regular files are allowed")
            if info.size > limits.max_member_bytes:
                raise ArchiveError(
                    f"member {name!r} declares {info.size} bytes, limit {limits.max_member_bytes}"
                )
            total += info.size
            if total > limits.max_total_bytes:
                raise ArchiveError(f"members add up to more than {limits.max_total_bytes} bytes")
            if name in members or name.lower() in folded:
                raise ArchiveError(f"member {name!r} appears twice (or differs only in case)")
            folded.add(name.lower())
            members[name] = Member(name, info.size, info)
    except ArchiveError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error, UnicodeError, ValueError) as exc:
        raise ArchiveError(f"archive is truncated or corrupt: {exc}") from None
    return members


def _read_exact(stream: _ReadBudget, count: int, what: str) -> bytes:
    data = b""
    while len(data) < count:
        chunk = stream.read(min(count - len(data), 1 << 20))
        if not chunk:
            raise ArchiveError(f"archive is truncated in {what}")
        data += chunk
    return data


def _check_canonical_layout(stream: _ReadBudget, members: dict[str, Member]) -> None:
    """Every byte outside member data must be what the exporter writes: each header equals
    ``tar_header_bytes(name, size)``, block padding and the end-of-archive are zeros, and the
    archive ends on a tar record boundary. Member data is covered by the signed digests, so
    with this check no byte of a bundle can change unnoticed (tarfile alone ignores padding,
    checksum trailers and anything after a broken header)."""
    try:
        stream.seek(0)
        position = 0
        in_order = sorted(members.values(), key=lambda m: m.info.offset)
        names = [member.name for member in in_order]
        if names != canonical_member_order(names):
            raise ArchiveError(
                "members are not in the exporter's order (manifest.json, manifest.sig, then "
                "names sorted)"
            )
        for member in in_order:
            info = member.info
            if info.offset != position:
                raise ArchiveError(f"unexpected bytes before member {member.name!r}")
            expected = tar_header_bytes(member.name, member.size)
            header = _read_exact(stream, info.offset_data - info.offset, f"{member.name} header")
            if header != expected:
                raise ArchiveError(
                    f"member {member.name!r} has a header the exporter never writes "
                    "(mode, owner, time, format or padding differ)"
                )
            stream.seek(member.size, io.SEEK_CUR)  # data is covered by the signed digests
            padding = -member.size % tarfile.BLOCKSIZE
            if _read_exact(stream, padding, f"{member.name} padding").count(0) != padding:
                raise ArchiveError(f"member {member.name!r} is followed by non-zero padding")
            position = info.offset_data + member.size + padding
        end_blocks = 2 * tarfile.BLOCKSIZE
        want_trailer = end_blocks + -(position + end_blocks) % TAR_RECORD_SIZE
        trailer = 0
        # Read one byte past the expected trailer at most: never inflate appended zeros.
        while trailer <= want_trailer and (chunk := stream.read(want_trailer + 1 - trailer)):
            if chunk.count(0) != len(chunk):
                raise ArchiveError("bytes after the last member are not the zero end-of-archive")
            trailer += len(chunk)
    except ArchiveError:
        raise
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise ArchiveError(f"archive is truncated or corrupt: {exc}") from None
    if trailer != want_trailer:
        raise ArchiveError(
            f"archive ends with {trailer} zero bytes after the last member, the exporter writes "
            f"exactly {want_trailer} (end-of-archive blocks padded to a {TAR_RECORD_SIZE}-byte "
            "record)"
        )
