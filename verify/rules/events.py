"""The event bus rules: which audit record gets which message, where it goes, when it is
handled, when it expires and where it escalates (docs/spec/events.md).

Pure and integer-only, like every rule here (DESIGN §9): the runtime publishes what these
functions say, and the verifier demands exactly that from the recorded audit records.

* **Tree** (fixed): ``agent:<role>`` -> ``role:<role>`` -> ``run`` -> ``human``
  (``parent``). A message goes to the direct supervisor of its source; nothing else is a
  route ("no side channels").
* **Causes** (``message_for``): an ``attempt.failed`` is a P anomaly (tier ``P``, TTL 1 h),
  a ``control.decision`` of layer I a threshold breach (tier ``I``, 6 h), a layer-D
  ``escalate`` a meta alert (tier ``meta``, TTL 0: until the run ends). The source is the
  agent the record is about (``agent:<role>``, partition ``<role>``), or ``run`` (partition
  ``run``) for run-wide keys (``run``, ``subtree:...``).
* **Handling** (``handler_of``/``handles``): only a role supervisor acts on its own: a P
  message is handled by the failed task's next spawn or its settling, an agent's I or meta
  message by the next spawn of that role (the new configuration is loaded at restart). It
  counts only when that record's time is within the TTL.
* **Expiry** (``deadline_us``): an open message whose TTL ran out (the envelope's time plus
  ``ttl_ms``) expires; unless it was addressed to ``human`` it is re-sent one level up
  (``escalation``), same tier, TTL, topic, cause and text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

HUMAN: Final = "human"
RUN: Final = "run"
TIERS: Final = ("P", "I", "meta")
TTL_MS: Final = {"P": 3_600_000, "I": 21_600_000, "meta": 0}
"""Per tier, the time a recipient has to handle a message; 0 = until the run ends."""
SETTLED: Final = frozenset({"done", "failed", "cancelled", "denied"})
CAUSE_KINDS: Final = frozenset({"attempt.failed", "control.decision"})
HANDLER_KINDS: Final = frozenset({"agent.spawn", "task.transition"})


def parent(node: str) -> str | None:
    """The direct supervisor of a node of the tree, None for ``human`` or a non-node."""
    if node == RUN:
        return HUMAN
    for prefix, up in (("agent:", "role:"), ("role:", None)):
        if node.startswith(prefix) and len(node) > len(prefix):
            return RUN if up is None else up + node[len(prefix) :]
    return None


@dataclass(frozen=True)
class Message:
    """An ``event.message`` body."""

    partition: str
    source: str
    to: str
    tier: str
    ttl_ms: int
    topic: str
    cause: int
    text: str
    escalates: int | None = None

    def record(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "source": self.source,
            "to": self.to,
            "tier": self.tier,
            "ttl_ms": self.ttl_ms,
            "topic": self.topic,
            "cause": self.cause,
            "text": self.text,
            "escalates": self.escalates,
        }


def _origin(key: str) -> tuple[str, str]:
    """(partition, source) of a decision key: ``agent:<role>[:<sensor>]`` is the agent's,
    anything else (``run``, ``subtree:<path>``) the run's."""
    if key.startswith("agent:"):
        role = key[len("agent:") :].split(":", 1)[0]
        if role:
            return role, f"agent:{role}"
    return RUN, RUN


def _message(partition: str, source: str, tier: str, topic: str, cause: int, text: str) -> Message:
    to = parent(source)
    assert to is not None
    return Message(partition, source, to, tier, TTL_MS[tier], topic, cause, text)


def message_for(
    seq: int, kind: str, body: Mapping[str, Any], role_of: Mapping[str, str]
) -> Message | None:
    """The message an audit record (``seq``) must publish, or None. ``role_of``: each
    declared task's role (``task.planned``)."""
    if kind == "attempt.failed":
        task = str(body["task"])
        role = role_of.get(task)
        if role is None:
            return None  # an undeclared task: the semantics check refuses the record
        retry = "retried" if body["retry"] else "not retried"
        text = f"task {task} attempt {body['attempt']} failed ({body['anomaly']}); {retry}"
        return _message(role, f"agent:{role}", "P", f"anomaly.{body['anomaly']}", seq, text)
    if kind != "control.decision":
        return None
    layer, action = body["layer"], body["action"]
    if layer == "I":
        tier = "I"
    elif layer == "D" and action == "escalate":
        tier = "meta"
    else:
        return None
    partition, source = _origin(str(body["key"]))
    text = (
        f"step {body['step']}: {layer}/{body['rule']} on {body['key']} at "
        f"{body['level']} (threshold {body['threshold']}): {action}"
    )
    return _message(partition, source, tier, f"{body['rule']}.{action}", seq, text)


def escalation(message: Message, seq: int) -> Message | None:
    """The re-sent message when ``message`` (events ``seq``) expires, None at the top."""
    up = parent(message.to)
    if up is None:
        return None
    return dataclasses.replace(message, source=message.to, to=up, escalates=seq)


Handler = tuple[str, str]
"""What may handle a message: ("task", <task>) or ("role", <role>)."""


def handler_of(message: Message, cause_body: Mapping[str, Any]) -> Handler | None:
    """Who handles an original message addressed to a role supervisor, None if nothing
    handles it automatically (run-wide messages, escalated ones: a human's business)."""
    if message.escalates is not None or not message.to.startswith("role:"):
        return None
    if message.tier == "P":
        return ("task", str(cause_body["task"]))
    return ("role", message.partition)


def handles(
    handler: Handler, kind: str, body: Mapping[str, Any], role_of: Mapping[str, str]
) -> bool:
    """Whether an audit record is the recipient's answer to a message with ``handler``."""
    what, name = handler
    if kind == "agent.spawn":
        tasks = [str(task) for task in body["tasks"]]
        if what == "task":
            return name in tasks
        return any(role_of.get(task) == name for task in tasks)
    if kind == "task.transition" and what == "task":
        return body["task"] == name and body["to"] in SETTLED
    return False


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm): integer
    arithmetic only, total over any digits (a damaged date gives a number, never an error)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def time_us(text: str) -> int:
    """A record ``time`` (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, already checked by its pattern) in
    microseconds since 1970 (an integer: no float ever carries a time)."""
    days = _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    seconds = days * 86_400 + int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
    return seconds * 1_000_000 + int(text[20:26])


def format_us(micros: int) -> str:
    """The record ``time`` text of a microsecond count (``time_us``'s inverse for valid times)."""
    seconds, rest = divmod(micros, 1_000_000)
    days, second = divmod(seconds, 86_400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    year = yoe + era * 400 + (month <= 2)
    hour, minute, sec = second // 3600, second // 60 % 60, second % 60
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{sec:02d}.{rest:06d}Z"


def deadline_us(published: str, ttl_ms: int) -> int | None:
    """When a message published at ``published`` expires, None for a TTL of 0 (never)."""
    if ttl_ms == 0:
        return None
    return time_us(published) + ttl_ms * 1000
