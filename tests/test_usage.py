"""Usage meters (harness.orchestrate.usage): every adapter's real format, fed in any split.

The fake CLIs in tests/fakes print what the real ones print; they are run as real processes
and their stdout is fed byte-split at random points. Hand-written streams cover what the
fakes do not print: streaming assistant messages, repeated message ids, cumulative Codex
turns, pretty-printed Gemini documents, torn and oversized lines, hostile numbers.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.orchestrate.usage import (
    MAX_FIGURE,
    MAX_LINE,
    ClaudeMeter,
    Usage,
    UsageMeter,
    meter_for,
)
from harness.verify.rules import budget

FAKES = Path(__file__).parent / "fakes"


def _lines(*objs: object) -> bytes:
    return b"".join(json.dumps(obj).encode() + b"\n" for obj in objs)


def _feed(meter: UsageMeter, data: bytes, cuts: list[int] | None = None) -> Usage | None:
    points = sorted(set(cuts or []))
    start = 0
    for point in [*points, len(data)]:
        if point > start:
            meter.feed("stdout", data[start:point])
            start = point
    meter.close()
    return meter.usage()


def _meter(adapter: str) -> UsageMeter:
    meter = meter_for(adapter)
    assert meter is not None
    return meter


def _run_fake(name: str, argv: list[str], tmp_path: Path) -> bytes:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "FAKE_MODE": ""}
    done = subprocess.run(
        [sys.executable, str(FAKES / name), *argv],
        input=b"write the greeting",
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout


FAKE_RUNS = [
    (
        "claude",
        ["-p", "--output-format", "json", "--permission-mode", "acceptEdits"],
        Usage(120, 40, 12_300),
    ),
    (
        "claude",
        ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"],
        Usage(120, 40, 12_300),
    ),
    (
        "codex",
        ["exec", "--json", "--full-auto", "--skip-git-repo-check", "-"],
        Usage(1200, 45, None),
    ),
    ("gemini", ["--output-format", "json", "--approval-mode", "auto_edit"], Usage(950, 65, None)),
    ("opencode", ["run", "--format", "json"], Usage(1850, 42, 0)),
]


@pytest.mark.parametrize(("name", "argv", "expected"), FAKE_RUNS, ids=[r[0] for r in FAKE_RUNS])
def test_fake_cli_output_is_metered_in_any_split(
    tmp_path: Path, name: str, argv: list[str], expected: Usage
) -> None:
    out = _run_fake(name, argv, tmp_path)
    assert _feed(_meter(name), out) == expected
    rng = random.Random(name)
    for _ in range(30):
        cuts = [rng.randrange(len(out) + 1) for _ in range(rng.randrange(1, 12))]
        assert _feed(_meter(name), out, cuts) == expected
    assert _feed(_meter(name), out, list(range(len(out)))) == expected  # byte by byte


def test_adapters_without_usage_get_no_meter() -> None:
    for name in ("aider", "goose", "mycli", "command"):
        assert meter_for(name) is None
    assert meter_for("claude") is not meter_for("claude")  # fresh per agent


def test_the_scripted_agent_reports_its_tasks_usage_tokens_in_codex_shape() -> None:
    meter = meter_for("scripted")
    assert meter is not None and meter.usage() is None  # no usage line: nothing reported
    meter.feed("stdout", b'{"type":"turn.completed","usage":{"input_tokens":0,')
    meter.feed("stdout", b'"output_tokens":6000}}\n{"type":"result","ok":true}\n')
    usage = meter.usage()
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (0, 6000)


def test_nothing_reported_is_none_not_zero() -> None:
    for name in ("claude", "codex", "gemini", "opencode"):
        meter = _meter(name)
        assert meter.usage() is None
        meter.feed("stdout", b"plain text\n{not json}\n[1, 2]\n")
        meter.feed("stderr", _lines({"type": "turn.completed", "usage": {"input_tokens": 5}}))
        meter.close()
        assert meter.usage() is None, name


def test_claude_streaming_usage_grows_while_the_agent_runs() -> None:
    """Per-message usage counts before the result arrives (so a long run can be stopped
    mid-way); a message repeated per content block (same id) counts once, with its largest
    figures; cache tokens count as input; the result's totals win when they are larger."""
    meter = ClaudeMeter()
    usage1 = {"input_tokens": 10, "cache_read_input_tokens": 1000, "output_tokens": 5}
    meter.feed("stdout", _lines({"type": "system", "subtype": "init", "model": "m"}))
    meter.feed("stdout", _lines({"type": "assistant", "message": {"id": "a", "usage": usage1}}))
    assert meter.usage() == Usage(1010, 5, None)
    usage1b = {**usage1, "output_tokens": 9}
    meter.feed("stdout", _lines({"type": "assistant", "message": {"id": "a", "usage": usage1b}}))
    assert meter.usage() == Usage(1010, 9, None)
    usage2 = {"input_tokens": 3, "cache_creation_input_tokens": 7, "output_tokens": 100}
    meter.feed("stdout", _lines({"type": "assistant", "message": {"id": "b", "usage": usage2}}))
    assert meter.usage() == Usage(1020, 109, None)
    meter.feed("stdout", _lines({"type": "assistant", "message": {"usage": usage2}}))  # no id
    assert meter.usage() == Usage(1030, 209, None)
    result = {"type": "result", "usage": {"input_tokens": 5000, "output_tokens": 1}}
    meter.feed("stdout", _lines({**result, "total_cost_usd": 0.1}))
    assert meter.usage() == Usage(5000, 209, 100_000)


