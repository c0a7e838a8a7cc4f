"""Run check "events": the event bus says who was told what, when — and nothing else.

Folding a run's audit records (in order), then its events records (docs/spec/events.md):

* every cause in the audit store (an ``attempt.failed``, a layer-I ``control.decision``, a
  layer-D ``escalate``) has exactly one original ``event.message``, equal to what
  ``harness.verify.rules.events.message_for`` says: partition, source, recipient (the
  source's direct supervisor: no side channels), tier, TTL, topic, cause and text; a message
  whose cause is no such record is refused;
* an ``event.handled`` closes an open message addressed to a role supervisor, by that
  recipient, citing the first audit record after the cause that answers it (``handles``),
  whose time is within the TTL; an answer in time that is not recorded is refused too;
* an ``event.expired`` closes an open message with a TTL, no earlier than its deadline (the
  message's time plus ``ttl_ms``) and never one that was answered in time; unless it was
  addressed to ``human``, the very next record re-sends it one level up (``escalation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import VerificationError
from .records import Record
from .rules import events as rule


class EventError(VerificationError):
    """An event bus record the audit records do not call for, or one they call for missing."""


@dataclass(eq=False, repr=False)
class _Expected:
    message: rule.Message
    handler: rule.Handler | None
    answer: tuple[int, int] | None = None
    """The first audit record answering it: (seq, time in µs)."""
    published: bool = False


@dataclass(eq=False, repr=False)
class _Open:
    message: rule.Message
    deadline: int | None
    expected: _Expected | None
    """The original's expectation (None for an escalated copy: nothing answers it)."""


@dataclass(eq=False, repr=False)
class EventCheck:
    run: str
    role_of: dict[str, str] = field(default_factory=dict)
    expected: dict[int, _Expected] = field(default_factory=dict)
    waiting: dict[rule.Handler, list[int]] = field(default_factory=dict)
    """Per handler, the causes whose first answer is still to come (audit fold)."""
    open: dict[int, _Open] = field(default_factory=dict)
    """Messages neither handled nor expired, by events seq."""
    escalate: tuple[int, rule.Message, str] | None = None
    """After an expiry: (its message's seq, the re-sent message due next, where)."""
    messages: int = 0
    ended: bool = False
    """Whether the audit store ends with ``run.end`` (else the bus may lag behind it)."""
    cited: int = -1
    """The largest audit seq the events store cites (a cause or an answer)."""

    # ---- audit: what the bus must carry -------------------------------------------------
    def audit(self, record: Record, where: str) -> None:
        kind, body = record.kind, record.body
        self.ended = kind == "run.end"
        if kind == "task.planned":
            self.role_of.setdefault(str(body["task"]), str(body["role"]))
            return
        if kind in rule.HANDLER_KINDS:
            self._answers(record)
        if kind in rule.CAUSE_KINDS:
            message = rule.message_for(record.seq, kind, body, self.role_of)
            if message is not None:
                handler = rule.handler_of(message, body)
                self.expected[record.seq] = _Expected(message, handler)
                if handler is not None:
                    self.waiting.setdefault(handler, []).append(record.seq)

    def _answers(self, record: Record) -> None:
        body = record.body
        keys: list[rule.Handler] = []
        if record.kind == "agent.spawn":
            tasks = [str(task) for task in body["tasks"]]
            keys = [("task", task) for task in tasks]
            keys += [("role", self.role_of[task]) for task in tasks if task in self.role_of]
        elif body["to"] in rule.SETTLED:
            keys = [("task", str(body["task"]))]
        for key in keys:
            causes = self.waiting.pop(key, None)
            if causes is None or not rule.handles(key, record.kind, body, self.role_of):
                continue
            for cause in causes:
                self.expected[cause].answer = (record.seq, rule.time_us(record.time))

    def control(self, record: Record, where: str) -> None:
        """Control records cause no messages."""

    def lineage(self, record: Record, where: str) -> None:
        """Lineage records cause no messages."""

    # ---- events: what the bus carried ---------------------------------------------------
    def events(self, record: Record, where: str) -> None:
        if self.escalate is not None:
            seq, due, at = self.escalate
            self.escalate = None
            if record.kind != "event.message" or record.body["escalates"] != seq:
                raise EventError(
                    f"{at}: message {seq} expired but is not re-sent to {due.to!r} by the "
                    "next record"
                )
            self._escalated(record, due, where)
            return
        kind = record.kind
        if kind == "event.message":
            self._message(record, where)
        elif kind == "event.handled":
            self._handled(record, where)
        elif kind == "event.expired":
            self._expired(record, where)

    def _message(self, record: Record, where: str) -> None:
        body = record.body
        _route(body, where)
        self.messages += 1
        escalates = body["escalates"]
        expected: _Expected | None = None
        if escalates is None:
            expected = self.expected.get(int(body["cause"]))
            if expected is None:
                raise EventError(
                    f"{where}: message cites audit seq {body['cause']}, which is no "
                    "attempt.failed, layer-I decision or layer-D escalate of this run"
                )
            if expected.published:
                raise EventError(
                    f"{where}: a second message for audit seq {body['cause']} (one per cause)"
                )
            if int(body["cause"]) < self.cited:
                raise EventError(
                    f"{where}: message for audit seq {body['cause']} after one citing audit seq "
                    f"{self.cited} (the bus publishes in the audit store's order)"
                )
            self.cited = int(body["cause"])
            want = expected.message
            expected.published = True
        else:
            # Only right after its expiry (checked above); a stray copy has no expiry before it.
            raise EventError(f"{where}: re-sends message {escalates}, which did not just expire")
        _same(want.record(), body, where)
        self.open[record.seq] = _Open(want, rule.deadline_us(record.time, want.ttl_ms), expected)

    def _escalated(self, record: Record, due: rule.Message, where: str) -> None:
        _route(record.body, where)
        _same(due.record(), record.body, where)
        self.messages += 1
        self.open[record.seq] = _Open(due, rule.deadline_us(record.time, due.ttl_ms), None)

    def _handled(self, record: Record, where: str) -> None:
        body = record.body
        seq = int(body["message"])
        state = self._open(seq, where)
        expected = state.expected
        if expected is None or expected.handler is None:
            raise EventError(
                f"{where}: message {seq} to {state.message.to!r} cannot be handled by a record "
                "(only a role supervisor's answer handles a message)"
            )
        if body["by"] != state.message.to:
            raise EventError(
                f"{where}: message {seq} is handled by {body['by']!r}, not its recipient "
                f"{state.message.to!r}"
            )
        if expected.answer is None or expected.answer[0] != body["cause"]:
            first = "none" if expected.answer is None else f"audit seq {expected.answer[0]}"
            raise EventError(
                f"{where}: message {seq} is handled by audit seq {body['cause']}; the first "
                f"record answering it is {first}"
            )
        if state.deadline is not None and expected.answer[1] > state.deadline:
            raise EventError(
                f"{where}: message {seq} was answered after its TTL ({state.message.ttl_ms} ms): "
                "it must have been escalated, not handled"
            )
        self.cited = max(self.cited, int(body["cause"]))
        del self.open[seq]

    def _expired(self, record: Record, where: str) -> None:
        seq = int(record.body["message"])
        state = self._open(seq, where)
        if state.deadline is None:
            raise EventError(f"{where}: message {seq} has no TTL (ttl_ms 0) but expires")
        if rule.time_us(record.time) < state.deadline:
            raise EventError(
                f"{where}: message {seq} expires at {record.time}, before its deadline "
                f"{rule.format_us(state.deadline)}"
            )
        if _in_time(state):
            raise EventError(
                f"{where}: message {seq} expires although audit seq "
                f"{_answer(state)} "
                "answered it in time (it must be recorded as handled)"
            )
        del self.open[seq]
        due = rule.escalation(state.message, seq)
        if due is not None:
            self.escalate = (seq, due, where)

    def _open(self, seq: int, where: str) -> _Open:
        state = self.open.get(seq)
        if state is None:
            raise EventError(f"{where}: message {seq} is not an open message of this run")
        return state

    def _lagging(self, seq: int | None) -> bool:
        """A run without ``run.end`` at the end of its audit store (a crash, or an export of
        the sealed prefixes only) may end before the bus caught up: what it owes for audit
        records after the last one it cites is not (yet) missing. Within what it cites, and
        in an ended run, nothing may be missing."""
        return not self.ended and seq is not None and seq > self.cited

    def finish(self) -> None:
        if self.escalate is not None:
            seq, due, at = self.escalate
            raise EventError(f"{at}: message {seq} expired but is never re-sent to {due.to!r}")
        for cause, expected in sorted(self.expected.items()):
            if not expected.published and not self._lagging(cause):
                what = "P" if expected.message.tier == "P" else expected.message.tier
                raise EventError(
                    f"audit seq {cause} ({expected.message.topic}) has no {what} message in the "
                    "events store"
                )
        for seq, state in sorted(self.open.items()):
            if _in_time(state) and not self._lagging(_answer(state)):
                raise EventError(
                    f"message {seq} was answered in time by audit seq "
                    f"{_answer(state)}"
                    " but never recorded as handled"
                )


