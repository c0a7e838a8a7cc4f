"""Rounds benchmark: the harness's own cost per audited round, and the verifier's.

Prints one JSON line. Run: ``python bench/rounds.py --steps 5,40``.

For each size in ``--steps`` a rounds task whose scripted Manager plans that many steps runs
through the real Runtime in a real git repository (``steps + 1`` rounds: one per step, then
``Next: done``), every role a real process (sandboxed when bubblewrap is there, unless
``--no-sandbox``). Measured per round:

* ``harness_ms_per_round``: wall time of the round loop minus the wall time of its role
  processes (each ``run_role`` call timed from start to its answer): git commits and diffs,
  the tree digests, the texts, the records and their fsyncs — what the harness adds;
* ``coordinator_cpu_ms_per_round``: the runtime process's own CPU (children excluded);
* ``roles_ms_per_round``: the role processes' wall time (the scripted stand-ins; a real model
  takes seconds to minutes);
* ``verify_ms_per_round``: the marginal cost of a round to ``verify_bundle`` (export, then
  verify with the HMAC chain), the slope between the smallest and the largest size.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.rounds import job as rounds_job
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy


def _step(i: int) -> dict[str, Any]:
    return {"say": f"file {i}", "edits": [{"path": f"out/{i}.txt", "content": f"{i}\n"}]}


def _plan(steps: int) -> dict[str, Any]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 60}
    return {
        "plan": {"name": "bench", "settle_ticks": 1, "max_batch": 1},
        "task": [
            {
                "id": "long",
                "role": "rounder",
                "prompt": f"Write {steps} files, one per round.",
                "scope": ["out/**"],
                "gates": [gate],
                "rounds": {
                    "max_rounds": steps + 1,
                    "steps": [
                        {
                            "say": f"file {i}",
                            "edits": [{"path": f"out/{i}.txt", "content": f"{i}\n"}],
                        }
                        for i in range(steps)
                    ],
                },
            }
        ],
    }


def _cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


def _one(steps: int, folder: Path, sandbox: bool) -> dict[str, float]:
    repo = folder / "repo"
    make_repo(repo)
    keys = init_keys(folder / "keys")
    role_wall = [0.0]
    real_run_role = rounds_job.run_role

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_run_role(*args, **kwargs)
        finally:
            role_wall[0] += time.perf_counter() - start

    rounds_job.run_role = timed  # type: ignore[assignment]
    try:
        runtime = Runtime(
            repo=repo,
            plan=parse_plan(_plan(steps)),
            state_dir=repo / ".harness",
            keys=keys,
            run_id="r1",
            clock=LogicalClock(),
            capabilities=DEFAULT_MATRIX,
            git_date="2026-01-01T00:00:00+00:00",
            sandbox=Settings(opt_out=not sandbox),
            work_root=folder / "work",
            keys_dir=folder / "keys",
        )
        cpu0, wall0 = _cpu_ms(), time.perf_counter()
        summary = runtime.run()
        wall = time.perf_counter() - wall0
        cpu = _cpu_ms() - cpu0
    finally:
        rounds_job.run_role = real_run_role  # type: ignore[assignment]
    if summary.states["long"].value != "done":
        raise SystemExit(f"the rounds task ended {summary.states['long'].value}")
    rounds = steps + 1
    bundle = export_bundle(repo / ".harness", folder / "bundle.tar", keys).path
    start = time.perf_counter()
    report = verify_bundle(
        bundle, pins=TrustPolicy(frozenset({keys.key_id}), "bench"), hmac_master=keys.hmac_master
    )
    verify_ms = (time.perf_counter() - start) * 1000
    if report.status.value != "verified":
        raise SystemExit(f"verification failed: {report.failure}")
    return {
        "rounds": rounds,
        "wall_ms": wall * 1000,
        "roles_ms": role_wall[0] * 1000,
        "cpu_ms": cpu,
        "verify_ms": verify_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="5,40", help="comma-separated sizes (steps)")
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    sizes = sorted({int(part) for part in args.steps.split(",")})
    root = Path(tempfile.mkdtemp(prefix="bench-rounds-"))
    try:
        results = []
        for steps in sizes:
            folder = root / f"s{steps}"
            folder.mkdir()
            results.append(_one(steps, folder, not args.no_sandbox and shutil.which("bwrap")))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    big = results[-1]
    small = results[0]
    span = big["rounds"] - small["rounds"]
    slope = (
        (big["verify_ms"] - small["verify_ms"]) / span if span else big["verify_ms"] / big["rounds"]
    )
    per = big["rounds"]
    print(
        json.dumps(
            {
                "bench": "rounds",
                "sizes": [r["rounds"] for r in results],
                "sandbox": bool(not args.no_sandbox and shutil.which("bwrap")),
                "harness_ms_per_round": round((big["wall_ms"] - big["roles_ms"]) / per, 1),
                "coordinator_cpu_ms_per_round": round(big["cpu_ms"] / per, 1),
                "roles_ms_per_round": round(big["roles_ms"] / per, 1),
                "verify_ms_per_round": round(slope, 2),
                "verify_ms_total": round(big["verify_ms"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
