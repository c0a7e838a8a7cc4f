"""Sandbox benchmark: what bubblewrap adds to each spawned process.

Prints one JSON line. Run: ``python bench/sandbox.py --runs 40``.

Each run spawns ``/usr/bin/true`` through ``harness.orchestrate.proc.run_process`` the way the
runtime does (own process group, pipes, group kill and reap), once plain and once inside an
agent's sandbox profile (new user, PID, IPC, UTS, cgroup and network namespaces, the system,
the interpreter, the worktree, io and home mounts, private /tmp), alternating so that machine
noise hits both alike. ``overhead_ms_median`` is the median of the per-pair differences, the
figure the target (<= 50 ms per process) applies to; ``python_*`` does the same for
``python -c pass`` (what a gate or the scripted agent costs end to end). Integers only
(microseconds), like records.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.orchestrate.proc import run_process
from harness.orchestrate.sandbox import BatchDirs, Sandbox, Settings, probe


def _pairs(sandbox: Sandbox, dirs: BatchDirs, argv: list[str], runs: int) -> list[tuple[int, int]]:
    profile, env = sandbox.agent(dirs, programs=[argv[0]], network=False)
    wrapped = sandbox.argv(profile, argv)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        plain = run_process(argv, cwd=dirs.tree, timeout_s=30, env=env)
        t1 = time.perf_counter_ns()
        boxed = run_process(wrapped, cwd=dirs.tree, timeout_s=30, env=env, sandboxed=True)
        t2 = time.perf_counter_ns()
        if plain.exit_code != 0 or boxed.exit_code != 0:
            raise SystemExit(f"bench: a run failed: {boxed.stderr.decode()[-500:]}")
        out.append(((t1 - t0) // 1000, (t2 - t1) // 1000))
    return out


def _summary(prefix: str, pairs: list[tuple[int, int]]) -> dict[str, int]:
    plain = [p for p, _ in pairs]
    boxed = [b for _, b in pairs]
    diff = sorted(b - p for p, b in pairs)
    return {
        f"{prefix}plain_us_median": int(statistics.median(plain)),
        f"{prefix}sandboxed_us_median": int(statistics.median(boxed)),
        f"{prefix}overhead_us_median": int(statistics.median(diff)),
        f"{prefix}overhead_us_p90": diff[min(len(diff) - 1, (len(diff) * 9) // 10)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    support = probe()
    if not support.available:
        print(json.dumps({"bench": "sandbox", "skipped": support.reason}))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    try:
        repo = tmp / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        state = repo / ".harness"
        state.mkdir()
        sandbox = Sandbox.for_run(Settings(), repo=repo, state_dir=state, keys_dir=tmp / "keys")
        dirs = BatchDirs(tmp / "work" / "b1")
        dirs.create()
        dirs.tree.mkdir()
        true = shutil.which("true") or "/usr/bin/true"
        result: dict[str, object] = {"bench": "sandbox", "runs": args.runs,
                                     "bwrap": support.version, "cpus": os.cpu_count()}  # fmt: skip
        result |= _summary("true_", _pairs(sandbox, dirs, [true], args.runs))
        result |= _summary("python_", _pairs(sandbox, dirs, [sys.executable, "-c", "pass"],
                                             max(5, args.runs // 4)))  # fmt: skip
        overhead = result["true_overhead_us_median"]
        assert isinstance(overhead, int)
        result["overhead_ms_median"] = overhead // 1000
        result["target_ms"] = 50
        result["within_target"] = overhead <= 50_000
        print(json.dumps(result, sort_keys=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
