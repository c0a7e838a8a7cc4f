"""Every benchmark still runs and prints one JSON line (tiny sizes: figures are not checked).

Benchmarks are measured by hand (their figures go in closing notes), never asserted; this only
keeps them from rotting when the APIs they drive change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize(
    "args",
    [
        ["evidence.py", "--records", "300", "--batch", "100"],
        ["bundle.py", "--records", "300"],
        ["receipts.py", "--artifacts", "20", "--min-seconds", "0.05"],
        ["scheduler.py", "--tasks", "300"],
        ["runtime.py", "--tasks", "3"],
        ["crash_stress.py", "--rounds", "5"],
        ["gate.py", "--size-mib", "1"],
        ["gate.py", "--files", "5"],
        ["gate.py", "--files", "5", "--uncovered"],
        ["hostile.py", "--receipts", "20", "40"],
        ["policy.py", "--tasks", "60"],
        ["sealing.py", "--records", "300", "--every", "50", "--rounds", "1"],
        ["budget.py", "--megabytes", "1", "--calls", "1000"],
        ["parallel.py", "--tasks", "2", "--gate-s", "0", "--levels", "1,2"],
        ["supervise.py", "--entries", "200", "--procs", "2", "--sleep", "0.1"],
        ["rounds.py", "--steps", "1,2"],
        ["bus.py", "--commands", "20", "--polls", "50"],
        ["control.py", "--steps", "300"],
        ["review.py", "--calls", "200", "--hooks", "2"],
        ["events.py", "--tasks", "40"],
        ["dashboard.py", "--records", "300", "--grow", "5"],
        ["proxy.py", "--calls", "8"],
        ["journal.py", "--exchanges", "2", "--request-kib", "1", "--response-mib", "1"],
        ["identity.py", "--records", "200", "--rounds", "1"],
        ["all.py", "--records", "300", "--tasks", "3", "--files", "20"],
    ],
    ids=lambda args: args[0],
)
def test_benchmark_prints_one_json_line(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / args[0]), *args[1:]],
        cwd=BENCH, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert isinstance(json.loads(lines[0]), dict)
