"""Budget benchmark: usage-meter throughput and budget-rule decisions per second.

Prints one JSON line. Run: ``python bench/budget.py --megabytes 16``.

* ``meter_mb_per_s``: a Claude Code ``stream-json`` transcript of ``--megabytes`` MB
  (assistant messages with usage and ~2 KB of text each, then the result) fed to
  ``ClaudeMeter`` in 64 KiB chunks, with ``usage()`` asked after every chunk (what the runtime
  does for the live budget check);
* ``pretty_mb_per_s``: the same for a pretty-printed Gemini document (one document);
* ``breach_per_s``: ``Ledger.breach`` calls per second for a 3-task batch with limits in every
  scope (the live check); ``charge_per_s``: ``Ledger.charge`` calls per second.

The point of the figures: the meter must keep up with any agent's output on the coordinator's
one thread, and the live check must be negligible next to a tick.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from harness.orchestrate.usage import ClaudeMeter, GeminiMeter
from harness.verify.rules.budget import Ledger, Limits, Usage

CHUNK = 65536


def _claude_transcript(megabytes: int) -> bytes:
    lines = [json.dumps({"type": "system", "subtype": "init", "model": "m"})]
    size, n = 0, 0
    text = "x" * 2000
    while size < megabytes * 1_000_000:
        usage = {"input_tokens": 10 + n, "cache_read_input_tokens": 500, "output_tokens": 7}
        message = {"id": f"msg_{n}", "usage": usage, "content": [{"type": "text", "text": text}]}
        line = json.dumps({"type": "assistant", "message": message})
        lines.append(line)
        size += len(line) + 1
        n += 1
    result = {"type": "result", "usage": {"input_tokens": 1, "output_tokens": 1}}
    lines.append(json.dumps({**result, "total_cost_usd": 1.25}))
    return ("\n".join(lines) + "\n").encode()


def _gemini_document(megabytes: int) -> bytes:
    count = max(1, megabytes * 1_000_000 // 1100)
    doc = {
        "response": "done",
        "log": ["y" * 1000 for _ in range(count)],
        "stats": {"models": {"m": {"tokens": {"prompt": 5, "candidates": 6}}}},
    }
    return json.dumps(doc, indent=2).encode() + b"\n"


def _meter_rate(meter: ClaudeMeter | GeminiMeter, data: bytes) -> float:
    start = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        meter.feed("stdout", data[i : i + CHUNK])
        meter.usage()
    meter.close()
    seconds = time.perf_counter() - start
    assert meter.usage() is not None
    return len(data) / 1e6 / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args(argv)

    transcript = _claude_transcript(args.megabytes)
    meter_rate = _meter_rate(ClaudeMeter(), transcript)
    # a pretty document above 1 MiB is dropped by design: measure one that fits
    pretty = _gemini_document(1)
    pretty_rate = _meter_rate(GeminiMeter(), pretty) if len(pretty) < (1 << 20) else 0.0

    limits = Limits(wall_ms=10**9, tokens=10**12, cost_micros=10**12)
    ledger = Ledger(limits, {"coder": limits}, {t: limits for t in ("a", "b", "c")})
    tasks = ("a", "b", "c")
    live = Usage(1000, 1000, 1000)
    start = time.perf_counter()
    for _ in range(args.calls):
        ledger.breach(tasks, "coder", live)
    breach_rate = args.calls / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(args.calls):
        ledger.charge(tasks, "coder", live)
    charge_rate = args.calls / (time.perf_counter() - start)

    print(
        json.dumps(
            {
                "bench": "budget",
                "transcript_mb": round(len(transcript) / 1e6, 1),
                "meter_mb_per_s": round(meter_rate, 1),
                "pretty_doc_kb": len(pretty) // 1000,
                "pretty_mb_per_s": round(pretty_rate, 1),
                "breach_per_s": int(breach_rate),
                "charge_per_s": int(charge_rate),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
