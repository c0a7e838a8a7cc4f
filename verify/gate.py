"""``harness-verify gate``: may this change merge? Every changed file must be vouched for.

``run_gate(repo, base, head, bundle, pins)`` passes only if

1. the bundle verifies completely (``verify_bundle``: archive, signatures, records, Merkle
   roots, consistency proofs, every receipt, semantics) **and** its signer is pinned by the
   policy; otherwise the gate fails with the bundle's verdict (untrusted: exit 3; unreadable:
   exit 4; invalid or empty: exit 1);
2. every file changed between ``base`` and ``head`` (``git diff-tree``, renames split into a
   delete and an add) is covered by the bundle:

   * added, modified or type-changed: a *final artifact* of the path exists (the latest write
     of a task whose change was merged, across every run of the bundle, latest record time
     wins) and its SHA-256 equals the blob at ``head``;
   * deleted: the last merged action of the bundle on the path is an ``artifact.delete``.

The producing task passed its gates: final artifacts only count tasks whose change was merged
(``MergeFacts``/``FinalArtifacts``, the same definition the receipts use), and the verifier's
semantics check refuses a bundle in which a task merged without passing its gates. Every final
artifact has a verified receipt included in a signed checkpoint (the ``receipts`` check), so a
covered file is covered by a receipt signed by a pinned key.

Git runs as a subprocess with no system or global config, hooks and fsmonitor disabled, no
external diff or textconv, and no ``GIT_*`` variable inherited from the caller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from .archive import ArchiveError, open_bundle_archive
from .errors import VerificationError
from .gitio import GateUsageError, git, resolve_commit
from .layout import store_member
from .lineage import FinalArtifacts, MergeFacts
from .policy import NOT_PINNED_HINT, TrustPolicy
from .records import parse_record_line
from .report import EXIT_CODES, ExitCode, Report, Status
from .storecheck import iter_store_lines

GATE_FORMAT: Final = "harness-verify/gate-report"
GATE_VERSION: Final = 1
GATE_FORMATS: Final = ("text", "json", "sarif", "markdown")

NO_RECEIPT: Final = "no receipt for this file"
CONTENT_DIFFERS: Final = (
    "content differs from the attested write (edited after the agent wrote it?)"
)
DELETION_NOT_ATTESTED: Final = "deletion not attested"

_NULL_OID: Final = frozenset("0")
_CHANGE_NAMES: Final = {"A": "added", "M": "modified", "D": "deleted", "T": "type-changed"}

Verdict = Literal["covered", "uncovered"]


@dataclass(frozen=True)
class FileVerdict:
    path: str
    change: str
    """Git status letter: A (added), M (modified), D (deleted), T (type changed)."""
    verdict: Verdict
    reason: str
    run: str | None = None
    task: str | None = None
    seq: int | None = None
    """Lineage record that vouches for the file (or the closest one found)."""


@dataclass
class GateReport:
    passed: bool
    bundle_status: Status
    reason: str
    files: list[FileVerdict] = field(default_factory=list)
    bundle: str = ""
    base: str = ""
    head: str = ""
    signer_key_id: str | None = None
    trusted_by: str | None = None
    verifier_version: str = ""

    @property
    def exit_code(self) -> ExitCode:
        if self.bundle_status is not Status.VERIFIED:
            return EXIT_CODES[self.bundle_status]
        return ExitCode.VERIFIED if self.passed else ExitCode.INVALID

    @property
    def uncovered(self) -> list[FileVerdict]:
        return [entry for entry in self.files if entry.verdict == "uncovered"]


# ---- git -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: str
    status: str
    new_mode: str
    new_oid: str


def changed_files(repo: Path, base: str, head: str) -> list[Change]:
    """Files changed between two commits (ids), renames split into delete + add, sorted."""
    out = git(
        repo,
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        "--raw",
        base,
        head,
    )
    fields = out.split(b"\0")
    changes: list[Change] = []
    index = 0
    while index + 1 < len(fields):
        meta, raw_path = fields[index], fields[index + 1]
        index += 2
        if not meta.startswith(b":"):
            raise GateUsageError(f"unexpected git diff-tree output: {meta[:80]!r}")
        _old_mode, new_mode, _old_oid, new_oid, status = meta[1:].decode("ascii").split(" ")
        path = raw_path.decode("utf-8", "surrogateescape")
        changes.append(Change(path, status[:1], new_mode, new_oid))
    return sorted(changes, key=lambda change: change.path)


def _blob_digests(repo: Path, oids: list[str]) -> dict[str, str]:
    """SHA-256 (hex) of each blob, read with one ``git cat-file --batch``."""
    if not oids:
        return {}
    out = git(repo, "cat-file", "--batch", stdin="".join(f"{oid}\n" for oid in oids).encode())
    digests: dict[str, str] = {}
    position = 0
    for oid in oids:
        end = out.index(b"\n", position)
        header = out[position:end].decode("ascii").split(" ")
        if len(header) != 3 or header[1] != "blob":
            raise GateUsageError(f"git cat-file: {oid} is not a blob ({' '.join(header)})")
        size = int(header[2])
        body = out[end + 1 : end + 1 + size]
        digests[oid] = hashlib.sha256(body).hexdigest()
        position = end + 1 + size + 1
    return digests


# ---- the bundle's attested actions ----------------------------------------------------------


@dataclass(frozen=True)
class Attested:
    """The last merged action of the bundle on one path."""

    path: str
    kind: str
    """``artifact.write`` (``sha256``: the final artifact digest) or ``artifact.delete``."""
    sha256: str | None
    run: str
    task: str
    seq: int
    time: str


def attested_actions(bundle: Path, run_ids: list[str]) -> dict[str, Attested]:
    """Per path, the latest merged write or delete across the runs of a verified bundle."""
    latest: dict[str, Attested] = {}
    with open_bundle_archive(bundle) as archive:
        for run_id in run_ids:
            merges = MergeFacts()
            member = store_member(run_id, "audit")
            with archive.open(member) as stream:
                for line in iter_store_lines(stream, member):
                    record = parse_record_line(line, "audit", run_id)
                    merges.apply(record.kind, record.body)
            merged = merges.merged_tasks()
            finals = FinalArtifacts(merged)
            member = store_member(run_id, "lineage")
            with archive.open(member) as stream:
                for line in iter_store_lines(stream, member):
                    record = parse_record_line(line, "lineage", run_id)
                    if record.kind not in ("artifact.write", "artifact.delete"):
                        continue
                    finals.apply(record.kind, record.seq, record.body)
                    if merged is not None and record.body.get("task") not in merged:
                        continue
                    path = str(record.body["path"])
                    final = finals.current(path)
                    action = Attested(
                        path,
                        record.kind,
                        final.sha256 if final is not None else None,
                        run_id,
                        str(record.body.get("task", "")),
                        record.seq,
                        record.time,
                    )
                    previous = latest.get(path)
                    if previous is None or (previous.time, previous.run, previous.seq) <= (
                        action.time,
                        action.run,
                        action.seq,
                    ):
                        latest[path] = action
    return latest


# ---- the gate --------------------------------------------------------------------------------


def _judge(change: Change, digest: str | None, action: Attested | None) -> FileVerdict:
    where: dict[str, Any] = {}
    if action is not None:
        where = {"run": action.run, "task": action.task, "seq": action.seq}
    if change.status == "D":
        if action is not None and action.kind == "artifact.delete":
            return FileVerdict(
                change.path, "D", "covered", "deleted by a merged agent task", **where
            )
        reason = DELETION_NOT_ATTESTED
        if action is not None:
            reason += " (the bundle's last attested action on this path is a write)"
        return FileVerdict(change.path, "D", "uncovered", reason, **where)
    if change.status not in ("A", "M", "T"):
        return FileVerdict(change.path, change.status, "uncovered", "unsupported change type")
    if change.new_mode == "160000":
        return FileVerdict(
            change.path, change.status, "uncovered", "submodule changes cannot be attested"
        )
    if action is None:
        return FileVerdict(change.path, change.status, "uncovered", NO_RECEIPT)
    if action.kind == "artifact.delete":
        return FileVerdict(
            change.path,
            change.status,
            "uncovered",
            NO_RECEIPT + " (the bundle's last attested action on this path deletes it)",
            **where,
        )
    if digest is not None and action.sha256 == digest:
        return FileVerdict(
            change.path,
            change.status,
            "covered",
            f"sha256 {digest[:12]}… matches the final write of task {action.task}",
            **where,
        )
    return FileVerdict(change.path, change.status, "uncovered", CONTENT_DIFFERS, **where)


def run_gate(repo: Path, base: str, head: str, bundle: Path, pins: TrustPolicy) -> GateReport:
    """Judge every file changed between ``base`` and ``head`` against a verified bundle.

    Raises GateUsageError when ``repo`` is not a git repository or a ref names no commit.
    """
    from .bundle import verify_bundle

    base_id = resolve_commit(repo, base)
    head_id = resolve_commit(repo, head)
    changes = changed_files(repo, base_id, head_id)
    verified: Report = verify_bundle(bundle, pins=pins)
    report = GateReport(
        passed=False,
        bundle_status=verified.status,
        reason="",
        bundle=str(bundle),
        base=base_id,
        head=head_id,
        signer_key_id=verified.signer_key_id,
        trusted_by=verified.trusted_by,
        verifier_version=verified.verifier_version,
    )
    if verified.status is not Status.VERIFIED:
        failure = verified.failure
        detail = f"{failure.check}: {failure.reason}" if failure is not None else "not verified"
        report.reason = f"bundle {verified.status.value}: {detail}"
        if verified.status is Status.UNTRUSTED:
            report.reason += (
                f"; {NOT_PINNED_HINT}, or commit harness-verify.toml ([trust] keys = [...]) "
                "on the base branch"
            )
        report.files = [
            FileVerdict(c.path, c.status, "uncovered", "no trusted evidence: " + report.reason)
            for c in changes
        ]
        return report
    run_ids = sorted({store.run for store in verified.stores})
    try:
        actions = attested_actions(bundle, run_ids)
    except (ArchiveError, VerificationError, OSError) as exc:  # changed since it was verified
        report.bundle_status = Status.UNREADABLE
        report.reason = f"bundle unreadable on second pass: {exc}"
        return report
    blobs = [
        c.new_oid
        for c in changes
        if c.status != "D" and c.new_mode != "160000" and set(c.new_oid) != _NULL_OID
    ]
    digests = _blob_digests(repo, sorted(set(blobs)))
    report.files = [
        _judge(change, digests.get(change.new_oid), actions.get(change.path)) for change in changes
    ]
    uncovered = report.uncovered
    report.passed = not uncovered
    if uncovered:
        names = ", ".join(entry.path for entry in uncovered[:5])
        more = f" and {len(uncovered) - 5} more" if len(uncovered) > 5 else ""
        report.reason = f"{len(uncovered)} of {len(changes)} changed files uncovered: {names}{more}"
    else:
        report.reason = (
            f"all {len(changes)} changed files are covered by the bundle signed by "
            f"{verified.signer_key_id} (pinned by {verified.trusted_by})"
        )
    return report

