"""``harness-verify gate``: may this change merge? Every changed file must be vouched for.

``run_gate(repo, base, head, bundle, pins)`` passes only if

1. the bundle verifies completely (``verify_bundle``: archive, signatures, records, Merkle
   roots, consistency proofs, every receipt, semantics) **and** its signer is pinned by the
   policy; otherwise the gate fails with the bundle's verdict (untrusted: exit 3; unreadable:
   exit 4; invalid or empty: exit 1);
2. every file changed between ``base`` and ``head`` (``git diff-tree``, renames split into a
   delete and an add) is covered by the bundle:

   * the latest merged action on the path (across every run) leaves exactly the head state
     (content SHA-256 *and* git mode, or absent), and its recorded parent state — walking
     back through earlier merged actions on the path if need be — is exactly the base state;
   * the runs counted were made in this history: their recorded base commit is an ancestor
     of ``head`` (``verify/gatecover.py`` states the rule).

The producing task passed its gates: final artifacts only count tasks whose change was merged
(``MergeFacts``/``FinalArtifacts``, the same definition the receipts use), and the verifier's
semantics check refuses a bundle in which a task merged without passing its gates. Every final
artifact has a verified receipt included in a signed checkpoint (the ``receipts`` check), so a
covered file is covered by a receipt signed by a pinned key.

Git runs as a subprocess with no system or global config, hooks and fsmonitor disabled, no
external diff or textconv, and no ``GIT_*`` variable inherited from the caller (``gitio``).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

from .errors import VerificationError
from .gatecover import (
    BROKEN_HISTORY,
    CONTENT_DIFFERS,
    DELETION_NOT_ATTESTED,
    MODE_DIFFERS,
    NO_RECEIPT,
    OTHER_HISTORY,
    PARENT_DIFFERS,
    PathAction,
    State,
    action_from_record,
    judge_transition,
)
from .gitio import GIT_TIMEOUT_S, GateUsageError, git, git_argv, git_env, git_ok, resolve_commit
from .layout import store_member
from .lineage import MergeFacts
from .policy import NOT_PINNED_HINT, TrustPolicy
from .progress import ProgressSink
from .records import parse_record_line
from .report import EXIT_CODES, ExitCode, Report, Status
from .storecheck import iter_store_lines

__all__ = [
    "BROKEN_HISTORY",
    "CONTENT_DIFFERS",
    "DELETION_NOT_ATTESTED",
    "MODE_DIFFERS",
    "NO_RECEIPT",
    "OTHER_HISTORY",
    "PARENT_DIFFERS",
    "FileVerdict",
    "GateReport",
    "GateUsageError",
    "blob_digests",
    "bundle_history",
    "changed_files",
    "resolve_commit",
    "run_gate",
]

GATE_FORMAT: Final = "harness-verify/gate-report"
GATE_VERSION: Final = 2
"""2: files carry expected_sha256 and actual_sha256 (format 2 of the evidence, issue 15)."""
GATE_FORMATS: Final = ("text", "json", "sarif", "markdown")

GITLINK: Final = "160000"
_CHUNK: Final = 1 << 16
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
    expected_sha256: str | None = None
    """SHA-256 of the content that record leaves (None: a delete, or no record found)."""
    actual_sha256: str | None = None
    """SHA-256 of the file's content at head (None: deleted at head, or a submodule)."""


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
    old_mode: str
    new_mode: str
    old_oid: str
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
        "--no-abbrev",
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
        old_mode, new_mode, old_oid, new_oid, status = meta[1:].decode("ascii").split(" ")
        path = raw_path.decode("utf-8", "surrogateescape")
        changes.append(Change(path, status[:1], old_mode, new_mode, old_oid, new_oid))
    return sorted(changes, key=lambda change: change.path)


def _present(oid: str, mode: str) -> bool:
    """Whether a side of a change has a blob: not git's null id (all zeros), not a gitlink."""
    return oid.strip("0") != "" and mode != GITLINK


