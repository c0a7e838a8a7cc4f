"""A generator of hostile and broken bundles for the verifier (DESIGN §5, §6, §8).

Nothing here is a hand-made blob: every input is derived, at test time, from a valid bundle the
real exporter writes (``harness.receipts.bundle.export_bundle`` over a run recorded with fixed
keys and a fixed clock), by editing its members and re-signing where needed, or by writing tar
and gzip structures directly (``tarfile`` and raw headers) for the structural attacks.

``build_corpus(folder)`` writes every input into ``folder`` and returns one :class:`Case` per
file: the exit code the CLI must give, the ``status`` of its JSON report and a regular
expression the failure reason must match. Store-level cases are rebuilt into *consistent*,
re-signed bundles so that only the intended check can fail; archive-level cases keep a valid
bundle around the hostile member so that nothing but the hostile member is wrong.

Run it as a script to write the corpus somewhere and list it::

    python -m tests.corpus /tmp/corpus
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import io
import json
import shutil
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.receipts.bundle import export_bundle
from harness.receipts.dsse import sign_envelope
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.canonical import canonical_bytes
from harness.verify.keyids import key_id
from harness.verify.layout import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    MANIFEST,
    MANIFEST_SIG,
    attestation_member,
    checkpoint_member,
    key_member,
    manifest_note_text,
    member_sort_key,
    store_member,
    tar_header_bytes,
    tar_member_info,
)
from harness.verify.note import Signature
from harness.verify.records import RECORD_VERSION

from .evidence_helpers import make_keys

RUN_ID: Final = "run-1"
OTHER_SEED: Final = 2
"""Seed of the attacker's key ("key B"); the operator's key ("key A") is ``make_keys()``."""

TRAILER: Final = r"exporter writes exactly \d+|end-of-archive"
"""What the verifier says when the bytes after the last member are not exactly its end."""

STATUS_BY_EXIT: Final = {
    0: "verified",
    1: "invalid",
    3: "verified-untrusted",
    4: "unreadable",
}

# ------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    """One hostile input and what the verifier must say about it."""

    name: str
    path: Path
    expected_exit: int
    reason_regex: str
    status: str = ""
    """Expected ``status`` of the JSON report; derived from the exit code when empty."""
    check: str | None = None
    """The check expected to fail (``failure.check``), when it is worth pinning."""
    args: tuple[str, ...] = ()
    """Extra CLI arguments (e.g. ``--max-bytes`` for a gzip bomb)."""
    bomb: bool = False
    """Decompresses to far more than it weighs: memory is measured for it."""
    known_bug: str = ""
    """Non-empty: the verifier gets this case wrong today (tests mark it xfail, strict)."""
    budget: bool = False
    """A shape that once cost minutes or gigabytes: the CLI must finish it within the reading
    budget (docs/spec/verifier.md: <= 10 s and <= 256 MiB peak RSS for inputs <= 10 MB)."""

    @property
    def expected_status(self) -> str:
        return self.status or STATUS_BY_EXIT[self.expected_exit]


# ------------------------------------------------------------------------------ keys, clock


def operator_keys() -> OperatorKeys:
    """Key A: the operator's fixed key; the CLI pins its key id with --trusted-key."""
    return make_keys()


def attacker_keys() -> OperatorKeys:
    """Key B: a different fixed key (same HMAC master, which does not matter here)."""
    return make_keys(OTHER_SEED)


class FixedClock:
    """Deterministic record times: one microsecond apart from a fixed start."""

    def __init__(self) -> None:
        self.tick = 0

    def __call__(self) -> str:
        self.tick += 1
        return f"2026-01-01T00:00:{self.tick // 1_000_000:02d}.{self.tick % 1_000_000:06d}Z"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def record_run(
    state: Path, keys: OperatorKeys, run_id: str = RUN_ID, *, small: bool = False
) -> None:
    """Record a run with records in every store and a mid-run checkpoint of all four.

    The export then seals again, so stores that grew after the mid-run checkpoint (audit and
    lineage) carry two checkpoints and a consistency proof. With ``small`` only the audit store
    gets records (2 + 2), the smallest bundle that still has a consistency proof.
    """
    with RunRecorder(state, run_id, keys, clock=FixedClock()) as run:
        if small:
            run.record("audit", "event", {"name": "a", "data": {}})
            run.record("audit", "event", {"name": "b", "data": {}})
            run.checkpoint_all()
            run.record("audit", "event", {"name": "c", "data": {}})
            run.record("audit", "event", {"name": "d", "data": {}})
            return
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "fixed"}})
        run.record("audit", "event", {"name": "task.start", "data": {"task": "t1"}})
        run.record(
            "control",
            "command",
            {"operator": "op", "command": "run", "args": {}, "id": "c1", "revision": 0},
        )
        run.record(
            "replay",
            "model.call",
            {
                "adapter": "scripted",
                "key": _sha("k"),
                "model": "m",
                "request_sha256": _sha("q"),
                "response_sha256": _sha("r"),
            },
        )
        run.record("lineage", "artifact.write", _artifact("src/a.py", 0))
        run.checkpoint_all()
        run.record("lineage", "artifact.write", _artifact("src/b.py", 1))
        run.record("audit", "event", {"name": "gate.passed", "data": {"task": "t1"}})
        run.record("audit", "run.end", {"outcome": "succeeded"})


def _artifact(path: str, step: int) -> dict[str, Any]:
    return {
        "actor": "agent",
        "model": "m",
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "path": path,
        "sha256": _sha(path),
        "step": step,
        "task": "t1",
    }


def export_run(
    folder: Path,
    keys: OperatorKeys,
    *,
    small: bool = False,
    empty: bool = False,
    runs: int = 1,
    name: str = "bundle.tar",
) -> tuple[Path, Path]:
    """Record (unless ``empty``) and export; returns (state folder, bundle path)."""
    state = folder / "state"
    for index in range(runs):
        run_id = RUN_ID if index == 0 else f"run-{index + 1}"
        if empty:
            with RunRecorder(state, run_id, keys, clock=FixedClock()) as run:
                run.checkpoint_all()
        else:
            record_run(state, keys, run_id, small=small)
    out = folder / name
    export_bundle(state, out, keys)
    return state, out


# ------------------------------------------------------------------------------ tar writing


def tar_info(name: str, size: int) -> tarfile.TarInfo:
    """The header the exporter writes for every member (the verifier's own definition)."""
    return tar_member_info(name, size)


