"""Usage meters: tokens and cost read from an agent CLI's own output while it runs.

Budgets are enforced outside the agent (issue 11 §6, docs/spec/runtime.md "Budgets"), so the
runtime reads what the CLI reports on stdout as it arrives: ``meter_for(adapter)`` gives a
``UsageMeter`` (``None`` for adapters that report nothing), the runtime ``feed``s it every
chunk it reads, in any split, and asks ``usage()`` after each feed for the live budget check
and once more for ``agent.exit.usage``. A meter never blocks, never raises on what the agent
prints, and holds at most ``MAX_LINE`` bytes of an unfinished line (a longer line is skipped
whole: usage never sits in megabyte lines, and an agent must not make the runtime buffer
without bound).

What each adapter reports (the formats are in the adapter modules' docstrings):

* **claude**: ``stream-json`` assistant messages carry ``message.usage`` while the run goes
  (one message may be repeated per content block with the same ``message.id``: the largest
  figures per id count once), and the final ``result`` object (also the whole output with
  ``--output-format json``, or an element of the JSON array some versions print) carries the
  run's ``usage`` and ``total_cost_usd``. Input = ``input_tokens`` +
  ``cache_creation_input_tokens`` + ``cache_read_input_tokens`` (Claude counts cache traffic
  apart from ``input_tokens``); output = ``output_tokens``.
* **codex**: ``turn.completed.usage`` is the thread's running total (the latest counts).
  Input = ``input_tokens`` (``cached_input_tokens`` is part of it); output = ``output_tokens``
  (reasoning included). No cost.
* **gemini**: the one (pretty-printed) JSON document at the end: per model
  ``stats.models.<m>.tokens``; input = ``prompt`` (cached part included) + ``tool``, output =
  ``candidates`` + ``thoughts``, summed over models. No cost.
* **opencode**: every ``step_finish`` part carries that step's ``tokens`` and ``cost``,
  summed over steps. Input = ``input`` + ``cache.read`` + ``cache.write``; output = ``output``
  + ``reasoning``.

So cached input tokens always count as input tokens, in full: a token budget limits what the
model processed; the cost budget is where caching discounts show. Figures only ever grow
(a meter keeps the largest total it has seen), a negative, fractional, boolean or non-numeric
figure is ignored as unreported (never subtracted), and a figure above ``2**53 - 1``
saturates there (records carry JSON-safe integers). Costs are read as exact decimals (JSON
numbers parsed with ``Decimal``) and become integer micro-dollars rounded up; cost is ``None``
when the agent never reported one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, DecimalException
from typing import Any, Final

from harness.verify.rules import budget

MAX_LINE: Final = 1 << 20
"""Bytes of one output line (or one pretty-printed document) a meter buffers, at most."""
MAX_FIGURE: Final = 2**53 - 1
"""Token and cost figures saturate here (the largest integer a record may carry)."""
_SATURATED_DOLLARS: Final = Decimal(MAX_FIGURE).scaleb(-6)


@dataclass(frozen=True, slots=True)
class Usage:
    """What an agent reported using: the body of ``agent.exit.usage``."""

    input_tokens: int
    output_tokens: int
    cost_micros: int | None
    """Micro-dollars (rounded up), ``None`` when the agent reported no cost."""

    @property
    def tokens(self) -> int:
        """Input + output tokens: what a token budget counts."""
        return self.input_tokens + self.output_tokens

    def record(self) -> dict[str, int | None]:
        """The ``agent.exit.usage`` object."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_micros": self.cost_micros,
        }

    def charge(self, wall_ms: int) -> budget.Usage:
        """The budget rule's usage of an agent that ran ``wall_ms`` (no cost counts 0)."""
        return budget.Usage(wall_ms=wall_ms, tokens=self.tokens, cost_micros=self.cost_micros or 0)


def _count(value: object) -> int:
    """A token figure, 0 when it is not a non-negative integer (never trusted negative)."""
    if type(value) is not int or value < 0:
        return 0
    return min(value, MAX_FIGURE)


def _dollars(value: object) -> Decimal | None:
    """A cost figure in dollars, ``None`` when it is not a finite number >= 0."""
    if type(value) is int:
        amount = Decimal(value)
    elif type(value) is Decimal:
        amount = value
    elif type(value) is float and math.isfinite(value):
        amount = Decimal(str(value))
    else:
        return None
    if not amount.is_finite() or amount < 0:
        return None
    return amount


def _micros(amount: Decimal) -> int:
    """Dollars as micro-dollars, rounded up, exactly (``scaleb`` only moves the exponent)."""
    if amount >= _SATURATED_DOLLARS:
        return MAX_FIGURE
    try:
        micros = int(amount.scaleb(6).to_integral_value(rounding=ROUND_CEILING))
    except DecimalException:  # pragma: no cover - finite and bounded above
        return MAX_FIGURE
    return min(micros, MAX_FIGURE)


