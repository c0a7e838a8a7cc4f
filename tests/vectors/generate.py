"""Regenerate the golden vectors in this folder (deterministic: fixed keys, fixed clock).

    python -m tests.vectors.generate            # rewrite the files here
    python -m tests.vectors.generate OUT_DIR    # write them elsewhere (the test does this)

See README.md for what each file is. tests/test_golden_vectors.py re-derives every file and
compares bytes, so a change to any format shows up as a diff here, on purpose.
"""

from __future__ import annotations

import base64
import hashlib
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
from harness.verify.modelkey import api_of, exchange_key
from harness.verify.records import STORES

from ..corpus import RUN_ID, operator_keys, record_run
from ..evidence_helpers import with_control
from ..test_rules_evidence import PLAN, lawful

HERE = Path(__file__).resolve().parent
POLICY_RUN = "policy-run"
PROXY_RUN = "proxy-run"
EGRESS = [
    {"credential": True, "family": "anthropic", "host": "api.anthropic.com",
     "path_prefix": "/v1/", "port": 443, "route": "anthropic", "scheme": "https"},
    {"credential": True, "family": "google", "host": "generativelanguage.googleapis.com",
     "path_prefix": "/v1beta/", "port": 443, "route": "google", "scheme": "https"},
    {"credential": True, "family": "openai", "host": "api.openai.com",
     "path_prefix": "/v1/", "port": 443, "route": "openai", "scheme": "https"},
]  # fmt: skip


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
    proxy, keyed = _proxy_bundle(keys)
    put("proxy-bundle.tar", proxy["bundle"])
    put("proxy-replay.jsonl", proxy[store_member(PROXY_RUN, "replay")])
    put("proxy-keys.json", json.dumps(keyed, indent=2, sort_keys=True).encode() + b"\n")
    return written


def _exchange(seq: int, route: str, path: str, request: bytes, response: bytes,
              headers: dict[str, str], usage: dict[str, int | None]) -> dict[str, Any]:  # fmt: skip
    entry = next(e for e in EGRESS if e["route"] == route)
    family = str(entry["family"])
    found = exchange_key(family, request, "POST", path, headers)
    dropped = {"anthropic": ["x-api-key"], "google": ["x-goog-api-key"]}.get(family, [])
    return {
        "batch": "b0001", "seq": seq, "route": route, "method": "POST", "path": path,
        "outcome": "answered", "status": 200, "family": family, "api": api_of(family, path),
        "upstream": f"https://{entry['host']}:443", "key": found.key, "model": found.model,
        "stream": found.stream, "parameters": found.parameters,
        "request_sha256": hashlib.sha256(request).hexdigest(),
        "response_sha256": hashlib.sha256(response).hexdigest(), "journaled": True,
        "usage": usage, "dropped_credentials": dropped,
        "reason": None, "response_bytes": len(response),
    }  # fmt: skip


def _proxy_bundle(keys: Any) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
    """The lawful runtime run with its batch proxied: three journaled answers (Anthropic
    Messages, OpenAI Responses streamed, a Gemini stream whose model and stream are its
    path's), one refused request (no route), their sources, and the six journal blobs
    (``journal/<sha256>``, last in the tar); ``proxy-keys.json`` lists each request blob
    with its parameters and key (the known answers of proxy.md §4)."""
    blobs = {
        "anthropic-request": b'{"max_tokens": 64, "messages": [{"content": "hi", "role": '
        b'"user"}], "metadata": {"user_id": "u-1"}, "model": "claude-x"}',
        "anthropic-response": b'{"content":[{"text":"hello","type":"text"}],"id":"msg_1",'
        b'"model":"claude-x","role":"assistant","stop_reason":"end_turn","type":"message",'
        b'"usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":3,'
        b'"input_tokens":9,"output_tokens":1}}',
        "openai-request": b'{"model":"gpt-x","input":"hi","stream":true,"user":"u-1"}',
        "openai-response": b'event: response.completed\ndata: {"type":"response.completed",'
        b'"response":{"usage":{"input_tokens":4,"output_tokens":1}}}\n\n',
        "google-request": b'{"contents":[{"parts":[{"text":"hi"}],"role":"user"}],'
        b'"generationConfig":{"temperature":0.5},"stream":false}',
        "google-response": b'data: {"candidates":[{"content":{"parts":[{"text":"hel"}],'
        b'"role":"model"}}],"usageMetadata":{"promptTokenCount":5,"totalTokenCount":5}}\r\n\r\n'
        b'data: {"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},'
        b'"finishReason":"STOP"}],"usageMetadata":{"cachedContentTokenCount":2,'
        b'"candidatesTokenCount":1,"promptTokenCount":5,"thoughtsTokenCount":2,'
        b'"totalTokenCount":8}}\r\n\r\n',
    }
    exchanges = [
        _exchange(1, "anthropic", "/v1/messages", blobs["anthropic-request"],
                  blobs["anthropic-response"], {"anthropic-version": "2023-06-01"},
                  {"input_tokens": 9, "output_tokens": 1, "cache_read": 3, "cache_write": 0}),
        _exchange(2, "openai", "/v1/responses", blobs["openai-request"],
                  blobs["openai-response"], {},
                  {"input_tokens": 4, "output_tokens": 1, "cache_read": None, "cache_write": None}),
        _exchange(3, "google", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
                  blobs["google-request"], blobs["google-response"], {},
                  {"input_tokens": 5, "output_tokens": 3, "cache_read": 2, "cache_write": None}),
        {"batch": "b0001", "seq": 4, "route": "-", "method": "CONNECT", "path": "evil.example:443",
         "outcome": "refused", "status": 403, "family": None, "api": None, "upstream": None,
         "key": None, "model": None, "stream": False, "parameters": None, "request_sha256": None,
         "response_sha256": None, "journaled": False, "usage": None, "dropped_credentials": [],
         "reason": "tunnels are refused: CONNECT evil.example:443 is not on the allow-list",
         "response_bytes": 0},
    ]  # fmt: skip
    records: list[tuple[str, str, dict[str, Any]]] = []
    for store, kind, body in lawful():
        if kind == "agent.spawn":
            body = {**body, "sandbox": {**body["sandbox"], "egress": EGRESS}}
        records.append((store, kind, body))
        if kind == "agent.spawn":
            records += [
                ("audit", "model.source", {"batch": "b0001", "seq": seq, "source": "live"})
                for seq in (1, 2, 3)
            ]
    records += [("replay", "model.exchange", body) for body in exchanges]
    keyed = [
        {"family": e["family"], "request": blobs[f"{e['family']}-request"].decode(),
         "parameters": e["parameters"], "model": e["model"], "key": e["key"]}
        for e in exchanges[:3]
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        with RunRecorder(state, PROXY_RUN, keys, clock=LogicalClock()) as recorder:
            recorder.write_plan(plan_bytes(PLAN))
            for store, kind, body in with_control(records, plan_bytes(PLAN)):
                recorder.record(store, kind, body)
            recorder.checkpoint_all()
        folder = state / "journals" / PROXY_RUN / "blobs"
        folder.mkdir(parents=True)
        for data in blobs.values():
            (folder / hashlib.sha256(data).hexdigest()).write_bytes(data)
        bundle = export_bundle(state, Path(tmp) / "bundle.tar", keys).path
        out = {"bundle": bundle.read_bytes()}
        with tarfile.open(bundle) as tar:
            for m in tar.getmembers():
                out[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    return out, keyed


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
