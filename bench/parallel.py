"""Parallel batches benchmark: tasks/s and coordinator CPU per task at 1, 4, 8, 16 in flight.

Prints one JSON line. Run: ``python bench/parallel.py --tasks 16 --gate-s 2``.

A plan of ``--tasks`` independent tasks (each with its own scope, so no two lock each other
out) runs through the real Runtime in a real git repository, once per level of ``--levels``
(``max_in_flight`` = the role's ``concurrency`` = the level): every batch spawns a real agent
process (a Python script writing one file, in the sandbox when bubblewrap is there) and one
real gate that sleeps ``--gate-s`` seconds. ``coordinator_cpu_ms_per_task`` is the runtime
process's own CPU (user + system, children excluded) per task: what the single-threaded loop
spends on git, records and supervision. ``speedup`` is each level's wall time against the
first level's. ``restore_ms`` is the P layer's restore time: from a failed attempt's
``attempt.failed`` record to the next attempt's ``agent.started`` (a fresh worktree from the
current HEAD, the feedback in its prompt), median of ``--restores`` retried tasks (target
<= 2000 ms). With ``--ray ADDRESS`` the same plan also runs on the Ray executor at the
highest level, and ``ray_overhead_ms_per_batch`` is its extra wall time per batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.orchestrate.adapters import CommandAdapter, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.receipts.keys import OperatorKeys
from harness.verify.fsm import TaskState

_AGENT = """
import pathlib, sys
task = sys.stdin.read().split("]", 1)[0].lstrip("[")
pathlib.Path(task).mkdir(exist_ok=True)
pathlib.Path(task, "out.txt").write_text(task + "\\n")
"""


def _plan(tasks: int, level: int, gate_s: float) -> dict[str, Any]:
    gate = {
        "name": "ok",
        "command": [sys.executable, "-c", f"import time; time.sleep({gate_s})"],
        "timeout_s": 60,
    }
    return {
        "plan": {
            "name": "bench",
            "max_batch": 1,
            "settle_ticks": 1,
            "max_in_flight": level,
            "concurrency": {"r": level},
        },
        "task": [
            {
                "id": f"t{i:04d}",
                "role": "r",
                "prompt": "x",
                "adapter": "bench-writer",
                "scope": [f"t{i:04d}/**"],
                "gates": [gate],
            }
            for i in range(tasks)
        ],
    }


_LEARNER = """
import pathlib, sys
ok = "What failed" in sys.stdin.read()
pathlib.Path("answer.txt").write_text("42\\n" if ok else "41\\n")
"""


def _restore_ms(work: Path, tasks: int) -> float:
    """Median restore time over ``tasks`` tasks that fail their gate once (wall clock)."""
    from datetime import datetime

    from harness.orchestrate.clock import wall_clock
    from harness.verify.canonical import parse_canonical

    script = work / "learner.py"
    script.write_text(_LEARNER)
    register_adapter(CommandAdapter.from_template([sys.executable, str(script)],
                                                  name="bench-learner"))  # fmt: skip
    check = "import pathlib, sys; sys.exit(pathlib.Path('answer.txt').read_text() != '42\\n')"
    gate = {"name": "pytest", "command": [sys.executable, "-c", check], "timeout_s": 60}
    plan = {
        "plan": {"name": "restore", "max_batch": 1, "settle_ticks": 1, "max_attempts": 2},
        "task": [{"id": f"r{i:03d}", "role": "r", "prompt": "x", "adapter": "bench-learner",
                  "gates": [gate]} for i in range(tasks)],
    }  # fmt: skip
    repo = work / "restore"
    make_repo(repo)
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "bench-learner": NO_TAGS}
    )
    Runtime(repo=repo, plan=parse_plan(plan), state_dir=repo / ".harness",
            keys=OperatorKeys(Ed25519PrivateKey.generate(), b"\x02" * 32), run_id="restore",
            clock=wall_clock, capabilities=matrix,
            work_root=work / "restore-work").run()  # fmt: skip
    audit = repo / ".harness" / "runs" / "restore" / "audit.jsonl"
    records = [parse_canonical(line) for line in audit.read_bytes().splitlines()]

    def at(record: dict[str, Any]) -> float:
        return datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()

    failed = {r["body"]["task"]: at(r) for r in records if r["kind"] == "attempt.failed"}
    batch_task = {r["body"]["batch"]: r["body"]["tasks"][0] for r in records
                  if r["kind"] == "agent.spawn" and r["body"]["attempt"] == 2}  # fmt: skip
    gaps = sorted(
        1000 * (at(r) - failed[batch_task[r["body"]["batch"]]])
        for r in records
        if r["kind"] == "agent.started" and r["body"]["batch"] in batch_task
    )
    if len(gaps) != tasks:
        raise SystemExit(f"restore: {len(gaps)} of {tasks} tasks were retried")
    return round(gaps[len(gaps) // 2], 1)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _one(work: Path, label: str, tasks: int, level: int, gate_s: float, executor: Any) -> dict:
    repo = work / label
    make_repo(repo)
    keys = OperatorKeys(Ed25519PrivateKey.generate(), b"\x01" * 32)
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "bench-writer": NO_TAGS}
    )
    runtime = Runtime(
        repo=repo,
        plan=parse_plan(_plan(tasks, level, gate_s)),
        state_dir=repo / ".harness",
        keys=keys,
        run_id="bench",
        clock=LogicalClock(),
        capabilities=matrix,
        git_date="2026-01-01T00:00:00+00:00",
        work_root=work / f"{label}-work",
    )
    runtime.executor = executor
    cpu, start = _cpu(), time.monotonic()
    summary = runtime.run()
    wall, spent = time.monotonic() - start, _cpu() - cpu
    done = sum(state is TaskState.DONE for state in summary.states.values())
    if done != tasks:
        raise SystemExit(f"{label}: only {done} of {tasks} tasks done: {summary.states}")
    return {"wall_s": round(wall, 3), "cpu_s": round(spent, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--gate-s", type=float, default=2.0)
    parser.add_argument("--levels", default="1,4,8,16")
    parser.add_argument("--ray", default=None, help="Ray address: also time the Ray executor")
    parser.add_argument("--restores", type=int, default=5, help="retried tasks for restore_ms")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    script = work / "agent.py"
    script.write_text(_AGENT)
    register_adapter(CommandAdapter.from_template([sys.executable, str(script)],
                                                  name="bench-writer"))  # fmt: skip
    out: dict[str, Any] = {"bench": "parallel", "tasks": args.tasks, "gate_s": args.gate_s}
    try:
        results = {level: _one(work, f"l{level}", args.tasks, level, args.gate_s, None)
                   for level in levels}  # fmt: skip
        first = results[levels[0]]["wall_s"]
        out["levels"] = {
            str(level): {
                **r,
                "tasks_per_s": round(args.tasks / r["wall_s"], 3),
                "coordinator_cpu_ms_per_task": round(1000 * r["cpu_s"] / args.tasks, 1),
                "speedup": round(first / r["wall_s"], 2),
            }
            for level, r in results.items()
        }
        if args.restores:
            out["restore_ms"] = _restore_ms(work, args.restores)
        if args.ray:
            from harness.orchestrate.executors.ray_executor import RayExecutor

            ray = RayExecutor(args.ray)
            ray.connect()
            try:
                top = levels[-1]
                remote = _one(work, "ray", args.tasks, top, args.gate_s, ray)
            finally:
                ray.close()
            out["ray"] = remote
            out["ray_overhead_ms_per_batch"] = round(
                1000 * (remote["wall_s"] - results[top]["wall_s"]) / args.tasks, 1
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
