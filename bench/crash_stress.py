"""Crash stress: SIGKILL a store writer at random moments, recover, check nothing acked is lost.

Prints one JSON line. Run: ``python bench/crash_stress.py --rounds 2000`` (CI runs 200 rounds
in tests/test_store.py; this is the longer version).

Each round forks a writer that appends batches and reports every durable acknowledgement on a
pipe; the parent kills it with SIGKILL after a random delay, then reopens the store (which
quarantines a torn tail) and continues. At the end every acknowledged record must be present
at its seq with its content, and the store must verify against a fresh signed checkpoint with
the keyed chain.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.keys import OperatorKeys
from harness.receipts.store import StoreWriter
from harness.verify.records import parse_record_line
from harness.verify.runcheck import open_checkpoints
from harness.verify.storecheck import iter_store_lines, verify_store

MASTER = bytes(range(32))
KEYS = OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x07" * 32), MASTER)


def _writer(path: Path, fd: int, seed: int) -> None:
    rng = random.Random(seed)
    writer = StoreWriter(path, store="audit", run_id="stress", hmac_master=MASTER)
    n = 0
    while True:
        size = rng.randint(1, 8)
        acks = writer.append_many(
            [("event", {"name": f"s{seed}", "data": {"i": n + k}}) for k in range(size)]
        )
        os.write(fd, "".join(f"{a.seq} {seed} {n + k}\n" for k, a in enumerate(acks)).encode())
        n += size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--max-delay-ms", type=float, default=30.0)
    args = parser.parse_args()
    rng = random.Random(1)
    acked: dict[int, tuple[int, int]] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.jsonl"
        for round_ in range(args.rounds):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                try:
                    _writer(path, write_fd, round_)
                finally:
                    os._exit(1)
            os.close(write_fd)
            time.sleep(rng.uniform(0, args.max_delay_ms / 1000))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            with os.fdopen(read_fd, "rb") as pipe:
                for line in pipe.read().decode().splitlines():
                    seq, seed, n = map(int, line.split())
                    acked[seq] = (seed, n)
            StoreWriter(path, store="audit", run_id="stress", hmac_master=MASTER).close()
        with StoreWriter(path, store="audit", run_id="stress", hmac_master=MASTER) as writer:
            writer.checkpoint(KEYS.note_signer())
            folder = writer.checkpoint_dir
        data = path.read_bytes()
        lines = data.splitlines()
        lost = 0
        for seq, (seed, n) in acked.items():
            body = parse_record_line(lines[seq], "audit", "stress").body
            if body["name"] != f"s{seed}" or body["data"]["i"] != n:
                lost += 1
        notes = [(p.name, p.read_bytes()) for p in sorted(folder.glob("*.note"))]
        result = verify_store(
            iter_store_lines(io.BytesIO(data), "audit.jsonl"),
            member="audit.jsonl",
            store="audit",
            run_id="stress",
            checkpoints=open_checkpoints(notes, [KEYS.note_signer().verifier_key()]),
            hmac_master=MASTER,
        )

        print(
            json.dumps(
                {
                    "rounds": args.rounds,
                    "acknowledged": len(acked),
                    "records": result.size,
                    "recoveries": result.kinds.get("store.recovered", 0),
                    "lost_acknowledged": lost,
                    "verified": True,
                    "seconds": round(time.perf_counter() - start, 2),
                }
            )
        )


if __name__ == "__main__":
    main()
