"""``harness-verify pack DIR|PACK.tar``: check an EU AI Act Article 12 evidence pack offline.

A pack (docs/compliance/eu-ai-act.md) is a folder or a tar of files listed, with their SHA-256
and size, in ``pack-manifest.json``, which ``pack-manifest.sig`` signs: a C2SP signed note,
one signature line, whose text is ``harness-verify/v1/eu-ai-act-pack`` and the manifest's
SHA-256 (hex), exactly as ``manifest.sig`` signs a bundle manifest, by the same key. The checks,
in order; the first failure stops the pass and names the file:

1. ``pack``: the input is a readable folder of regular files, or a safe tar (the bundle's
   reader: fixed headers, no links, no ``..``); anything unsafe exits 4;
2. ``signature``: the note verifies with the manifest's ``signer`` and signs its digest;
3. ``files``: every listed file is there with its digest and size, and no file is unlisted;
   the verifier wheel the manifest names (``wheel``) is one of them;
4. ``bundle``: ``bundle.tar`` verifies in full with the given pins, and its signer is the
   pack's signer (so pinning the bundle's key pins the pack);
5. ``report``: report.json states nothing the verified bundle contradicts (verify/art12.py).

Exit codes as ``harness-verify``: 0 verified and the signer pinned, 1 invalid, 2 usage,
3 verified but the signer not pinned, 4 unreadable or unsafe input.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from . import textsafe
from .archive import ArchiveError, Limits, check_member_name, open_bundle_archive
from .art12 import BUNDLE_NAME, ReportMismatchError, check_report, keep_member
from .bundle import verify_bundle_contents
from .bundlehead import bounded_json
from .canonical import parse_canonical
from .errors import NoteError, VerificationError
from .keyids import key_id
from .note import open_note_signed_once, parse_verifier_key
from .policy import TrustPolicy
from .render import render_json
from .report import EXIT_CODES, ExitCode, Outcome, Status

PACK_FORMAT: Final = "harness-verify/eu-ai-act-pack"
PACK_VERSION: Final = 2
PACK_MANIFEST: Final = "pack-manifest.json"
PACK_SIG: Final = "pack-manifest.sig"
PACK_NOTE_ORIGIN: Final = "harness-verify/v1/eu-ai-act-pack"
"""First line of the note signing the pack manifest; the second is its SHA-256 (hex)."""
REPORT_JSON: Final = "report.json"
VERIFICATION: Final = "verification.json"
REQUIRED: Final = (BUNDLE_NAME, "verification.json", REPORT_JSON, "report.html", "README.txt")
WHEELHOUSE: Final = "wheelhouse"
WHEEL_RE: Final = re.compile(r"harness_verify-[0-9A-Za-z.+!_-]+-py3-none-any\.whl")
MANIFEST_LIMIT: Final = 16 << 20
SIG_LIMIT: Final = 4 << 10
REPORT_LIMIT: Final = 256 << 20
CHECKS: Final = ("pack", "signature", "files", "bundle", "report")


def pack_note_text(manifest_sha256_hex: str) -> str:
    return f"{PACK_NOTE_ORIGIN}\n{manifest_sha256_hex}\n"


class PackCheckError(Exception):
    """A check failed; ``status`` says which exit code it means."""

    def __init__(self, message: str, status: Status = Status.INVALID) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class PackReport:
    pack: str
    status: Status = Status.INVALID
    checks: dict[str, tuple[Outcome, str]] = field(default_factory=dict)
    signer_key_id: str | None = None
    trusted_by: str | None = None
    failure: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.status]

    def to_json(self) -> dict[str, Any]:
        value = {
            "pack": self.pack,
            "status": str(self.status),
            "exit_code": int(self.exit_code),
            "signer_key_id": self.signer_key_id,
            "trusted_by": self.trusted_by,
            "failure": self.failure,
            "checks": [
                {"name": name, "outcome": str(self.checks[name][0]), "detail": self.checks[name][1]}
                for name in CHECKS
            ],
        }
        safe: dict[str, Any] = textsafe.json_safe(value)
        return safe

    def to_text(self) -> str:
        lines = [f"pack {textsafe.text(self.pack)}: {str(self.status).upper()}"]
        for name in CHECKS:
            outcome, detail = self.checks[name]
            lines.append(f"  {name}: {outcome}" + (f" ({textsafe.text(detail)})" if detail else ""))
        if self.signer_key_id:
            lines.append(f"signer key id: {self.signer_key_id}")
        if self.failure:
            lines.append(f"error: {textsafe.text(self.failure)}")
        if self.status is Status.UNTRUSTED:
            lines.append(
                "the signer is not pinned: check its key id out of band, then pass "
                "--trusted-key KEYID"
            )
        return "\n".join(lines) + "\n"


# ---- reading a pack ----------------------------------------------------------------------------


class _Files:
    """The pack's files: name -> (size, sha256), small reads, and the bundle's source."""

    def __init__(self, entries: dict[str, tuple[int, str]]) -> None:
        self.entries = entries

    def read(self, name: str, limit: int) -> bytes:
        raise NotImplementedError

    def bundle(self) -> Path | bytes:
        raise NotImplementedError


class _DirFiles(_Files):
    def __init__(self, root: Path) -> None:
        self.root = root
        entries: dict[str, tuple[int, str]] = {}
        self._walk(root, "", entries)
        super().__init__(entries)

    def _walk(self, folder: Path, prefix: str, entries: dict[str, tuple[int, str]]) -> None:
        with os.scandir(folder) as scan:
            for entry in sorted(scan, key=lambda e: e.name):
                name = prefix + entry.name
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode) and prefix.count("/") < 8:
                    self._walk(Path(entry.path), name + "/", entries)
                elif stat.S_ISREG(info.st_mode):
                    entries[name] = (info.st_size, _sha256_path(Path(entry.path)))
                else:
                    raise PackCheckError(
                        f"{name}: not a regular file or folder (a link or device): refused",
                        Status.UNREADABLE,
                    )

    def read(self, name: str, limit: int) -> bytes:
        with (self.root / name).open("rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise PackCheckError(f"{name}: more than {limit} bytes")
        return data

    def bundle(self) -> Path:
        return self.root / BUNDLE_NAME


class _TarFiles(_Files):
    def __init__(self, path: Path, limits: Limits) -> None:
        try:
            with open_bundle_archive(path, limits) as archive:
                self.data: dict[str, bytes] = {n: archive.open(n).read() for n in archive.names}
        except ArchiveError as exc:
            raise PackCheckError(f"{path.name}: {exc}", Status.UNREADABLE) from None
        super().__init__(
            {
                name: (len(data), hashlib.sha256(data).hexdigest())
                for name, data in self.data.items()
            }
        )

    def read(self, name: str, limit: int) -> bytes:
        data = self.data[name]
        if len(data) > limit:
            raise PackCheckError(f"{name}: more than {limit} bytes")
        return data

    def bundle(self) -> bytes:
        return self.data[BUNDLE_NAME]


def _sha256_path(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def _open(path: Path, limits: Limits) -> _Files:
    try:
        info = path.lstat()
    except OSError as exc:
        raise PackCheckError(f"cannot read {path}: {exc.strerror}", Status.UNREADABLE) from None
    if stat.S_ISDIR(info.st_mode):
        try:
            return _DirFiles(path)
        except OSError as exc:
            raise PackCheckError(f"cannot read {path}: {exc.strerror}", Status.UNREADABLE) from None
    if stat.S_ISREG(info.st_mode):
        return _TarFiles(path, limits)
    raise PackCheckError(f"{path}: not a folder or a tar file", Status.UNREADABLE)


# ---- the checks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Listing:
    files: dict[str, tuple[int, str]]
    signer: str
    signer_id: str
    wheel: str


def _signed_listing(files: _Files) -> _Listing:
    for name in (PACK_MANIFEST, PACK_SIG):
        if name not in files.entries:
            raise PackCheckError(f"{name}: missing (the pack is unsigned or incomplete)")
    data = files.read(PACK_MANIFEST, MANIFEST_LIMIT)
    note = files.read(PACK_SIG, SIG_LIMIT)
    try:
        bounded_json(data, PACK_MANIFEST)
        doc = parse_canonical(data)
    except VerificationError as exc:
        raise PackCheckError(f"{PACK_MANIFEST}: {exc}") from None
    keys = {"files", "format", "signer", "version", "wheel"}
    if type(doc) is not dict or doc.keys() != keys:
        raise PackCheckError(f"{PACK_MANIFEST}: members must be exactly {sorted(keys)}")
    if (doc["format"], doc["version"]) != (PACK_FORMAT, PACK_VERSION):
        raise PackCheckError(
            f"{PACK_MANIFEST}: format {doc['format']!r} version {doc['version']!r} is not "
            f"{PACK_FORMAT} version {PACK_VERSION}",
            Status.UNREADABLE,
        )
    if type(doc["signer"]) is not str or type(doc["wheel"]) is not str:
        raise PackCheckError(f"{PACK_MANIFEST}: signer and wheel must be strings")
    try:
        verifier = parse_verifier_key(doc["signer"])
        opened = open_note_signed_once(note, [doc["signer"]])
    except NoteError as exc:
        raise PackCheckError(f"{PACK_SIG}: {exc}") from None
    if opened.text != pack_note_text(hashlib.sha256(data).hexdigest()):
        raise PackCheckError(f"{PACK_SIG}: signs a different digest than {PACK_MANIFEST} has")
    listed: dict[str, tuple[int, str]] = {}
    if type(doc["files"]) is not list:
        raise PackCheckError(f"{PACK_MANIFEST}: files must be a list")
    for entry in doc["files"]:
        if (
            type(entry) is not dict
            or entry.keys() != {"name", "sha256", "size"}
            or type(entry["name"]) is not str
            or type(entry["size"]) is not int
            or type(entry["sha256"]) is not str
        ):
            raise PackCheckError(f"{PACK_MANIFEST}: a files entry is not {{name, sha256, size}}")
        name = entry["name"]
        try:
            check_member_name(name)
        except ArchiveError as exc:
            raise PackCheckError(f"{PACK_MANIFEST}: {exc}") from None
        if name in listed or name in (PACK_MANIFEST, PACK_SIG):
            raise PackCheckError(f"{PACK_MANIFEST}: lists {name} twice or lists itself")
        listed[name] = (entry["size"], entry["sha256"])
    return _Listing(listed, doc["signer"], key_id(verifier.public_key), doc["wheel"])


def _check_files(files: _Files, listing: _Listing) -> None:
    for name in sorted(set(files.entries) - set(listing.files) - {PACK_MANIFEST, PACK_SIG}):
        raise PackCheckError(f"{name}: not listed in {PACK_MANIFEST} (a file added to the pack)")
    for name, (size, digest) in sorted(listing.files.items()):
        if name not in files.entries:
            raise PackCheckError(f"{name}: listed in {PACK_MANIFEST} but missing")
        if files.entries[name] != (size, digest):
            actual_size, actual = files.entries[name]
            raise PackCheckError(
                f"{name}: SHA-256 {actual} ({actual_size} bytes), {PACK_MANIFEST} says {digest} "
                f"({size} bytes)"
            )
    for name in REQUIRED:
        if name not in listing.files:
            raise PackCheckError(f"{name}: missing from the pack")
    if not WHEEL_RE.fullmatch(listing.wheel) or listing.wheel not in listing.files:
        raise PackCheckError(
            f"{PACK_MANIFEST}: wheel {listing.wheel!r} is not a listed harness_verify wheel"
        )
    for name in listing.files:
        if "/" in name and not (name.startswith(WHEELHOUSE + "/") and name.endswith(".whl")):
            raise PackCheckError(f"{name}: only {WHEELHOUSE}/*.whl may be in a sub-folder")


def _check_verification(data: bytes, ours: str) -> None:
    """verification.json is the producing verifier's output on the bundle, pinned to its
    signer: verified, exit 0, that signer, and the same stores (counts, roots) as this
    verification finds. Its verifier version and check wording may differ from ours."""
    try:
        bounded_json(data, VERIFICATION)
        theirs = json.loads(data)
    except (VerificationError, ValueError) as exc:
        raise PackCheckError(f"{VERIFICATION}: not JSON ({exc})") from None
    mine = json.loads(ours)
    if not isinstance(theirs, dict):
        raise PackCheckError(f"{VERIFICATION}: not a JSON object")
    for key, expected in (
        ("bundle", BUNDLE_NAME),
        ("status", str(Status.VERIFIED)),
        ("exit_code", 0),
        ("signer_key_id", mine["signer_key_id"]),
        ("stores", mine["stores"]),
    ):
        if theirs.get(key) != expected:
            raise PackCheckError(
                f"{VERIFICATION}: {key} is not what verifying {BUNDLE_NAME} gives "
                f"({json.dumps(expected)[:120]})"
            )


def check_pack(path: Path, pins: TrustPolicy, limits: Limits | None = None) -> PackReport:
    """Run every check on a pack folder or tar; never raises for bad input."""
    report = PackReport(pack=path.name or str(path))
    done: list[str] = []

    def passed(name: str, detail: str = "") -> None:
        report.checks[name] = (Outcome.PASSED, detail)
        done.append(name)

    try:
        files = _open(path, limits or Limits())
        passed("pack", f"{len(files.entries)} files")
        listing = _signed_listing(files)
        report.signer_key_id = listing.signer_id
        passed("signature", f"signed by key id {listing.signer_id}")
        _check_files(files, listing)
        passed("files", f"{len(listing.files)} listed files match, wheel {listing.wheel}")
        verified = verify_bundle_contents(
            files.bundle(), keep=keep_member, pins=pins, limits=limits, display_name=BUNDLE_NAME
        )
        bundle = verified.report
        if bundle.status not in (Status.VERIFIED, Status.UNTRUSTED):
            reason = bundle.failure.reason if bundle.failure else str(bundle.status)
            where = (
                f" ({bundle.failure.member})" if bundle.failure and bundle.failure.member else ""
            )
            raise PackCheckError(f"{BUNDLE_NAME}: {bundle.status}: {reason}{where}", bundle.status)
        if bundle.signer_key_id != listing.signer_id:
            raise PackCheckError(
                f"{BUNDLE_NAME}: signed by key id {bundle.signer_key_id}, the pack by "
                f"{listing.signer_id}"
            )
        passed("bundle", str(bundle.status))
        try:
            check_report(
                files.read(REPORT_JSON, REPORT_LIMIT),
                verified.members,
                files.entries[BUNDLE_NAME][1],
                listing.signer_id,
            )
        except (ReportMismatchError, VerificationError, KeyError, TypeError, AttributeError) as exc:
            message = str(exc) if isinstance(exc, ReportMismatchError) else f"report.json: {exc!r}"
            raise PackCheckError(message) from None
        _check_verification(files.read(VERIFICATION, REPORT_LIMIT), render_json(bundle))
        passed("report", "report.json and verification.json agree with the verified bundle")
        report.status = bundle.status
        report.trusted_by = bundle.trusted_by
    except PackCheckError as exc:
        report.status = exc.status
        report.failure = str(exc)
        failed = CHECKS[len(done)]
        report.checks[failed] = (Outcome.FAILED, str(exc))
    except OSError as exc:
        report.status = Status.UNREADABLE
        report.failure = f"cannot read the pack: {exc}"
        report.checks[CHECKS[len(done)]] = (Outcome.FAILED, report.failure)
    for name in CHECKS:
        report.checks.setdefault(name, (Outcome.NOT_RUN, ""))
    return report


def listing_document(files: Mapping[str, bytes], signer: str, wheel: str) -> dict[str, Any]:
    """The pack manifest's document for ``files`` (what the exporter signs)."""
    return {
        "files": [
            {"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
            for n, d in sorted(files.items())
        ],
        "format": PACK_FORMAT,
        "signer": signer,
        "version": PACK_VERSION,
        "wheel": wheel,
    }
