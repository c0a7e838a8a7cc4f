"""A Sigstore identity as trust for a bundle: ``harness-verify BUNDLE`` and ``gate`` with
``--sigstore-bundle bundle.tar.sigstore.json`` (docs/spec/sigstore.md §4).

The Sigstore bundle must verify, against the operator's trusted root and pinned identities,
over **exactly the bytes the verification read**: the bundle file is opened once, its head is
read for the signer's key id (a hint only), then the single verification pass reads it again
from the start through :class:`HashingReader`, and the Sigstore bundle is checked against the
SHA-256 of what that pass consumed (drained to the end of the file). The manifest's signer then
counts as pinned because the pin is the key id the verified pass itself found; a file replaced
between the two reads only makes the hint miss (not pinned), never a pass over other bytes.

If the Sigstore bundle does not verify (any integrity check, or an identity or issuer not
pinned), the verdict is downgraded to ``verified-untrusted`` (exit 3) with the reason, whatever
else pinned the signer: an explicitly given Sigstore bundle that fails is a finding, not noise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final, TypeVar

from .archive import ArchiveError, ArchiveReader, Limits
from .gate import FileVerdict, GateReport
from .policy import TrustPolicy
from .report import Failure, Report, Status, failed_report
from .sigstore_identity import EXTRA_MISSING, SigstoreTrust

__all__ = ["HashingReader", "SigstoreSetupError", "SigstoreWitness", "prepare_witness"]

_KEY_MEMBER: Final = re.compile(r"keys/([0-9a-f]{64})\.vkey")
MAX_SIGSTORE_BUNDLE: Final = 1 << 20
TRUST_HINT: Final = (
    "The Sigstore bundle must verify for bundle.tar's exact bytes, against the trusted root, "
    "signed by a pinned identity and issuer: check who signed it, and the --trusted-root."
)
T = TypeVar("T")


class SigstoreSetupError(Exception):
    """The Sigstore inputs cannot be used (exit 2): a missing extra, an unreadable file, a
    trusted root ``sigstore`` refuses."""


class HashingReader:
    """A forward reader that hashes every byte it hands out (the verification pass's input)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self._hash = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self._hash.update(data)
        self.count += len(data)
        return data

    def tell(self) -> int:
        """Bytes handed out so far (the progress display asks; reading began at 0)."""
        return self.count

    def fileno(self) -> int:
        """The file's descriptor: its size for the progress display, never for reading."""
        return self._inner.fileno()

    def finish(self, limit: int) -> bytes | None:
        """Read the rest of the input and return the SHA-256 of all of it (``None`` if the
        input is longer than ``limit`` bytes: no signature is checked over an unbounded file)."""
        while self.read(1 << 20):
            if self.count > limit:
                return None
        return self._hash.digest()


def head_signer(handle: IO[bytes], limits: Limits) -> str | None:
    """The key id the bundle's third member names (``keys/<id>.vkey``), or ``None``: a hint
    for the pin; the verification pass decides whether that key signed the manifest."""
    try:
        reader = ArchiveReader(handle, limits)
        member = None
        for _ in range(3):
            member = reader.next()
            if member is None:
                return None
    except ArchiveError:
        return None
    match = _KEY_MEMBER.fullmatch(member.name) if member is not None else None
    return match.group(1) if match else None


@dataclasses.dataclass
class SigstoreWitness:
    """A Sigstore bundle, its trusted root (parsed) and the pins, ready to judge a bundle."""

    trust: SigstoreTrust
    data: bytes
    name: str
    root: object
    """``sigstore.models.TrustedRoot`` (typed loosely: this module must import without it)."""

    @property
    def source(self) -> str:
        return f"sigstore {self.trust.describe()} ({self.trust.source})"

    def pins_for(self, pins: TrustPolicy, signer: str | None) -> TrustPolicy:
        """``pins`` with ``signer`` added (named after the identities) when it is not pinned
        already: the pass then trusts it only if it is the key that signed the manifest."""
        if signer is None or pins.pins(signer):
            return pins
        return dataclasses.replace(
            pins, key_ids=pins.key_ids | {signer}, source=self.source, sigstore=self.trust
        )

    def refusal(self, digest: bytes | None, subject: str) -> str | None:
        """Why the Sigstore bundle does not vouch for these bytes, or ``None`` if it does."""
        if digest is None:
            return f"{subject} is larger than the read limit: not checked against {self.name}"
        from .sigstore_check import verify_sigstore_bundle

        outcome = verify_sigstore_bundle(
            self.data,
            self.name,
            digest,
            subject,
            self.root,  # type: ignore[arg-type]
            self.trust.identities,
        )
        if outcome.status is Status.VERIFIED:
            return None
        failure = outcome.failure
        if failure is None:
            detail = "not verified"
        elif failure.reason.startswith(("identity:", "issuer:", "key:")):
            detail = failure.reason  # already names what failed
        else:
            detail = f"{failure.check}: {failure.reason}"
        return f"Sigstore bundle {self.name} does not vouch for {subject}: {detail}"

    def run(
        self,
        bundle: Path,
        pins: TrustPolicy,
        limits: Limits,
        verify: Callable[[IO[bytes], TrustPolicy], T],
    ) -> tuple[T, str | None]:
        """Open ``bundle`` once, run ``verify`` over a hashing reader of it with the signer
        pinned, and return its result and the refusal (``None``: the Sigstore bundle vouches
        for exactly the bytes ``verify`` read)."""
        with bundle.open("rb") as handle:
            signer = head_signer(handle, limits)
            handle.seek(0)
            reader = HashingReader(handle)
            result = verify(reader, self.pins_for(pins, signer))  # type: ignore[arg-type]
            digest = reader.finish(limits.max_total_bytes + (1 << 30))
        return result, self.refusal(digest, str(bundle))


def prepare_witness(trust: SigstoreTrust, sigstore_bundle: Path) -> SigstoreWitness:
    """Read the Sigstore bundle and parse the trusted root; raises :class:`SigstoreSetupError`."""
    try:
        from .sigstore_check import SigstoreUsageError, load_trusted_root
    except ImportError:
        raise SigstoreSetupError(EXTRA_MISSING) from None
    try:
        with sigstore_bundle.open("rb") as handle:
            data = handle.read(MAX_SIGSTORE_BUNDLE + 1)
    except OSError as exc:
        raise SigstoreSetupError(f"cannot read {sigstore_bundle}: {exc.strerror}") from None
    if len(data) > MAX_SIGSTORE_BUNDLE:
        raise SigstoreSetupError(f"{sigstore_bundle} is larger than {MAX_SIGSTORE_BUNDLE} bytes")
    try:
        root = load_trusted_root(trust.trusted_root, trust.trusted_root_name)
    except SigstoreUsageError as exc:
        raise SigstoreSetupError(str(exc)) from None
    return SigstoreWitness(trust, data, str(sigstore_bundle), root)


def downgrade_report(report: Report, reason: str) -> None:
    """A verified bundle whose Sigstore witness refuses: ``verified-untrusted``, the reason."""
    if report.status is not Status.VERIFIED:
        return
    report.checks = [check for check in report.checks if check.name != "trust"]
    report.trusted_by = None
    failed_report(report, Failure("trust", reason, hint=TRUST_HINT), Status.UNTRUSTED)


def downgrade_gate(report: GateReport, reason: str) -> None:
    """The gate's counterpart: nothing is covered by evidence whose trust is refused."""
    if report.bundle_status is not Status.VERIFIED:
        return
    report.bundle_status = Status.UNTRUSTED
    report.passed = False
    report.trusted_by = None
    report.reason = f"bundle {Status.UNTRUSTED.value}: trust: {reason}"
    report.files = [
        FileVerdict(entry.path, entry.change, "uncovered", "no trusted evidence: " + reason)
        for entry in report.files
    ]
