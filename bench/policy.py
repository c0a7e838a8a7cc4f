"""Policy re-decision benchmark: what the verifier's ``plan``/``trifecta``/``capsule``/
``gate-integrity`` rules cost on top of the lifecycle check.

Prints one JSON line. Run: ``python bench/policy.py --tasks 5000``.

A synthetic format-2 history (in memory, no I/O): ``--tasks`` tasks under a capsule, each
checked before spawn, spawned, one edit, checked before gates, one gate, an intact
gate-integrity record, merged, done; every 50th task denied by the trifecta; the control
records the runtime adds (``tests/evidence_helpers.with_control``). It is folded
twice: with the policy check (``run_semantics``, what the bundle verifier does) and with the
lifecycle fold alone (``RunSemantics`` without policy).

* ``records`` — audit records in the history (lineage records: one per task more);
* ``with_policy_us_per_record`` / ``lifecycle_only_us_per_record`` — fold time per audit record;
* ``policy_overhead_us_per_record`` — their difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from harness.verify.canonical import canonical_bytes
from harness.verify.records import Record
from harness.verify.rules import capsule as capsule_rule
from harness.verify.rules import trifecta
from harness.verify.rules.controller import Params
from harness.verify.semantics import RunSemantics, run_semantics

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.evidence_helpers import with_control  # the runtime's control records

T = "2026-01-01T00:00:00.000000Z"
C, TREE = "1" * 40, "2" * 40
CAPSULE = {"goal": "g", "actions": ["edit", "gate", "merge"], "scope": ["src/**"],
           "adapters": [], "egress": [], "expires": "2030-01-01T00:00:00.000000Z"}  # fmt: skip
MATRIX = {
    "adapters": {"s": []},
    "mcp": {},
    "tools": {"secrets": ["private_data"], "web": ["external_comm", "untrusted_input"]},
}


def _rec(kind: str, store: str = "audit", **body: Any) -> Record:
    return Record(store, "r", 0, T, kind, body, "ab" * 32)


def history(n: int) -> tuple[bytes, list[Record], list[Record]]:
    digest = hashlib.sha256(canonical_bytes(CAPSULE)).hexdigest()
    tasks = []
    for i in range(n):
        tools = ["secrets", "web"] if i % 50 == 0 else ["web"]
        tasks.append({"id": f"t{i}", "role": "r", "priority": 0, "depends": [], "adapter": "s",
                      "tools": tools, "scope": ["src/**"], "requirements": []})  # fmt: skip
    plan = canonical_bytes({"format": "harness-verify/plan", "version": 1, "name": "p",
                            "capsule": CAPSULE, "tasks": tasks,
                            "control": Params().record()})  # fmt: skip
    audit = [_rec("run.start", plan="p", plan_sha256=hashlib.sha256(plan).hexdigest(),
                  producer="b", harness_version="0", base_commit=C, repository_roots=[C],
                  capabilities=MATRIX, capsule=CAPSULE, sandbox={"kind": "none"})]  # fmt: skip
    audit += [_rec("task.planned", task=t["id"], role="r", priority=0, depends=[], adapter="s",
                   tools=t["tools"]) for t in tasks]  # fmt: skip
    lineage = []
    matrix = trifecta.matrix_from_object(MATRIX)

    def move(task: str, a: str, b: str) -> Record:
        return _rec("task.transition", task=task, reason="r", **{"from": a, "to": b})

    def check(task: str, actions: list[list[str]]) -> Record:
        return _rec("capsule.check", task=task, capsule=digest, now=T, actions=actions,
                    conforms=True, violations=[])  # fmt: skip

    for i, t in enumerate(tasks):
        name, batch, branch = t["id"], f"b{i}", f"harness/r/b{i}"
        decision = trifecta.decide(matrix, "s", t["tools"], None)
        if decision.denied:
            audit += [_rec("capability.denied", task=name, tools=list(decision.chain),
                           tags=list(decision.tags), reason=decision.reason, sandbox=None),
                      move(name, "planned", "denied")]  # fmt: skip
            continue
        acts = [["edit", f"src/{name}.py"], ["gate", "g"], ["merge", branch]]
        assert not capsule_rule.conformance(
            capsule_rule.capsule_from_document(CAPSULE), now=T,
            task=capsule_rule.TaskFacts(name, "s", ("src/**",)),
            actions=[(a, b) for a, b in acts])  # fmt: skip
        audit += [
            check(name, []), move(name, "planned", "open"), move(name, "open", "claimed"),
            _rec("lock.acquire", batch=batch, globs=["src/**"]),
            _rec("agent.spawn", batch=batch, tasks=[name], adapter="s", branch=branch,
                 worktree="w", timeout_ms=1, sandbox={"kind": "none"}, env=[],
                 supervisor=f"role:{t['role']}", attempt=1, idle_ms=None, lifetime_ms=1,
                 grace_ms=2000, lock=["src/**"],
                 budget={"wall_ms": None, "tokens": None, "cost_micros": None}),
            move(name, "claimed", "in_progress"), check(name, acts),
            move(name, "in_progress", "gating"),
            _rec("gate.result", task=name, gate="g", passed=True, exit_code=0, duration_ms=1),
            _rec("gate.integrity", batch=batch, tasks=[name], commit=C, tree=TREE, head=C,
                 head_tree=TREE, clean_before=True, clean_after=True, intact=True,
                 reason="unchanged"),
            _rec("merge.result", task=name, branch=branch, merged=True, commit=C, reason="c"),
            move(name, "gating", "done"),
            _rec("lock.release", batch=batch, reason="retired"),
        ]  # fmt: skip
        lineage.append(_rec("artifact.write", "lineage", path=f"src/{name}.py", task=name))
    rows = with_control([("audit", r.kind, dict(r.body)) for r in audit], plan)
    audit = [_rec(kind, **body) for store, kind, body in rows if store == "audit"]
    return plan, audit, lineage


def fold(semantics: RunSemantics, audit: list[Record], lineage: list[Record]) -> float:
    start = time.perf_counter()
    for i, record in enumerate(audit):
        semantics.audit(record, f"a{i}")
    for i, record in enumerate(lineage):
        semantics.lineage(record, f"l{i}")
    semantics.finish()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=5000)
    args = parser.parse_args()
    plan, audit, lineage = history(args.tasks)
    with_policy = min(fold(run_semantics("r", plan), audit, lineage) for _ in range(3))
    plain = []
    for _ in range(3):
        bare = RunSemantics("r")
        bare.declared = False  # lifecycle rules only; finish() is told there is no policy
        start = time.perf_counter()
        for i, record in enumerate(audit):
            if record.kind != "run.start":
                bare.audit(record, f"a{i}")
        for i, record in enumerate(lineage):
            bare.lineage(record, f"l{i}")
        plain.append(time.perf_counter() - start)
    lifecycle = min(plain)
    n = len(audit)
    print(json.dumps({
        "tasks": args.tasks, "records": n,
        "with_policy_us_per_record": round(with_policy / n * 1e6, 2),
        "lifecycle_only_us_per_record": round(lifecycle / n * 1e6, 2),
        "policy_overhead_us_per_record": round((with_policy - lifecycle) / n * 1e6, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
