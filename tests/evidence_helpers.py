"""Helpers shared by store and verifier tests: keys, a recorded run, verification of a folder."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.keys import OperatorKeys
from harness.receipts.store import StoreWriter, read_checkpoints
from harness.verify.checkpoint import Checkpoint
from harness.verify.runcheck import open_checkpoints
from harness.verify.storecheck import StoreResult, iter_store_lines, verify_store

MASTER = bytes(range(32))


def make_keys(seed: int = 1) -> OperatorKeys:
    return OperatorKeys(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32), MASTER)


def event(n: int) -> tuple[str, dict[str, object]]:
    return ("event", {"name": f"e{n}", "data": {"n": n}})


def checkpoints_of(writer: StoreWriter, keys: OperatorKeys) -> list[Checkpoint]:
    notes = [(f"cp{i}", note) for i, note in enumerate(read_checkpoints(writer.checkpoint_dir))]
    return open_checkpoints(notes, [keys.note_signer().verifier_key()])


def verify_bytes(
    data: bytes,
    checkpoints: Sequence[Checkpoint],
    *,
    store: str = "audit",
    run_id: str = "run-1",
    hmac_master: bytes | None = MASTER,
) -> StoreResult:
    return verify_store(
        iter_store_lines(io.BytesIO(data), f"{store}.jsonl"),
        member=f"{store}.jsonl",
        store=store,
        run_id=run_id,
        checkpoints=checkpoints,
        hmac_master=hmac_master,
    )


def open_writer(path: Path, store: str = "audit", run_id: str = "run-1") -> StoreWriter:
    return StoreWriter(path, store=store, run_id=run_id, hmac_master=MASTER)


# -- control records for hand-built histories (issue 13: the verifier's "control" check) ----

Body = dict[str, Any]
Rows = list[tuple[str, str, Body]]
_PLANNING = ("task.planned", "capsule.approved")


def control_prologue(base_commit: str) -> Rows:
    """The two records a format-2 run carries right after its last ``task.planned``:
    configuration version 1 (snapshot = the run's base commit) and the first phase."""
    from harness.verify.rules.controller import Controller, Params

    machine = Controller(Params(), {}, risky=lambda _: False, denied=lambda _a, _t: False)
    phase = {"phase": machine.phase, "progress_pm": 0, "step": 0, "reason": "run start"}
    return [
        ("audit", "config.version", machine.initial().record(base_commit)),
        ("audit", "control.phase", phase),
    ]


def with_control(rows: Sequence[tuple[str, str, Body]], plan: bytes) -> Rows:
    """``rows`` (store, kind, body) with the control records the runtime would add, made by
    the runtime's own controller and sensor code: version 1 and the first phase after the
    last ``task.planned``; a ``control.phase`` after each settled transition that changes
    the phase, then the meta layer's ``control.review`` for each review point passed; one
    step (``control.sensor``, its decisions and versions) after the
    transition that follows each ended attempt (outside a crash recovery, where only a
    crashed attempt has one); and ``agent.spawn.config`` set to the version in force.
    Rows that already carry control records are returned unchanged. The event bus records
    for the result follow (``events_helpers.with_events``)."""
    from .events_helpers import with_events

    return with_events(_ControlWriter(plan).rows(rows))


class _ControlWriter:
    def __init__(self, plan: bytes) -> None:
        obj = json.loads(plan)  # leniently: a test may hand a damaged plan member
        assert isinstance(obj, dict)
        self.obj = obj
        self.specs = {t["id"]: t for t in obj["tasks"]}
        self.out: Rows = []
        self.machine: Any = None
        self.base = ""
        self.stage = "before"
        self.states: dict[str, str] = {}
        self.attempts: dict[str, int] = {}
        self.batches: dict[str, str] = {}
        self.gates: dict[str, list[tuple[str, str, bool]]] = {}
        self.outcomes: dict[str, str] = {}
        self.exits: dict[str, Body] = {}
        self.pending: dict[str, tuple[int, str | None, bool]] = {}
        self.epoch = 0
        self.recovering = False

    def rows(self, rows: Sequence[tuple[str, str, Body]]) -> Rows:
        if any(kind in ("config.version", "control.sensor") for _, kind, _ in rows):
            return list(rows)
        for store, kind, body in rows:
            if store != "audit":
                self.out.append((store, kind, body))
                continue
            if self.stage == "planning" and kind not in _PLANNING:
                self._begin()
            if kind == "agent.spawn" and self.machine is not None:
                body = {**body, "config": self.machine.version}
            self.out.append((store, kind, body))
            self._track(kind, body)
        return self.out

    def _start(self, body: Body) -> None:
        from harness.verify.rules import trifecta
        from harness.verify.rules.controller import Controller, Params, parse_params

        params = parse_params(self.obj["control"]) if "control" in self.obj else Params()
        assert isinstance(params, Params), params
        matrix = trifecta.matrix_from_object(body["capabilities"])
        sandbox = body.get("sandbox")
        tasks: dict[str, list[tuple[str, Sequence[str]]]] = {}
        for spec in self.obj["tasks"]:
            tasks.setdefault(spec["role"], []).append((spec["adapter"], list(spec["tools"])))
        self.machine = Controller(
            params,
            tasks,
            risky=lambda tool: bool(trifecta.tool_tags(matrix, tool)),
            denied=lambda adapter, tools: trifecta.decide(matrix, adapter, tools, sandbox).denied,
        )
        self.base = body["base_commit"]
        self.stage = "planning"

    def _begin(self) -> None:
        version, phase = control_prologue(self.base)
        self.out.append(version)
        self.machine.settle(self._progress())
        self.out.append((*phase[:2], {**phase[2], "phase": self.machine.phase,
                                      "progress_pm": self.machine.progress}))  # fmt: skip
        self.stage = "running"

    def _progress(self) -> int:
        from harness.verify.rules import phases

        settled = sum(1 for s in self.states.values() if s in phases.SETTLED)
        return phases.progress_pm(settled, len(self.specs))

    def _track(self, kind: str, body: Body) -> None:
        if kind == "run.start":
            self._start(body)
        elif kind == "task.planned":
            self.states[body["task"]] = "planned"
        elif kind == "run.status":
            if body["epoch"] != self.epoch:
                self.epoch = body["epoch"]
                self.attempts.clear()
            self.recovering = body["status"] == "starting"
        elif kind == "agent.spawn":
            for task in body["tasks"]:
                self.attempts[task] = self.attempts.get(task, 0) + 1
                self.batches[task] = body["batch"]
                self.gates[task] = []
                self.outcomes.pop(task, None)
        elif kind == "agent.exit":
            self.exits[body["batch"]] = body
        elif kind == "gate.result":
            self.gates.setdefault(body["task"], []).append(
                (body["task"], body["gate"], body["passed"])
            )
        elif kind == "round.end":
            self.outcomes[body["task"]] = body["outcome"]
        elif kind == "attempt.failed":
            self.pending[body["task"]] = (body["attempt"], body["anomaly"], self.recovering)
        elif kind == "task.transition" and self.stage == "running":
            self._transition(body)

    def _transition(self, body: Body) -> None:
        from harness.verify.rules import phases

        task, target = body["task"], body["to"]
        self.states[task] = target
        previous = self.machine.progress
        if target in phases.SETTLED and self.machine.settle(self._progress()) is not None:
            self.out.append(("audit", "control.phase", {
                "phase": self.machine.phase, "progress_pm": self.machine.progress,
                "step": self.machine.steps, "reason": "progress"}))  # fmt: skip
        if target in phases.SETTLED:  # the meta layer's reviews (a logical clock: 0 s in)
            for review in self.machine.reviews(previous, heightened=False):
                self.out.append(("audit", "control.review", {
                    "step": self.machine.steps, "progress_pm": self.machine.progress,
                    "elapsed_s": 0, "heightened": False, **review.record()}))  # fmt: skip
        if not self.recovering and target == "done":
            self.pending[task] = (self.attempts.get(task, 0), None, False)
        elif not self.recovering and (body["from"], target) == ("in_progress", "blocked"):
            self.pending[task] = (self.attempts.get(task, 0), self.outcomes.get(task), False)
        if task in self.pending:
            self._step(task, *self.pending.pop(task))

    def _step(self, task: str, attempt: int, cls: str | None, recovered: bool) -> None:
        from harness.orchestrate.control.facts import History, JobFacts, measures, tier1
        from harness.verify.rules.controller import Step, subtree_of

        spec = self.specs[task]
        exit_body = None if recovered else self.exits.get(self.batches.get(task, ""))
        facts = JobFacts(
            duration_ms=exit_body["duration_ms"] if exit_body else 0,
            usage=exit_body["usage"] if exit_body else None,
            gates=() if recovered else self.gates.get(task, []),
        )
        wanted = sorted({r for t in self.specs.values() for r in t.get("requirements", [])})
        coverage = None
        if wanted:
            done = {r for t, s in self.specs.items() if self.states.get(t) == "done"
                    for r in s.get("requirements", [])}  # fmt: skip
            coverage = len(done) * 1000 // len(wanted)
        step = Step(
            task=task,
            agent=spec["role"],
            subtree=subtree_of(spec["scope"]),
            attempt=attempt,
            cls=cls,
            tier1=tier1(cls=cls, attempt=attempt, task=task, facts=facts, coverage=coverage),
            measures=measures(spec["role"], facts, History()),
        )
        phase = self.machine.phase
        observed = self.machine.observe(step)
        self.out.append(("audit", "control.sensor", {
            "step": observed.step, "task": task, "agent": step.agent, "subtree": step.subtree,
            "attempt": attempt, "phase": phase, "class": cls,
            "readings": [r.record() for r in observed.readings]}))  # fmt: skip
        self.out.extend(("audit", "control.decision", d.record()) for d in observed.decisions)
        self.out.extend(("audit", "config.version", v.record(self.base)) for v in observed.versions)
