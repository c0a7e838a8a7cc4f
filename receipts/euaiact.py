"""``harness export --eu-ai-act``: an evidence pack for Article 12 of Regulation (EU) 2024/1689.

The pack (docs/compliance/eu-ai-act.md) holds, for the runs whose records fall in a time window:

- ``bundle.tar``: the signed bundle (the same exporter as ``harness export``);
- ``verification.json``: the verifier's own JSON output on it, pinned to the exporting key;
- ``report.json``: canonical JSON (schemas/eu-ai-act-report.schema.json) built from the records
  read back out of the *verified* bundle, never from the state folder, so every claim is backed
  by signed evidence; each claim lists the records (member + seq) that support it;
- ``report.html``: the same report, self-contained (inline CSS, no scripts, no external URLs);
- ``README.txt``: offline verification instructions;
- ``pack-manifest.json``: SHA-256 and size of every other file.

Deterministic: no wall-clock time is written (the only times are record times), keys are
sorted and lists have a stable order, so the same state gives byte-identical pack files; when
``out`` ends in ``.tar`` they go into a tar written with the bundle's fixed member header.

Never in: any secret. Only public key material (key id, verifier key) is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness import __version__
from harness.verify.archive import open_bundle_archive
from harness.verify.bundle import verify_bundle
from harness.verify.canonical import canonical_bytes
from harness.verify.errors import VerificationError
from harness.verify.layout import MANIFEST, plan_member, store_member, tar_member_info
from harness.verify.lineage import FOLD_ORDER, FinalArtifacts, MergeFacts
from harness.verify.manifest import parse_manifest
from harness.verify.packcheck import PACK_SIG, WHEELHOUSE, listing_document, pack_note_text
from harness.verify.policy import TrustPolicy
from harness.verify.records import MAX_LINE_BYTES, TIME_RE, Record, parse_record_line
from harness.verify.render import render_json
from harness.verify.report import Status
from harness.verify.storecheck import iter_store_lines

from .bundle import ExportError, export_bundle
from .euaiact_control import control_section
from .euaiact_html import render_html, render_readme
from .euaiact_tasks import tasks_section
from .euaiact_text import (
    BUNDLE_NAME,
    DELETION_POLICY,
    LIMITATIONS,
    PACK_MANIFEST,
    PROVISIONS,
    README_NAME,
    REGULATION,
    REPORT_HTML,
    REPORT_JSON,
    RETENTION_NOTE,
    SECTION_PROVISIONS,
    VERIFICATION_NAME,
)
from .euaiact_wheel import build_wheel, check_wheel, wheelhouse_files
from .keys import OperatorKeys

REPORT_FORMAT: Final = "harness-verify/eu-ai-act-report"
REPORT_VERSION: Final = 1
MIN_RETENTION_DAYS: Final = 183
"""Six months, rounded up: Art. 19(1) and 26(6) ask for at least six months."""
EVIDENCE_CAP: Final = 50
"""At most this many evidence references per claim; ``evidence_count`` gives the total."""


class PackError(ExportError):
    """The pack cannot be made (no run in the window, the bundle does not verify, bad input)."""


@dataclass(frozen=True)
class PackResult:
    path: Path
    runs: tuple[str, ...]
    key_id: str
    bundle_sha256: str
    status: str
    files: tuple[str, ...]


# ---- run selection ---------------------------------------------------------------------------


def _check_time(value: str | None, what: str) -> None:
    if value is not None and not TIME_RE.fullmatch(value):
        raise PackError(f"{what} must be an RFC 3339 UTC time like 2026-01-01T00:00:00.000000Z")


def _store_times(path: Path, store: str, run_id: str) -> tuple[str, str] | None:
    first: bytes | None = None
    last: bytes | None = None
    with path.open("rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break  # a torn tail: recovery deals with it at export
            if first is None:
                first = line[:-1]
            last = line[:-1]
    if first is None or last is None:
        return None
    return (
        parse_record_line(first, store, run_id).time,
        parse_record_line(last, store, run_id).time,
    )


def run_time_range(state_dir: Path, run_id: str) -> tuple[str, str] | None:
    """First and last record time of a run in the state folder (None if it has no record)."""
    times: list[str] = []
    for store in FOLD_ORDER:
        path = state_dir / "runs" / run_id / f"{store}.jsonl"
        if path.is_file():
            found = _store_times(path, store, run_id)
            if found:
                times.extend(found)
    return (min(times), max(times)) if times else None


def select_runs(
    state_dir: Path, since: str | None, until: str | None, run_ids: Sequence[str] | None = None
) -> list[str]:
    """Runs whose record time range overlaps [since, until] (None = open-ended)."""
    _check_time(since, "--since")
    _check_time(until, "--until")
    root = state_dir / "runs"
    available = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for run_id in run_ids or ():
        if run_id not in available:
            raise PackError(f"no run {run_id!r} in {root}")
    chosen = []
    for run_id in sorted(set(run_ids)) if run_ids else available:
        span = run_time_range(state_dir, run_id)
        if span is None:
            continue
        if (since is None or span[1] >= since) and (until is None or span[0] <= until):
            chosen.append(run_id)
    return chosen


# ---- reading the verified bundle -------------------------------------------------------------


class _Evidence:
    """Capped list of (member, seq) references for one claim."""

    def __init__(self) -> None:
        self.refs: list[dict[str, Any]] = []
        self.count = 0

    def add(self, record: Record) -> None:
        self.count += 1
        if len(self.refs) < EVIDENCE_CAP:
            self.refs.append({"member": store_member(record.run, record.store), "seq": record.seq})

    def fields(self) -> dict[str, Any]:
        return {"evidence": list(self.refs), "evidence_count": self.count}


def _one(record: Record) -> dict[str, Any]:
    evidence = _Evidence()
    evidence.add(record)
    return evidence.fields()


def _read_runs(
    bundle: Path,
) -> tuple[dict[str, Any], dict[str, list[Record]], dict[str, bytes]]:
    """The manifest (as a dict), every record of every run and each run's plan document,
    read from the bundle."""
    records: dict[str, list[Record]] = {}
    plans: dict[str, bytes] = {}
    with open_bundle_archive(bundle) as archive:
        data = archive.read_small(MANIFEST, 64 << 20)
        manifest = parse_manifest(data)
        raw = json.loads(data)
        for run in manifest.runs:
            with contextlib.suppress(KeyError, VerificationError):
                plans[run.run] = archive.read_small(plan_member(run.run), 16 << 20)
            found: list[Record] = []
            for store in FOLD_ORDER:
                member = store_member(run.run, store)
                with archive.open(member) as stream:
                    for line in iter_store_lines(stream, member, limit=MAX_LINE_BYTES):
                        found.append(parse_record_line(line, store, run.run))
            records[run.run] = found
    return raw, records, plans


def _sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


# ---- report sections -------------------------------------------------------------------------


def _periods(runs: dict[str, list[Record]]) -> list[dict[str, Any]]:
    out = []
    for run_id, records in sorted(runs.items()):
        if not records:
            continue
        first = min(records, key=lambda r: (r.time, FOLD_ORDER.index(r.store), r.seq))
        last = max(records, key=lambda r: (r.time, -FOLD_ORDER.index(r.store), r.seq))
        evidence = _Evidence()
        for record in (first, last):
            evidence.add(record)
        starts = [r for r in records if r.kind == "run.start"]
        ends = [r for r in records if r.kind == "run.end"]
        out.append(
            {
                "run": run_id,
                "start": first.time,
                "end": last.time,
                "records": len(records),
                "plan": str(starts[0].body["plan"]) if starts else None,
                "outcome": str(ends[-1].body["outcome"]) if ends else None,
                **evidence.fields(),
            }
        )
    return out


def _actors(runs: dict[str, list[Record]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str, str], _Evidence] = {}
    for run_id, records in sorted(runs.items()):
        for record in records:
            if record.kind in ("artifact.write", "artifact.delete"):
                key = (
                    run_id,
                    "lineage",
                    str(record.body["actor"]),
                    str(record.body["model"] or ""),
                )
            elif record.kind == "model.call":
                key = (run_id, "replay", str(record.body["adapter"]), str(record.body["model"]))
            elif record.kind == "agent.spawn":
                key = (run_id, "audit", str(record.body["adapter"]), "")
            elif record.kind == "command":
                key = (run_id, "control", str(record.body["operator"]), "")
            else:
                continue
            groups.setdefault(key, _Evidence()).add(record)
    roles = {"lineage": "writer", "replay": "model-caller", "audit": "agent", "control": "operator"}
    return [
        {
            "run": run_id,
            "source": store,
            "role": roles[store],
            "actor": actor,
            "model": model or None,
            **evidence.fields(),
        }
        for (run_id, store, actor, model), evidence in sorted(groups.items())
    ]


def _events(runs: dict[str, list[Record]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], _Evidence] = {}
    for run_id, records in sorted(runs.items()):
        for record in records:
            groups.setdefault((run_id, record.store, record.kind), _Evidence()).add(record)
    return [
        {"run": run_id, "store": store, "kind": kind, "count": ev.count, **ev.fields()}
        for (run_id, store, kind), ev in sorted(groups.items())
    ]


def _claim(record: Record, category: str, detail: str, task: str | None) -> dict[str, Any]:
    return {
        "run": record.run,
        "time": record.time,
        "kind": record.kind,
        "category": category,
        "task": task,
        "detail": detail,
        **_one(record),
    }


def _interventions(runs: dict[str, list[Record]]) -> list[dict[str, Any]]:
    out = []
    for _run_id, records in sorted(runs.items()):
        for record in records:
            body = record.body
            if record.kind == "command":
                args = canonical_bytes(body["args"]).decode("utf-8")
                out.append(
                    _claim(
                        record,
                        "operator-command",
                        f"operator {body['operator']} issued {body['command']} {args}",
                        None,
                    )
                )
            elif record.kind == "capsule.approved":
                out.append(
                    _claim(
                        record,
                        "approval",
                        f"intent capsule {body['capsule']} approved: {body['goal']} "
                        f"(expires {body['expires']})",
                        None,
                    )
                )
    return out


def _risks(runs: dict[str, list[Record]]) -> list[dict[str, Any]]:
    out = []
    for _run_id, records in sorted(runs.items()):
        for record in records:
            body = record.body
            kind = record.kind
            if kind == "capability.denied":
                tools = ", ".join(body["tools"])
                out.append(
                    _claim(
                        record,
                        "capability-denied",
                        f"tools {tools} denied: {body['reason']}",
                        str(body["task"]),
                    )
                )
            elif kind == "task.refused":
                out.append(
                    _claim(
                        record,
                        "transition-refused",
                        f"illegal transition {body['from']} -> {body['to']} refused: "
                        f"{body['reason']}",
                        str(body["task"]),
                    )
                )
            elif kind == "gate.result" and not body["passed"]:
                out.append(
                    _claim(
                        record,
                        "gate-failed",
                        f"gate {body['gate']} failed (exit code {body['exit_code']})",
                        str(body["task"]),
                    )
                )
            elif kind == "merge.result" and not body["merged"]:
                out.append(
                    _claim(
                        record,
                        "merge-refused",
                        f"merge of {body['branch']} not done: {body['reason']}",
                        str(body["task"]),
                    )
                )
            elif kind == "capsule.check" and not body["conforms"]:
                violations = "; ".join(body["violations"])
                out.append(
                    _claim(
                        record,
                        "capsule-violation",
                        f"run does not conform to capsule {body['capsule']}: {violations}",
                        str(body["task"]),
                    )
                )
            elif kind == "agent.exit" and body["timed_out"]:
                out.append(
                    _claim(
                        record,
                        "agent-timeout",
                        f"agent of batch {body['batch']} hit its time limit "
                        f"(signal {body['signal']})",
                        None,
                    )
                )
            elif kind == "store.recovered":
                out.append(
                    _claim(
                        record,
                        "store-recovered",
                        f"torn tail of {body['length']} bytes at offset {body['offset']} "
                        "moved to quarantine",
                        None,
                    )
                )
    return out


def _changes(runs: dict[str, list[Record]]) -> dict[str, Any]:
    operations = []
    final = []
    for run_id, records in sorted(runs.items()):
        merges = MergeFacts()
        for record in records:
            if record.store == "audit":
                merges.apply(record.kind, record.body)
        artifacts = FinalArtifacts(merges.merged_tasks())
        by_seq: dict[int, Record] = {}
        for record in records:
            if record.store != "lineage" or not record.kind.startswith("artifact."):
                continue
            artifacts.apply(record.kind, record.seq, record.body)
            by_seq[record.seq] = record
            body = record.body
            operations.append(
                {
                    "run": run_id,
                    "time": record.time,
                    "operation": record.kind.removeprefix("artifact."),
                    "path": str(body["path"]),
                    "sha256": body.get("sha256"),
                    "task": str(body["task"]),
                    "actor": str(body["actor"]),
                    "model": body["model"],
                    **_one(record),
                }
            )
        for artifact in artifacts.final():
            final.append(
                {
                    "run": run_id,
                    "path": artifact.path,
                    "sha256": artifact.sha256,
                    "task": artifact.task,
                    "actor": artifact.actor,
                    "model": artifact.model,
                    "writes": artifact.writes,
                    **_one(by_seq[artifact.seq]),
                }
            )
    return {"final_artifacts": final, "operations": operations}


def _integrity(
    manifest: dict[str, Any], runs: dict[str, list[Record]], bundle_sha: str, status: str
) -> dict[str, Any]:
    stores = []
    for run in sorted(manifest["runs"], key=lambda r: r["run"]):
        records = runs.get(run["run"], [])
        for store in sorted(run["stores"]):
            claim = run["stores"][store]
            evidence = _Evidence()
            last = [r for r in records if r.store == store][-1:]
            for record in last:
                evidence.add(record)
            stores.append(
                {
                    "run": run["run"],
                    "store": store,
                    "member": store_member(run["run"], store),
                    "records": claim["records"],
                    "root": claim["root"],
                    "checkpoints": list(claim["checkpoints"]),
                    **evidence.fields(),
                }
            )
    return {
        "bundle": BUNDLE_NAME,
        "bundle_sha256": bundle_sha,
        "verification_status": status,
        "verification_file": VERIFICATION_NAME,
        "stores": stores,
    }


OFFLINE_VENV: Final = "../harness-verify-env"
"""Where the README's offline install puts its venv: outside the pack, which must hold only
its listed files."""


def _verification(key_id: str, wheel: str, wheelhouse: bool) -> dict[str, Any]:
    """How to verify: always with the verifier wheel the pack carries, never from an index
    (whoever holds a package name there would decide what auditors run)."""
    run = f"pipx run --spec ./{wheel} harness-verify"
    commands = [
        f"{run} pack . --trusted-key {key_id}",
        f"{run} {BUNDLE_NAME} --trusted-key {key_id}",
        f"{run} {BUNDLE_NAME} --trusted-key {key_id} --format json",
    ]
    if wheelhouse:
        commands += [
            "fully offline, with the dependency wheels in wheelhouse/ (built for one platform), "
            "into a virtual environment next to (not inside) the pack folder:",
            f"python3 -m venv {OFFLINE_VENV}",
            f"{OFFLINE_VENV}/bin/pip install --no-index --find-links wheelhouse ./{wheel}",
            f"{OFFLINE_VENV}/bin/harness-verify pack . --trusted-key {key_id}",
        ]
    return {
        "commands": commands,
        "wheel": wheel,
        "expected_exit_code": 0,
        "compare": [
            "the exit code is 0 and the verdict is VERIFIED",
            f"the signer key id printed equals {key_id} (obtain this key id from the "
            "controller through a channel other than this pack)",
            f"the JSON output equals {VERIFICATION_NAME} (apart from the bundle path and the "
            "verifier version if it differs)",
            "the checkpoint roots and record counts equal the integrity section of report.json",
            "the SHA-256 of every pack file equals pack-manifest.json, which "
            "pack-manifest.sig signs with the same key (harness-verify pack checks both)",
        ],
    }


def build_report(
    *,
    bundle: Path,
    status: str,
    keys: OperatorKeys,
    since: str | None,
    until: str | None,
    controller: str,
    retention_days: int,
    system_name: str,
    wheel: str,
    wheelhouse: bool = False,
) -> dict[str, Any]:
    """report.json's document, from the records of the (already verified) bundle."""
    manifest, runs, plans = _read_runs(bundle)
    provisions = []
    for pid, citation, summary, pstatus in PROVISIONS:
        sections = sorted(s for s, ids in SECTION_PROVISIONS.items() if pid in ids)
        provisions.append(
            {
                "id": pid,
                "citation": citation,
                "summary": summary,
                "status": pstatus,
                "sections": sections,
            }
        )
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "regulation": REGULATION,
        "system": {
            "name": system_name,
            "version": __version__,
            "producer": str(manifest["producer"]),
            "signer_key_id": keys.key_id,
            "verifier_key": str(manifest["signer"]),
        },
        "window": {
            "since": since,
            "until": until,
            "runs": sorted(runs),
        },
        "periods": _periods(runs),
        "actors": _actors(runs),
        "events": _events(runs),
        "interventions": _interventions(runs),
        "risks": _risks(runs),
        "tasks": tasks_section(runs),
        "control": control_section(runs, plans),
        "changes": _changes(runs),
        "integrity": _integrity(manifest, runs, _sha256_file(bundle), status),
        "provisions": provisions,
        "section_provisions": {k: list(v) for k, v in sorted(SECTION_PROVISIONS.items())},
        "retention": {
            "period_days": retention_days,
            "minimum_days": MIN_RETENTION_DAYS,
            "controller": controller,
            "deletion_policy": DELETION_POLICY,
            "note": RETENTION_NOTE,
            "provisions": ["art-19-1", "art-26-6"],
        },
        "verification": _verification(keys.key_id, wheel, wheelhouse),
        "limitations": list(LIMITATIONS),
    }