def write_tar(members: Iterable[tuple[str, bytes]]) -> bytes:
    """A tar exactly as the exporter writes it (PAX format, UTF-8, fixed headers, in order)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name, data in members:
            tar.addfile(tar_info(name, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def write_tar_infos(entries: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar of arbitrary headers (links, devices, odd names): for structural attacks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def read_members(data: bytes) -> list[tuple[str, bytes]]:
    """The members of a (valid) bundle tar, in archive order."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for info in tar:
            stream = tar.extractfile(info)
            assert stream is not None
            out.append((info.name, stream.read()))
    return out


def member_offsets(data: bytes) -> list[tuple[str, int, int, int]]:
    """(name, header offset, data offset, size) of every member of a valid tar."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return [(i.name, i.offset, i.offset_data, i.size) for i in tar.getmembers()]


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\x00" % (width - 1, value)


def ustar_header(
    name: bytes,
    size: int = 0,
    *,
    kind: bytes = tarfile.REGTYPE,
    linkname: bytes = b"",
    size_field: bytes | None = None,
) -> bytes:
    """One raw 512-byte ustar header (any bytes as name), with a correct checksum."""
    block = bytearray(tarfile.BLOCKSIZE)
    block[0 : len(name)] = name[:100]
    block[100:108] = _octal(0o644, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = size_field if size_field is not None else _octal(size, 12)
    block[136:148] = _octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[157 : 157 + len(linkname)] = linkname[:100]
    block[257:265] = b"ustar\x0000"
    checksum = sum(block)
    block[148:156] = b"%06o\x00 " % checksum
    return bytes(block)


def pax_header(records: dict[bytes, bytes]) -> bytes:
    """A raw PAX extended header (type 'x') carrying ``records`` (values: any bytes)."""
    body = b""
    for key, value in records.items():
        payload = b" " + key + b"=" + value + b"\n"
        length = len(payload) + 1
        while len(str(length).encode()) + len(payload) != length:
            length = len(str(length).encode()) + len(payload)
        body += str(length).encode() + payload
    return ustar_header(b"././@PaxHeader", len(body), kind=tarfile.XHDTYPE) + _padded(body)


def _padded(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % tarfile.BLOCKSIZE)


def raw_tar(blocks: Sequence[bytes]) -> bytes:
    """Concatenate raw headers/data and end the archive as tarfile does (record-padded)."""
    body = b"".join(blocks) + b"\x00" * (2 * tarfile.BLOCKSIZE)
    return body + b"\x00" * (-len(body) % tarfile.RECORDSIZE)


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def gzip_zeros(total: int, chunk: int = 1600 * tarfile.RECORDSIZE) -> bytes:
    """A gzip of ``total`` zero bytes, made fast: one compressed member repeated (a gzip
    file may be several members back to back; readers decompress them as one stream)."""
    count, rest = divmod(total, chunk)
    return _gzip_of_zeros(chunk) * count + (_gzip_of_zeros(rest) if rest else b"")


@functools.cache
def _gzip_of_zeros(size: int) -> bytes:
    return gzip.compress(b"\x00" * size, compresslevel=9, mtime=0)


# ------------------------------------------------------------------------------ re-signing


@dataclass
class Bundle:
    """A bundle's members in memory, editable, and re-signable into a consistent tar."""

    members: dict[str, bytes]
    keys: OperatorKeys

    @classmethod
    def from_tar(cls, data: bytes, keys: OperatorKeys) -> Bundle:
        return cls(dict(read_members(data)), keys)

    def copy(self) -> Bundle:
        return Bundle(dict(self.members), self.keys)

    @property
    def manifest(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.members[MANIFEST])
        return value

    def store(self, store: str, run_id: str = RUN_ID) -> list[bytes]:
        """The lines of a store (without newlines)."""
        return self.members[store_member(run_id, store)].splitlines()

    def set_store(self, store: str, lines: Sequence[bytes], run_id: str = RUN_ID) -> None:
        self.members[store_member(run_id, store)] = b"".join(line + b"\n" for line in lines)

    def checkpoints(self, store: str, run_id: str = RUN_ID) -> list[str]:
        prefix = f"runs/{run_id}/checkpoints/{store}/"
        return sorted(name for name in self.members if name.startswith(prefix))

    def resign(
        self,
        *,
        sign_with: OperatorKeys | None = None,
        declare: OperatorKeys | None = None,
        update: Callable[[dict[str, Any]], None] | None = None,
    ) -> bytes:
        """Rewrite ``manifest.json`` to list the current members and sign it.

        The runs claims are kept as they are (so a tampered store still contradicts what the
        checkpoints sealed). ``declare`` is the key the manifest names as its signer and whose
        public key file the bundle carries; ``sign_with`` the key that actually signs.
        """
        declare = declare or self.keys
        sign_with = sign_with or declare
        body = {n: d for n, d in self.members.items() if n not in (MANIFEST, MANIFEST_SIG)}
        declared_key = declare.note_signer().verifier_key()
        own_keys = [n for n in body if n.startswith("keys/")]
        for name in own_keys:
            del body[name]
        body[key_member(key_id(declare.public_raw))] = declared_key.encode() + b"\n"
        manifest = self.manifest
        manifest["signer"] = declared_key
        manifest["members"] = [
            {"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
            for n, d in sorted(body.items())
        ]
        if update is not None:
            update(manifest)
        data = canonical_bytes(manifest)
        signature = sign_with.note_signer().sign(
            manifest_note_text(hashlib.sha256(data).hexdigest())
        )
        rest = sorted(body.items(), key=lambda item: member_sort_key(item[0]))
        return write_tar([(MANIFEST, data), (MANIFEST_SIG, signature), *rest])

    def tar(self) -> bytes:
        """The members as they are (no re-signing), in exporter order."""
        head = [(n, self.members[n]) for n in (MANIFEST, MANIFEST_SIG) if n in self.members]
        rest = sorted(
            ((n, d) for n, d in self.members.items() if n not in (MANIFEST, MANIFEST_SIG)),
            key=lambda item: member_sort_key(item[0]),
        )
        return write_tar([*head, *rest])


# ------------------------------------------------------------------------------ the corpus


@dataclass
class _Writer:
    folder: Path
    cases: list[Case] = field(default_factory=list)

    def add(
        self,
        name: str,
        data: bytes,
        expected_exit: int,
        reason_regex: str,
        *,
        suffix: str = ".tar",
        **extra: Any,
    ) -> None:
        path = self.folder / f"{name}{suffix}"
        path.write_bytes(data)
        self.cases.append(Case(name, path, expected_exit, reason_regex, **extra))


def build_corpus(folder: Path) -> list[Case]:
    """Write every hostile input into ``folder`` (created) and return the cases."""
    folder.mkdir(parents=True, exist_ok=True)
    work = folder / "_work"
    keys = operator_keys()
    state, base_path = export_run(work / "base", keys)
    base = base_path.read_bytes()
    bundle = Bundle.from_tar(base, keys)
    writer = _Writer(folder)
    writer.add("valid", base, 0, r"^$", status="verified")
    _archive_cases(writer, base)
    _structural_cases(writer, bundle)
    _gzip_cases(writer, base)
    _truncation_cases(writer, base)
    _manifest_cases(writer, bundle)
    _store_cases(writer, bundle, state, work)
    _quarantine_cases(writer, work)
    _cross_run_cases(writer, work)
    _verdict_cases(writer, work)
    _cost_cases(writer, bundle)
    shutil.rmtree(work)
    return writer.cases


def _archive_cases(writer: _Writer, base: bytes) -> None:
    writer.add("not-a-tar", b"this is not an archive\n" * 40, 4, r"not a readable tar archive")
    writer.add("empty-file", b"", 4, r"not a readable tar archive|empty")
    writer.add("empty-tar", write_tar([]), 1, r"no members", status="empty", check="archive")
    writer.add("zeros-only", b"\x00" * tarfile.RECORDSIZE, 1, r"no members", status="empty")
    writer.add(
        "random-bytes",
        hashlib.shake_256(b"corpus").digest(20480),
        4,
        r"not a readable tar archive",
    )
    # A valid bundle followed by a second, unsigned archive's worth of junk.
    writer.add(
        "junk-after-end",
        base + b"junk" * 128,
        4,
        r"end-of-archive|not the zero|truncated",
    )
    # More zero records than the exporter writes: not one byte string per bundle any more.
    writer.add(
        "trailing-zero-records",
        base + b"\x00" * tarfile.RECORDSIZE,
        4,
        TRAILER,
    )


def _hostile(bundle: Bundle, *extra: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    """The valid bundle's members, then hostile entries."""
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = [
        (tar_info(name, len(data)), data)
        for name, data in [
            (MANIFEST, bundle.members[MANIFEST]),
            (MANIFEST_SIG, bundle.members[MANIFEST_SIG]),
            *sorted((n, d) for n, d in bundle.members.items() if n not in (MANIFEST, MANIFEST_SIG)),
        ]
    ]
    return write_tar_infos([*entries, *extra])


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tar_info(name, 0)
    info.type = kind
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info


def _structural_cases(writer: _Writer, bundle: Bundle) -> None:
    payload = b"owned\n"

    def file(name: str) -> tuple[tarfile.TarInfo, bytes]:
        return tar_info(name, len(payload)), payload

    traversal = r"climbs out of the archive|absolute path|outside \[A-Za-z0-9\._-\]"
    for name, member, regex in [
        ("traversal-dotdot", "../x", r"climbs out of the archive \(\.\.\)"),
        ("traversal-nested", "a/../../x", r"climbs out of the archive \(\.\.\)"),
        ("traversal-absolute", "/etc/x", r"is an absolute path"),
        ("traversal-windows-backslash", "C:\\x", r"is an absolute path"),
        ("traversal-windows-slash", "C:/x", r"is an absolute path"),
        ("traversal-unc", "\\\\server\\share\\x", r"is an absolute path"),
        ("traversal-backslash-dotdot", "..\\x", r"climbs out of the archive \(\.\.\)"),
        ("name-backslash", "runs\\run-1\\x", traversal),
        ("name-dot-segment", "runs/./x", traversal),
        ("name-trailing-slash-file", "runs/x/", traversal),
        ("name-control-char", "runs/x\ny", traversal),
        ("name-too-long", "a" * 200, traversal),
    ]:
        writer.add(name, _hostile(bundle, file(member)), 4, regex, check="archive")

    link = r"is a symbolic link; only regular files"
    writer.add(
        "symlink",
        _hostile(bundle, (_special("link", tarfile.SYMTYPE, "/etc/passwd"), None)),
        4,
        link,
    )
    writer.add(
        "symlink-replacing-member",
        _hostile_replacing(bundle, "runs/run-1/stores/audit.jsonl", tarfile.SYMTYPE),
        4,
        link,
    )
    writer.add(
        "hardlink",
        _hostile(bundle, (_special("hard", tarfile.LNKTYPE, MANIFEST), None)),
        4,
        r"is a hard link; only regular files",
    )
    writer.add(
        "hardlink-to-symlink",
        _hostile(
            bundle,
            (_special("s", tarfile.SYMTYPE, "/etc/shadow"), None),
            (_special("h", tarfile.LNKTYPE, "s"), None),
        ),
        4,
        r"is a (symbolic|hard) link; only regular files",
    )
    writer.add(
        "hardlink-before-symlink",
        _hostile(
            bundle,
            (_special("h", tarfile.LNKTYPE, "s"), None),
            (_special("s", tarfile.SYMTYPE, "/etc/shadow"), None),
        ),
        4,
        r"is a hard link; only regular files",
    )
    for name, kind, words in [
        ("char-device", tarfile.CHRTYPE, "a character device"),
        ("block-device", tarfile.BLKTYPE, "a block device"),
        ("fifo", tarfile.FIFOTYPE, "a FIFO"),
        ("directory", tarfile.DIRTYPE, "a directory"),
        ("contiguous-file", tarfile.CONTTYPE, "a contiguous file"),
    ]:
        writer.add(
            name, _hostile(bundle, (_special("node", kind), None)), 4, f"is {words}; only regular"
        )
    # A type tarfile does not know: it skips over its data as if it were a regular file.
    odd = tar_info("odd", 0)
    odd.type = b"Z"
    writer.add("unknown-type", _hostile(bundle, (odd, None)), 4, r"only regular files")

    writer.add(
        "duplicate-member",
        _hostile(bundle, (tar_info(MANIFEST, 2), b"{}")),
        4,
        r"appears twice",
    )
    writer.add(
        "duplicate-store",
        _hostile(
            bundle,
            (
                tar_info("runs/run-1/stores/audit.jsonl", 1),
                b"\n",
            ),
        ),
        4,
        r"appears twice",
    )
    writer.add(
        "case-collision",
        _hostile(bundle, (tar_info("Manifest.json", 2), b"{}")),
        4,
        r"appears twice \(or differs only in case\)",
    )

    # Sizes: a raw header declaring 8 GiB - 1 (ustar's largest) and a PAX size of 1 TiB.
    head = _strip_end(write_tar(list(_ordered(bundle))))
    writer.add(
        "oversize-ustar",
        raw_tar([head, ustar_header(b"big", 8 * 2**30 - 1), b"\x00" * 512]),
        4,
        r"declares \d+ bytes, limit \d+",
    )
    writer.add(
        "oversize-pax",
        raw_tar([head, pax_header({b"size": b"%d" % 2**40}), ustar_header(b"big", 0)]),
        4,
        r"declares \d+ bytes, limit \d+",
    )
    writer.add(
        "negative-size-base256",
        raw_tar([head, ustar_header(b"zz-neg", size_field=b"\xff" * 12)]),
        4,
        r"header the exporter never writes",
    )

    # Non-UTF-8 names: raw bytes in a ustar header, and in a PAX path record.
    writer.add(
        "name-not-utf8-ustar",
        raw_tar([head, ustar_header(b"runs/\xff\xfe.txt", 0)]),
        4,
        r"is not valid UTF-8",
    )
    writer.add(
        "name-not-utf8-pax",
        raw_tar([head, pax_header({b"path": b"runs/caf\xe9"}), ustar_header(b"x", 0)]),
        4,
        r"is not valid UTF-8",
    )
    binary = tar_info("runs/\udcff\udcfe", 0)  # tarfile writes hdrcharset=BINARY
    writer.add(
        "name-not-utf8-pax-binary", _hostile(bundle, (binary, b"")), 4, r"is not valid UTF-8"
    )
    writer.add(
        "name-first-member-not-utf8",
        raw_tar([ustar_header(b"\xc3\x28", 0)]),
        4,
        r"is not valid UTF-8",
    )


def _strip_end(tar: bytes) -> bytes:
    """A tar's bytes up to (not including) its end-of-archive zeros."""
    offsets = member_offsets(tar)
    _, _, data_offset, size = offsets[-1]
    return tar[: data_offset + size + (-size % tarfile.BLOCKSIZE)]


def _ordered(bundle: Bundle) -> list[tuple[str, bytes]]:
    head = [(n, bundle.members[n]) for n in (MANIFEST, MANIFEST_SIG)]
    rest = sorted((n, d) for n, d in bundle.members.items() if n not in (MANIFEST, MANIFEST_SIG))
    return head + rest


def _hostile_replacing(bundle: Bundle, target: str, kind: bytes) -> bytes:
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for name, data in _ordered(bundle):
        if name == target:
            entries.append((_special(name, kind, "/etc/passwd"), None))
        else:
            entries.append((tar_info(name, len(data)), data))
    return write_tar_infos(entries)


def _gzip_cases(writer: _Writer, base: bytes) -> None:
    writer.add("gzip-valid", gzip_bytes(base), 0, r"^$", status="verified", suffix=".tar.gz")
    # The same inside the gzip: 500 MiB of zeros after a valid bundle, in ~0.5 MB.
    writer.add(
        "gzip-valid-plus-zeros",
        gzip_bytes(base) + gzip_zeros(32 * 1600 * tarfile.RECORDSIZE),
        4,
        TRAILER,
        suffix=".tar.gz",
        bomb=True,
    )
    # A member that declares a terabyte: refused from its header, nothing inflated.
    declared = raw_tar([pax_header({b"size": b"%d" % 2**40}), ustar_header(b"bomb", 0)])
    writer.add(
        "gzip-bomb-declared-size",
        gzip_bytes(declared),
        4,
        r"declares \d+ bytes, limit \d+",
        suffix=".tar.gz",
        bomb=True,
    )
    # 500 MiB of zeros (a whole number of tar records) in ~0.5 MB: with a 1 MiB budget the
    # read budget stops it.
    zeros = gzip_zeros(32 * 1600 * tarfile.RECORDSIZE)
    writer.add(
        "gzip-bomb-zeros-budget",
        zeros,
        4,
        r"gzip bomb|expands beyond|zero bytes after the last member",
        suffix=".tar.gz",
        args=("--max-bytes", str(1 << 20)),
        bomb=True,
    )
    # Same with default limits: no members and far more zeros than an end-of-archive record;
    # memory must stay flat while reading.
    writer.add(
        "gzip-bomb-zeros-default",
        zeros,
        4,
        TRAILER,
        check="archive",
        suffix=".tar.gz",
        bomb=True,
    )
    # A header claiming a huge PAX record (tarfile would read it whole): the read cap stops it.
    huge_pax = raw_tar([ustar_header(b"././@PaxHeader", 3 << 30, kind=tarfile.XHDTYPE)])
    writer.add(
        "gzip-bomb-huge-pax-header",
        gzip_bytes(huge_pax[:1024]) + gzip_zeros(64 << 20),
        4,
        r"oversized read|gzip bomb|expands beyond|truncated|not a readable",
        suffix=".tar.gz",
        bomb=True,
    )
    packed = gzip_bytes(base)
    writer.add(
        "gzip-truncated",
        packed[: len(packed) // 2],
        4,
        r"truncated|unreadable|ended|corrupt|not a readable",
        suffix=".tar.gz",
    )
    corrupt = bytearray(packed)
    corrupt[len(corrupt) // 2] ^= 0xFF
    writer.add(
        "gzip-corrupt-stream",
        bytes(corrupt),
        4,
        r".",  # where the damage surfaces depends on the deflate stream; it must be refused
        check="archive",
        suffix=".tar.gz",
    )
    bad_crc = bytearray(packed)
    bad_crc[-8] ^= 0x01  # the CRC-32 of the gzip trailer: every byte inflates fine
    writer.add(
        "gzip-crc-mismatch",
        bytes(bad_crc),
        4,
        r"CRC check failed",
        check="archive",
        suffix=".tar.gz",
    )
    bad_size = bytearray(packed)
    bad_size[-4] ^= 0x01  # ISIZE, the length mod 2^32
    writer.add(
        "gzip-length-mismatch",
        bytes(bad_size),
        4,
        r"Incorrect length",
        check="archive",
        suffix=".tar.gz",
    )
    writer.add(
        "gzip-of-nothing", gzip_bytes(b""), 4, r"not a readable tar archive", suffix=".tar.gz"
    )
    writer.add(
        "gzip-header-only", packed[:10], 4, r"not a readable|truncated|ended", suffix=".tar.gz"
    )
    raw_deflate = zlib.compress(base)
    writer.add("zlib-not-gzip", raw_deflate, 4, r"not a readable tar archive")


def _truncation_cases(writer: _Writer, base: bytes) -> None:
    offsets = member_offsets(base)
    header = offsets[4][1]
    writer.add(
        "truncated-in-header",
        base[: header + 200],
        4,
        r"truncated|end-of-archive|not the zero",
        check="archive",
    )
    writer.add(
        "truncated-at-member-boundary",
        base[:header],
        4,
        r"end-of-archive|truncated",
    )
    store = next(o for o in offsets if o[0].endswith("stores/audit.jsonl"))
    writer.add(
        "truncated-in-data",
        base[: store[2] + store[3] // 2],
        4,
        r"truncated|unexpected end|corrupt",
    )
    first = offsets[0]
    writer.add(
        "truncated-in-first-header",
        base[:300],
        4,
        r"not a readable tar archive|truncated",
    )
    writer.add(
        "truncated-in-manifest",
        base[: first[2] + 100],
        4,
        r"truncated|unexpected end|corrupt",
    )
    writer.add(
        "truncated-end-of-archive",
        _strip_end(base) + b"\x00" * 512,
        4,
        r"end-of-archive",
    )


def _manifest_cases(writer: _Writer, bundle: Bundle) -> None:
    other = attacker_keys()
    proof = next(n for n in bundle.members if "/proofs/" in n)

    missing = bundle.copy()
    del missing.members[proof]
    writer.add(
        "member-missing", missing.tar(), 1, r"listed in manifest\.json but missing", check="members"
    )
    writer.add(
        "member-missing-resigned",
        missing.resign(),
        1,
        r"required by the runs but absent",
        check="members",
    )

    extra = bundle.copy()
    extra.members["notes.txt"] = b"not signed\n"
    writer.add("member-extra", extra.tar(), 1, r"not listed in manifest\.json", check="members")
    writer.add(
        "member-extra-resigned",
        extra.resign(),
        1,
        r"not a member this bundle's runs call for",
        check="members",
    )

    edited = bundle.copy()
    name = store_member(RUN_ID, "control")
    edited.members[name] = edited.members[name].replace(b'"op"', b'"OP"')
    writer.add("member-edited", edited.tar(), 1, r"SHA-256 differs", check="members")

    no_sig = bundle.copy()
    del no_sig.members[MANIFEST_SIG]
    writer.add(
        "manifest-sig-missing", no_sig.tar(), 1, r"no manifest\.sig", check="manifest-signature"
    )
    no_manifest = bundle.copy()
    del no_manifest.members[MANIFEST]
    writer.add(
        "manifest-missing",
        no_manifest.tar(),
        1,
        r"no manifest\.json",
        check="manifest-signature",
    )

    # Declares key A, signed by key B under B's own name: no signature by the declared key.
    writer.add(
        "manifest-signed-by-other-key",
        bundle.resign(sign_with=other),
        1,
        r"no signature from a known key",
        check="manifest-signature",
    )
    # Re-signed by key B but the signature line claims key A's name and id.
    writer.add(
        "manifest-resigned-posing-as-declared-key",
        _forged_signature(bundle, other),
        1,
        r"invalid signature for key",
        check="manifest-signature",
    )
    # The whole manifest re-signed by key B, which it also declares (and the key file is B's):
    # the signature is valid, but the checkpoints are key A's, so nothing else verifies.
    writer.add(
        "manifest-resigned-whole-by-other-key",
        bundle.resign(declare=other),
        1,
        r"no signature from a known key",
        check="merkle-roots",
    )
    # manifest.sig over another manifest (the digest line differs).
    stale = bundle.copy()
    stale.members[MANIFEST_SIG] = bundle.keys.note_signer().sign(manifest_note_text("0" * 64))
    writer.add(
        "manifest-sig-other-digest",
        stale.tar(),
        1,
        r"signs a different manifest digest",
        check="manifest-signature",
    )
    # The key file is not the declared signer's key (it holds key B under key A's name): the
    # manifest signature is checked against the key file, which must be named after its key.
    wrong_key_file = bundle.copy()
    key_name = next(n for n in wrong_key_file.members if n.startswith("keys/"))
    wrong_key_file.members[key_name] = other.note_signer().verifier_key().encode() + b"\n"
    writer.add(
        "key-file-of-other-key",
        _resign_keeping_key_files(wrong_key_file),
        1,
        r"is not the signer's key \(it holds key [0-9a-f]{64}\)",
        check="manifest-signature",
    )
    # The key file is key B, properly named, the manifest (signed by A) names key A: the
    # signature does not verify under the key the bundle carries.
    writer.add(
        "key-file-other-than-declared",
        _resign_keeping_key_files(_with_key_file(bundle, other)),
        1,
        r"no signature from a known key",
        check="manifest-signature",
    )

    def set_version(manifest: dict[str, Any]) -> None:
        manifest["version"] = BUNDLE_VERSION + 1

    writer.add(
        "manifest-unknown-version",
        bundle.resign(update=set_version),
        4,
        rf"version {BUNDLE_VERSION + 1} is not supported",
        check="manifest-signature",
    )

    def set_format(manifest: dict[str, Any]) -> None:
        manifest["format"] = BUNDLE_FORMAT + "-v9"

    writer.add(
        "manifest-unknown-format",
        bundle.resign(update=set_format),
        4,
        r"unknown format",
        check="manifest-signature",
    )

    def add_field(manifest: dict[str, Any]) -> None:
        manifest["x-extra"] = True

    writer.add(
        "manifest-unknown-field",
        bundle.resign(update=add_field),
        1,
        r"unknown \['x-extra'\]",
        check="manifest-signature",
    )

    def inflate_claim(manifest: dict[str, Any]) -> None:
        claim = manifest["runs"][0]["stores"]["control"]
        claim["root"] = "0" * 64

    writer.add(
        "manifest-claim-wrong-root",
        bundle.resign(update=inflate_claim),
        1,
        r"manifest\.json claims \d+ records with root",
        check="merkle-roots",
    )

    spaced = bundle.copy()
    spaced.members[MANIFEST] = spaced.members[MANIFEST].replace(b'{"format":', b'{"format": ', 1)
    writer.add(
        "manifest-not-canonical",
        _sign_raw_manifest(spaced),
        1,
        r"canonical",
        check="manifest-signature",
    )
    dup = bundle.copy()
    dup.members[MANIFEST] = dup.members[MANIFEST].replace(
        b'{"format":', b'{"version":1,"format":', 1
    )
    writer.add(
        "manifest-duplicate-key",
        _sign_raw_manifest(dup),
        1,
        r"duplicate key",
        check="manifest-signature",
    )


def _forged_signature(bundle: Bundle, other: OperatorKeys) -> bytes:
    """A manifest.sig whose line names the declared key A but carries key B's signature."""
    declared = bundle.keys.note_signer()
    text = manifest_note_text(hashlib.sha256(bundle.members[MANIFEST]).hexdigest())
    forged = Signature(
        declared.name, declared.key_hash, other.note_signer().signature(text).signature
    )
    copy = bundle.copy()
    copy.members[MANIFEST_SIG] = text.encode() + b"\n" + forged.to_line().encode()
    return copy.tar()


def _with_key_file(bundle: Bundle, keys: OperatorKeys) -> Bundle:
    """The bundle with its key file replaced by ``keys``' (named after it)."""
    copy = bundle.copy()
    for name in [n for n in copy.members if n.startswith("keys/")]:
        del copy.members[name]
    copy.members[key_member(key_id(keys.public_raw))] = (
        keys.note_signer().verifier_key().encode() + b"\n"
    )
    return copy


def _resign_keeping_key_files(bundle: Bundle) -> bytes:
    """Re-list members and re-sign with the bundle's key, but keep the key files as edited."""
    body = {n: d for n, d in bundle.members.items() if n not in (MANIFEST, MANIFEST_SIG)}
    manifest = bundle.manifest
    manifest["members"] = [
        {"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
        for n, d in sorted(body.items())
    ]
    copy = bundle.copy()
    copy.members[MANIFEST] = canonical_bytes(manifest)
    return _sign_raw_manifest(copy)


def _sign_raw_manifest(bundle: Bundle) -> bytes:
    """Sign ``manifest.json`` exactly as it stands (even if it is not canonical)."""
    data = bundle.members[MANIFEST]
    copy = bundle.copy()
    copy.members[MANIFEST_SIG] = bundle.keys.note_signer().sign(
        manifest_note_text(hashlib.sha256(data).hexdigest())
    )
    return copy.tar()


def _store_cases(writer: _Writer, bundle: Bundle, state: Path, work: Path) -> None:
    audit = bundle.store("audit")
    assert len(audit) >= 4, "the base run must have at least four audit records"

    # An unsealed tail: one more, correctly chained record after the last signed checkpoint.
    later = work / "later"
    shutil.copytree(state, later)
    with RunRecorder(later, RUN_ID, bundle.keys, clock=FixedClock()) as run:
        run.record("audit", "event", {"name": "after.seal", "data": {}})
    tail = bundle.copy()
    tail.members[store_member(RUN_ID, "audit")] = (
        later / "runs" / RUN_ID / "audit.jsonl"
    ).read_bytes()
    writer.add(
        "store-unsealed-tail",
        tail.resign(),
        1,
        r"not covered by any signed checkpoint \(unsealed tail\)",
        check="merkle-roots",
    )

    seq_regex = r"seq \d+ where \d+ was expected"
    for name, lines in [
        ("store-record-deleted", audit[:1] + audit[2:]),
        ("store-record-duplicated", audit[:2] + audit[1:]),
        ("store-records-reordered", [audit[1], audit[0], *audit[2:]]),
        ("store-first-record-deleted", audit[1:]),
    ]:
        edited = bundle.copy()
        edited.set_store("audit", lines)
        writer.add(name, edited.resign(), 1, seq_regex, check="records")

    cut = bundle.copy()
    cut.set_store("audit", audit[:-1])
    writer.add(
        "store-tail-cut",
        cut.resign(),
        1,
        r"signed checkpoint covers \d+ records but the store has \d+ \(records removed",
        check="merkle-roots",
    )
    emptied = bundle.copy()
    emptied.set_store("audit", [])
    writer.add(
        "store-emptied",
        emptied.resign(),
        1,
        r"signed checkpoint covers \d+ records but the store has 0",
        check="merkle-roots",
    )
    torn = bundle.copy()
    torn.members[store_member(RUN_ID, "audit")] = torn.members[store_member(RUN_ID, "audit")][:-1]
    writer.add(
        "store-torn-last-line",
        torn.resign(),
        1,
        r"not terminated by a newline",
        check="records",
    )

    dup_key = bundle.copy()
    first = audit[0]
    v = b'"v":%d' % RECORD_VERSION
    assert v + b"}" in first
    dup_key.set_store("audit", [first.replace(v + b"}", v + b"," + v + b"}"), *audit[1:]])
    writer.add(
        "store-duplicate-json-key", dup_key.resign(), 1, r"duplicate key 'v'", check="records"
    )
    spaced = bundle.copy()
    spaced.set_store("audit", [first.replace(b'{"body":', b'{"body": ', 1), *audit[1:]])
    writer.add(
        "store-non-canonical-spacing",
        spaced.resign(),
        1,
        r"not the RFC 8785 canonical form",
        check="records",
    )
    reordered_keys = bundle.copy()
    swapped = first.replace(b'"store":"audit","time":', b'"time":', 1)
    swapped = swapped.replace(b"," + v + b"}", b',"store":"audit",' + v + b"}", 1)
    reordered_keys.set_store("audit", [swapped, *audit[1:]])
    writer.add(
        "store-non-canonical-key-order",
        reordered_keys.resign(),
        1,
        r"canonical form",
        check="records",
    )
    edited_body = bundle.copy()
    assert b'"fixed"' in first
    edited_body.set_store("audit", [first.replace(b'"fixed"', b'"forged"'), *audit[1:]])
    writer.add(
        "store-record-edited",
        edited_body.resign(),
        1,
        r"Merkle root of the first \d+ records",
        check="merkle-roots",
    )
    wrong_run = bundle.copy()
    wrong_run.set_store("audit", [first.replace(b'"run":"run-1"', b'"run":"run-2"'), *audit[1:]])
    writer.add("store-record-other-run", wrong_run.resign(), 1, r"run", check="records")

    # Swapped checkpoints: two checkpoint files of one store trade contents.
    names = bundle.checkpoints("audit")
    assert len(names) == 2
    swap = bundle.copy()
    swap.members[names[0]], swap.members[names[1]] = (
        bundle.members[names[1]],
        bundle.members[names[0]],
    )
    writer.add(
        "checkpoints-swapped",
        swap.resign(),
        1,
        r"checkpoint size \d+ does not match its name",
        check="merkle-roots",
    )
    # Two stores' equally sized checkpoints trade contents: the origin binds each to its log.
    control = checkpoint_member(RUN_ID, "control", 1)
    replay = checkpoint_member(RUN_ID, "replay", 1)
    across = bundle.copy()
    across.members[control], across.members[replay] = (
        bundle.members[replay],
        bundle.members[control],
    )
    writer.add(
        "checkpoints-swapped-across-stores",
        across.resign(),
        1,
        r"checkpoint origin .* is not",
        check="merkle-roots",
    )
    # A checkpoint signed by key B (properly, under B's name).
    other = attacker_keys()
    foreign = bundle.copy()
    text = foreign.members[names[0]].split(b"\n\n")[0] + b"\n"
    foreign.members[names[0]] = other.note_signer().sign(text)
    writer.add(
        "checkpoint-signed-by-other-key",
        foreign.resign(),
        1,
        r"no signature from a known key",
        check="merkle-roots",
    )

    # A consistency proof that does not connect: one hash altered.
    proof_name = next(n for n in bundle.members if "/proofs/audit/" in n)
    proof = json.loads(bundle.members[proof_name])
    assert proof["proof"], "the audit proof must hold at least one hash"
    digest = proof["proof"][0]
    proof["proof"][0] = ("f" if digest[0] != "f" else "e") + digest[1:]
    bad_proof = bundle.copy()
    bad_proof.members[proof_name] = canonical_bytes(proof)
    writer.add(
        "consistency-proof-altered",
        bad_proof.resign(),
        1,
        r"computed root2? [0-9a-f]+… != expected",
        check="consistency-proofs",
    )
    proof = json.loads(bundle.members[proof_name])
    proof["proof"] = proof["proof"] + [proof["proof"][0]]
    long_proof = bundle.copy()
    long_proof.members[proof_name] = canonical_bytes(proof)
    writer.add(
        "consistency-proof-extra-hash",
        long_proof.resign(),
        1,
        r"consistency|proof",
        check="consistency-proofs",
    )
    proof = json.loads(bundle.members[proof_name])
    proof["store"] = "lineage"
    misbound = bundle.copy()
    misbound.members[proof_name] = canonical_bytes(proof)
    writer.add(
        "consistency-proof-other-log",
        misbound.resign(),
        1,
        r"another log or other sizes",
        check="consistency-proofs",
    )


def export_with_quarantine(folder: Path, keys: OperatorKeys) -> Path:
    """A bundle whose audit store recovered from a torn write: it carries a quarantine member
    and a chained ``store.recovered`` record naming the torn tail's offset, length and hash."""
    state = folder / "state"
    with RunRecorder(state, RUN_ID, keys, clock=FixedClock()) as run:
        run.record("audit", "event", {"name": "before.crash", "data": {}})
    with (state / "runs" / RUN_ID / "audit.jsonl").open("ab") as handle:
        handle.write(b'{"body":{"torn')  # a crash mid-append
    with RunRecorder(state, RUN_ID, keys, clock=FixedClock()) as run:
        run.record("audit", "event", {"name": "after.crash", "data": {}})
    out = folder / "bundle.tar"
    export_bundle(state, out, keys)
    return out


def _quarantine_cases(writer: _Writer, work: Path) -> None:
    keys = operator_keys()
    path = export_with_quarantine(work / "quarantine", keys)
    bundle = Bundle.from_tar(path.read_bytes(), keys)
    writer.add("valid-with-quarantine", path.read_bytes(), 0, r"^$", status="verified")
    name = next(n for n in bundle.members if n.endswith(".quarantine.jsonl"))
    entry = json.loads(bundle.members[name])

    def entry_case(case: str, regex: str, **changes: Any) -> None:
        edited = bundle.copy()
        edited.members[name] = canonical_bytes({**entry, **changes}) + b"\n"
        writer.add(case, edited.resign(), 1, regex, check="records")

    # The entry must be well-formed and hold exactly the bytes it describes ...
    kept = r"kept bytes do not have the stated length and SHA-256"
    entry_case("quarantine-length-mismatch", kept, length=entry["length"] + 1)
    entry_case("quarantine-hash-mismatch", kept, sha256="0" * 64)
    other = b"not what was torn off"
    entry_case("quarantine-data-not-the-torn-tail", kept, data_b64=base64.b64encode(other).decode())
    entry_case("quarantine-entry-of-other-store", r"entry is for store 'control'", store="control")
    entry_case("quarantine-found-not-a-time", r"found must be a record time", found="yesterday")
    entry_case(
        "quarantine-data-not-canonical-base64",
        r"not canonical standard base64",
        data_b64=entry["data_b64"] + "\n",
    )
    # ... and be the tail the chained store.recovered record names.
    tails = r"quarantined tails do not match the store\.recovered records"
    entry_case("quarantine-offset-mismatch", tails, offset=entry["offset"] + 1)
    entry_case(
        "quarantine-other-tail",
        tails,
        data_b64=base64.b64encode(other).decode(),
        length=len(other),
        sha256=hashlib.sha256(other).hexdigest(),
    )
    missing = bundle.copy()
    missing.members[name] = b""
    writer.add(
        "quarantine-emptied",
        missing.resign(),
        1,
        r"quarantined tails do not match",
        check="records",
    )


def _cross_run_cases(writer: _Writer, work: Path) -> None:
    """Two runs with identical records: members swapped between them must not pass."""
    keys = operator_keys()
    _, path = export_run(work / "two-runs", keys, runs=2)
    bundle = Bundle.from_tar(path.read_bytes(), keys)
    writer.add("valid-two-runs", path.read_bytes(), 0, r"^$", status="verified")
    one, two = store_member(RUN_ID, "audit"), store_member("run-2", "audit")
    stores = bundle.copy()
    stores.members[one], stores.members[two] = bundle.members[two], bundle.members[one]
    writer.add(
        "runs-stores-swapped",
        stores.resign(),
        1,
        r"run id 'run-2' is not 'run-1'",
        check="records",
    )
    one, two = checkpoint_member(RUN_ID, "control", 1), checkpoint_member("run-2", "control", 1)
    notes = bundle.copy()
    notes.members[one], notes.members[two] = bundle.members[two], bundle.members[one]
    writer.add(
        "runs-checkpoints-swapped",
        notes.resign(),
        1,
        r"checkpoint origin 'harness-verify/v1/run-2/control' is not",
        check="merkle-roots",
    )


def _verdict_cases(writer: _Writer, work: Path) -> None:
    keys = operator_keys()
    _, seal_only = export_run(work / "seal-only", keys, empty=True)
    writer.add(
        "seal-only",
        seal_only.read_bytes(),
        1,
        r"every store is empty",
        status="seal-only",
        check="records",
    )
    empty_state = work / "no-runs" / "state"
    empty_state.mkdir(parents=True)
    export_bundle(empty_state, work / "no-runs" / "bundle.tar", keys)
    writer.add(
        "no-runs",
        (work / "no-runs" / "bundle.tar").read_bytes(),
        1,
        r"holds no runs",
        status="empty",
        check="records",
    )
    # A complete, self-consistent bundle by another key: integrity holds, trust does not.
    _, foreign = export_run(work / "foreign", attacker_keys())
    writer.add(
        "foreign-signer",
        foreign.read_bytes(),
        3,
        r"not among the pinned keys",
        check="trust",
    )


# ------------------------------------------------------------------------------ cost (issue 9 §3)


def dense_list(size: int) -> bytes:
    """``[[],[],...]``: the JSON with the most values per byte (~20x its size once decoded)."""
    count = max(1, (size - 2) // 3)
    return b"[" + b"[]," * (count - 1) + b"[]]"


def _with_manifest(bundle: Bundle, manifest: bytes, signature: bytes) -> bytes:
    """The bundle's members behind another manifest.json and manifest.sig."""
    copy = bundle.copy()
    copy.members[MANIFEST] = manifest
    copy.members[MANIFEST_SIG] = signature
    return copy.tar()


def _cost_cases(writer: _Writer, bundle: Bundle) -> None:
    junk_sig = b"harness-verify/v1/bundle\n" + b"0" * 64 + "\n\n\u2014 junk AAAA\n".encode()
    # Found: 65 KB of .tar.gz whose manifest is a huge JSON list and whose signature is junk
    # took 34 s and 2.1 GB (parsed before the signature was checked). Now the inflation ratio
    # refuses it while it streams in, before anything is decoded.
    writer.add(
        "cost-manifest-huge-list-gzip",
        gzip_bytes(_with_manifest(bundle, dense_list(30 << 20), junk_sig)),
        4,
        r"inflates to more than \d+ times",
        check="archive",
        suffix=".tar.gz",
        budget=True,
    )
    # The same in a plain tar (no ratio to stop it): the signature is checked on the digest
    # first, so nothing of the list is decoded.
    writer.add(
        "cost-manifest-huge-list-junk-signature",
        _with_manifest(bundle, dense_list(2 << 20), junk_sig),
        1,
        r"^manifest\.sig: ",
        check="manifest-signature",
        budget=True,
    )
    # Validly signed (by the bundle's own key, which anyone can make): the value density is
    # refused before decoding.
    dense = dense_list(2 << 20)
    signed = bundle.keys.note_signer().sign(manifest_note_text(hashlib.sha256(dense).hexdigest()))
    writer.add(
        "cost-manifest-dense-self-signed",
        _with_manifest(bundle, dense, signed),
        1,
        r"denser than any document",
        check="manifest-signature",
        budget=True,
    )
    # A store that declares 3 GiB of zeros in ~3 MB of gzip: refused by the inflation ratio,
    # not hashed (and inflated twice) to the end.
    ordered = _ordered(bundle)
    target = store_member(RUN_ID, "audit")
    index = next(i for i, (name, _) in enumerate(ordered) if name == target)
    head = _strip_end(write_tar(ordered[:index])) + tar_header_bytes(target, 3 << 30)
    writer.add(
        "cost-gzip-store-of-zeros",
        gzip_bytes(head) + gzip_zeros(3 << 30),
        4,
        r"inflates to more than \d+ times",
        check="archive",
        suffix=".tar.gz",
        bomb=True,
        budget=True,
    )

    # A run's attestations, signed by the bundle's key: a DSSE statement and a COSE_Sign1
    # statement that are huge lists of empty containers are refused before decoding.
    dense_dsse = bundle.copy()
    dense_dsse.members[attestation_member(RUN_ID, "lineage.dsse.json")] = sign_envelope(
        "application/vnd.in-toto+json",
        dense_list(1 << 20),
        bundle.keys.signing_key,
        keyid=bundle.keys.key_id,
    )
    writer.add(
        "cost-attestation-dense-statement",
        dense_dsse.resign(),
        1,
        r"lineage\.dsse\.json payload: \d+ JSON values .* denser than any document",
        check="receipts",
        budget=True,
    )
    dense_cose = bundle.copy()
    count = 1 << 20
    dense_cose.members[attestation_member(RUN_ID, "run-summary.cose")] = (
        b"\x9a" + count.to_bytes(4, "big") + b"\x80" * count
    )
    writer.add(
        "cost-cose-dense-statement",
        dense_cose.resign(),
        1,
        r"run-summary\.cose: \d+ CBOR array/map bytes .* denser than any document",
        check="receipts",
        budget=True,
    )


def many_receipts_bundle(folder: Path, receipts: int, *, compress: bool) -> Path:
    """One run with ``receipts`` final artifacts, each with its receipt member."""
    keys = operator_keys()
    state = folder / "state"
    if not state.exists():
        with RunRecorder(state, RUN_ID, keys, clock=FixedClock()) as run:
            run.store("lineage").append_many(
                ("artifact.write", _artifact(f"src/m{i % 37}/f{i}.py", i)) for i in range(receipts)
            )
            run.record("audit", "event", {"name": "done", "data": {}})
    out = folder / ("bundle.tar.gz" if compress else "bundle.tar")
    export_bundle(state, out, keys, compress=compress)
    return out


def many_runs_bundle(folder: Path, tiny_runs: int, big_records: int, *, compress: bool) -> Path:
    """One run with a large lineage store, then ``tiny_runs`` runs of a few records each: the
    shape whose backward reads re-inflated the large member again and again."""
    keys = operator_keys()
    state = folder / "state"
    if not state.exists():
        with RunRecorder(state, "run-0", keys, clock=FixedClock()) as run:
            run.store("lineage").append_many(
                ("artifact.write", _artifact(f"src/big{i % 997}.py", i)) for i in range(big_records)
            )
            run.record("audit", "event", {"name": "done", "data": {}})
        for index in range(tiny_runs):
            record_run(state, keys, f"run-t{index:04d}", small=True)
    out = folder / ("bundle.tar.gz" if compress else "bundle.tar")
    export_bundle(state, out, keys, compress=compress)
    return out


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.corpus FOLDER", file=sys.stderr)
        return 2
    for case in build_corpus(Path(argv[0])):
        print(f"{case.expected_exit}  {case.expected_status:<18} {case.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
