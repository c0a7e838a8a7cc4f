"""Event bus benchmark: the runtime's cost per published message, the verifier's per record.

Prints one JSON line. Run: ``python bench/events.py --tasks 2000``.

A synthetic run of ``tasks`` tasks over 10 roles: each task fails once (a P message), is
restarted (its answer, ``event.handled``), and every tenth failure is followed by a layer-I
decision (an I message, answered by the role's next restart). The audit records are appended
in group commits of one retirement each (failure + decision), then the restart, through the
real stores with fdatasync, exactly as ``RunCore.flush`` feeds the bus.

* ``publish_us``: wall time of ``EventBus.audited`` per events record written (fold, build,
  append with fdatasync), excluding the audit append itself;
* ``derive_us``: the same fold without any I/O (``orchestrate.events.derive``), per record;
* ``verify_us``: the verifier's events check (``EventCheck``: audit fold then events fold)
  per events record, over the records as parsed from the store;
* ``records``: events records written.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.orchestrate.events import EventBus, derive
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.receipts.store import utc_now
from harness.verify.eventcheck import event_check
from harness.verify.records import parse_record_line

Body = dict[str, Any]


def _rows(tasks: int) -> list[list[tuple[str, Body]]]:
    batches: list[list[tuple[str, Body]]] = [[
        ("task.planned", {"task": f"t{i}", "role": f"r{i % 10}", "priority": 0, "depends": [],
                          "adapter": "scripted", "tools": []})
        for i in range(tasks)
    ]]  # fmt: skip
    for i in range(tasks):
        failure: list[tuple[str, Body]] = [
            ("attempt.failed", {"task": f"t{i}", "batch": f"b{i}", "attempt": 1, "anomaly": "test",
                                "reason": "gate failed", "retry": True, "checkpoint": "0" * 40,
                                "feedback_sha256": "1" * 64}),
        ]  # fmt: skip
        if i % 10 == 9:
            decision: Body = {"step": i, "layer": "I", "rule": "bucket", "key": f"agent:r{i % 10}",
                              "level": 20, "threshold": 20, "class": "test",
                              "action": "template", "config": None}  # fmt: skip
            failure.append(("control.decision", decision))
        batches.append(failure)
        batches.append([("agent.spawn", {"batch": f"c{i}", "tasks": [f"t{i}"],
                                         "adapter": "scripted", "branch": "b", "worktree": "w",
                                         "timeout_ms": 1, "sandbox": {}, "env": [],
                                         "supervisor": f"role:r{i % 10}", "attempt": 2,
                                         "idle_ms": None, "lifetime_ms": 1, "grace_ms": 1,
                                         "lock": [], "budget": {}, "config": 1})])  # fmt: skip
    return batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    args = parser.parse_args()
    keys = OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x01" * 32), bytes(range(32)))
    batches = _rows(args.tasks)
    with tempfile.TemporaryDirectory() as tmp:
        recorder = RunRecorder(Path(tmp), "bench", keys)
        bus = EventBus(recorder, utc_now)
        audit = recorder.store("audit")
        publish = 0.0
        for batch in batches:
            acks = audit.append_many(batch)
            start = time.perf_counter()
            bus.audited(batch, acks)
            publish += time.perf_counter() - start
        events_path = recorder.folder / "events.jsonl"
        audit_path = recorder.folder / "audit.jsonl"
        events = [parse_record_line(line, "events", "bench")
                  for line in events_path.read_bytes().splitlines()]  # fmt: skip
        audits = [parse_record_line(line, "audit", "bench")
                  for line in audit_path.read_bytes().splitlines()]  # fmt: skip
        recorder.close()
    flat = [(seq, kind, body) for seq, (kind, body) in enumerate(r for b in batches for r in b)]
    start = time.perf_counter()
    derived = derive(flat)
    derive_s = time.perf_counter() - start
    assert len(derived) == len(events)
    start = time.perf_counter()
    check = event_check("bench", None)
    for record in audits:
        check.audit(record, "a")
    for record in events:
        check.events(record, "e")
    check.finish()
    verify_s = time.perf_counter() - start
    n = len(events)
    print(json.dumps({
        "bench": "events", "tasks": args.tasks, "records": n,
        "publish_us": round(publish / n * 1e6, 2),
        "derive_us": round(derive_s / n * 1e6, 2),
        "verify_us": round(verify_s / n * 1e6, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