def _get(obj: object, *path: str) -> object:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


class UsageMeter:
    """Incremental reader of one agent's stdout; subclasses interpret the JSON values.

    Lines are split on ``\\n``; each complete line that is a JSON value is an event (a JSON
    array's elements are events). A line that starts a JSON object or array but does not
    parse begins a multi-line document (Gemini pretty-prints): lines are gathered until one
    that starts in column 0 with ``}`` or ``]`` makes the gathered text parse; a document that
    outgrows ``MAX_LINE`` or does not parse at that line is dropped. A document starts only at
    a line that is exactly ``{`` or ``[`` (what pretty-printers write), so a torn JSON line
    never swallows the lines after it. Anything else is ignored.
    """

    def __init__(self) -> None:
        self._line = bytearray()
        self._skipping = False
        """True while the rest of an oversized line is being dropped."""
        self._doc: bytearray | None = None
        self.skipped_lines = 0
        """Lines (or documents) dropped for being longer than ``MAX_LINE``."""

    # -- input -----------------------------------------------------------------------------

    def feed(self, stream: str, chunk: bytes) -> None:
        """Take the next ``chunk`` of ``stream`` (``"stdout"``; other streams are ignored:
        no CLI reports usage on stderr)."""
        if stream != "stdout" or not chunk:
            return
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self._skipping:
                if len(self._line) + len(piece) > MAX_LINE:
                    self._line.clear()
                    self._skipping = True
                    self.skipped_lines += 1
                else:
                    self._line += piece
            if end < 0:
                return
            if self._skipping:
                self._skipping = False
                self._drop_doc()
            else:
                line = bytes(self._line)
                self._line.clear()
                self._take_line(line)
            start = end + 1

    def close(self) -> None:
        """The stream ended: a last line without ``\\n`` counts too."""
        if self._line and not self._skipping:
            line = bytes(self._line)
            self._line.clear()
            self._take_line(line)
        self._line.clear()
        self._skipping = False
        self._doc = None

    def _drop_doc(self) -> None:
        self._doc = None

    def _take_line(self, line: bytes) -> None:
        if self._doc is not None:
            if len(self._doc) + len(line) + 1 > MAX_LINE:
                self._doc = None
                self.skipped_lines += 1
                return
            self._doc += line + b"\n"
            if line[:1] in (b"}", b"]"):
                doc, self._doc = bytes(self._doc), None
                value = _parse(doc)
                if value is not _INVALID:
                    self._value(value)
            return
        stripped = line.strip()
        if not stripped or stripped[:1] not in (b"{", b"["):
            return
        if stripped in (b"{", b"["):  # the first line of a pretty-printed document
            self._doc = bytearray(line + b"\n")
            return
        value = _parse(stripped)
        if value is not _INVALID:
            self._value(value)

    def _value(self, value: object) -> None:
        if isinstance(value, list):
            for item in value:
                if isinstance(item, Mapping):
                    self.event(item)
        elif isinstance(value, Mapping):
            self.event(value)

    # -- interpretation ---------------------------------------------------------------------

    def event(self, event: Mapping[str, Any]) -> None:
        """One JSON object the CLI printed."""
        raise NotImplementedError

    def usage(self) -> Usage | None:
        """What the agent has reported so far; ``None`` when it reported nothing."""
        raise NotImplementedError


_INVALID: Final = object()


def _parse(data: bytes) -> object:
    try:
        return json.loads(data, parse_float=Decimal, parse_constant=lambda _: None)
    except (ValueError, RecursionError):
        return _INVALID


