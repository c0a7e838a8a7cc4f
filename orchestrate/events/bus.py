"""The runtime's side of the event bus: publish what the rules say, handle, expire, escalate.

Why it is driven from the audit store's acknowledgements (``audited``) rather than from the
places that queue the cause records: a message may cite only a *durable* cause (its ``cause``
is an audit seq), so it is appended right after the group commit that made its cause durable,
and no code path that queues an ``attempt.failed`` or a ``control.decision`` can forget to
publish. A crash between the two appends loses only events the audit store still calls for:
``load`` (on the first use in a process) folds both stores and appends what is missing,
including answers (``event.handled``) the crash kept from being recorded.

Time: deadlines are record times plus the tier's TTL, in integer microseconds
(``rules.events``). Expiry is checked with the audit batch's own time at every group commit
and, from the loop's tick, with the run's clock (``tick``; a logical clock is only peeked at,
so the demo's record times do not depend on how often the loop ticks). An expiry is never
recorded before its deadline (``not_before``), whatever the clock says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.receipts.run import RunRecorder
from harness.receipts.store import Appended, StoreWriter
from harness.verify.records import parse_record_line
from harness.verify.rules import events as rule

Item = tuple[str, Mapping[str, Any]]


@dataclass
class _Open:
    message: rule.Message
    deadline: int | None
    handler: rule.Handler | None


class BusState:
    """What the bus knows (open messages, who answers them) and the batch it is building:
    no I/O, so the runtime's bus and ``derive`` (tests, tools) publish the same records."""

    def __init__(self) -> None:
        self.role_of: dict[str, str] = {}
        self.open: dict[int, _Open] = {}
        """Messages neither handled nor expired, by events seq."""
        self.waiting: dict[rule.Handler, list[int]] = {}
        """Per handler, the open originals it answers (events seqs)."""
        self.published: set[int] = set()
        """Audit seqs whose original message is in the store (or in the batch being built)."""
        self.by_cause: dict[int, int] = {}
        """Audit seq of a recorded original -> its events seq (``load``)."""
        self.loaded = False
        self._items: list[Item] = []
        self._base = 0
        self._floor = ""

    def _start(self, base: int, floor: str) -> None:
        self._items = []
        self._base = base
        self._floor = floor

    def _add(self, kind: str, body: Mapping[str, Any]) -> int:
        self._items.append((kind, body))
        return self._base + len(self._items) - 1

    # ---- folding -------------------------------------------------------------------------
    def _fold(self, kind: str, body: Mapping[str, Any], seq: int, time: str) -> None:
        if kind == "task.planned":
            self.role_of.setdefault(str(body["task"]), str(body["role"]))
        if kind in rule.HANDLER_KINDS:
            self._answer(kind, body, seq, rule.time_us(time))
        if kind in rule.CAUSE_KINDS and seq in self.published:
            self._rewait(seq, body)
        elif kind in rule.CAUSE_KINDS:
            message = rule.message_for(seq, kind, body, self.role_of)
            if message is not None:
                self.published.add(seq)
                handler = rule.handler_of(message, body)
                events_seq = self._add("event.message", message.record())
                self.open[events_seq] = _Open(message, None, handler)  # deadline on commit
                if handler is not None:
                    self.waiting.setdefault(handler, []).append(events_seq)

    def _answer(self, kind: str, body: Mapping[str, Any], seq: int, at: int) -> None:
        if kind == "agent.spawn":
            tasks = [str(task) for task in body["tasks"]]
            keys: list[rule.Handler] = [("task", task) for task in tasks]
            keys += [("role", self.role_of[task]) for task in tasks if task in self.role_of]
        elif body["to"] in rule.SETTLED:
            keys = [("task", str(body["task"]))]
        else:
            return
        for key in keys:
            if not rule.handles(key, kind, body, self.role_of):
                continue
            for ref in self.waiting.pop(key, []):
                state = self.open.get(ref)
                if state is None:
                    continue
                if state.deadline is None or at <= state.deadline:
                    self._add(
                        "event.handled", {"message": ref, "by": state.message.to, "cause": seq}
                    )
                    del self.open[ref]
                # else: answered after its TTL: it stays open and the expiry escalates it

    def _expire(self, now: int) -> None:
        for seq in sorted(self.open):
            state = self.open[seq]
            if state.deadline is None or state.deadline > now:
                continue
            del self.open[seq]
            self._add("event.expired", {"message": seq})
            self._floor = max(self._floor, rule.format_us(state.deadline))
            up = rule.escalation(state.message, seq)
            if up is not None:
                self.open[self._add("event.message", up.record())] = _Open(up, None, None)

    # ---- resume ----------------------------------------------------------------------------
    def _replay(self, seq: int, kind: str, body: Mapping[str, Any], time: str) -> None:
        """Fold one recorded events record (the store verified as the writer opened it)."""
        if kind == "event.message":
            message = rule.Message(**{name: body[name] for name in _MESSAGE})
            if message.escalates is None:
                self.published.add(message.cause)
            # Originals wait again when the audit fold reaches their cause (``_rewait``).
            self.open[seq] = _Open(message, rule.deadline_us(time, message.ttl_ms), None)
            if message.escalates is None:
                self.by_cause[message.cause] = seq
        elif kind in ("event.handled", "event.expired"):
            self.open.pop(int(body["message"]), None)

    def _rewait(self, cause: int, body: Mapping[str, Any]) -> None:
        """The audit fold of ``load`` reached the cause of a recorded original: if it is
        still open, later records may answer it."""
        ref = self.by_cause.get(cause)
        state = self.open.get(ref) if ref is not None else None
        if ref is None or state is None:
            return
        state.handler = rule.handler_of(state.message, body)
        if state.handler is not None:
            self.waiting.setdefault(state.handler, []).append(ref)


