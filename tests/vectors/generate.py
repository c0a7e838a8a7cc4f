"""Regenerate the golden vectors in this folder (deterministic: fixed keys, fixed clock).

    python -m tests.vectors.generate            # rewrite the files here
    python -m tests.vectors.generate OUT_DIR    # write them elsewhere (the test does this)

See README.md for what each file is. tests/test_golden_vectors.py re-derives every file and
compares bytes, so a change to any format shows up as a diff here, on purpose.
"""

from __future__ import annotations

import base64
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plandoc import plan_bytes
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.layout import (
    MANIFEST,
    MANIFEST_SIG,
    attestation_member,
    checkpoint_member,
    plan_member,
    receipt_member,
    store_member,
)
from harness.verify.records import STORES

from ..corpus import RUN_ID, operator_keys, record_run
from ..evidence_helpers import with_control
from ..test_rules_evidence import PLAN, lawful

HERE = Path(__file__).resolve().parent
POLICY_RUN = "policy-run"


def generate(out: Path) -> list[Path]:
    keys = operator_keys()
    written: list[Path] = []

    def put(name: str, data: bytes) -> None:
        (out / name).write_bytes(data)
        written.append(out / name)

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        record_run(state, keys)
        bundle = export_bundle(state, Path(tmp) / "bundle.tar", keys).path
        data = bundle.read_bytes()
        with tarfile.open(bundle) as tar:
            members = {
                m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers()
            }
    out.mkdir(parents=True, exist_ok=True)
    put("bundle.tar", data)
    put("manifest.json", members[MANIFEST])
    put("manifest.sig", members[MANIFEST_SIG])
    manifest = json.loads(members[MANIFEST])
    run = manifest["runs"][0]
    for store in STORES:
        put(f"{store}.jsonl", members[store_member(RUN_ID, store)])
        last = run["stores"][store]["checkpoints"][-1]
        put(f"{store}.checkpoint.note", members[checkpoint_member(RUN_ID, store, last)])
    for seq in run["receipts"]:
        receipt = members[receipt_member(RUN_ID, seq)]
        put(f"receipt-{seq}.json", receipt)
        put(f"receipt-{seq}.cose", base64.b64decode(json.loads(receipt)["cose"]))
    for name in ("run-summary.dsse.json", "lineage.dsse.json", "provenance.dsse.json"):
        put(name, members[attestation_member(RUN_ID, name)])
    put("run-summary.cose", members[attestation_member(RUN_ID, "run-summary.cose")])
    facts = {
        "ed25519_seed_hex": keys.signing_key.private_bytes_raw().hex(),
        "ed25519_public_hex": keys.public_raw.hex(),
        "key_id": keys.key_id,
        "verifier_key": keys.note_signer().verifier_key(),
        "hmac_master_hex": keys.hmac_master.hex(),
        "run": RUN_ID,
        "stores": run["stores"],
        "receipts": run["receipts"],
        "note": "TEST KEYS ONLY: published on purpose so anyone can re-derive these vectors.",
    }
    put("keys-and-facts.json", json.dumps(facts, indent=2, sort_keys=True).encode() + b"\n")
    policy = _policy_bundle(keys)
    put("policy-bundle.tar", policy["bundle"])
    put("policy-plan.json", policy[plan_member(POLICY_RUN)])
    put("policy-audit.jsonl", policy[store_member(POLICY_RUN, "audit")])
    return written


def _policy_bundle(keys: Any) -> dict[str, bytes]:
    """A format-2 runtime run: run.start binding the plan member, a trifecta denial, capsule
    checks with their inputs, a gate-integrity record (the lawful history of
    tests/test_rules_evidence.py), so a second verifier can re-decide every decision."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        with RunRecorder(state, POLICY_RUN, keys, clock=LogicalClock()) as recorder:
            recorder.write_plan(plan_bytes(PLAN))
            for store, kind, body in with_control(lawful(), plan_bytes(PLAN)):
                recorder.record(store, kind, body)
            recorder.checkpoint_all()
        bundle = export_bundle(state, Path(tmp) / "bundle.tar", keys).path
        out = {"bundle": bundle.read_bytes()}
        with tarfile.open(bundle) as tar:
            for m in tar.getmembers():
                out[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for path in generate(target):
        print(path)
