"""The dashboard's fold of one run's audit and lineage records: what each page shows.

One pass over the records in store order, O(1) work per record, memory bounded by caps
(a run of 10^5 records keeps its tasks, batches, receipts and the control records the trend
needs, never the records themselves). Every record is parsed by the verifier's own
``parse_record_line`` (canonical JSON, schema of its kind): a line that does not parse is
counted as a problem and skipped, never guessed at.

Live updates are derived here too: each record that changes what a client shows (a task's
state, a command's receipt, the run's status) becomes an event, numbered by the audit
record count after it (the SSE cursor), kept in a bounded ring.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from harness.verify.errors import VerificationError
from harness.verify.records import Record, parse_record_line

RING: Final = 10_000
"""Live events kept for clients that reconnect (older cursors get a resync)."""
PER_TASK: Final = 500
"""Entries kept per task and per list (attempts, gates, rounds, transitions, writes)."""
CONTROL_RECORDS: Final = 50_000
PROBLEMS: Final = 20
CONTROL_KINDS: Final = frozenset(
    {"run.start", "control.sensor", "control.decision", "control.phase"}
)


@dataclass
class TaskView:
    name: str
    state: str = "planned"
    role: str = ""
    adapter: str = ""
    depends: list[str] = field(default_factory=list)
    reason: str = ""
    transitions: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    gates: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    """Commits the records name for this task (batch commits, round checkpoints), oldest first."""


@dataclass
class BatchView:
    batch: str
    tasks: list[str]
    attempt: int
    branch: str
    start: int
    """Audit seq of its ``agent.spawn`` (the timeline's x axis is the record order)."""
    end: int | None = None
    """Audit seq of its ``lock.release`` (None while in flight)."""
    exit_code: int | None = None
    commit: str | None = None


def _add(items: list[Any], item: Any, cap: int = PER_TASK) -> None:
    if len(items) < cap:
        items.append(item)


class RunFold:
    """Everything the pages show of one run, folded from its records."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.count = 0
        self.status: str | None = None
        self.epoch = 0
        self.ended = False
        self.outcome: str | None = None
        self.started_at: str | None = None
        self.last_time: str | None = None
        self.tasks: dict[str, TaskView] = {}
        self.batches: dict[str, BatchView] = {}
        self.receipts: dict[str, dict[str, Any]] = {}
        self.control_records: list[Record] = []
        self.problems: list[str] = []
        self.problem_count = 0
        self.events: deque[tuple[int, str, dict[str, Any]]] = deque(maxlen=RING)
        """(audit record count after the record, event name, data), oldest first."""
        self.dropped_upto = 0
        """The cursor of the newest event that fell out of the ring (0: none did)."""
        self.lineage_count = 0

    # ---- audit -------------------------------------------------------------------------------
    def audit_line(self, line: bytes) -> None:
        self.count += 1
        kind = _kind_of(line)
        if kind and kind not in FOLDED:
            return  # counted, not needed by any view: not parsed (a cost of 10^5 records)
        try:
            record = parse_record_line(line, "audit", self.run_id)
        except VerificationError as exc:
            self._problem(f"audit record {self.count - 1}: {exc}")
            return
        self.last_time = record.time
        if record.kind in CONTROL_KINDS and len(self.control_records) < CONTROL_RECORDS:
            self.control_records.append(record)
        handler = _AUDIT.get(record.kind)
        if handler is not None:
            handler(self, record)

    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < PROBLEMS:
            self.problems.append(text)

    def _event(self, name: str, data: dict[str, Any]) -> None:
        if len(self.events) == self.events.maxlen:
            self.dropped_upto = self.events[0][0]
        self.events.append((self.count, name, data))

    def task(self, name: str) -> TaskView:
        view = self.tasks.get(name)
        if view is None:
            view = self.tasks[name] = TaskView(name)
        return view

    def _batch_tasks(self, body: Any) -> list[TaskView]:
        batch = self.batches.get(str(body.get("batch")))
        return [self.task(name) for name in batch.tasks] if batch else []

    def _run_start(self, record: Record) -> None:
        self.started_at = record.time

    def _planned(self, record: Record) -> None:
        body = record.body
        view = self.task(str(body["task"]))
        view.state = "planned"
        view.role = str(body.get("role", ""))
        view.adapter = str(body.get("adapter", ""))
        view.depends = [str(d) for d in body.get("depends", [])]
        self._task_event(view)

    def _transition(self, record: Record) -> None:
        body = record.body
        view = self.task(str(body["task"]))
        view.state = str(body["to"])
        view.reason = str(body.get("reason", ""))
        _add(
            view.transitions,
            {"seq": record.seq, "from": body["from"], "to": body["to"], "reason": view.reason},
        )
        self._task_event(view)

    def _task_event(self, view: TaskView) -> None:
        """What a live run page updates of a task's row (and its outcome counts from)."""
        self._event(
            "task",
            {
                "task": view.name,
                "state": view.state,
                "reason": view.reason,
                "attempts": len(view.attempts),
            },
        )

    def _status(self, record: Record) -> None:
        body = record.body
        self.status, self.epoch = str(body["status"]), int(body["epoch"])
        self.ended = False  # a resumed run writes run.status again after its run.end
        self._run_event()

    def _end(self, record: Record) -> None:
        self.ended = True
        self.outcome = str(record.body.get("outcome"))
        self._run_event()

    def _run_event(self) -> None:
        self._event(
            "run",
            {"status": self.status, "epoch": self.epoch, "ended": self.ended,
             "state": self.state_label()},
        )  # fmt: skip

    def _spawn(self, record: Record) -> None:
        body = record.body
        batch = BatchView(
            str(body["batch"]),
            [str(t) for t in body["tasks"]],
            int(body["attempt"]),
            str(body["branch"]),
            record.seq,
        )
        self.batches[batch.batch] = batch
        for view in self._batch_tasks(body):
            _add(
                view.attempts,
                {"seq": record.seq, "batch": batch.batch, "attempt": batch.attempt,
                 "branch": batch.branch, "adapter": body.get("adapter"), "exit_code": None,
                 "duration_ms": None, "timed_out": None},
            )  # fmt: skip

    def _exit(self, record: Record) -> None:
        body = record.body
        batch = self.batches.get(str(body["batch"]))
        if batch is None:
            return
        batch.exit_code = body.get("exit_code")
        for view in self._batch_tasks(body):
            for attempt in view.attempts:
                if attempt["batch"] == batch.batch:
                    attempt.update(
                        exit_code=body.get("exit_code"),
                        duration_ms=body.get("duration_ms"),
                        timed_out=body.get("timed_out"),
                    )

    def _release(self, record: Record) -> None:
        batch = self.batches.get(str(record.body["batch"]))
        if batch is not None and batch.end is None:
            batch.end = record.seq

    def _integrity(self, record: Record) -> None:
        body = record.body
        batch = self.batches.get(str(body["batch"]))
        commit = body.get("commit")
        if batch is not None and isinstance(commit, str):
            batch.commit = commit
            for view in self._batch_tasks(body):
                _add(view.commits, commit)

    def _gate(self, record: Record) -> None:
        body = record.body
        view = self.task(str(body["task"]))
        _add(view.gates, {"seq": record.seq, **dict(body)})

    def _failed(self, record: Record) -> None:
        body = record.body
        view = self.task(str(body["task"]))
        _add(view.failures, {"seq": record.seq, **dict(body)})

    def _round(self, record: Record) -> None:
        body = record.body
        view = self.task(str(body["task"]))
        _add(view.rounds, {"seq": record.seq, "kind": record.kind, **dict(body)})
        commit = body.get("commit_after")
        if isinstance(commit, str):
            _add(view.commits, commit)

    def _receipt(self, record: Record) -> None:
        body = record.body
        entry = {
            "command": str(body["id"]),
            "kind": str(body["command"]),
            "status": str(body["outcome"]),
            "reason": str(body.get("reason", "")),
            "seq": record.seq,
        }
        if str(body["id"]) not in self.receipts:
            self.receipts[str(body["id"])] = entry
        self._event("receipt", {k: entry[k] for k in ("command", "kind", "status")})

    # ---- lineage ----------------------------------------------------------------------------
    def lineage_line(self, line: bytes) -> None:
        self.lineage_count += 1
        try:
            record = parse_record_line(line, "lineage", self.run_id)
        except VerificationError as exc:
            self._problem(f"lineage record {self.lineage_count - 1}: {exc}")
            return
        body = record.body
        if record.kind == "artifact.write" and isinstance(body.get("task"), str):
            _add(
                self.task(str(body["task"])).writes,
                {"seq": record.seq, "path": str(body["path"]), "sha256": body["sha256"],
                 "parents": list(body.get("parents", [])), "mode": body.get("mode")},
            )  # fmt: skip

    # ---- views -------------------------------------------------------------------------------
    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for view in self.tasks.values():
            counts[view.state] = counts.get(view.state, 0) + 1
        return dict(sorted(counts.items()))

    def state_label(self) -> str:
        if self.ended:
            return f"ended {self.outcome}" if self.outcome else "ended"
        return self.status or "creating"


_KIND: Final = b',"kind":"'


def _kind_of(line: bytes) -> bytes:
    """The record's kind, found without parsing: in a canonical record the members are
    sorted, so ``kind`` follows ``body`` and is followed only by ``mac``, ``run``, ``seq``,
    ``store``, ``time`` and ``v``, none of which can hold a quote: the last ``,"kind":"`` is
    the record's own (receipts/bundle.py filters lines the same way). A line without one is
    parsed (and refused by the parser); a skipped kind is never shown, so whether such a line
    is well formed is left to the verifier (the evidence check)."""
    start = line.rfind(_KIND)
    if start < 0:
        return b""
    start += len(_KIND)
    end = line.find(b'"', start)
    return line[start:end] if end > 0 else b""


_AUDIT: Final = {
    "run.start": RunFold._run_start,
    "task.planned": RunFold._planned,
    "task.transition": RunFold._transition,
    "run.status": RunFold._status,
    "run.end": RunFold._end,
    "agent.spawn": RunFold._spawn,
    "agent.exit": RunFold._exit,
    "lock.release": RunFold._release,
    "gate.integrity": RunFold._integrity,
    "gate.result": RunFold._gate,
    "attempt.failed": RunFold._failed,
    "round.plan": RunFold._round,
    "round.step": RunFold._round,
    "round.audit": RunFold._round,
    "round.end": RunFold._round,
    "command.receipt": RunFold._receipt,
}

FOLDED: Final = frozenset(kind.encode() for kind in (*_AUDIT, *CONTROL_KINDS))
