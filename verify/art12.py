"""What the verifier can re-derive of an Article 12 report (report.json) from a verified bundle.

Decision (docs/compliance/eu-ai-act.md §Self-check): the report's *derivation* stays with the
exporter (receipts/euaiact.py), because its sections and wording are changing (issue 15 part 2:
verdict, tasks, timeline, labels) and ``verify/`` must not import ``receipts/``. What
``harness-verify pack`` checks instead is every statement of report.json that the bundle
decides, exactly, so a report edited after export fails even when its digest is re-listed:

- report.json is the RFC 8785 canonical form (one byte string per document);
- ``system``: producer, verifier key and signer key id are the bundle's;
- ``window.runs`` are exactly the bundle's runs;
- ``integrity``: bundle digest, status ``verified``, and per store the member, record count,
  root and checkpoints of the signed manifest;
- ``events``: the (run, store, kind, count) groups are exactly the bundle's records;
- ``periods``: per run, first and last record time and record count;
- every evidence reference anywhere in the document names a store member of the bundle and a
  record in it; a claim citing one record has that record's run, kind and time.

Free text (details, provisions, retention wording) is checked only through the signed pack
manifest: it is the exporter's statement, signed, not something the records prove.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .canonical import parse_canonical
from .errors import VerificationError
from .layout import MANIFEST, store_member
from .lineage import FOLD_ORDER
from .manifest import Manifest, parse_manifest
from .records import MAX_LINE_BYTES, Record, parse_record_line
from .storecheck import iter_store_lines

REPORT_FORMAT: Final = "harness-verify/eu-ai-act-report"
BUNDLE_NAME: Final = "bundle.tar"


class ReportMismatchError(Exception):
    """report.json says something the verified bundle does not."""


def keep_member(name: str) -> bool:
    """Bundle members the check reads: the manifest and the record stores (for
    ``verify_bundle_contents(keep=...)``, so it reads the bytes the verifier checked)."""
    return name == MANIFEST or (
        name.startswith("runs/")
        and "/stores/" in name
        and name.endswith(".jsonl")
        and not name.endswith(".quarantine.jsonl")
    )


def read_records(members: Mapping[str, bytes]) -> tuple[Manifest, dict[str, Record]]:
    """The manifest and every record of the bundle, by ``member#seq``."""
    manifest = parse_manifest(members[MANIFEST])
    records: dict[str, Record] = {}
    for run in manifest.runs:
        for store in FOLD_ORDER:
            member = store_member(run.run, store)
            if member not in members:
                continue
            stream = io.BytesIO(members[member])
            for line in iter_store_lines(stream, member, limit=MAX_LINE_BYTES):
                record = parse_record_line(line, store, run.run)
                records[f"{member}#{record.seq}"] = record
    return manifest, records


