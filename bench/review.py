"""Action review benchmark: the rule's cost per call, the verifier's per record, the hook's
round trip.

Prints one JSON line. Run: ``python bench/review.py --calls 20000 --hooks 20``.

* ``decide_us``: ``target_of`` + ``classify`` + ``egress_host`` + ``decide`` for one call, mean
  over a mix of reads, writes, shell lines (plain, compound, irreversible) and web calls;
  ``shell_us``: ``classify`` of shell lines alone (the tokenizer dominates);
* ``verify_us``: the verifier's re-decision of one ``action.review`` record
  (``ReviewCheck.audit``), mean over the same mix;
* ``socket_ms``: one request through the real review socket, answered by a desk polled in a
  loop (record queued, "flushed", answered), the client in this process (``ask``): median;
* ``hook_ms``: the same through the hook command as Claude Code runs it
  (``python -m harness.cli_hook pre-tool-use``, a fresh interpreter per call): median;
  ``hook_cli_ms``: through ``python -m harness.cli hook pre-tool-use`` (the whole CLI loads).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness.orchestrate.review import ENV_SOCKET, ENV_WAIT, ReviewDesk
from harness.orchestrate.review.protocol import ask
from harness.verify.records import Record
from harness.verify.reviewcheck import ReviewCheck
from harness.verify.rules.review import classify, decide, egress_host, strictness_of, target_of

ROOT = "/w/tree"
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("Read", {"file_path": f"{ROOT}/src/a.py"}),
    ("Write", {"file_path": f"{ROOT}/src/b.py", "content": "x" * 200}),
    ("Edit", {"file_path": f"{ROOT}/docs/c.md", "old_string": "a", "new_string": "b"}),
    ("Bash", {"command": "python -m pytest -q tests/test_a.py"}),
    ("Bash", {"command": "cd src && make build 2>&1 | tee log.txt && git status"}),
    ("Bash", {"command": "git add -A && git commit -m 'x' && git push origin main"}),
    ("Bash", {"command": "curl -sS https://api.example.com/v1/items | jq ."}),
    ("WebFetch", {"url": "https://docs.example.org/page", "prompt": "summarise"}),
    ("Grep", {"pattern": "TODO", "path": "src"}),
    ("Bash", {"command": "rm -rf build dist && python -m build"}),
]


def _decide_one(tool: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    target = target_of(tool, tool_input, ROOT)
    cls = classify(tool, target)
    host = egress_host(tool, target)
    return decide(
        cls, in_scope=True, locked=False, strictness="normal", approved=False,
        host_known=bool(host) and host == "api.example.com",
    )  # fmt: skip


def _records() -> tuple[list[Record], list[Record]]:
    def rec(seq: int, kind: str, body: dict[str, Any]) -> Record:
        return Record("audit", "r", seq, "2026-01-01T00:00:00.000000Z", kind, body, "")

    head = [
        rec(0, "lock.acquire", {"batch": "b1", "globs": ["src/**"]}),
        rec(1, "agent.spawn", {"batch": "b1", "tasks": ["t1"], "lock": ["src/**"]}),
        rec(2, "agent.started", {"batch": "b1"}),
    ]
    reviews = []
    for n, (tool, tool_input) in enumerate(CALLS * 10, start=1):
        target = target_of(tool, tool_input, ROOT)
        cls = classify(tool, target)
        decision, reason = decide(
            cls, in_scope=tool not in ("Write", "Edit") or target.startswith("src/"),
            locked=False, strictness=strictness_of("implement"), approved=False,
            host_known=False,
        )  # fmt: skip
        body = {"task": "t1", "batch": "b1", "review": n, "tool": tool, "input_sha256": "0" * 64,
                "target": target, "class": cls, "phase": "implement", "decision": decision,
                "reason": reason, "approval": None}  # fmt: skip
        reviews.append(rec(2 + n, "action.review", body))
    return head, reviews


class _Run:
    def __init__(self, folder: Path) -> None:
        self.run_id = "bench"
        self.folder = folder
        self.plan = None
        self.control = None
        self.records = 0

    def audit(self, kind: str, body: Any) -> None:
        self.records += 1

    def flush(self) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--hooks", type=int, default=20)
    args = parser.parse_args()
    out: dict[str, Any] = {"calls": args.calls, "hooks": args.hooks}

    rounds = max(1, args.calls // len(CALLS))
    started = time.perf_counter()
    for _ in range(rounds):
        for tool, tool_input in CALLS:
            _decide_one(tool, tool_input)
    out["decide_us"] = round((time.perf_counter() - started) * 1e6 / (rounds * len(CALLS)), 2)
    shells = [c["command"] for t, c in CALLS if t == "Bash"]
    started = time.perf_counter()
    for _ in range(rounds):
        for line in shells:
            classify("Bash", line)
    out["shell_us"] = round((time.perf_counter() - started) * 1e6 / (rounds * len(shells)), 2)

    head, reviews = _records()
    repeat = max(1, args.calls // len(reviews))
    started = time.perf_counter()
    for _ in range(repeat):
        check = ReviewCheck(frozenset())
        for record in head:
            check.audit(record, "x")
        for record in reviews:
            check.audit(record, "x")
    out["verify_us"] = round((time.perf_counter() - started) * 1e6 / (repeat * len(reviews)), 2)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        desk = ReviewDesk(_Run(folder))
        path = desk.open("b1", ("t1",), ("src/**",), folder / "tree")
        stop = threading.Event()

        def loop() -> None:  # the run loop's tick, as often as it would wake on the socket
            while not stop.is_set():
                desk.poll()
                time.sleep(0.0005)

        ticker = threading.Thread(target=loop, daemon=True)
        ticker.start()
        request = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Read",
                              "tool_input": {"file_path": "src/a.py"}}).encode()  # fmt: skip
        times = []
        for _ in range(max(5, args.hooks * 5)):
            t0 = time.perf_counter()
            ask(str(path), request, 10.0)
            times.append((time.perf_counter() - t0) * 1000)
        out["socket_ms"] = round(statistics.median(times), 3)
        env = {"PATH": os.environ.get("PATH", ""), ENV_SOCKET: str(path), ENV_WAIT: "5"}
        for key, module in (("hook_ms", "harness.cli_hook"), ("hook_cli_ms", "harness.cli")):
            argv = [sys.executable, "-m", module] + (["hook"] if module == "harness.cli" else [])
            times = []
            for _ in range(args.hooks):
                t0 = time.perf_counter()
                done = subprocess.run(
                    [*argv, "pre-tool-use"], input=request, env=env, capture_output=True,
                    check=True,
                )  # fmt: skip
                times.append((time.perf_counter() - t0) * 1000)
                assert b'"allow"' in done.stdout, done.stdout
            out[key] = round(statistics.median(times), 1)
        stop.set()
        ticker.join()
        desk.close("b1")
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
