"""Control-bus benchmark: the cost of a poll, of issuing a command, and of reading a long store.

Prints one JSON line. Run: ``python bench/bus.py --commands 200``.

* ``poll_idle_us``: one ``ControlBus.poll`` with nothing new (safe open of every path component,
  shared lock, fstat): what the runtime pays at every decision point;
* ``issue_ms``: one ``issue_command`` (safe opens, exclusive lock, catch-up, re-read of the store
  from genesis, audit tail, durable append) on a store of ``--commands`` records, mean over
  the last 20; ``replay_ms``: an exact replay of one of them (no append, no fsync);
* ``read_all_ms``: a fresh reader parsing and MAC-checking the whole store once.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.orchestrate.bus import ControlBus
from harness.receipts.commands import issue_command
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import run_dir
from harness.receipts.store import StoreWriter

RUN = "bench-1"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--polls", type=int, default=2000)
    args = parser.parse_args()
    keys = OperatorKeys(Ed25519PrivateKey.from_private_bytes(bytes(32)), bytes(range(32)))
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp).resolve()
        folder = run_dir(state, RUN)
        with StoreWriter(
            folder / "audit.jsonl", store="audit", run_id=RUN, hmac_master=keys.hmac_master
        ) as audit:
            status = {"status": "running", "epoch": 0, "reason": "start", "command": None}
            audit.append("run.status", status)
        issue_times = []
        for n in range(args.commands):
            started = time.perf_counter()
            issue_command(
                state,
                RUN,
                keys,
                operator="bench",
                command="instruct",
                args={"text": f"{n:064x}"},
                command_id=f"c{n}",
            )
            issue_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        issue_command(
            state,
            RUN,
            keys,
            operator="bench",
            command="instruct",
            args={"text": f"{0:064x}"},
            command_id="c0",
        )
        replay = time.perf_counter() - started
        started = time.perf_counter()
        bus = ControlBus(folder, RUN, keys.hmac_master)
        assert len(bus.poll()) == args.commands
        read_all = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(args.polls):
            bus.poll()
        idle = (time.perf_counter() - started) / args.polls
        depth = len(folder.parts)
    tail = issue_times[-20:]
    print(
        json.dumps(
            {
                "commands": args.commands,
                "path_depth": depth,
                "poll_idle_us": round(idle * 1e6, 1),
                "issue_ms": round(sum(tail) / len(tail) * 1e3, 2),
                "replay_ms": round(replay * 1e3, 2),
                "read_all_ms": round(read_all * 1e3, 2),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