def test_claude_verbose_json_array_and_pretty_documents() -> None:
    messages = [
        {"type": "system", "subtype": "init"},
        {"type": "assistant", "message": {"id": "x", "usage": {"output_tokens": 3}}},
        {"type": "result", "usage": {"input_tokens": 7, "output_tokens": 2}, "total_cost_usd": 1},
    ]
    one_line = json.dumps(messages).encode() + b"\n"
    assert _feed(ClaudeMeter(), one_line) == Usage(7, 3, 1_000_000)
    pretty = json.dumps(messages, indent=2).encode() + b"\n"
    assert _feed(ClaudeMeter(), pretty, [5, 77, 200]) == Usage(7, 3, 1_000_000)


def test_codex_turns_are_cumulative() -> None:
    turn = {"type": "turn.completed"}
    out = _lines(
        {"type": "thread.started", "thread_id": "t"},
        {**turn, "usage": {"input_tokens": 100, "cached_input_tokens": 90, "output_tokens": 4}},
        {**turn, "usage": {"input_tokens": 250, "cached_input_tokens": 200, "output_tokens": 9}},
        {"type": "turn.failed", "usage": {"input_tokens": 10**6}},
    )
    assert _feed(_meter("codex"), out) == Usage(250, 9, None)


def test_gemini_pretty_printed_document_sums_models() -> None:
    doc = {
        "response": "done {\n} [\n]",
        "stats": {
            "models": {
                "a": {"tokens": {"prompt": 10, "candidates": 2, "thoughts": 3, "tool": 1}},
                "b": {"tokens": {"prompt": 5, "candidates": 1, "cached": 4}},
                "c": {"api": {}},
            }
        },
    }
    pretty = b"Loaded cached credentials.\n" + json.dumps(doc, indent=2).encode() + b"\n"
    rng = random.Random(3)
    for _ in range(20):
        cuts = [rng.randrange(len(pretty)) for _ in range(5)]
        assert _feed(_meter("gemini"), pretty, cuts) == Usage(16, 6, None)


def test_opencode_steps_are_summed_and_cost_is_exact() -> None:
    step = {"type": "step_finish"}
    out = _lines(
        {"type": "step_start", "part": {}},
        {**step, "part": {"tokens": {"input": 10, "output": 1, "cache": {"read": 5}}, "cost": 0.1}},
        {**step, "part": {"tokens": {"input": 1, "reasoning": 2, "cache": {"write": 3}}}},
        {**step, "part": {"tokens": {"output": 1}, "cost": 0.2}},
    )
    # 0.1 + 0.2 is 0.30000000000000004 in binary floats; as decimals it is exactly 0.3.
    assert _feed(_meter("opencode"), out) == Usage(19, 4, 300_000)


@pytest.mark.parametrize(
    ("cost", "micros"),
    [
        ("0.0000001", 1),  # rounded up, never down to free
        ("0.0123", 12_300),
        ("1", 1_000_000),
        ("0", 0),
        ("1e-7", 1),
        ("12.3456781", 12_345_679),
        ("1e300", MAX_FIGURE),
    ],
)
def test_cost_becomes_micros_rounded_up(cost: str, micros: int) -> None:
    line = b'{"type": "result", "total_cost_usd": ' + cost.encode() + b"}\n"
    usage = _feed(ClaudeMeter(), line)
    assert usage is not None and usage.cost_micros == micros