@dataclass
class _Totals:
    """Running figures; ``seen`` says whether any usage was reported at all."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    seen: bool = False

    def usage(self) -> Usage | None:
        if not self.seen:
            return None
        cost = None if self.cost is None else _micros(self.cost)
        return Usage(min(self.input_tokens, MAX_FIGURE), min(self.output_tokens, MAX_FIGURE), cost)


def _claude_tokens(usage: object) -> tuple[int, int] | None:
    if not isinstance(usage, Mapping):
        return None
    tokens_in = (
        _count(usage.get("input_tokens"))
        + _count(usage.get("cache_creation_input_tokens"))
        + _count(usage.get("cache_read_input_tokens"))
    )
    return tokens_in, _count(usage.get("output_tokens"))


class ClaudeMeter(UsageMeter):
    """Claude Code ``json`` / ``stream-json`` (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._messages: dict[str, tuple[int, int]] = {}
        self._streamed = (0, 0)
        self._result: tuple[int, int] | None = None
        self._cost: Decimal | None = None
        self._anonymous = 0

    def event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "assistant":
            figures = _claude_tokens(_get(event, "message", "usage"))
            if figures is None:
                return
            key = _get(event, "message", "id")
            if not isinstance(key, str):
                self._anonymous += 1
                key = f"\0{self._anonymous}"
            old = self._messages.get(key, (0, 0))
            new = (max(old[0], figures[0]), max(old[1], figures[1]))
            self._messages[key] = new
            self._streamed = (
                self._streamed[0] + new[0] - old[0],
                self._streamed[1] + new[1] - old[1],
            )
        elif kind == "result":
            figures = _claude_tokens(event.get("usage"))
            if figures is not None:
                old = self._result or (0, 0)
                self._result = (max(old[0], figures[0]), max(old[1], figures[1]))
            cost = _dollars(event.get("total_cost_usd"))
            if cost is not None and (self._cost is None or cost > self._cost):
                self._cost = cost

    def usage(self) -> Usage | None:
        if not self._messages and self._result is None and self._cost is None:
            return None
        result = self._result or (0, 0)
        totals = _Totals(
            max(self._streamed[0], result[0]),
            max(self._streamed[1], result[1]),
            self._cost,
            seen=True,
        )
        return totals.usage()


class CodexMeter(UsageMeter):
    """Codex ``exec --json``: ``turn.completed.usage`` is cumulative; the largest counts."""

    def __init__(self) -> None:
        super().__init__()
        self._totals = _Totals()

    def event(self, event: Mapping[str, Any]) -> None:
        usage = event.get("usage")
        if event.get("type") != "turn.completed" or not isinstance(usage, Mapping):
            return
        totals = self._totals
        totals.input_tokens = max(totals.input_tokens, _count(usage.get("input_tokens")))
        totals.output_tokens = max(totals.output_tokens, _count(usage.get("output_tokens")))
        totals.seen = True

    def usage(self) -> Usage | None:
        return self._totals.usage()


class GeminiMeter(UsageMeter):
    """Gemini CLI ``--output-format json``: ``stats.models.*.tokens`` of the final document."""

    def __init__(self) -> None:
        super().__init__()
        self._totals = _Totals()

    def event(self, event: Mapping[str, Any]) -> None:
        models = _get(event, "stats", "models")
        if not isinstance(models, Mapping):
            return
        tokens_in = tokens_out = 0
        seen = False
        for entry in models.values():
            tokens = _get(entry, "tokens")
            if not isinstance(tokens, Mapping):
                continue
            seen = True
            tokens_in += _count(tokens.get("prompt")) + _count(tokens.get("tool"))
            tokens_out += _count(tokens.get("candidates")) + _count(tokens.get("thoughts"))
        if seen:
            totals = self._totals
            totals.input_tokens = max(totals.input_tokens, tokens_in)
            totals.output_tokens = max(totals.output_tokens, tokens_out)
            totals.seen = True

    def usage(self) -> Usage | None:
        return self._totals.usage()


class OpencodeMeter(UsageMeter):
    """opencode ``run --format json``: per-step ``tokens`` and ``cost``, summed."""

    def __init__(self) -> None:
        super().__init__()
        self._totals = _Totals()

    def event(self, event: Mapping[str, Any]) -> None:
        part = event.get("part")
        if event.get("type") != "step_finish" or not isinstance(part, Mapping):
            return
        totals = self._totals
        tokens = part.get("tokens")
        if isinstance(tokens, Mapping):
            totals.input_tokens += (
                _count(tokens.get("input"))
                + _count(_get(tokens, "cache", "read"))
                + _count(_get(tokens, "cache", "write"))
            )
            totals.output_tokens += _count(tokens.get("output")) + _count(tokens.get("reasoning"))
            totals.seen = True
        cost = _dollars(part.get("cost"))
        if cost is not None:
            totals.cost = cost if totals.cost is None else totals.cost + cost
            totals.seen = True

    def usage(self) -> Usage | None:
        return self._totals.usage()


_METERS: Final[Mapping[str, Callable[[], UsageMeter]]] = {
    "claude": ClaudeMeter,
    "codex": CodexMeter,
    "gemini": GeminiMeter,
    "opencode": OpencodeMeter,
    "scripted": CodexMeter,  # the scripted agent reports usage_tokens in Codex's shape
}


def meter_for(adapter: str) -> UsageMeter | None:
    """A fresh meter for a built-in adapter that reports usage, else ``None`` (its agents are
    then charged wall-clock only)."""
    make = _METERS.get(adapter)
    return make() if make is not None else None