class EventBus(BusState):
    """One run's bus: the only writer of its ``events`` store."""

    def __init__(self, recorder: RunRecorder, now: Callable[[], str]) -> None:
        """``now``: reads the run's clock for ``tick`` (without advancing a logical one)."""
        super().__init__()
        self.recorder = recorder
        self.now = now

    # ---- the runtime's calls ----------------------------------------------------------
    def audited(self, records: Sequence[Item], acks: Sequence[Appended]) -> None:
        """A group commit of the audit store returned: publish, answer and expire."""
        if not acks:
            return
        if not self.loaded:
            self.load(upto=acks[0].seq)
        self._start(self._writer().size, acks[-1].time)
        for (kind, body), ack in zip(records, acks, strict=True):
            self._fold(kind, body, ack.seq, ack.time)
        self._expire(rule.time_us(acks[-1].time))
        self._commit()

    def tick(self) -> None:
        """The loop's tick: expire (and escalate) what the run's clock says is overdue."""
        if not self.loaded:
            self.load()
        if all(state.deadline is None for state in self.open.values()):
            return  # nothing can expire: do not even read the clock
        self._start(self._writer().size, "")
        self._expire(rule.time_us(self.now()))
        self._commit()

    def load(self, upto: int | None = None) -> None:
        """Fold the events store, then the audit records before ``upto`` (all: None), and
        append what they call for that is missing (a crash between the two appends)."""
        self.loaded = True
        events = self._writer()
        for line in _lines(events):
            record = parse_record_line(line, "events", self.recorder.run_id)
            self._replay(record.seq, record.kind, record.body, record.time)
        audit = self.recorder.store("audit")
        self._start(self._writer().size, "")
        for line in _lines(audit):
            record = parse_record_line(line, "audit", self.recorder.run_id)
            if upto is not None and record.seq >= upto:
                break
            self._floor = max(self._floor, record.time)
            self._fold(record.kind, record.body, record.seq, record.time)
        self._commit()

    def _writer(self) -> StoreWriter:
        return self.recorder.store("events")

    def _commit(self) -> None:
        items, self._items = self._items, []
        if not items:
            return
        acks = self._writer().append_many(items, not_before=self._floor or None)
        assert acks[0].seq == self._base, "the events store has one writer: the run's bus"
        for (kind, _), ack in zip(items, acks, strict=True):
            state = self.open.get(ack.seq)
            if kind == "event.message" and state is not None:
                state.deadline = rule.deadline_us(ack.time, state.message.ttl_ms)


_MESSAGE = tuple(name for name in rule.Message.__dataclass_fields__)


def _lines(writer: StoreWriter) -> list[bytes]:
    """The complete lines of a store its writer has caught up with (and verified)."""
    with writer.path.open("rb") as handle:
        data = handle.read()
    return data.split(b"\n")[:-1]


def derive(audit: Iterable[tuple[int, str, Mapping[str, Any]]]) -> list[Item]:
    """The events records the bus publishes for these audit records (seq, kind, body), in
    order, when no TTL runs out between them (no expiry): for hand-built evidence."""
    state = BusState()
    state._start(0, "")
    for seq, kind, body in audit:
        state._fold(kind, body, seq, "1970-01-01T00:00:00.000000Z")
    return list(state._items)
