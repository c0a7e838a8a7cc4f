"""Semantic checks: each rule has a history that breaks it.

Histories here are records built in memory (fast, one rule at a time); tests/test_rules_evidence.py
builds whole bundles with the project's writers and checks the same refusals end to end.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from harness.verify.canonical import canonical_bytes
from harness.verify.policycheck import PolicyError
from harness.verify.records import Record
from harness.verify.rules import trifecta
from harness.verify.rules.controller import Params
from harness.verify.semantics import SemanticsError, check_run_semantics

from .evidence_helpers import with_control

HEX = "ab" * 32
C1, C2, T1, T2 = "1" * 40, "2" * 40, "3" * 40, "4" * 40
TIME = "2026-01-01T00:00:00.000000Z"
MATRIX = {"adapters": {"s": []}, "mcp": {}, "tools": {"web": ["external_comm", "untrusted_input"]}}
CAPSULE = {
    "goal": "g",
    "actions": ["edit", "gate", "merge"],
    "scope": ["src/**"],
    "adapters": [],
    "egress": [],
    "expires": "2026-06-01T00:00:00.000000Z",
}


def _task(task: str, adapter: str = "s", tools: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "id": task,
        "role": "coder",
        "priority": 0,
        "depends": [],
        "adapter": adapter,
        "tools": list(tools),
        "scope": ["**"],
        "requirements": [],
    }


def plan_doc(*tasks: dict[str, Any], capsule: dict[str, Any] | None = None) -> bytes:
    return canonical_bytes(
        {
            "format": "harness-verify/plan",
            "version": 1,
            "name": "p",
            "capsule": capsule,
            "tasks": list(tasks),
            "control": Params().record(),
        }
    )


def _rec(kind: str, time: str = TIME, **body: Any) -> Record:
    return Record("audit", "r", 0, time, kind, body, HEX)


NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}


def start(plan: bytes, capsule: dict[str, Any] | None = None, **extra: Any) -> Record:
    extra.setdefault("sandbox", NO_SANDBOX)
    return _rec(
        "run.start",
        plan="p",
        plan_sha256=hashlib.sha256(plan).hexdigest(),
        producer="t",
        harness_version="0",
        base_commit=C1,
        repository_roots=[C1],
        capabilities=MATRIX,
        capsule=capsule,
        **extra,
    )


def planned(task: str, adapter: str = "s", tools: tuple[str, ...] = ()) -> Record:
    return _rec(
        "task.planned",
        task=task,
        role="coder",
        priority=0,
        depends=[],
        adapter=adapter,
        tools=list(tools),
    )


def move(task: str, a: str, b: str) -> Record:
    return _rec("task.transition", task=task, reason="r", **{"from": a, "to": b})


def spawn(*tasks: str, sandbox: dict[str, Any] | None = None) -> Record:
    return _rec(
        "agent.spawn",
        batch="b1",
        tasks=list(tasks),
        adapter="s",
        branch="x",
        worktree="w",
        timeout_ms=1,
        sandbox=sandbox or {"kind": "none", "network": True, "private_mounts": True},
        env=[],
        supervisor="role:coder",
        attempt=1,
        idle_ms=None,
        lifetime_ms=1,
        grace_ms=2000,
        lock=["**"],
        budget={"wall_ms": None, "tokens": None, "cost_micros": None},
    )


def gate(task: str, passed: bool) -> Record:
    return _rec("gate.result", task=task, gate="g", passed=passed, exit_code=0, duration_ms=1)


def integrity(intact: bool = True, head: str = C2, reason: str = "unchanged") -> Record:
    return _rec(
        "gate.integrity",
        batch="b1",
        tasks=["t1"],
        commit=C2,
        tree=T1,
        head=head,
        head_tree=T1,
        clean_before=True,
        clean_after=True,
        intact=intact,
        reason=reason,
    )


def merge(task: str, merged: bool) -> Record:
    return _rec("merge.result", task=task, branch="x", merged=merged, commit=None, reason="r")


def denial(task: str, adapter: str, tools: tuple[str, ...], sandbox: Any = None) -> Record:
    matrix = trifecta.matrix_from_object(MATRIX)
    decision = trifecta.decide(matrix, adapter, tools, sandbox)
    return _rec(
        "capability.denied",
        task=task,
        tools=list(decision.chain),
        tags=list(decision.tags),
        reason=decision.reason or "x",
        sandbox=sandbox,
    )


def refuse(task: str, a: str, b: str) -> Record:
    return _rec("task.refused", task=task, reason="x", **{"from": a, "to": b})


def write(task: str, path: str = "a") -> Record:
    return Record("lineage", "r", 0, TIME, "artifact.write", {"path": path, "task": task}, HEX)


PLAN = plan_doc(_task("t1"), _task("t2", "x"))


def _happy(task: str = "t1") -> list[Record]:
    return [
        start(PLAN),
        planned(task),
        planned("t2", "x"),
        move(task, "planned", "open"),
        move(task, "open", "claimed"),
        spawn(task),
        move(task, "claimed", "in_progress"),
        move(task, "in_progress", "gating"),
        gate(task, True),
        integrity(),
        merge(task, True),
        move(task, "gating", "done"),
        denial("t2", "x", ()),
        move("t2", "planned", "denied"),
    ]


def _locked(audit: list[Record]) -> list[Record]:
    """The histories here are about the lifecycle: give every spawn the lock the runtime takes
    right before it (the lock rules have their own tests, tests/test_lock_evidence.py)."""
    out: list[Record] = []
    for record in audit:
        if record.kind == "agent.spawn":
            out.append(_rec("lock.acquire", batch=record.body["batch"], globs=record.body["lock"]))
        out.append(record)
    return out


def _controlled(audit: list[Record], plan: bytes | None) -> list[Record]:
    """With the control records the runtime adds (``with_control``; their check has its own
    tests, tests/test_control_evidence.py)."""
    if plan is None:
        return audit
    bodies = [dict(r.body) for r in audit]
    times = {id(body): r.time for body, r in zip(bodies, audit, strict=True)}
    out: list[Record] = []
    rows = [("audit", r.kind, body) for r, body in zip(audit, bodies, strict=True)]
    for _, kind, body in with_control(rows, plan):
        time = times.get(id(body), out[-1].time if out else TIME)  # added: the time before
        out.append(_rec(kind, time, **body))
    return out


def _check(audit: list[Record], lineage: list[Record] = (), plan: bytes | None = PLAN) -> None:  # type: ignore[assignment]
    check_run_semantics(
        "r",
        [(r, f"a{i}") for i, r in enumerate(_controlled(_locked(audit), plan))],
        [(r, f"l{i}") for i, r in enumerate(lineage)],
        plan,
    )


def test_lawful_history_passes() -> None:
    _check(_happy(), [write("t1")])
    refused = _rec("task.refused", task="t2", reason="terminal", **{"from": "denied", "to": "open"})
    _check([*_happy(), refused], [write("t1")])
    _check([], [write("anything")], None)  # no runtime records: nothing to check


H = _happy()


@pytest.mark.parametrize(
    ("audit", "lineage", "reason"),
    [
        ([H[0], move("t1", "planned", "open")], [], "not declared"),
        ([H[0], planned("t1"), planned("t1")], [], "declared twice"),
        ([*H[:3], move("t1", "open", "claimed")], [], "but is 'planned'"),
        ([*H[:3], move("t1", "planned", "done")], [], "not a legal transition"),
        ([*H[:8], integrity(), merge("t1", True), move("t1", "gating", "done")], [],
         "merged without"),
        ([*H[:8], gate("t1", False), move("t1", "gating", "done")], [], "done without"),
        ([*H[:9], move("t1", "gating", "done")], [], "done without"),
        (
            [*H[:3], refuse("t1", "planned", "open")],
            [],
            "legal transition planned -> open was refused",
        ),
        ([*H[:3], denial("t2", "x", ()), spawn("t2")], [], "spawned denied task|rule trifecta"),
        ([*H[:3], denial("t2", "x", ()), move("t2", "planned", "open")], [], "rule trifecta"),
        ([*H[:3], denial("t2", "x", ())], [], "denied but ends 'planned'"),
        ([*H[:3]], [write("t1")], "which never ran"),
        (H, [write("t9")], "never declared"),
    ],
)  # fmt: skip
def test_each_rule_fails(audit: list[Record], lineage: list[Record], reason: str) -> None:
    with pytest.raises((SemanticsError, PolicyError), match=reason):
        _check(audit, lineage)


# ---- the recorded policy ----------------------------------------------------------------------


def test_plan_binding() -> None:
    with pytest.raises(PolicyError, match=r"rule plan: task.planned before run.start"):
        _check(H[1:])
    with pytest.raises(PolicyError, match=r"plan.json is not in the bundle"):
        _check(H, plan=None)
    with pytest.raises(PolicyError, match=r"has SHA-256"):
        _check(H, plan=PLAN + b" ")
    with pytest.raises(PolicyError, match=r"task 't3' breaks rule plan: declared but not a task"):
        _check([*H, planned("t3")])
    with pytest.raises(PolicyError, match=r"task 't2' breaks rule plan: in the plan but never"):
        _check([r for r in H if r.body.get("task") != "t2"])
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule plan: task.planned differs"):
        _check([H[0], planned("t1", tools=("web",))])
    with pytest.raises(PolicyError, match=r"a plan member without run.start"):
        _check([], plan=PLAN)


def test_trifecta_recomputed() -> None:
    # a recorded denial the rule would allow (t1's adapter has no tags)
    forged = _rec("capability.denied", task="t1", tools=["web"], tags=["external_comm"],
                  reason="x", sandbox=None)  # fmt: skip
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule trifecta: recorded as denied"):
        _check([*H[:3], forged, move("t1", "planned", "denied")])
    # a denial whose text differs from the rule's
    wrong = _rec("capability.denied", task="t2", tools=["adapter:x"], tags=list(trifecta.RISKS),
                 reason="because", sandbox=None)  # fmt: skip
    with pytest.raises(PolicyError, match=r"task 't2' breaks rule trifecta: the recorded denial"):
        _check([*H[:3], wrong, move("t2", "planned", "denied")])
    # a task the rule denies that ran anyway (no denial recorded)
    ran = [*H[:3], move("t2", "planned", "open"), move("t2", "open", "claimed"), spawn("t2")]
    with pytest.raises(PolicyError, match=r"task 't2' breaks rule trifecta: opened"):
        _check(ran)
    sandbox = {"kind": "bwrap", "network": False, "private_mounts": False}
    lowered = start(PLAN, sandbox=sandbox)
    with pytest.raises(PolicyError, match=r"task 't2' breaks rule trifecta: ran, but the rule"):
        _check([lowered, *ran[1:]])  # opened legally under the run's sandbox, spawned without
    _check([lowered, *ran[1:5], spawn("t2", sandbox=sandbox)])  # same sandbox: allowed


ROUTE = {
    "route": "anthropic",
    "family": "anthropic",
    "scheme": "https",
    "host": "api.anthropic.com",
    "port": 443,
    "path_prefix": "/v1/",
    "credential": True,
}


def test_sandbox_lowering_is_physics() -> None:
    matrix = trifecta.matrix_from_object({"adapters": {}, "mcp": {}, "tools": {}})
    for sandbox, denied in [
        (None, True),
        ({"kind": "none", "network": False, "private_mounts": False}, True),
        ({"kind": "bwrap", "network": True, "private_mounts": True}, True),
        ({"kind": "bwrap", "network": False, "private_mounts": True, "egress": []}, False),
        ({"kind": "bwrap", "network": True, "private_mounts": False}, False),
        ({"kind": "bwrap", "network": 0, "private_mounts": 0}, True),  # not booleans: no claim
        # decision 0048: a proxied agent still talks out through its allow-list
        ({"kind": "bwrap", "network": False, "private_mounts": True, "egress": [ROUTE]}, True),
        ({"kind": "bwrap", "network": False, "private_mounts": True}, True),  # no egress: no claim
        ({"kind": "bwrap", "network": False, "private_mounts": True, "egress": {}}, True),
    ]:
        assert trifecta.decide(matrix, "claude", (), sandbox).denied is denied, sandbox
    web = trifecta.decide(matrix, "claude", ("web", "secrets"), {"kind": "bwrap",
                          "network": False, "private_mounts": False})  # fmt: skip
    assert web.denied, "tools keep their tags: only the adapter's are lowered"


CPLAN = plan_doc(_task("t1"), capsule=CAPSULE)


def _capsule_check(task: str, now: str, actions: list[list[str]], violations: list[str],
                   time: str = TIME) -> Record:  # fmt: skip
    return _rec(
        "capsule.check",
        time=time,
        task=task,
        capsule=hashlib.sha256(canonical_bytes(CAPSULE)).hexdigest(),
        now=now,
        actions=actions,
        conforms=not violations,
        violations=violations,
    )


ACTS = [["edit", "src/a.py"], ["gate", "g"], ["merge", "x"]]


def _capsule_run(check: Record, path: str = "src/a.py") -> tuple[list[Record], list[Record]]:
    return [
        start(CPLAN, CAPSULE),
        planned("t1"),
        _capsule_check("t1", TIME, [], []),
        move("t1", "planned", "open"),
        move("t1", "open", "claimed"),
        spawn("t1"),
        move("t1", "claimed", "in_progress"),
        check,
        move("t1", "in_progress", "gating"),
        gate("t1", True),
        integrity(),
        merge("t1", True),
        move("t1", "gating", "done"),
    ], [write("t1", path)]


def test_capsule_recomputed() -> None:
    audit, lineage = _capsule_run(_capsule_check("t1", TIME, ACTS, []))
    _check(audit, lineage, CPLAN)
    late = "2026-07-01T00:00:00.000000Z"
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule capsule: the recorded decision"):
        _check(*_capsule_run(_capsule_check("t1", late, ACTS, [], time=late)), CPLAN)
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule capsule: decided at"):
        _check(*_capsule_run(_capsule_check("t1", late, ACTS, [])), CPLAN)
    # the check left out the edit the lineage shows: done is refused
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule capsule: done, but its edit"):
        _check(*_capsule_run(_capsule_check("t1", TIME, ACTS[1:], [])), CPLAN)
    # the gate and the merge must be covered by the check
    with pytest.raises(PolicyError, match=r"rule capsule: gate 'g' was not covered"):
        _check(*_capsule_run(_capsule_check("t1", TIME, [ACTS[0], ACTS[2]], [])), CPLAN)
    with pytest.raises(PolicyError, match=r"rule capsule: merge 'x' was not covered"):
        _check(*_capsule_run(_capsule_check("t1", TIME, ACTS[:2], [])), CPLAN)
    audit, lineage = _capsule_run(_capsule_check("t1", TIME, ACTS, []))
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule capsule: ran without"):
        _check(audit[:2] + audit[3:], lineage, CPLAN)


def test_gate_integrity_recomputed() -> None:
    bad = [*H[:9], integrity(intact=True, head=C1), merge("t1", True), move("t1", "gating", "done")]
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule gate-integrity: the recorded"):
        _check(bad)
    moved = integrity(
        intact=False, head=C1, reason=f"HEAD moved from {C2} to {C1} during the gates"
    )
    with pytest.raises(PolicyError, match=r"task 't1' breaks rule gate-integrity: merged without"):
        _check([*H[:9], moved, merge("t1", True), move("t1", "gating", "done")])
    _check([*H[:9], moved, move("t1", "gating", "failed"), *H[12:]])