# ---- writing the pack ------------------------------------------------------------------------


def _write_pack_tar(out: Path, files: dict[str, bytes]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with tmp.open("wb") as handle:
        with tarfile.open(
            fileobj=handle, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8"
        ) as tar:
            for name in sorted(files):
                tar.addfile(tar_member_info(name, len(files[name])), io.BytesIO(files[name]))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, out)


def check_pack_out(out: Path, force: bool) -> None:
    """Refuse to write over an existing pack (or anything else) unless ``force``."""
    if out.is_symlink() or (out.exists() and not (out.is_dir() or out.is_file())):
        raise PackError(f"{out}: exists and is not a folder or a file")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise PackError(f"{out}: exists and is not empty; pass --force to replace the pack")
    if out.is_file() and not force:
        raise PackError(f"{out}: exists; pass --force to replace the pack")
    if out.is_dir() and out.name.endswith(".tar"):
        raise PackError(f"{out}: is a folder, not a .tar")


def _write_pack_dir(out: Path, files: dict[str, bytes], force: bool) -> None:
    """Write the pack's files; with ``force``, first remove what an earlier pack left there
    (only regular files at the top and in wheelhouse/; anything else is refused)."""
    out.mkdir(parents=True, exist_ok=True)
    if force:
        stale = []
        for path in sorted(out.iterdir()):
            if path.is_dir() and not path.is_symlink() and path.name == WHEELHOUSE:
                inner = sorted(path.iterdir())
                if any(p.is_symlink() or not p.is_file() for p in inner):
                    raise PackError(f"{path}: holds more than files; not replacing it")
                stale += inner
            elif path.is_file() and not path.is_symlink():
                stale.append(path)
            else:
                raise PackError(f"{path}: not a pack file; not replacing {out}")
        for path in stale:
            path.unlink()
    for name, data in files.items():
        target = out / name
        target.parent.mkdir(exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)


