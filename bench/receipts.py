"""Receipts benchmark: artifact receipts, COSE, DSSE and the bundle "receipts" check.

Prints one JSON line. Run: ``python bench/receipts.py --artifacts 1000``.

A run writing ``--artifacts`` final artifacts (plus ``--artifacts // 4`` overwrites, so not every
lineage record is final, and a mid-run checkpoint) is exported to a bundle; its members are
then read into memory and each operation is timed in this process, repeated for at least
``--min-seconds``:

* ``receipts_per_s``: ``verify_receipt`` on the bundle's artifact receipts (canonical JSON,
  record schema, signed checkpoint, RFC 6962 path, RFC 9942 COSE receipt: two Ed25519
  verifications each);
* ``cose_receipts_per_s``: ``verify_inclusion_receipt`` alone;
* ``cose_sign1_per_s``: ``verify_sign1`` of a signed statement with a small (one-subject)
  in-toto payload, and ``cose_sign1_run_summary_per_s`` of the bundle's ``run-summary.cose``
  (payload ``run_summary_bytes``, one subject per final artifact);
* ``dsse_per_s`` / ``dsse_run_summary_per_s``: ``verify_envelope`` of a small envelope and of
  the bundle's run-summary envelope;
* ``receipts_check_*``: ``check_run_receipts`` (verify/runreceipts.py) over the whole run, as
  the bundle verifier calls it after the stores verified: every receipt bound to the lineage
  log, three envelopes, subjects, run summary, COSE statement. ``receipts_check_objects`` is
  what it returns (receipts + 4 attestations); ``receipts_check_receipts_per_s`` is final
  artifacts per second of that check.
* ``ed25519_verify_per_s``: bare Ed25519 verifications (``cryptography``) of a final-note-sized
  message, the floor a receipt's cost is measured against: a bundle receipt needs one
  distinct verification (its final-artifact note; the sealing checkpoint and the COSE
  signature repeat across a run's receipts and are verified once).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.bundle import export_bundle
from harness.receipts.cose import sign1
from harness.receipts.dsse import sign_envelope
from harness.receipts.intoto import statement
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.cose import verify_inclusion_receipt, verify_sign1
from harness.verify.dsse import PAYLOAD_TYPE_IN_TOTO, verify_envelope
from harness.verify.layout import attestation_member, checkpoint_member, store_member
from harness.verify.manifest import parse_manifest
from harness.verify.merkle import leaf_hash
from harness.verify.receipt import verify_receipt
from harness.verify.records import STORES
from harness.verify.runcheck import open_checkpoints
from harness.verify.runreceipts import check_run_receipts
from harness.verify.storecheck import StoreResult, iter_store_lines, verify_store

MASTER = bytes(range(32))
RUN = "bench-run"


def _body(path: str, version: int, step: int) -> dict[str, object]:
    return {
        "path": path,
        "sha256": hashlib.sha256(f"{path}@{version}".encode()).hexdigest(),
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "actor": "claude-code",
        "task": f"task-{step // 100}",
        "step": step,
        "model": "claude-sonnet-4",
    }


def build(folder: Path, artifacts: int) -> tuple[dict[str, bytes], OperatorKeys]:
    """Record and export a run; return the bundle's members (in memory) and the keys."""
    keys = OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), MASTER)
    state = folder / "state"
    paths = [f"src/module_{i % 37}/file_{i}.py" for i in range(artifacts)]
    with RunRecorder(state, RUN, keys) as run:
        run.record("audit", "event", {"name": "run.begin", "data": {"plan": "bench"}})
        lineage = run.store("lineage")
        lineage.append_many(
            ("artifact.write", _body(path, 0, step)) for step, path in enumerate(paths)
        )
        lineage.checkpoint(keys.note_signer())
        lineage.append_many(
            ("artifact.write", _body(path, 1, artifacts + step))
            for step, path in enumerate(paths[: artifacts // 4])
        )
        run.record("audit", "run.end", {"outcome": "succeeded"})
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    with tarfile.open(bundle) as tar:
        members = {
            info.name: tar.extractfile(info).read()  # type: ignore[union-attr]
            for info in tar.getmembers()
        }
    return members, keys


def rate(operation: Callable[[], int], min_seconds: float) -> float:
    """Items per second: ``operation`` returns how many items it processed; best of rounds."""
    rates: list[float] = []
    spent = 0.0
    while spent < min_seconds or len(rates) < 3:
        t0 = time.perf_counter()
        items = operation()
        seconds = time.perf_counter() - t0
        spent += seconds
        rates.append(items / seconds)
    return max(rates)


def verified_stores(members: dict[str, bytes], signer: str) -> dict[str, StoreResult]:
    """What the bundle verifier knows when it reaches the receipts check."""
    manifest = parse_manifest(members["manifest.json"])
    (claim,) = manifest.runs
    results = {}
    for store in STORES:
        notes = [
            (name, members[name])
            for name in (checkpoint_member(RUN, store, n) for n in claim.stores[store].checkpoints)
        ]
        member = store_member(RUN, store)
        results[store] = verify_store(
            iter_store_lines(io.BytesIO(members[member]), member),
            member=member,
            store=store,
            run_id=RUN,
            checkpoints=open_checkpoints(notes, [signer]),
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", type=int, default=1000)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        members, keys = build(Path(tmp), args.artifacts)
        build_seconds = time.perf_counter() - t0
    manifest = parse_manifest(members["manifest.json"])
    (claim,) = manifest.runs
    signer = manifest.signer
    public = keys.signing_key.public_key()
    receipts = [members[n] for n in sorted(members) if "/receipts/" in n]
    assert len(receipts) == len(claim.receipts) == args.artifacts

    def all_receipts() -> int:
        for data in receipts:
            verify_receipt(data)
        return len(receipts)

    parsed = [json.loads(data) for data in receipts]
    cose = [(base64.b64decode(doc["cose"]), leaf_hash(doc["record"].encode())) for doc in parsed]

    def cose_receipts() -> int:
        for message, leaf in cose:
            verify_inclusion_receipt(message, public, leaf)
        return len(cose)

    small = statement(
        [("src/app.py", hashlib.sha256(b"app").hexdigest())],
        "urn:harness-verify:predicate:lineage:v1",
        {"run": RUN, "artifacts": []},
    )
    kid = bytes.fromhex(keys.key_id)
    small_cose = sign1(small, keys.signing_key, kid=kid, content_type=PAYLOAD_TYPE_IN_TOTO)
    small_dsse = sign_envelope(PAYLOAD_TYPE_IN_TOTO, small, keys.signing_key, keyid=keys.key_id)
    run_cose = members[attestation_member(RUN, "run-summary.cose")]
    run_dsse = members[attestation_member(RUN, "run-summary.dsse.json")]
    batch = 200

    def repeat(function: Callable[[], object]) -> Callable[[], int]:
        def run() -> int:
            for _ in range(batch):
                function()
            return batch

        return run

    stores = verified_stores(members, signer)

    def read(name: str, limit: int) -> bytes:
        data = members[name]
        if len(data) > limit:
            raise ValueError(f"{name} over {limit} bytes")
        return data

    checked = check_run_receipts(read, claim, stores, signer, manifest.producer)
    check_seconds: list[float] = []
    while sum(check_seconds) < args.min_seconds or len(check_seconds) < 3:
        t0 = time.perf_counter()
        check_run_receipts(read, claim, stores, signer, manifest.producer)
        check_seconds.append(time.perf_counter() - t0)
    best = min(check_seconds)
    note_sized = b"harness-verify/v1/bench-run/final-artifact\n999\n" + b"0" * 64 + b"\n"
    note_signature = keys.signing_key.sign(note_sized)
    figures = {
        "final_artifacts": args.artifacts,
        "lineage_records": stores["lineage"].size,
        "receipt_bytes_mean": statistics.fmean(len(data) for data in receipts),
        "receipts_per_s": rate(all_receipts, args.min_seconds),
        "cose_receipts_per_s": rate(cose_receipts, args.min_seconds),
        "cose_sign1_per_s": rate(repeat(lambda: verify_sign1(small_cose, public)), 0.5),
        "cose_sign1_run_summary_per_s": rate(
            repeat(lambda: verify_sign1(run_cose, public)), args.min_seconds
        ),
        "dsse_per_s": rate(repeat(lambda: verify_envelope(small_dsse, [public])), 0.5),
        "dsse_run_summary_per_s": rate(
            repeat(lambda: verify_envelope(run_dsse, [public])), args.min_seconds
        ),
        "run_summary_bytes": len(verify_envelope(run_dsse, [public])[1]),
        "receipts_check_objects": checked,
        "receipts_check_seconds": best,
        "receipts_check_receipts_per_s": args.artifacts / best,
        "ed25519_verify_per_s": rate(
            repeat(lambda: public.verify(note_signature, note_sized)), 0.5
        ),
        "build_export_seconds": build_seconds,
    }
    rounded = {
        key: round(value, 4 if value < 1 else 1) if isinstance(value, float) else value
        for key, value in figures.items()
    }
    print(json.dumps(rounded))


if __name__ == "__main__":
    main()
