"""Runtime benchmark: evidence CPU per recorded event in a real run, and scheduling rate.

Prints one JSON line. Run: ``python bench/runtime.py --tasks 300``.

A plan of ``--tasks`` independent tasks (a mix of roles) runs through the real Runtime in a
real git repository; every batch spawns the no-op agent ``true`` in its own worktree (so the
figures include real processes and git, but no model). ``evidence_cpu_us_per_event`` is the
process CPU spent inside the evidence stores (serialization, MACs, Merkle updates, writes) per
record written, measured around ``StoreWriter.append_many`` (the runtime group-commits each
tick's records: the last retirement, the promotions and the spawns, then ``agent.started``;
``commits_per_batch``); ``evidence_cpu_us_per_event_without_fsync`` is the same less the
kernel CPU spent in ``fdatasync`` (``fsync_cpu_us_per_commit`` per group commit,
``group_commits`` of them): the floor any durable commit pays on this file system. The
scheduler's own rate over 10^4 queued tasks is bench/scheduler.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.orchestrate.adapters import CommandAdapter, register_adapter
from harness.orchestrate.capabilities import DEFAULT_MATRIX, NO_TAGS
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import make_repo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts import store as store_module
from harness.receipts.keys import OperatorKeys
from harness.verify.fsm import TaskState


def _plan(tasks: int) -> dict[str, object]:
    gate = {"name": "ok", "command": [sys.executable, "-c", "pass"], "timeout_s": 30}
    return {
        "plan": {"name": "bench", "max_batch": 3, "settle_ticks": 1},
        "task": [
            {
                "id": f"t{i:05d}",
                "role": f"r{i % 4}",
                "prompt": "noop",
                "adapter": "noop",
                "priority": i % 7,
                "gates": [gate],
            }
            for i in range(tasks)
        ],
    }


def evidence_cost(tasks: int) -> dict[str, float]:
    noop = shutil.which("true") or "/bin/true"
    register_adapter(CommandAdapter.from_template([noop], name="noop"))
    matrix = dataclasses.replace(
        DEFAULT_MATRIX, adapters={**DEFAULT_MATRIX.adapters, "noop": NO_TAGS}
    )
    keys = OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x06" * 32), bytes(range(32)))
    # The agent is ``true`` and the figure is the evidence's: no sandbox (explicitly opted
    # out, as recorded), so the run is the same with or without bubblewrap on the machine.
    sandbox = Settings(opt_out=True)
    spent = {"cpu": 0.0, "records": 0, "commits": 0, "fsync_cpu": 0.0}
    original = store_module.StoreWriter.append_many
    fdatasync = store_module.os.fdatasync

    def timed(self, items, **options):  # type: ignore[no-untyped-def]
        batch = list(items)
        start = time.process_time()
        try:
            return original(self, batch, **options)
        finally:
            spent["cpu"] += time.process_time() - start
            spent["records"] += len(batch)
            spent["commits"] += 1

    def timed_sync(fd: int) -> None:  # the kernel's share: what one durable commit costs
        start = time.process_time()
        try:
            fdatasync(fd)
        finally:
            spent["fsync_cpu"] += time.process_time() - start

    store_module.StoreWriter.append_many = timed  # type: ignore[method-assign]
    store_module.os.fdatasync = timed_sync
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "repo"
            make_repo(repo)
            wall = time.perf_counter()
            summary = Runtime(
                repo=repo, plan=parse_plan(_plan(tasks)), state_dir=repo / ".harness",
                keys=keys, run_id="bench", clock=LogicalClock(), capabilities=matrix,
                sandbox=sandbox,
            ).run()  # fmt: skip
            wall = time.perf_counter() - wall
    finally:
        store_module.StoreWriter.append_many = original  # type: ignore[method-assign]
        store_module.os.fdatasync = fdatasync
    done = sum(1 for state in summary.states.values() if state is TaskState.DONE)
    return {
        "tasks": tasks,
        "tasks_done": done,
        "batches": summary.batches,
        "events": spent["records"],
        "evidence_cpu_us_per_event": spent["cpu"] / max(spent["records"], 1) * 1e6,
        "evidence_cpu_us_per_event_without_fsync": (spent["cpu"] - spent["fsync_cpu"])
        / max(spent["records"], 1)
        * 1e6,
        "group_commits": spent["commits"],
        "commits_per_batch": spent["commits"] / max(summary.batches, 1),
        "fsync_cpu_us_per_commit": spent["fsync_cpu"] / max(spent["commits"], 1) * 1e6,
        "run_seconds": wall,
        "tasks_per_s_end_to_end": tasks / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    figures: dict[str, float] = evidence_cost(args.tasks)
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
