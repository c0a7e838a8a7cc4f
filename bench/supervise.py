"""Supervised-process benchmark: progress-probe cost and the tick loop's coordination cost.

Prints one JSON line. Run: ``python bench/supervise.py --entries 20000 --procs 8``.

* ``probe_ms_<n>``: median wall time of one progress fingerprint (``supervise.fingerprint``) of
  a tree of ``n`` files in 100 folders (``--entries`` and a tenth of it), warm cache;
  ``probe_truncated``: whether the larger walk hit the 20,000-entry bound.
* ``parallel_*``: ``--procs`` processes that each sleep ``--sleep`` seconds, started together and
  stepped by one loop (``step(0)`` on each, then ``wait_any``) the way the tick loop does:
  wall time, loop iterations, and the coordinator's CPU time (``time.process_time``) per
  process; ``serial_s`` is what running them one after another would take at least.
* ``idle_step_us``: CPU per ``step(0)`` on a running, silent process (no probe due).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.orchestrate.supervise import Limits, Supervised, fingerprint, wait_any


def make_tree(root: Path, entries: int) -> None:
    folders = 100
    for d in range(folders):
        (root / f"d{d}").mkdir(parents=True)
    for i in range(max(0, entries - folders - 1)):
        (root / f"d{i % folders}" / f"f{i}").write_bytes(b"x" * (i % 97))


def probe_ms(root: Path, rounds: int = 7) -> tuple[float, bool]:
    fingerprint([root])  # warm the cache
    times = []
    truncated = False
    for _ in range(rounds):
        t0 = time.perf_counter()
        truncated = fingerprint([root]).truncated
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, truncated


def parallel(procs: int, sleep_s: float, cwd: Path) -> dict[str, float | int]:
    code = f"import time; time.sleep({sleep_s})"
    cpu0, t0 = time.process_time(), time.monotonic()
    running = [
        Supervised.start([sys.executable, "-c", code], cwd=cwd, limits=Limits(wall_s=60))
        for _ in range(procs)
    ]
    loops = 0
    while not all(p.done for p in running):
        loops += 1
        for p in running:
            p.step(0.0)
        wait_any(running, 1.0)
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    assert all(p.outcome is not None and p.outcome.result.exit_code == 0 for p in running)
    return {
        "parallel_s": round(wall, 3),
        "serial_s": round(procs * sleep_s, 3),
        "parallel_loops": loops,
        "coordinator_cpu_ms_per_proc": round(cpu * 1000 / procs, 2),
    }


def idle_step_us(cwd: Path, calls: int = 2000) -> float:
    proc = Supervised.start(["sleep", "30"], cwd=cwd, limits=Limits(wall_s=60, grace_s=0))
    try:
        cpu0 = time.process_time()
        for _ in range(calls):
            proc.step(0.0)
        return (time.process_time() - cpu0) * 1e6 / calls
    finally:
        proc.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--sleep", type=float, default=1.0)
    args = ap.parse_args()
    out: dict[str, object] = {"bench": "supervise", "procs": args.procs}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for n in sorted({max(1, args.entries // 10), args.entries}):
            tree = base / f"tree{n}"
            make_tree(tree, n)
            ms, truncated = probe_ms(tree)
            out[f"probe_ms_{n}"] = round(ms, 3)
            out["probe_truncated"] = truncated
        out.update(parallel(args.procs, args.sleep, base))
        out["idle_step_us"] = round(idle_step_us(base), 1)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