def _route(body: Mapping[str, Any], where: str) -> None:
    """The rules every message obeys, whatever its cause: its recipient is its source's
    direct supervisor, and its TTL is its tier's."""
    source, to = str(body["source"]), str(body["to"])
    if rule.parent(source) != to:
        raise EventError(
            f"{where}: a message from {source!r} to {to!r}: the only route from a source "
            f"is to its direct supervisor ({rule.parent(source)!r}); no side channels"
        )
    tier = str(body["tier"])
    if tier not in rule.TTL_MS:
        raise EventError(f"{where}: unknown tier {tier!r} (tiers: {', '.join(rule.TIERS)})")
    if body["ttl_ms"] != rule.TTL_MS[tier]:
        raise EventError(
            f"{where}: a {tier} message has ttl_ms {body['ttl_ms']}; the tier's TTL is "
            f"{rule.TTL_MS[tier]}"
        )


def _answer(state: _Open) -> int | None:
    expected = state.expected
    return None if expected is None or expected.answer is None else expected.answer[0]


def _in_time(state: _Open) -> bool:
    expected = state.expected
    if expected is None or expected.handler is None or expected.answer is None:
        return False
    return state.deadline is None or expected.answer[1] <= state.deadline


def _same(want: Mapping[str, Any], body: Mapping[str, Any], where: str) -> None:
    for name in sorted(want):
        if body.get(name) != want[name]:
            raise EventError(
                f"{where}: message {name} is {body.get(name)!r}; the rule says {want[name]!r}"
            )


def event_check(run: str, plan: bytes | None) -> EventCheck:
    return EventCheck(run)
