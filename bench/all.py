"""The evidence benchmarks at one size, side by side with the hardware floor (issue 14).

Prints one JSON line. Run: ``python bench/all.py --records 100000`` (add ``--table`` for a
text table instead).

Runs, each in its own interpreter (their own one-line outputs are kept under their names):
``evidence.py`` (appends, one store's verification, the floor), ``bundle.py`` (the CLI on a
whole bundle: keyed, keyless, ``--jobs 1``, gzip, peak RSS, start-up), ``runtime.py`` (the
runtime's evidence CPU per event in a real run) and ``gate.py --files`` (the merge gate on a
change of many files). ``side_by_side`` then sets each headline figure next to the floor it is
judged against: bare SHA-256 leaf hash + HMAC-SHA256 over the same record bytes, on one core,
measured in the same run (``floor_records_per_s``; as microseconds per record for appends).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        cwd=HERE, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-500:]}"}
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def side_by_side(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each headline figure with its floor and the ratio (figure / floor, or floor / figure
    for rates: how many times the floor's cost it takes)."""
    rows: list[dict[str, Any]] = []
    evidence, bundle = results.get("evidence", {}), results.get("bundle", {})
    floor = evidence.get("floor_records_per_s") or bundle.get("floor_records_per_s")
    if not floor:
        return rows
    floor_us = 1e6 / floor

    def rate(name: str, value: float | None, target: float | None) -> None:
        if value:
            rows.append({"figure": name, "records_per_s": round(value), "floor_records_per_s":
                         round(floor), "times_floor_cost": round(floor / value, 2),
                         "target": target})  # fmt: skip

    def cost(name: str, value: float | None, target: float | None) -> None:
        if value:
            rows.append({"figure": name, "us_per_record": round(value, 2), "floor_us_per_record":
                         round(floor_us, 2), "times_floor_cost": round(value / floor_us, 2),
                         "target": target})  # fmt: skip

    rate("bundle verify keyed (CLI, all cores)", bundle.get("verify_keyed_records_per_s"), 250e3)
    rate(
        "bundle verify keyed (CLI, --jobs 1)",
        bundle.get("verify_keyed_one_process_records_per_s"),
        None,
    )
    rate("bundle verify keyless (CLI)", bundle.get("verify_keyless_records_per_s"), None)
    rate("store verify keyed (one process, API)", evidence.get("verify_keyed_records_per_s"), None)
    cost("append, group commit (CPU)", evidence.get("append_cpu_us_per_record"), 10.0)
    cost("append, one fsync each (CPU)", evidence.get("event_cpu_us_per_record"), None)
    cost("runtime evidence per event (CPU)",
         results.get("runtime", {}).get("evidence_cpu_us_per_event"), 10.0)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=300, help="runtime.py's plan size")
    parser.add_argument("--files", type=int, default=10_000, help="gate.py's changed files")
    parser.add_argument("--skip", action="append", default=[], help="a script to leave out")
    parser.add_argument("--table", action="store_true", help="a text table, not JSON")
    args = parser.parse_args()
    plan = {
        "evidence": ("evidence.py", "--records", str(args.records)),
        "bundle": ("bundle.py", "--records", str(args.records)),
        "runtime": ("runtime.py", "--tasks", str(args.tasks)),
        "gate": ("gate.py", "--files", str(args.files)),
    }
    results = {name: run(*call) for name, call in plan.items() if name not in args.skip}
    out = {"records": args.records, **results, "side_by_side": side_by_side(results)}
    if not args.table:
        print(json.dumps(out))
        return
    for row in out["side_by_side"]:
        values = [f"{key}={value}" for key, value in row.items() if key != "figure"]
        print(f"{row['figure']:<40} " + "  ".join(values))
    gate = results.get("gate", {})
    if gate:
        print(
            f"{'gate (' + str(args.files) + ' files)':<40} seconds={gate.get('seconds')} target=5"
        )


if __name__ == "__main__":
    main()
