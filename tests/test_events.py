"""The event bus: its rules, the runtime's bus on real stores with a clock the test controls,
and the verifier's events check refusing each way a bus record can be wrong.

The bus (``orchestrate.events.EventBus``) is driven exactly as the runtime drives it: audit
records appended in a group commit, then ``audited`` with the acknowledgements; ``tick`` with
the clock moved past a TTL. The records it writes are read back with the strict record parser
and folded through the verifier's ``EventCheck`` (audit first, then events), so each refusal
test changes one recorded thing and names the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.events import EventBus, derive, human_messages
from harness.receipts.run import RunRecorder
from harness.verify.eventcheck import EventError, event_check
from harness.verify.records import Record, parse_record_line
from harness.verify.rules import events as rule

from .evidence_helpers import make_keys

RUN = "r1"
HOUR_US = 3_600_000_000
Body = dict[str, Any]


class Clock:
    """A record clock the test moves by hand (microseconds since 2026-01-01)."""

    def __init__(self) -> None:
        self.us = rule.time_us("2026-01-01T00:00:00.000000Z")

    def __call__(self) -> str:
        return rule.format_us(self.us)

    def advance(self, micros: int) -> None:
        self.us += micros


def planned(task: str, role: str) -> tuple[str, Body]:
    return ("task.planned", {"task": task, "role": role, "priority": 0, "depends": [],
                             "adapter": "scripted", "tools": []})  # fmt: skip


def failed(task: str, attempt: int = 1, retry: bool = True) -> tuple[str, Body]:
    return ("attempt.failed", {"task": task, "batch": "b0001", "attempt": attempt,
                               "anomaly": "test", "reason": "gate failed", "retry": retry,
                               "checkpoint": "0" * 40,
                               "feedback_sha256": "1" * 64 if retry else None})  # fmt: skip


def spawn(*tasks: str) -> tuple[str, Body]:
    return ("agent.spawn", {"batch": "b0002", "tasks": list(tasks), "adapter": "scripted",
                            "branch": "b", "worktree": "w", "timeout_ms": 1, "sandbox": {},
                            "env": [], "supervisor": "role:coder", "attempt": 2,
                            "idle_ms": None, "lifetime_ms": 1, "grace_ms": 1, "lock": [],
                            "budget": {}, "config": 1})  # fmt: skip


def move(task: str, source: str, target: str) -> tuple[str, Body]:
    return ("task.transition", {"task": task, "from": source, "to": target, "reason": "r"})


def decision(layer: str, key: str, action: str, rule_name: str = "bucket") -> tuple[str, Body]:
    return ("control.decision", {"step": 3, "layer": layer, "rule": rule_name, "key": key,
                                 "level": 20, "threshold": 20, "class": "test",
                                 "action": action, "config": None})  # fmt: skip


class Bus:
    """A real run folder, its recorder and bus, fed the way ``RunCore.flush`` feeds it."""

    def __init__(self, folder: Path, clock: Callable[[], str] | None = None) -> None:
        self.clock = clock or Clock()
        self.recorder = RunRecorder(folder, RUN, make_keys(), clock=self.clock)
        self.bus = EventBus(self.recorder, self.clock)

    def audit(self, *items: tuple[str, Body]) -> None:
        acks = self.recorder.store("audit").append_many(items)
        self.bus.audited(list(items), acks)

    def records(self, store: str) -> list[Record]:
        path = self.recorder.folder / f"{store}.jsonl"
        if not path.exists():
            return []
        return [parse_record_line(line, store, RUN) for line in path.read_bytes().splitlines()]

    def events(self) -> list[tuple[str, Body]]:
        return [(r.kind, dict(r.body)) for r in self.records("events")]


def fold(audit: list[Record], events: list[Record]) -> None:
    """The verifier's events check over recorded audit and events records."""
    check = event_check(RUN, None)
    for record in audit:
        check.audit(record, f"audit seq {record.seq}")
    for record in events:
        check.events(record, f"events seq {record.seq}")
    check.finish()


