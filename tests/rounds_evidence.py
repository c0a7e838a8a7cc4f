"""Hand-built evidence of rounds, commands and run lifecycles, recorded with the project's own
writers (``RunRecorder``, ``export_bundle``) and verified with ``verify_bundle``.

``Evidence`` builds a run's records the way the runtime records them (the recorded header of
an audit is the rules' for its report, unless a test overrides it); ``lawful()`` is one rounds
task over three rounds that verifies; ``verify`` exports and verifies; ``fold`` drives the
rounds fold directly. Shared by tests/test_round_evidence.py, test_command_evidence.py and
test_lifecycle_evidence.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.plandoc import plan_bytes
from harness.receipts.bundle import export_bundle
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy
from harness.verify.records import Record
from harness.verify.roundcheck import RoundCheck, RoundError
from harness.verify.rules.header import REPLACEMENT, VIOLATION, Header, parse_header

from .evidence_helpers import make_keys, with_control

try:
    from harness.verify.rules.roles import denied
except ImportError:  # pragma: no cover - helper H4's module; the check skips without it

    def denied(role: str) -> tuple[str, ...]:
        return ()


RUN = "r1"
BASE, C1, C2 = "1" * 40, "2" * 40, "3" * 40
TREE, TREE2 = "a" * 64, "b" * 64
NO_SANDBOX = {"kind": "none", "network": True, "private_mounts": True, "opt_out": True}
HERE = Path(__file__).parent / "vectors"
Body = dict[str, Any]
Row = tuple[str, str, Body]
AUDIT = f"runs/{RUN}/stores/audit.jsonl"


def make_plan(tasks: list[str]) -> Any:
    return parse_plan(
        {
            "plan": {"name": "p"},
            "task": [
                {
                    "id": t,
                    "role": "coder",
                    "prompt": "fix",
                    "scope": ["src/**"],
                    "gates": [{"name": "tests", "command": ["true"]}],
                }
                for t in tasks
            ],
        }
    )


def move(task: str, a: str, b: str, reason: str = "r") -> Row:
    return ("audit", "task.transition", {"task": task, "from": a, "to": b, "reason": reason})


def status(state: str, epoch: int = 0, command: str | None = None) -> Row:
    return (
        "audit",
        "run.status",
        {"status": state, "epoch": epoch, "reason": "r", "command": command},
    )


def command(cid: str, name: str, revision: int = 0, args: Body | None = None) -> Row:
    body = {"operator": "op", "command": name, "args": args or {}, "id": cid, "revision": revision}
    return ("control", "command", body)


def receipt(cid: str, name: str, seq: int, outcome: str = "applied", reason: str = "ok") -> Row:
    body = {"id": cid, "command": name, "control_seq": seq, "outcome": outcome, "reason": reason}
    return ("audit", "command.receipt", body)


@dataclass
class Evidence:
    """Records (store, kind, body) and round texts (digest -> bytes) of one run."""

    plan: Any
    records: list[Row] = field(default_factory=list)
    texts: dict[str, bytes] = field(default_factory=dict)
    latest: dict[str, Header | None] = field(default_factory=dict)

    def add(self, *rows: Row) -> Evidence:
        self.records.extend(rows)
        return self

    def text(self, content: str | bytes) -> str:
        data = content.encode() if isinstance(content, str) else content
        digest = hashlib.sha256(data).hexdigest()
        self.texts[digest] = data
        return digest

    # ---- the runtime's records ------------------------------------------------------------------
    def start(self) -> Evidence:
        start = {
            "plan": "p",
            "plan_sha256": hashlib.sha256(plan_bytes(self.plan)).hexdigest(),
            "producer": "harness test",
            "harness_version": "0",
            "base_commit": BASE,
            "repository_roots": [BASE],
            "capabilities": _matrix(),
            "capsule": None,
            "sandbox": NO_SANDBOX,
        }
        self.add(("audit", "run.start", start))
        for t in self.plan.tasks:
            self.add(
                (
                    "audit",
                    "task.planned",
                    {
                        "task": t.id,
                        "role": t.role,
                        "priority": t.priority,
                        "depends": list(t.depends),
                        "adapter": t.adapter,
                        "tools": list(t.tools),
                    },
                )
            )
        return self

    def spawn(self, task: str) -> Evidence:
        body = {
            "batch": "b0001",
            "tasks": [task],
            "adapter": "scripted",
            "branch": f"harness/{RUN}/b0001",
            "worktree": "/w",
            "timeout_ms": 1000,
            "sandbox": NO_SANDBOX,
            "env": ["PATH"],
            "supervisor": "role:coder",
            "attempt": 1,
            "idle_ms": None,
            "lifetime_ms": 1000,
            "grace_ms": 2000,
            "lock": ["src/**"],
            "budget": {"wall_ms": None, "tokens": None, "cost_micros": None},
            "config": 1,
        }
        return self.add(
            move(task, "planned", "open"),
            move(task, "open", "claimed"),
            ("audit", "lock.acquire", {"batch": "b0001", "globs": ["src/**"]}),
            ("audit", "agent.spawn", body),
            move(task, "claimed", "in_progress"),
        )

    def merge(self, task: str, tip: str) -> Evidence:
        integrity = {
            "batch": "b0001",
            "tasks": [task],
            "commit": tip,
            "tree": TREE[:40],
            "head": tip,
            "head_tree": TREE[:40],
            "clean_before": True,
            "clean_after": True,
            "intact": True,
            "reason": "unchanged",
        }
        return self.add(
            move(task, "in_progress", "gating"),
            (
                "audit",
                "gate.result",
                {"task": task, "gate": "tests", "passed": True, "exit_code": 0, "duration_ms": 1},
            ),
            ("audit", "gate.integrity", integrity),
            (
                "audit",
                "merge.result",
                {
                    "task": task,
                    "branch": f"harness/{RUN}/b0001",
                    "merged": True,
                    "commit": tip,
                    "reason": "clean",
                },
            ),
            move(task, "gating", "done"),
            ("audit", "lock.release", {"batch": "b0001", "reason": "retired"}),
        )

    def roles(self, task: str, epoch: int = 0, max_rounds: int = 25) -> Evidence:
        roles = {
            role: {
                "adapter": "scripted",
                "model": None,
                "denied": list(denied(role)),
                "enforced_by_flags": [],
                "flags": [],
            }
            for role in ("manager", "executor", "auditor")
        }
        return self.add(
            (
                "audit",
                "round.roles",
                {"task": task, "epoch": epoch, "max_rounds": max_rounds, "roles": roles},
            )
        )

    def plan_(
        self,
        task: str,
        n: int,
        text: str,
        nxt: str | None,
        *,
        valid: bool = True,
        cites: list[int] | None = None,
        epoch: int = 0,
    ) -> Evidence:
        body = {
            "task": task,
            "round": n,
            "epoch": epoch,
            "text": self.text(text),
            "next": nxt,
            "valid": valid,
            "reason": "ok" if valid else "invalid",
            "cites": cites or [],
            "exit_code": 0,
        }
        return self.add(("audit", "round.plan", body))

    def step(
        self,
        task: str,
        n: int,
        before: str,
        after: str,
        *,
        paths: list[str] | None = None,
        claims: bool = True,
        changed: bool | None = None,
        epoch: int = 0,
    ) -> Evidence:
        paths = ["src/a.py"] if paths is None and before != after else (paths or [])
        if changed is None:
            changed = before != after or bool(paths)
        body = {
            "task": task,
            "round": n,
            "epoch": epoch,
            "text": self.text(f"claim {n}\n"),
            "exit_code": 0,
            "claims_success": claims,
            "commit_before": before,
            "commit_after": after,
            "changed": changed,
            "paths": paths,
        }
        return self.add(("audit", "round.step", body))

    def audit(
        self,
        task: str,
        n: int,
        report: str,
        *,
        repair: str | None = None,
        ghost: bool = False,
        tree_after: str = TREE,
        epoch: int = 0,
        **override: Any,
    ) -> Evidence:
        """A round.audit as the runtime records it: the header as parsed (the repair's when
        there is one), else REPLACEMENT; VIOLATION when the tree changed."""
        parsed = parse_header(repair if repair is not None else report)
        header = parsed.header or REPLACEMENT
        if tree_after != TREE:
            header = VIOLATION
        complete = (header.status, header.integrity, header.contract) == (
            "complete",
            "clean",
            "aligned",
        )
        effective = (
            "blocked"
            if header.status == "blocked"
            else ("complete" if complete and not ghost else "incomplete")
        )
        body = {
            "task": task,
            "round": n,
            "epoch": epoch,
            "text": self.text(report),
            "repair": self.text(repair) if repair is not None else None,
            "exit_code": 0,
            "tree_before": TREE,
            "tree_after": tree_after,
            "header_valid": parsed.header is not None,
            "status": header.status,
            "integrity": header.integrity,
            "contract": header.contract,
            "ghost": ghost,
            "effective": effective,
        }
        body.update(override)
        return self.add(("audit", "round.audit", body))

    def end(
        self, task: str, n: int, outcome: str, failing: int, checkpoint: str, epoch: int = 0
    ) -> Evidence:
        body = {
            "task": task,
            "round": n,
            "epoch": epoch,
            "outcome": outcome,
            "failing": failing,
            "checkpoint": checkpoint,
        }
        return self.add(("audit", "round.end", body))

    def input(self, task: str, n: int, cid: str, kind: str, text: str, epoch: int = 0) -> Evidence:
        body = {
            "task": task,
            "round": n,
            "epoch": epoch,
            "command": cid,
            "kind": kind,
            "text": self.text(text),
        }
        return self.add(("audit", "round.input", body))


def _matrix() -> Body:
    from harness.orchestrate.capabilities import DEFAULT_MATRIX, matrix_object

    return matrix_object(DEFAULT_MATRIX)


INCOMPLETE = "Status: incomplete\nIntegrity: clean\nContract audit: aligned\n\nTests fail.\n"
COMPLETE = "**Status:** complete\n**Integrity:** clean\n**Contract audit:** aligned\n\nOK.\n"
UNPARSEABLE = "Looks fine to me.\n"


def lawful() -> Evidence:
    """t1: round 1 incomplete (failing 1), an instruction, round 2 complete after a format
    repair (failing 0), round 3 ``Next: done``; then gating, merge, done, completed."""
    ev = Evidence(make_plan(["t1"])).start()
    ev.add(status("creating"), status("starting"), status("running"))
    ev.spawn("t1").roles("t1")
    ev.plan_("t1", 1, "Edit src/a.py.\nNext: cli\n", "cli")
    ev.step("t1", 1, BASE, C1).audit("t1", 1, INCOMPLETE).end("t1", 1, "continue", 1, C1)
    ev.add(command("c1", "instruct", args={"task": "t1"}), receipt("c1", "instruct", 0))
    ev.input("t1", 1, "c1", "instruct", "Use the new parser.\n")
    ev.plan_("t1", 2, "Cites: 1\nFinish the parser.\nNext: gui\n", "gui", cites=[1])
    ev.step("t1", 2, C1, C2).audit("t1", 2, UNPARSEABLE, repair=COMPLETE)
    ev.end("t1", 2, "continue", 0, C2)
    ev.plan_("t1", 3, "All done.\n**Next:** done\n", "done").end("t1", 3, "done", 0, C2)
    ev.merge("t1", C2)
    ev.add(status("completed"), ("audit", "run.end", {"outcome": "completed"}))
    return ev


def verify(tmp_path: Path, ev: Evidence, extra: dict[str, bytes] | None = None) -> Any:
    """Record, export and verify; ``extra`` adds files to the run's rounds folder by name."""
    keys = make_keys()
    state = tmp_path / "state"
    with RunRecorder(state, RUN, keys, clock=LogicalClock()) as recorder:
        recorder.write_plan(plan_bytes(ev.plan))
        for store, kind, body in with_control(ev.records, plan_bytes(ev.plan)):
            recorder.record(store, kind, body)
        recorder.checkpoint_all()
        rounds = recorder.folder / "rounds"
        rounds.mkdir(exist_ok=True)
        for digest, data in ev.texts.items():
            (rounds / f"{digest}.txt").write_bytes(data)
        for name, data in (extra or {}).items():
            (rounds / name).write_bytes(data)
    bundle = export_bundle(state, tmp_path / "bundle.tar", keys).path
    return verify_bundle(bundle, pins=TrustPolicy(frozenset({keys.key_id}), "test"))


