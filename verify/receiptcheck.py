"""``harness-verify receipt``: one receipt against one artifact file, with a verdict.

The per-file check a CI step runs on each changed file. Statuses and exit codes match the
bundle verifier's: verified (0), invalid (1), verified-untrusted (3), unreadable (4).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from . import textsafe
from .errors import VerificationError
from .policy import TrustPolicy
from .receipt import MAX_RECEIPT_BYTES, check_artifact, verify_receipt
from .report import EXIT_CODES, ExitCode, Status

MAX_ARTIFACT_BYTES: Final = 1 << 31


@dataclass
class ReceiptOutcome:
    receipt: str
    artifact: str
    name: str
    status: Status = Status.INVALID
    reason: str = ""
    signer_key_id: str | None = None
    trusted_by: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.status]

    def to_json(self) -> dict[str, Any]:
        """The JSON report; every string (paths, reason, receipt facts) in display form."""
        document = {
            "format": "harness-verify/receipt-report",
            "version": 1,
            "receipt": self.receipt,
            "artifact": self.artifact,
            "name": self.name,
            "status": self.status.value,
            "exit_code": int(self.exit_code),
            "reason": self.reason,
            "signer_key_id": self.signer_key_id,
            "trusted_by": self.trusted_by,
            **self.facts,
        }
        safe: dict[str, Any] = textsafe.json_safe(document)
        return safe

    def to_text(self) -> str:
        """The human report, one ``label: value`` line per fact, values in display form: the
        receipt's content and the paths given are not trusted to be printable or UTF-8."""
        shown = textsafe.text
        verdict = {
            Status.VERIFIED: "VERIFIED",
            Status.UNTRUSTED: "VERIFIED BUT NOT TRUSTED",
            Status.UNREADABLE: "UNREADABLE",
        }.get(self.status, "INVALID")
        lines = [
            f"{verdict}: {shown(self.name)} ({shown(self.artifact)})",
            f"receipt: {shown(self.receipt)}",
        ]
        if self.reason:
            lines.append(f"reason: {shown(self.reason)}")
        if self.signer_key_id:
            lines.append(f"signer key id: {shown(self.signer_key_id)}")
        for key, value in self.facts.items():
            lines.append(f"{shown(key)}: {shown(value)}")
        lines.append(f"exit code {int(self.exit_code)}")
        return "\n".join(lines)


def _read(path: Path, limit: int, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise OSError(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise OSError(f"{what} {path} is larger than {limit} bytes")
    return data


def _read_artifact(path: Path) -> tuple[bytes, str]:
    """The artifact's content and git mode as git would record them: a symbolic link is its
    target text (mode 120000, never followed), a regular file is 100755 if its owner may
    execute it, else 100644."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return os.fsencode(os.readlink(path)), "120000"
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"artifact {path} is not a regular file or a symbolic link")
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return _read(path, MAX_ARTIFACT_BYTES, "artifact"), mode


def check_receipt_file(
    receipt: Path, artifact: Path, name: str, pins: TrustPolicy
) -> ReceiptOutcome:
    """Never raises for bad input: the outcome carries the verdict and the reason."""
    outcome = ReceiptOutcome(str(receipt), str(artifact), name)
    try:
        receipt_bytes = _read(receipt, MAX_RECEIPT_BYTES, "receipt")
        content, mode = _read_artifact(artifact)
    except OSError as exc:
        outcome.status, outcome.reason = Status.UNREADABLE, str(exc)
        return outcome
    try:
        verified = verify_receipt(receipt_bytes)
        outcome.signer_key_id = verified.signer_key_id
        outcome.facts = {
            "run": verified.run,
            "leaf_index": verified.leaf_index,
            "tree_size": verified.tree_size,
            "root": verified.root.hex(),
            "sha256": verified.sha256,
            "mode": verified.mode,
            "certifies": (
                f"{verified.path} (sha256 {verified.sha256}, mode {verified.mode}) is the final "
                f"write of its path in run {verified.run}, by a task whose change was merged, "
                f"as signed by key {verified.signer_key_id}"
            ),
        }
        check_artifact(verified, content, name, mode)
    except VerificationError as exc:
        outcome.status, outcome.reason = Status.INVALID, str(exc)
        return outcome
    if pins.pins(verified.signer_key_id):
        outcome.status, outcome.trusted_by = Status.VERIFIED, pins.source
    else:
        outcome.status = Status.UNTRUSTED
        outcome.reason = "integrity verified but signer not pinned"
    return outcome