def refused(audit: list[Record], events: list[Record], words: str) -> None:
    with pytest.raises(EventError) as caught:
        fold(audit, events)
    assert words in str(caught.value), str(caught.value)


def edit(records: list[Record], seq: int, **changes: Any) -> list[Record]:
    out = list(records)
    out[seq] = out[seq]._replace(body={**out[seq].body, **changes})
    return out


# ---- the rules ---------------------------------------------------------------------------


def test_the_tree_goes_agent_role_run_human() -> None:
    assert rule.parent("agent:coder") == "role:coder"
    assert rule.parent("role:coder") == "run"
    assert rule.parent("run") == "human"
    assert rule.parent("human") is None
    assert [rule.parent(n) for n in ("agent:", "role:", "coder", "Run")] == [None] * 4


def test_causes_tiers_and_ttls() -> None:
    roles = {"t1": "coder"}
    p = rule.message_for(7, *failed("t1"), roles)
    assert p is not None
    assert (p.partition, p.source, p.to, p.tier, p.ttl_ms, p.topic, p.cause) == (
        "coder", "agent:coder", "role:coder", "P", 3_600_000, "anomaly.test", 7,
    )  # fmt: skip
    i = rule.message_for(8, *decision("I", "agent:coder", "template"), roles)
    assert i is not None and (i.tier, i.ttl_ms, i.to) == ("I", 21_600_000, "role:coder")
    sub = rule.message_for(9, *decision("I", "subtree:docs", "split"), roles)
    assert sub is not None and (sub.partition, sub.source, sub.to) == ("run", "run", "human")
    cusum = rule.message_for(9, *decision("D", "agent:coder:pace_ms", "escalate", "cusum"), roles)
    assert cusum is not None and (cusum.tier, cusum.ttl_ms, cusum.source) == (
        "meta", 0, "agent:coder",
    )  # fmt: skip
    assert (
        rule.message_for(9, *decision("D", "agent:coder:pace_ms", "warn", "cusum"), roles) is None
    )
    assert rule.message_for(9, *failed("undeclared"), roles) is None
    assert rule.message_for(9, *spawn("t1"), roles) is None


def test_escalation_keeps_everything_but_the_route() -> None:
    p = rule.message_for(7, *failed("t1"), {"t1": "coder"})
    assert p is not None
    up = rule.escalation(p, 4)
    assert up is not None and (up.source, up.to, up.escalates) == ("role:coder", "run", 4)
    assert dataclasses.replace(up, source=p.source, to=p.to, escalates=None) == p
    top = rule.escalation(up, 5)
    assert top is not None and (top.source, top.to) == ("run", "human")
    assert rule.escalation(top, 6) is None


def test_times_are_integer_microseconds() -> None:
    t = "2026-03-01T12:34:56.000789Z"
    assert rule.format_us(rule.time_us(t)) == t
    assert rule.time_us("1970-01-01T00:00:01.000002Z") == 1_000_002
    assert rule.deadline_us(t, 1) == rule.time_us(t) + 1000
    assert rule.deadline_us(t, 0) is None


# ---- the bus with a controlled clock -------------------------------------------------------


