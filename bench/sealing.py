"""Progressive sealing benchmark: what signing a checkpoint every N records costs an appender.

Prints one JSON line. Run: ``python bench/sealing.py --records 100000 --every 1000``.

The same records are appended through ``RunRecorder`` twice per round, into fresh state
folders: once sealed only at the end, once also every ``--every`` records (issue 11 §7). Group
commit of ``--batch`` records per fsync, as the runtime appends. Rounds alternate the two and
the best round of each is kept (the disk is shared).

* ``plain_records_per_s`` / ``sealed_records_per_s`` — durable appends per second, end seal
  included.
* ``overhead_pct`` — extra wall time of the sealed run, in percent of the plain one.
* ``cpu_overhead_pct`` — the same for process CPU (signing, file writes), excluding fsync waits.
* ``us_per_checkpoint`` — the extra wall time divided by the extra checkpoints.
* ``checkpoints`` — checkpoints the sealed run signed; ``same_root`` — both runs' stores are
  byte-identical (sealing writes no record).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from workload import lineage_body  # bench/workload.py (scripts run from bench/)

from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder

MASTER = bytes(range(32))
RUN = "bench-run"


class _Clock:
    """Fixed record times, so both runs write the same bytes."""

    def __init__(self) -> None:
        self.tick = 0

    def __call__(self) -> str:
        self.tick += 1
        return f"2026-01-01T00:00:{self.tick // 1_000_000:02d}.{self.tick % 1_000_000:06d}Z"


def _keys() -> OperatorKeys:
    return OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), MASTER)


def run_once(folder: Path, records: int, batch: int, every: int | None) -> tuple[float, float]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with RunRecorder(folder, RUN, _keys(), clock=_Clock(), seal_every_records=every) as run:
        writer = run.store("lineage")
        for start in range(0, records, batch):
            writer.append_many(
                ("artifact.write", lineage_body(i))
                for i in range(start, min(records, start + batch))
            )
        run.checkpoint_all()
    return time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for name, every in (("plain", None), ("sealed", args.every)):
                folder = Path(tmp) / f"{name}-{index}"
                wall, cpu = run_once(folder, args.records, args.batch, every)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu)
        base = Path(tmp) / "plain-0" / "runs" / RUN
        sealed = Path(tmp) / "sealed-0" / "runs" / RUN
        same = (base / "lineage.jsonl").read_bytes() == (sealed / "lineage.jsonl").read_bytes()
        counts = [len(list((d / "checkpoints" / "lineage").glob("*.note"))) for d in (base, sealed)]
    (plain_wall, plain_cpu), (sealed_wall, sealed_cpu) = best["plain"], best["sealed"]
    extra = max(counts[1] - counts[0], 1)
    print(
        json.dumps(
            {
                "bench": "sealing",
                "records": args.records,
                "every": args.every,
                "batch": args.batch,
                "plain_records_per_s": round(args.records / plain_wall),
                "sealed_records_per_s": round(args.records / sealed_wall),
                "overhead_pct": round(100 * (sealed_wall - plain_wall) / plain_wall, 1),
                "cpu_overhead_pct": round(100 * (sealed_cpu - plain_cpu) / plain_cpu, 1),
                "us_per_checkpoint": round(1e6 * (sealed_wall - plain_wall) / extra),
                "checkpoints": counts[1],
                "same_root": same,
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
