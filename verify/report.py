"""The verifier's result: every check run, its outcome, and on failure where and why.

This module is the contract between the checks (``harness.verify.bundle``), the renderers
(text, JSON, JUnit, SARIF in ``harness.verify.render``) and the CLI's exit codes. The JSON
rendering of ``Report`` is a stable format with a schema (schemas/verify-report.schema.json).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Final

from .sealing import largest_unsealed


class ExitCode(IntEnum):
    """Stable, documented process exit codes of ``harness-verify``."""

    VERIFIED = 0
    """Every check passed and the signer is pinned by policy or --trusted-key."""
    INVALID = 1
    """The evidence is invalid: tampered, incomplete, empty, or seal-only."""
    USAGE = 2
    """The command line or the policy file is wrong."""
    UNTRUSTED = 3
    """Every integrity check passed, but no pinned key says who signed it."""
    UNREADABLE = 4
    """The input is not a readable, safe, supported bundle (not a tar, unsafe member, ...)."""
    DIFFERENT = 5
    """``compare`` only: both bundles verified and trusted, but their runs differ."""


class Status(StrEnum):
    """Overall verdict; each maps to one exit code (``EXIT_CODES``)."""

    VERIFIED = "verified"
    UNTRUSTED = "verified-untrusted"
    EMPTY = "empty"
    SEAL_ONLY = "seal-only"
    INVALID = "invalid"
    UNREADABLE = "unreadable"


EXIT_CODES: Final = {
    Status.VERIFIED: ExitCode.VERIFIED,
    Status.UNTRUSTED: ExitCode.UNTRUSTED,
    Status.EMPTY: ExitCode.INVALID,
    Status.SEAL_ONLY: ExitCode.INVALID,
    Status.INVALID: ExitCode.INVALID,
    Status.UNREADABLE: ExitCode.UNREADABLE,
}


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    NOT_RUN = "not-run"
    """A check after the first failure: the verifier stops at the first failure."""


CHECK_ORDER: Final = (
    "archive",
    "manifest-signature",
    "members",
    "records",
    "merkle-roots",
    "consistency-proofs",
    "hmac-chain",
    "receipts",
    "semantics",
    "trust",
)
"""Every check, in the order the verifier runs them (DESIGN §6)."""

CHECK_TITLES: Final = {
    "archive": "archive is a safe, readable tar (no links, devices, traversal, bombs)",
    "manifest-signature": "manifest is canonical, supported, and signed by its declared key",
    "members": "every member is listed with the right size and SHA-256; none extra or missing",
    "records": "every record is canonical JSON with a valid schema, seq and time order",
    "merkle-roots": "signed checkpoints match the RFC 6962 roots and cover every record",
    "consistency-proofs": "consecutive checkpoints are linked by valid consistency proofs",
    "hmac-chain": "every record's HMAC chains (needs --hmac-key)",
    "receipts": "every final artifact has a receipt, and receipts and attestations verify",
    "semantics": "task histories follow the lifecycle; denials, gates and merges are honoured",
    "trust": "the signing key is pinned by --trusted-key or the policy",
}


CHECK_HINTS: Final = {
    "archive": "The file is not a bundle written by `harness export`, or it was damaged or "
    "crafted. Do not extract it; get the bundle again from its producer.",
    "manifest-signature": "The manifest was changed or signed by another key than it declares: "
    "treat the bundle as tampered.",
    "members": "A member was added, removed or changed after export: treat the bundle as "
    "tampered, and re-export it from the original state.",
    "records": "A record was edited, inserted, removed or reordered, or a store is not in "
    "canonical form: treat the bundle as tampered.",
    "merkle-roots": "The records no longer match what the signed checkpoints sealed: treat the "
    "bundle as tampered.",
    "consistency-proofs": "A later checkpoint does not extend an earlier one: the log was "
    "rewritten between checkpoints.",
    "hmac-chain": "Records were rewritten without the HMAC master key, or --hmac-key is not the "
    "key of the run that produced them.",
    "receipts": "A receipt or attestation does not verify or does not match the records: "
    "treat the bundle as tampered.",
    "semantics": "Each record is intact but together they describe an impossible history: the "
    "producer is faulty or the records were forged by a key holder.",
    "trust": "Check the signer's key id out of band, then pin it with --trusted-key KEYID or in "
    "harness-verify.toml ([trust] keys = [...]).",
}
"""What to do when a check fails; carried in Failure.hint."""


@dataclass(frozen=True)
class Failure:
    """Where verification stopped and why; ``hint`` says what to do about it.

    ``check`` and the location (``member``, ``line``, ``seq``) are part of the report format and
    specified per failure in docs/spec/verifier.md §3.0: ``member`` is a bundle member name,
    ``line`` 1-based within it, ``seq`` the record's ``seq`` as read; each is None where that
    table says null (every ``manifest-signature``, ``semantics`` and ``trust`` failure, every
    read error). A second verifier reports the same check and location; ``reason`` and ``hint``
    are wording only.
    """

    check: str
    reason: str
    member: str | None = None
    line: int | None = None
    seq: int | None = None
    hint: str = ""


@dataclass
class CheckResult:
    name: str
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True)
class StoreSummary:
    run: str
    store: str
    records: int
    root: str
    checkpoints: tuple[int, ...]
    first_time: str | None
    last_time: str | None
    kinds: dict[str, int]

    @property
    def largest_unsealed(self) -> int:
        """The most records that were ever past the newest checkpoint (``sealing``)."""
        return largest_unsealed(self.checkpoints, self.records)


@dataclass(frozen=True)
class SandboxSummary:
    """How one runtime run confined its processes, as its records say (issue 10 §1)."""

    run: str
    kind: str
    """The run's sandbox kind (``run.start``): ``bwrap``, or ``none`` when the operator opted
    out."""
    opt_out: bool
    """The operator explicitly allowed running without a sandbox."""
    unsandboxed: tuple[str, ...]
    """Batches whose ``agent.spawn`` profile is not a bubblewrap sandbox."""
    spawns: int


@dataclass(frozen=True)
class ControlSummary:
    """What the control check re-decided for one runtime run (issue 13 §9): its steps and
    their readings, the decisions they provoked (``layer/rule/action`` -> count) and the
    configuration versions after the first, each produced by one of those decisions."""

    run: str
    steps: int
    readings: int
    decisions: dict[str, int]
    versions: int

    def line(self) -> str:
        """``12 steps, 3 decisions and 2 configuration versions re-decided (...)``."""
        total = sum(self.decisions.values())
        shown = ", ".join(f"{key} {n}" for key, n in self.decisions.items())
        return (
            f"{_count(self.steps, 'step')} ({_count(self.readings, 'reading')}), "
            f"{_count(total, 'decision')} and {_count(self.versions, 'configuration version')} "
            "re-decided" + (f": {shown}" if shown else "")
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def unconfined_runs(summaries: list[SandboxSummary]) -> str:
    """One line naming, per run, the batches that ran without a sandbox."""
    parts = []
    for summary in summaries:
        batches = ", ".join(summary.unsandboxed[:3]) + (
            ", ..." if len(summary.unsandboxed) > 3 else ""
        )
        opt_out = " under the operator's recorded opt-out" if summary.opt_out else ""
        parts.append(
            f"run {summary.run}: {len(summary.unsandboxed)} of {summary.spawns} batches "
            f"({batches}){opt_out}"
        )
    return "; ".join(parts)


@dataclass
class Report:
    """Everything the verifier found; renderers turn it into text, JSON, JUnit or SARIF."""

    bundle: str
    status: Status = Status.INVALID
    checks: list[CheckResult] = field(default_factory=list)
    failure: Failure | None = None
    signer_key_id: str | None = None
    trusted_by: str | None = None
    """Where the pin came from: "--trusted-key" or a policy file path."""
    stores: list[StoreSummary] = field(default_factory=list)
    hmac_checked: bool = False
    verifier_version: str = ""
    sandboxes: list[SandboxSummary] = field(default_factory=list)
    """Per runtime run (with ``run.start``), how its agents and gates were confined."""
    controls: list[ControlSummary] = field(default_factory=list)
    """Per runtime run whose semantics verified, what the control check re-decided."""

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_CODES[self.status]

    def check(self, name: str) -> CheckResult:
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(name)


def failed_report(report: Report, failure: Failure, status: Status = Status.INVALID) -> Report:
    """Mark ``failure.check`` failed, every later check not run, and set the verdict."""
    done = {result.name for result in report.checks}
    report.checks.append(CheckResult(failure.check, Outcome.FAILED, failure.reason))
    report.checks.extend(
        CheckResult(name, Outcome.NOT_RUN)
        for name in CHECK_ORDER
        if name not in done and name != failure.check
    )
    report.failure = failure
    report.status = status
    return report