def test_an_unhandled_p_message_climbs_one_level_per_ttl_up_to_human(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(failed("t1"))
    assert [(k, b.get("to")) for k, b in run.events()] == [("event.message", "role:coder")]
    run.bus.tick()  # nothing is due yet
    assert len(run.events()) == 1
    clock = run.clock
    assert isinstance(clock, Clock)
    clock.advance(HOUR_US - 1)
    run.bus.tick()
    assert len(run.events()) == 1, "expired a microsecond early"
    for expected_to in ("run", "human"):
        clock.advance(1 if expected_to == "run" else HOUR_US)
        run.bus.tick()
        *_, (expired, gone), (kind, body) = run.events()
        assert (expired, kind, body["to"]) == ("event.expired", "event.message", expected_to)
        assert body["escalates"] == gone["message"]
    assert [m["to"] for m in human_messages(run.recorder.folder)] == ["human"]
    clock.advance(HOUR_US)
    run.bus.tick()
    assert run.events()[-1][0] == "event.expired"  # at the top: expired, never re-sent
    assert human_messages(run.recorder.folder) == []
    times = [r.time for r in run.records("events")]
    assert times[1] == rule.format_us(rule.time_us(times[0]) + HOUR_US)  # exactly at the deadline
    fold(run.records("audit"), run.records("events"))


def test_an_answer_in_time_handles_the_message(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"), planned("t2", "coder"))
    run.audit(failed("t1"), decision("I", "agent:coder", "template"))
    run.audit(spawn("t2"))  # another task of the role: answers the I message only
    run.audit(spawn("t1"))
    kinds = [(k, b.get("cause"), b.get("message")) for k, b in run.events()]
    assert kinds == [
        ("event.message", 2, None),
        ("event.message", 3, None),
        ("event.handled", 4, 1),
        ("event.handled", 5, 0),
    ]
    fold(run.records("audit"), run.records("events"))


def test_a_final_failure_is_handled_by_the_task_settling(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(failed("t1", retry=False), move("t1", "in_progress", "failed"))
    assert [k for k, _ in run.events()] == ["event.message", "event.handled"]
    fold(run.records("audit"), run.records("events"))


def test_an_answer_after_the_ttl_escalates_instead(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(failed("t1"))
    assert isinstance(run.clock, Clock)
    run.clock.advance(HOUR_US + 5)  # no tick ran: the answer's own commit expires it
    run.audit(spawn("t1"))
    assert [(k, b.get("to")) for k, b in run.events()] == [
        ("event.message", "role:coder"),
        ("event.expired", None),
        ("event.message", "run"),
    ]
    audit, events = run.records("audit"), run.records("events")
    fold(audit, events)
    handled = {"message": 0, "by": "role:coder", "cause": 2}
    late = [*events[:1], Record("events", RUN, 1, events[1].time, "event.handled", handled, "")]
    refused(audit, late, "answered after its TTL")


def test_a_meta_alert_lives_until_the_run_ends(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(decision("D", "run", "escalate", "rate"))
    assert isinstance(run.clock, Clock)
    run.clock.advance(1000 * HOUR_US)
    run.bus.tick()
    assert [(k, b["to"], b["ttl_ms"]) for k, b in run.events()] == [("event.message", "human", 0)]
    assert len(human_messages(run.recorder.folder)) == 1
    fold(run.records("audit"), run.records("events"))


def test_a_crash_between_the_two_appends_is_repaired_on_the_next_start(tmp_path: Path) -> None:
    first = Bus(tmp_path)
    first.audit(planned("t1", "coder"))
    first.audit(failed("t1"))
    # the crash: the answer's audit commit is durable, the bus never saw it
    first.recorder.store("audit").append_many([spawn("t1"), failed("t1", attempt=2)])
    first.recorder.close()
    second = Bus(tmp_path)
    second.bus.tick()  # the next process's first use loads both stores
    assert [(k, b.get("cause"), b.get("message")) for k, b in second.events()] == [
        ("event.message", 1, None),
        ("event.handled", 2, 0),
        ("event.message", 3, None),
    ]
    fold(second.records("audit"), second.records("events"))


def test_a_tick_never_moves_a_logical_clock(tmp_path: Path) -> None:
    clock = LogicalClock()
    recorder = RunRecorder(tmp_path, RUN, make_keys(), clock=clock)
    bus = EventBus(recorder, clock.peek)
    items = [planned("t1", "coder"), failed("t1")]
    bus.audited(items, recorder.store("audit").append_many(items))
    before = clock.tick
    for _ in range(50):
        bus.tick()
    assert clock.tick == before
    assert clock.peek() == clock.peek()


def test_derive_publishes_what_the_bus_publishes(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    rows = [planned("t1", "coder"), failed("t1"), decision("I", "agent:coder", "template"),
            spawn("t1"), failed("t1", 2, False), move("t1", "in_progress", "failed")]  # fmt: skip
    for row in rows:
        run.audit(row)
    assert derive((seq, k, b) for seq, (k, b) in enumerate(rows)) == run.events()


def test_an_expiry_is_never_recorded_before_its_deadline(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(failed("t1"))
    assert isinstance(run.clock, Clock)
    run.clock.advance(HOUR_US)
    run.bus.now = lambda: rule.format_us(rule.time_us("2026-01-01T00:00:00.000000Z") + 2 * HOUR_US)
    run.clock.us -= HOUR_US  # the record clock went back an hour after the tick read it
    run.bus.tick()
    events = run.records("events")
    assert events[1].kind == "event.expired"
    assert rule.time_us(events[1].time) >= rule.time_us(events[0].time) + HOUR_US
    fold(run.records("audit"), events)


# ---- the verifier's events check refuses ---------------------------------------------------


@pytest.fixture
def lawful(tmp_path: Path) -> tuple[list[Record], list[Record]]:
    """A P message escalated once (to ``run``) and an I message handled in time; the audit
    store ends with run.end (nothing may be owed)."""
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"), planned("t2", "coder"))
    run.audit(failed("t1"), decision("I", "agent:coder", "template"))
    assert isinstance(run.clock, Clock)
    run.clock.advance(HOUR_US)
    run.bus.tick()
    run.audit(spawn("t2"))
    run.audit(("run.end", {"outcome": "completed"}))
    audit, events = run.records("audit"), run.records("events")
    assert [r.kind for r in events] == ["event.message", "event.message", "event.expired",
                                        "event.message", "event.handled"]  # fmt: skip
    fold(audit, events)
    return audit, events


def test_a_message_to_someone_else_than_the_direct_supervisor_is_refused(
    lawful: tuple[list[Record], list[Record]],
) -> None:
    audit, events = lawful
    refused(audit, edit(events, 0, to="human"), "no side channels")
    refused(audit, edit(events, 0, to="role:tester"), "no side channels")
    refused(audit, edit(events, 3, to="human"), "no side channels")


def test_a_wrong_ttl_is_refused(lawful: tuple[list[Record], list[Record]]) -> None:
    audit, events = lawful
    refused(audit, edit(events, 0, ttl_ms=21_600_000), "the tier's TTL is 3600000")
    refused(audit, edit(events, 1, tier="P"), "the tier's TTL is 3600000")
    refused(audit, edit(events, 1, tier="X"), "unknown tier")


def test_a_message_without_a_cause_of_the_right_kind_is_refused(
    lawful: tuple[list[Record], list[Record]],
) -> None:
    audit, events = lawful
    refused(audit, edit(events, 0, cause=0), "no attempt.failed, layer-I decision")
    refused(audit, edit(events, 0, cause=99), "no attempt.failed, layer-I decision")
    refused(audit, edit(events, 1, cause=2), "a second message for audit seq 2")
    refused(audit, edit(events, 0, cause=3), "the rule says")  # a P message citing a decision
    refused(audit, edit(events, 0, topic="anomaly.lint"), "message topic")
    refused(audit, edit(events, 0, text="all is well"), "message text")


def test_a_cause_without_its_message_is_refused(lawful: tuple[list[Record], list[Record]]) -> None:
    audit, events = lawful
    refused(audit, [], "audit seq 2 (anomaly.test) has no P message")
    refused(audit, events[1:2], "audit seq 2 (anomaly.test) has no P message")
    refused(audit, events[:1], "audit seq 3 (bucket.template) has no I message")
    twice = [*events[:1], events[0]._replace(seq=1)]
    refused(audit, twice, "a second message for audit seq 2")


def test_an_expiry_before_the_deadline_is_refused(
    lawful: tuple[list[Record], list[Record]],
) -> None:
    audit, events = lawful
    early = list(events)
    early[2] = events[2]._replace(time=events[0].time)
    refused(audit, early, "before its deadline")


def test_an_expiry_without_its_escalation_is_refused(
    lawful: tuple[list[Record], list[Record]],
) -> None:
    audit, events = lawful
    refused(audit, events[:3], "expired but is never re-sent to 'run'")
    refused(audit, [*events[:3], events[4]], "expired but is not re-sent to 'run'")
    refused(audit, edit(events, 3, escalates=1), "expired but is not re-sent")
    refused(audit, edit(events, 3, source="agent:coder", to="role:coder"), "message source")
    stray = [*events[:2], events[3]]
    refused(audit, stray, "re-sends message 0, which did not just expire")


def test_wrong_handling_is_refused(lawful: tuple[list[Record], list[Record]]) -> None:
    audit, events = lawful
    refused(audit, edit(events, 4, by="run"), "not its recipient 'role:coder'")
    refused(audit, edit(events, 4, cause=0), "the first record answering it is audit seq 4")
    refused(audit, edit(events, 4, message=3), "cannot be handled by a record")
    refused(audit, edit(events, 4, message=0), "is not an open message")
    refused(audit, events[:4], "answered in time by audit seq 4 but never recorded as handled")


def test_expiring_what_was_answered_in_time_or_has_no_ttl_is_refused(tmp_path: Path) -> None:
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"))
    run.audit(failed("t1"), decision("D", "run", "escalate", "rate"))
    run.audit(spawn("t1"))
    audit, events = run.records("audit"), run.records("events")
    assert [r.kind for r in events] == ["event.message", "event.message", "event.handled"]
    fold(audit, events)
    late = events[0]._replace(time=rule.format_us(rule.time_us(events[0].time) + HOUR_US))
    expire0 = Record("events", RUN, 2, late.time, "event.expired", {"message": 0}, "0" * 64)
    refused(audit, [*events[:2], expire0], "answered it in time")
    expire1 = expire0._replace(body={"message": 1})
    refused(audit, [*events[:2], expire1], "has no TTL (ttl_ms 0) but expires")


def test_the_bus_may_lag_behind_an_unended_audit_store_only(tmp_path: Path) -> None:
    """A crash (or an export of the sealed prefixes) can leave the last causes without their
    messages: accepted while the audit store does not end with run.end, and only after the
    last audit record the events store cites; with run.end, refused."""
    run = Bus(tmp_path)
    run.audit(planned("t1", "coder"), planned("t2", "coder"))
    run.audit(failed("t1"))
    # the crash: this commit is durable, the bus never saw it
    run.recorder.store("audit").append_many([spawn("t1"), failed("t2")])
    audit, events = run.records("audit"), run.records("events")
    fold(audit, events)
    ended = run.recorder.store("audit").append("run.end", {"outcome": "completed"})
    assert ended.seq == len(audit)
    audit = run.records("audit")
    refused(audit, events, "audit seq 4 (anomaly.test) has no P message")
    # a hole before what the bus cites is never a lag
    run2 = Bus(tmp_path / "b")
    run2.audit(planned("t1", "coder"), planned("t2", "coder"))
    run2.audit(failed("t1"), failed("t2"))
    audit2, events2 = run2.records("audit"), run2.records("events")
    refused(audit2, events2[1:], "audit seq 2 (anomaly.test) has no P message")
    refused(audit2, [events2[1], events2[0]._replace(seq=1)], "publishes in the audit")


def test_a_damaged_time_never_raises() -> None:
    """A flipped digit can make a time that fits the pattern but names no date (month 13):
    the rules compute a number, the verifier refuses elsewhere and never crashes (a single
    bit flip once raised ValueError out of the fold, tests/test_flips.py)."""
    assert rule.time_us("2026-13-01T00:00:00.000000Z") > rule.time_us("2026-12-01T00:00:00.000000Z")
    assert rule.time_us("2026-02-31T99:99:99.999999Z") > 0