def blob_digests(repo: Path, oids: list[str]) -> dict[str, str]:
    """SHA-256 (hex) of each blob, streamed from one ``git cat-file --batch --buffer``.

    Every id is written to a temporary file first and given to git as its standard input, so
    git streams the objects back without waiting for a request per object (one pipe, no
    deadlock, no thread); each body is hashed in chunks, so memory stays at one chunk whatever
    the blob's size.
    """
    digests: dict[str, str] = {}
    if not oids:
        return digests
    with tempfile.TemporaryFile() as requests:
        requests.write("".join(f"{oid}\n" for oid in oids).encode("ascii"))
        requests.seek(0)
        try:
            proc = subprocess.Popen(
                git_argv("cat-file", "--batch", "--buffer"),
                cwd=repo,
                env=git_env(),
                stdin=requests,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise GateUsageError(f"cannot run git cat-file: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    try:
        for oid in oids:
            digests[oid] = _read_blob_digest(proc.stdout, oid)
    finally:
        proc.stdout.close()
        proc.wait(timeout=GIT_TIMEOUT_S)
    return digests


def _read_blob_digest(out: IO[bytes], oid: str) -> str:
    """Hash the next object of ``git cat-file --batch`` output, which must be blob ``oid``."""
    header = out.readline(512).decode("ascii", "replace").split()
    if len(header) != 3 or header[0] != oid or header[1] != "blob" or not header[2].isdigit():
        raise GateUsageError(f"git cat-file: {oid} is not a blob ({' '.join(header)})")
    remaining = int(header[2])
    digest = hashlib.sha256()
    while remaining:
        chunk = out.read(min(remaining, _CHUNK))
        if not chunk:
            raise GateUsageError(f"git cat-file: {oid} ended early")
        digest.update(chunk)
        remaining -= len(chunk)
    if out.read(1) != b"\n":
        raise GateUsageError(f"git cat-file: {oid}: unexpected output")
    return digest.hexdigest()


# ---- the bundle's attested actions ----------------------------------------------------------


@dataclass
class BundleHistory:
    """Per path, the merged actions of a verified bundle; per run, its recorded base commit."""

    actions: dict[str, list[PathAction]] = field(default_factory=dict)
    base_commits: dict[str, str | None] = field(default_factory=dict)


def _stores_kept(name: str) -> bool:
    """The members the gate folds: every run's audit and lineage store."""
    return name.startswith("runs/") and name.endswith(
        ("/stores/audit.jsonl", "/stores/lineage.jsonl")
    )


def bundle_history(members: Mapping[str, bytes], run_ids: list[str]) -> BundleHistory:
    """Fold the verified audit and lineage stores of a bundle into merged path histories.

    ``members`` are the bytes the verification read (``verify_bundle_contents``): the gate
    never reopens the bundle, so it judges exactly the bytes that were verified.
    """
    history = BundleHistory()
    for run_id in run_ids:
        merges = MergeFacts()
        base_commit: str | None = None
        member = store_member(run_id, "audit")
        for line in iter_store_lines(io.BytesIO(members[member]), member):
            record = parse_record_line(line, "audit", run_id)
            merges.apply(record.kind, record.body)
            if record.kind == "run.start":
                base_commit = str(record.body["base_commit"])
        history.base_commits[run_id] = base_commit
        merged = merges.merged_tasks()
        member = store_member(run_id, "lineage")
        for line in iter_store_lines(io.BytesIO(members[member]), member):
            record = parse_record_line(line, "lineage", run_id)
            if record.kind not in ("artifact.write", "artifact.delete"):
                continue
            if merged is not None and record.body.get("task") not in merged:
                continue
            action = action_from_record(run_id, record.kind, record.seq, record.time, record.body)
            history.actions.setdefault(action.path, []).append(action)
    return history


def _runs_in_history(repo: Path, head: str, history: BundleHistory) -> set[str]:
    """Runs whose recorded base commit is in ``head``'s history (same repository, and a state
    the change descends from); a run without one (no runtime records) is in no history."""
    commits = {commit for commit in history.base_commits.values() if commit is not None}
    ancestors = {
        commit
        for commit in commits  # one git call per distinct base commit, not per run
        if git_ok(repo, "merge-base", "--is-ancestor", commit, head)
    }
    return {run for run, commit in history.base_commits.items() if commit in ancestors}


# ---- the gate --------------------------------------------------------------------------------


def _judge(
    change: Change,
    digests: dict[str, str],
    actions: list[PathAction],
    foreign: list[PathAction],
) -> FileVerdict:
    def state(oid: str, mode: str) -> State:
        return (digests[oid], mode) if _present(oid, mode) else None

    gitlink = GITLINK in (change.old_mode, change.new_mode)
    coverage = judge_transition(
        None if gitlink else state(change.old_oid, change.old_mode),
        None if gitlink else state(change.new_oid, change.new_mode),
        actions,
        gitlink=gitlink,
    )
    reason = coverage.reason
    if not coverage.covered and not actions and foreign:
        reason = f"{OTHER_HISTORY} (run {foreign[0].run}: base commit not an ancestor of head)"
    head_state = None if gitlink else state(change.new_oid, change.new_mode)
    where: dict[str, Any] = {"actual_sha256": None if head_state is None else head_state[0]}
    if coverage.evidence is not None:
        evidence = coverage.evidence
        where |= {"run": evidence.run, "task": evidence.task, "seq": evidence.seq}
        where["expected_sha256"] = None if evidence.result is None else evidence.result[0]
    verdict: Verdict = "covered" if coverage.covered else "uncovered"
    return FileVerdict(change.path, change.status, verdict, reason, **where)


def run_gate(
    repo: Path,
    base: str,
    head: str,
    bundle: Path,
    pins: TrustPolicy,
    source: IO[bytes] | None = None,
    progress: ProgressSink | None = None,
) -> GateReport:
    """Judge every file changed between ``base`` and ``head`` against a verified bundle.

    ``source``, when given, is the already opened bundle read instead of ``bundle`` (the
    Sigstore witness hashes exactly what the verification reads: sigstore_bind). ``progress``
    is told how the bundle's verification goes (the CLI draws it on standard error).
    Raises GateUsageError when ``repo`` is not a git repository or a ref names no commit.
    """
    from .bundle import verify_bundle_contents

    base_id = resolve_commit(repo, base)
    head_id = resolve_commit(repo, head)
    changes = changed_files(repo, base_id, head_id)
    contents = verify_bundle_contents(
        bundle if source is None else source,  # type: ignore[arg-type]
        keep=_stores_kept,
        pins=pins,
        progress=progress,
        display_name=str(bundle),
    )
    verified: Report = contents.report
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
        history = bundle_history(contents.members, run_ids)
    except (KeyError, VerificationError) as exc:  # cannot happen for verified members
        report.bundle_status = Status.INVALID
        report.passed = False
        report.reason = f"verified stores could not be folded: {exc}"
        return report
    in_history = _runs_in_history(repo, head_id, history)
    oids = sorted(
        {c.old_oid for c in changes if _present(c.old_oid, c.old_mode)}
        | {c.new_oid for c in changes if _present(c.new_oid, c.new_mode)}
    )
    digests = blob_digests(repo, oids)
    report.files = []
    for change in changes:
        path_actions = history.actions.get(change.path, [])
        ours = [action for action in path_actions if action.run in in_history]
        foreign = [action for action in path_actions if action.run not in in_history]
        report.files.append(_judge(change, digests, ours, foreign))
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