@pytest.mark.parametrize(
    "bad", ["-5", "true", '"12"', "null", "1.5", "NaN", "-Infinity", "[3]", "{}"]
)
def test_hostile_figures_are_ignored_never_subtracted(bad: str) -> None:
    """A negative, fractional, boolean or non-numeric figure is not reported usage."""
    good = b'{"type":"turn.completed","usage":{"input_tokens":7,"output_tokens":2}}\n'
    evil = (
        b'{"type":"turn.completed","usage":{"input_tokens":'
        + bad.encode()
        + b',"output_tokens":'
        + bad.encode()
        + b"}}\n"
    )
    assert _feed(_meter("codex"), good + evil) == Usage(7, 2, None)
    step = b'{"type":"step_finish","part":{"tokens":{"input":' + bad.encode() + b'},"cost":'
    opencode = _feed(_meter("opencode"), step + bad.encode() + b"}}\n")
    assert opencode is not None and opencode.tokens == 0
    assert opencode.cost_micros == (1_500_000 if bad == "1.5" else None)  # 1.5 is fine dollars


def test_huge_token_figures_saturate() -> None:
    line = _lines({"type": "turn.completed", "usage": {"input_tokens": 10**30, "output_tokens": 1}})
    assert _feed(_meter("codex"), line) == Usage(MAX_FIGURE, 1, None)


def test_oversized_lines_are_skipped_and_memory_stays_bounded() -> None:
    meter = _meter("codex")
    good = _lines({"type": "turn.completed", "usage": {"input_tokens": 3, "output_tokens": 4}})
    big_usage = {"input_tokens": 10**6, "output_tokens": 10**6, "pad": "x" * (MAX_LINE + 10)}
    big = _lines({"type": "turn.completed", "usage": big_usage})
    for i in range(0, len(big), 65536):
        meter.feed("stdout", big[i : i + 65536])
        assert len(meter._line) <= MAX_LINE  # the bound is the point
    meter.feed("stdout", good)
    meter.close()
    assert meter.usage() == Usage(3, 4, None)
    assert meter.skipped_lines == 1


def test_a_torn_line_does_not_swallow_the_next_ones() -> None:
    torn = b'{"type":"turn.completed","usage":{"input_tok\n'
    good = _lines({"type": "turn.completed", "usage": {"input_tokens": 3, "output_tokens": 4}})
    assert _feed(_meter("codex"), torn + good) == Usage(3, 4, None)


def test_oversized_pretty_document_is_dropped() -> None:
    doc = {"pad": "y" * (MAX_LINE + 5), "stats": {"models": {"m": {"tokens": {"prompt": 9}}}}}
    pretty = json.dumps(doc, indent=2).encode() + b"\n"
    meter = _meter("gemini")
    assert _feed(meter, pretty) is None
    assert meter.skipped_lines == 1


def test_last_line_without_newline_counts_at_close() -> None:
    meter = _meter("codex")
    meter.feed("stdout", b'{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}')
    assert meter.usage() is None
    meter.close()
    assert meter.usage() == Usage(1, 1, None)


def test_usage_record_and_charge() -> None:
    usage = Usage(10, 5, None)
    assert usage.record() == {"input_tokens": 10, "output_tokens": 5, "cost_micros": None}
    assert usage.charge(1234) == budget.Usage(wall_ms=1234, tokens=15, cost_micros=0)
    assert Usage(1, 2, 3).charge(0) == budget.Usage(0, 3, 3)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**9), st.integers(0, 10**9), st.decimals(0, 100, places=8)),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(0, 4000), max_size=10),
)
def test_opencode_totals_are_split_invariant(
    steps: list[tuple[int, int, Decimal]], cuts: list[int]
) -> None:
    out = b"".join(
        b'{"type":"step_finish","part":{"tokens":{"input":%d,"output":%d},"cost":%s}}\n'
        % (i, o, str(c).encode())
        for i, o, c in steps
    )
    total_cost = sum((c for _, _, c in steps), Decimal(0))
    expected = Usage(
        sum(i for i, _, _ in steps),
        sum(o for _, o, _ in steps),
        int(total_cost.scaleb(6).to_integral_value(rounding="ROUND_CEILING")),
    )
    assert _feed(_meter("opencode"), out, [c % (len(out) + 1) for c in cuts]) == expected