def refused(report: Any, *words: str) -> str:
    assert report.status.value == "invalid", report.checks
    assert report.failure.check == "semantics", report.failure
    reason = str(report.failure.reason)
    for word in words:
        assert word in reason, reason
    return reason


def edit(ev: Evidence, kind: str, change: Callable[[Body], None], nth: int = 0) -> Evidence:
    """A copy of ``ev`` whose ``nth`` record of ``kind`` is changed in place by ``change``."""
    seen = 0
    records: list[Row] = []
    for store, k, body in ev.records:
        body = dict(body)
        if k == kind:
            if seen == nth:
                change(body)
            seen += 1
        records.append((store, k, body))
    return Evidence(ev.plan, records, dict(ev.texts))


def fold(check: RoundCheck, ev: Evidence, *, expect: str) -> None:
    """Drive the fold directly over ``ev``'s audit records; it must refuse with ``expect``."""
    seq = 0
    with pytest.raises(RoundError) as caught:
        for store, kind, body in ev.records:
            if store != "audit":
                continue
            record = Record("audit", RUN, seq, "2026-01-01T00:00:00.000000Z", kind, body, "0" * 64)
            check.audit(record, f"{AUDIT} line {seq + 1} (seq {seq})")
            seq += 1
        check.finish()
    assert expect in str(caught.value), str(caught.value)


def fold_all(ev: Evidence) -> str | None:
    """Every run check and the semantics over ``ev`` directly (no bundle): the refusal's
    message, or None when the history is lawful. Milliseconds, for unit and mutation tests."""
    from harness.verify.errors import VerificationError
    from harness.verify.layout import round_text_member
    from harness.verify.semantics import run_semantics

    members = {round_text_member(RUN, d): data for d, data in ev.texts.items()}
    semantics = run_semantics(RUN, plan_bytes(ev.plan), members)
    seqs = {"audit": 0, "control": 0, "lineage": 0}
    rows = sorted(
        with_control(ev.records, plan_bytes(ev.plan)),
        key=lambda row: ("audit", "control", "lineage").index(row[0]),
    )
    try:
        for store, kind, body in rows:
            seq = seqs[store]
            seqs[store] += 1
            record = Record(store, RUN, seq, "2026-01-01T00:00:00.000000Z", kind, body, "0" * 64)
            where = f"runs/{RUN}/stores/{store}.jsonl line {seq + 1} (seq {seq})"
            getattr(semantics, store)(record, where)
        semantics.finish()
    except VerificationError as exc:
        return str(exc)
    return None
