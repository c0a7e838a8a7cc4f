"""Evidence-core benchmark: durable appends, store verification, and the hash+HMAC floor.

Prints one JSON line. Run: ``python bench/evidence.py --records 100000``.

* ``append_records_per_s`` — durable appends (group commit: ``--batch`` records per fsync).
* ``append_cpu_us_per_record`` — process CPU per appended record inside ``append_many``
  (body check, serialization, MAC, leaf hash, tree update, write), excluding time blocked in
  fsync and the benchmark's own making of the bodies.
* ``append_small_cpu_us_per_record`` — the same in commits of ``--small-batch`` records (the
  runtime's ticks commit a dozen or two), where each commit's own cost (lock, clock, write,
  the kernel's fdatasync) is shared by few records; at most 20 000 records.
* ``event_cpu_us_per_record`` / ``event_appends_per_s`` — one durable append per record (its
  own fsync), as the runtime records each audit event; at most 5000 records.
* ``verify_keyless_records_per_s`` / ``verify_keyed_records_per_s`` — full store verification
  (line split, canonical check, schema, seq, Merkle root vs signed checkpoint; keyed adds the
  HMAC chain), each in a fresh interpreter so ``peak_rss_mb`` is the verifier's own peak.
* ``floor_records_per_s`` — bare SHA-256 leaf hash + HMAC-SHA256 (``hmac.digest``) over the
  same record bytes in this run: what any verifier must at least spend.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from workload import lineage_body  # bench/workload.py (scripts run from bench/)

from harness.receipts.keys import OperatorKeys
from harness.receipts.store import StoreWriter
from harness.verify.runcheck import open_checkpoints
from harness.verify.storecheck import iter_store_lines, verify_store

MASTER = bytes(range(32))
RUN = "bench-run"


def _keys() -> OperatorKeys:
    return OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), MASTER)


_body = lineage_body


def append(folder: Path, records: int, batch: int) -> dict[str, float]:
    keys = _keys()
    path = folder / "lineage.jsonl"
    wall = cpu = 0.0
    with StoreWriter(path, store="lineage", run_id=RUN, hmac_master=MASTER) as writer:
        for start in range(0, records, batch):
            # The workload's bodies are built outside the timed region: only the append is
            # measured, not the benchmark making up its input.
            items = [
                ("artifact.write", _body(i)) for i in range(start, min(records, start + batch))
            ]
            wall0, cpu0 = time.perf_counter(), time.process_time()
            writer.append_many(items)
            wall += time.perf_counter() - wall0
            cpu += time.process_time() - cpu0
        writer.checkpoint(keys.note_signer())
    return {
        "append_records_per_s": records / wall,
        "append_cpu_us_per_record": cpu / records * 1e6,
        "store_bytes": path.stat().st_size,
    }


def single_appends(folder: Path, records: int) -> dict[str, float]:
    """What the runtime pays per recorded event: one durable append (own fsync) per record."""
    path = folder / "audit-single.jsonl"
    with StoreWriter(path, store="audit", run_id=RUN, hmac_master=MASTER) as writer:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(records):
            writer.append("event", {"name": "task.transition", "data": {"task": f"t{i}"}})
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "event_appends_per_s": records / wall,
        "event_cpu_us_per_record": cpu / records * 1e6,
    }


def verify(folder: Path, keyed: bool) -> dict[str, float]:
    keys = _keys()
    notes = [
        (p.name, p.read_bytes()) for p in sorted((folder / "checkpoints" / "lineage").iterdir())
    ]
    t0 = time.perf_counter()
    checkpoints = open_checkpoints(notes, [keys.note_signer().verifier_key()])
    with (folder / "lineage.jsonl").open("rb", buffering=1 << 20) as stream:
        result = verify_store(
            iter_store_lines(stream, "lineage.jsonl"),
            member="lineage.jsonl",
            store="lineage",
            run_id=RUN,
            checkpoints=checkpoints,
            hmac_master=MASTER if keyed else None,
        )
    seconds = time.perf_counter() - t0
    peak_mb = _vm_hwm_kb() / 1024
    return {"records": result.size, "seconds": seconds, "peak_rss_mb": peak_mb}


def _vm_hwm_kb() -> int:
    """Peak RSS of this process image (VmHWM); ru_maxrss would include the parent's pages
    from before exec, i.e. the appending benchmark's own memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def floor(folder: Path) -> float:
    key = hashlib.sha256(b"k").digest()
    sha256, digest = hashlib.sha256, hmac.digest
    count = 0
    t0 = time.perf_counter()
    with (folder / "lineage.jsonl").open("rb", buffering=1 << 20) as stream:
        for line in stream:
            record = line[:-1]
            sha256(b"\x00" + record).digest()
            digest(key, record, "sha256")
            count += 1
    return count / (time.perf_counter() - t0)


def _verify_in_fresh_process(folder: Path, keyed: bool) -> dict[str, float]:
    args = [sys.executable, __file__, "--verify-folder", str(folder)]
    if keyed:
        args.append("--keyed")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000, help="records per group commit")
    parser.add_argument("--small-batch", type=int, default=16, help="records per small commit")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--verify-folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--keyed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.verify_folder:
        print(json.dumps(verify(args.verify_folder, args.keyed)))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        figures: dict[str, object] = {"records": args.records, "batch": args.batch}
        figures.update(append(folder, args.records, args.batch))
        small = append(folder / "small", min(args.records, 20_000), args.small_batch)
        figures["append_small_cpu_us_per_record"] = small["append_cpu_us_per_record"]
        figures["small_batch"] = args.small_batch
        figures.update(single_appends(folder, min(args.records, 5000)))
        keyless = _verify_in_fresh_process(folder, keyed=False)
        keyed = _verify_in_fresh_process(folder, keyed=True)
        assert keyless["records"] == keyed["records"] == args.records
        floor_rate = floor(folder)
        figures.update(
            {
                "verify_keyless_records_per_s": keyless["records"] / keyless["seconds"],
                "verify_keyed_records_per_s": keyed["records"] / keyed["seconds"],
                "floor_records_per_s": floor_rate,
                "keyed_vs_floor": floor_rate / (keyed["records"] / keyed["seconds"]),
                "peak_rss_mb": max(keyless["peak_rss_mb"], keyed["peak_rss_mb"]),
            }
        )
        print(
            json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()})
        )


if __name__ == "__main__":
    main()