def _claims(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object carrying ``evidence``, with its JSON path."""
    if isinstance(value, dict):
        if "evidence" in value:
            yield where, value
        for key in sorted(value):
            yield from _claims(value[key], f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _claims(item, f"{where}[{index}]")


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise ReportMismatchError(f"report.json: {message}")


def _check_evidence(document: dict[str, Any], records: Mapping[str, Record]) -> None:
    for where, claim in _claims(document, "$"):
        refs = claim["evidence"]
        count = claim.get("evidence_count")
        _expect(
            isinstance(refs, list) and type(count) is int and count >= len(refs),
            f"{where}: evidence is not a list of at most evidence_count references",
        )
        cited: list[Record] = []
        for ref in refs:
            _expect(
                isinstance(ref, dict) and ref.keys() == {"member", "seq"},
                f"{where}: an evidence reference is not {{member, seq}}",
            )
            key = f"{ref['member']}#{ref['seq']}"
            _expect(key in records, f"{where} cites {key}, which is no record of {BUNDLE_NAME}")
            cited.append(records[key])
        if "run" in claim:
            for record in cited:
                _expect(
                    record.run == claim["run"],
                    f"{where} is about run {claim['run']} but cites a record of run {record.run}",
                )
        if count == 1 and len(cited) == 1:
            record = cited[0]
            for field in ("kind", "time"):
                if field in claim:
                    _expect(
                        claim[field] == getattr(record, field),
                        f"{where}: {field} {claim[field]!r}, but the record it cites "
                        f"({store_member(record.run, record.store)}#{record.seq}) has "
                        f"{getattr(record, field)!r}",
                    )


def _check_integrity(document: dict[str, Any], manifest: Manifest, bundle_sha256: str) -> None:
    integrity = document.get("integrity")
    if not isinstance(integrity, dict):
        raise ReportMismatchError("report.json: has no integrity section")
    _expect(integrity.get("bundle") == BUNDLE_NAME, f"integrity.bundle is not {BUNDLE_NAME}")
    _expect(
        integrity.get("bundle_sha256") == bundle_sha256,
        f"integrity.bundle_sha256 is not the SHA-256 of {BUNDLE_NAME} ({bundle_sha256})",
    )
    _expect(
        integrity.get("verification_status") == "verified",
        "integrity.verification_status is not verified",
    )
    expected = []
    for run in sorted(manifest.runs, key=lambda r: r.run):
        for store in sorted(run.stores):
            claim = run.stores[store]
            expected.append(
                {
                    "run": run.run,
                    "store": store,
                    "member": store_member(run.run, store),
                    "records": claim.records,
                    "root": claim.root.hex(),
                    "checkpoints": list(claim.checkpoints),
                }
            )
    stores = integrity.get("stores")
    if not isinstance(stores, list):
        raise ReportMismatchError("report.json: integrity.stores is not a list")
    shown = [
        {key: entry.get(key) for key in expected[0]}
        if expected and isinstance(entry, dict)
        else entry
        for entry in stores
    ]
    _expect(
        shown == expected,
        "integrity.stores differs from the signed manifest of the bundle (members, record "
        "counts, roots or checkpoints)",
    )


def _check_counts(document: dict[str, Any], records: Mapping[str, Record]) -> None:
    groups: dict[tuple[str, str, str], int] = {}
    spans: dict[str, list[Record]] = {}
    for record in records.values():
        key = (record.run, record.store, record.kind)
        groups[key] = groups.get(key, 0) + 1
        spans.setdefault(record.run, []).append(record)
    events = document.get("events")
    if not isinstance(events, list):
        raise ReportMismatchError("report.json: events is not a list")
    claimed: dict[tuple[str, str, str], Any] = {}
    for event in events:
        _expect(isinstance(event, dict), "an events entry is not an object")
        claimed[(event.get("run"), event.get("store"), event.get("kind"))] = event.get("count")
    for key in sorted(set(groups) | set(claimed)):
        _expect(
            claimed.get(key) == groups.get(key),
            f"events: {key[0]} {key[1]} {key[2]} counted {claimed.get(key)}, the bundle has "
            f"{groups.get(key, 0)}",
        )
    for period in document.get("periods", []):
        found = spans.get(period.get("run"), [])
        _expect(bool(found), f"periods: run {period.get('run')!r} has no record in the bundle")
        times = [r.time for r in found]
        _expect(
            (period.get("start"), period.get("end"), period.get("records"))
            == (min(times), max(times), len(found)),
            f"periods: run {period.get('run')} start, end or record count differs from the bundle",
        )


def check_report(
    data: bytes, members: Mapping[str, bytes], bundle_sha256: str, signer_key_id: str
) -> None:
    """Raise ReportMismatchError naming the first statement of report.json the bundle denies."""
    try:
        document = parse_canonical(data)
    except VerificationError as exc:
        raise ReportMismatchError(f"report.json: not canonical JSON (RFC 8785): {exc}") from None
    _expect(isinstance(document, dict), "is not a JSON object")
    _expect(document.get("format") == REPORT_FORMAT, f"format is not {REPORT_FORMAT}")
    manifest, records = read_records(members)
    system = document.get("system")
    if not isinstance(system, dict):
        raise ReportMismatchError("report.json: has no system section")
    _expect(
        (system.get("producer"), system.get("verifier_key"), system.get("signer_key_id"))
        == (manifest.producer, manifest.signer, signer_key_id),
        "system: producer, verifier key or signer key id is not the bundle's",
    )
    window = document.get("window")
    _expect(
        isinstance(window, dict) and window.get("runs") == sorted(r.run for r in manifest.runs),
        "window.runs are not the bundle's runs",
    )
    _check_integrity(document, manifest, bundle_sha256)
    _check_counts(document, records)
    _check_evidence(document, records)
