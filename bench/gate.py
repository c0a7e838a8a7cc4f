"""Merge-gate memory with a large changed file: the gate streams blobs, so peak RSS must not
grow with the blob (issue 9 §3: before, a 200 MiB file pushed the gate to 455 MB).

    python bench/gate.py [--size-mib 200]

Builds the demo repository and bundle, commits one extra file of the given size (random bytes,
so git cannot shrink it), runs ``harness-verify gate`` on the change in a child process, and
prints one JSON line: the blob size, the gate's exit code (1: the big file is uncovered), its
wall time and its own peak RSS (VmHWM of the child image after exec).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bundle import _REPORT_OWN_RSS  # bench/bundle.py (scripts run from bench/)

from harness.orchestrate import git
from harness.orchestrate.demo import run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = run_demo(Path(tmp) / "demo")
        base = git.head(demo.repo)
        big = demo.repo / "assets" / "big.bin"
        big.parent.mkdir()
        with big.open("wb") as handle:
            for _ in range(args.size_mib):
                handle.write(os.urandom(1 << 20))
        git.commit_all(demo.repo, "add a large file by hand")
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _REPORT_OWN_RSS, "gate", "--base", base,
             "--trusted-key", demo.key_id, "--format", "json", str(demo.bundle)],
            cwd=demo.repo, capture_output=True, text=True, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        peak_kb = int(done.stderr.strip().splitlines()[-1].split()[-1])
        files = json.loads(done.stdout)["files"]
    print(
        json.dumps(
            {
                "bench": "gate_large_blob",
                "blob_mib": args.size_mib,
                "exit_code": done.returncode,
                "uncovered": [f["path"] for f in files if f["verdict"] == "uncovered"],
                "seconds": round(seconds, 2),
                "peak_rss_mb": round(peak_kb / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