def export_pack(
    state_dir: Path,
    out: Path,
    keys: OperatorKeys,
    *,
    since: str | None,
    until: str | None,
    controller: str,
    retention_days: int = MIN_RETENTION_DAYS,
    system_name: str = "harness-verify",
    run_ids: Sequence[str] | None = None,
    wheel: Path | None = None,
    wheelhouse: Path | None = None,
    force: bool = False,
) -> PackResult:
    """Write the EU AI Act Article 12 evidence pack to ``out`` (a folder, or a ``.tar``).

    ``wheel``: the verifier wheel to carry (default: built from this source tree);
    ``wheelhouse``: a folder of dependency wheels to carry too; ``force``: replace an existing
    pack at ``out`` (refused otherwise)."""
    check_pack_out(out, force)
    if retention_days < MIN_RETENTION_DAYS:
        raise PackError(
            f"retention must be at least {MIN_RETENTION_DAYS} days (six months, Art. 19(1) and "
            "26(6) of Regulation (EU) 2024/1689)"
        )
    if not controller.strip():
        raise PackError("name the controller responsible for keeping the logs (--controller)")
    chosen = select_runs(state_dir, since, until, run_ids)
    if not chosen:
        raise PackError(f"no run in {state_dir / 'runs'} has records in the window")
    extra = [] if wheelhouse is None else wheelhouse_files(wheelhouse)
    with tempfile.TemporaryDirectory(prefix="harness-pack-") as scratch:
        wheel_path = wheel if wheel is not None else build_wheel(Path(scratch) / "wheel")
        wheel_name = check_wheel(wheel_path)
        bundle = Path(scratch) / BUNDLE_NAME
        export_bundle(state_dir, bundle, keys, chosen)
        report = verify_bundle(
            bundle,
            # pinned exactly as the documented auditor command pins it, so that running
            # ``harness-verify bundle.tar --trusted-key KEY --format json`` in the pack folder
            # prints verification.json byte for byte
            pins=TrustPolicy(frozenset({keys.key_id}), "--trusted-key"),
            display_name=BUNDLE_NAME,
        )
        if report.status is not Status.VERIFIED:
            raise PackError(f"the exported bundle does not verify: {report.status}")
        document = build_report(
            bundle=bundle,
            status=str(report.status),
            keys=keys,
            since=since,
            until=until,
            controller=controller,
            retention_days=retention_days,
            system_name=system_name,
            wheel=wheel_name,
            wheelhouse=bool(extra),
        )
        files = {
            BUNDLE_NAME: bundle.read_bytes(),
            VERIFICATION_NAME: render_json(report).encode("ascii"),
            REPORT_JSON: canonical_bytes(document),
            REPORT_HTML: render_html(document).encode("utf-8"),
            README_NAME: render_readme(document).encode("utf-8"),
            wheel_name: wheel_path.read_bytes(),
        }
    for path in extra:
        files[f"{WHEELHOUSE}/{path.name}"] = path.read_bytes()
    signer = keys.note_signer()
    manifest = canonical_bytes(listing_document(files, signer.verifier_key(), wheel_name))
    files[PACK_MANIFEST] = manifest
    files[PACK_SIG] = signer.sign(pack_note_text(hashlib.sha256(manifest).hexdigest()))
    if out.name.endswith(".tar"):
        _write_pack_tar(out, files)
    else:
        _write_pack_dir(out, files, force)
    return PackResult(
        path=out,
        runs=tuple(chosen),
        key_id=keys.key_id,
        bundle_sha256=hashlib.sha256(files[BUNDLE_NAME]).hexdigest(),
        status=str(report.status),
        files=tuple(sorted(files)),
    )


__all__ = [
    "PROVISIONS",
    "PackError",
    "PackResult",
    "build_report",
    "check_pack_out",
    "export_pack",
    "render_html",
    "select_runs",
]
