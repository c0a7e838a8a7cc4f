"""Journal members benchmark: what the verifier pays for ``journal/<sha256>`` members.

Prints one JSON line. Run: ``python bench/journal.py --exchanges 40 --request-kib 512
--response-mib 4``.

A lawful runtime run (tests/test_rules_evidence.py) whose one batch made ``--exchanges``
journaled Anthropic exchanges, each with a request blob of ``--request-kib`` KiB and a
response blob of ``--response-mib`` MiB (distinct bytes: every blob is its own member). It is
exported, then verified in a fresh process, and the same run without exchanges likewise:

* ``blob_mib`` — journal bytes in the bundle; ``bundle_mib`` — the whole bundle;
* ``export_s`` — ``export_bundle`` (hashes every blob twice: the check and the manifest);
* ``verify_s`` / ``verify_s_without`` — ``verify_bundle`` with and without the exchanges;
* ``verify_mib_per_s`` — blob bytes over the extra verify time;
* ``peak_rss_mib`` / ``peak_rss_mib_without`` — the verifying process's peak RSS: responses
  are streamed, so the difference stays near the largest request blob (read whole to recompute
  its key), not the blobs' total.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plandoc import plan_bytes
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.modelkey import exchange_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.evidence_helpers import make_keys, with_control
from tests.test_rules_evidence import PLAN, RUN, lawful

EGRESS = [
    {"credential": True, "family": "anthropic", "host": "api.anthropic.com",
     "path_prefix": "/v1/", "port": 443, "route": "anthropic", "scheme": "https"},
]  # fmt: skip
VERIFY = """
import sys, time
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy
start = time.perf_counter()
report = verify_bundle(__import__("pathlib").Path(sys.argv[1]),
                       pins=TrustPolicy(frozenset({sys.argv[2]}), "bench"))
took = time.perf_counter() - start
assert report.status.value == "verified", report.failure
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(took, hwm.split()[1])  # kB; ru_maxrss would include the forking parent's
"""


def _blobs(index: int, request_kib: int, response_mib: int) -> tuple[bytes, bytes]:
    text = f"{index:08d}" * (request_kib * 128)
    request = json.dumps(
        {"max_tokens": 64, "messages": [{"content": text, "role": "user"}], "model": "claude-x"}
    ).encode()
    words = f"w{index:07d} " * (response_mib * 131072)
    document = {"content": [{"text": words, "type": "text"}], "model": "claude-x",
                "type": "message", "usage": {"input_tokens": 9, "output_tokens": 1}}  # fmt: skip
    response = json.dumps(document).encode()
    return request, response


def _exchange(seq: int, request: bytes, response: bytes) -> dict[str, Any]:
    found = exchange_key("anthropic", request, "POST", "/v1/messages", {})
    return {
        "batch": "b0001", "seq": seq, "route": "anthropic", "method": "POST",
        "path": "/v1/messages", "outcome": "answered", "status": 200, "family": "anthropic",
        "api": "anthropic-messages", "upstream": "https://api.anthropic.com:443",
        "key": found.key, "model": found.model, "stream": False, "parameters": found.parameters,
        "request_sha256": hashlib.sha256(request).hexdigest(),
        "response_sha256": hashlib.sha256(response).hexdigest(), "journaled": True,
        "usage": {"input_tokens": 9, "output_tokens": 1, "cache_read": None, "cache_write": None},
        "dropped_credentials": [], "reason": None, "response_bytes": len(response),
    }  # fmt: skip


def _bundle(folder: Path, exchanges: int, request_kib: int, response_mib: int) -> tuple[Path, int]:
    keys = make_keys()
    state = folder / "state"
    blobs = folder / "state" / "journals" / RUN / "blobs"
    blobs.mkdir(parents=True)
    bodies, total = [], 0
    for seq in range(1, exchanges + 1):
        request, response = _blobs(seq, request_kib, response_mib)
        for data in (request, response):
            (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
            total += len(data)
        bodies.append(_exchange(seq, request, response))
    records = []
    for store, kind, original in lawful():
        body = original
        if kind == "agent.spawn" and exchanges:
            body = {**original, "sandbox": {**original["sandbox"], "egress": EGRESS}}
        records.append((store, kind, body))
        if kind == "agent.spawn":
            records += [("audit", "model.source", {"batch": "b0001", "seq": b["seq"],
                                                   "source": "live"}) for b in bodies]  # fmt: skip
    records += [("replay", "model.exchange", body) for body in bodies]
    with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(plan_bytes(PLAN))
        for store, kind, body in with_control(records, plan_bytes(PLAN)):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
    return state, total


def _verify(bundle: Path) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", VERIFY, str(bundle), make_keys().key_id],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    took, rss_kib = done.stdout.split()
    return float(took), int(rss_kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=40)
    parser.add_argument("--request-kib", type=int, default=512)
    parser.add_argument("--response-mib", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        state, blob_bytes = _bundle(folder / "with", args.exchanges, args.request_kib,
                                    args.response_mib)  # fmt: skip
        start = time.perf_counter()
        bundle = export_bundle(state, folder / "with.tar", make_keys()).path
        export_s = time.perf_counter() - start
        verify_s, rss = _verify(bundle)
        bare_state, _ = _bundle(folder / "without", 0, 0, 0)
        bare = export_bundle(bare_state, folder / "without.tar", make_keys()).path
        verify_bare, rss_bare = _verify(bare)
        extra = max(verify_s - verify_bare, 1e-9)
        print(
            json.dumps(
                {
                    "exchanges": args.exchanges,
                    "request_kib": args.request_kib,
                    "response_mib": args.response_mib,
                    "blob_mib": round(blob_bytes / 2**20, 1),
                    "bundle_mib": round(bundle.stat().st_size / 2**20, 1),
                    "export_s": round(export_s, 3),
                    "verify_s": round(verify_s, 3),
                    "verify_s_without": round(verify_bare, 3),
                    "verify_mib_per_s": round(blob_bytes / 2**20 / extra, 1),
                    "peak_rss_mib": round(rss, 1),
                    "peak_rss_mib_without": round(rss_bare, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
