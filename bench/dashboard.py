"""Dashboard benchmark: time to first byte of a big run's page, and the server's memory tailing.

Prints one JSON line. Run: ``python bench/dashboard.py --records 100000``.

The run is built fast but from real records: a one-task seed plan runs through the real
runtime (``run_plan``), then its records are re-appended through ``StoreWriter`` under the run
id ``big`` with the task's block of records repeated for ``t00001``, ``t00002``, ... (ids,
batch, branch and file names substituted) until the audit store holds ``--records`` records;
lineage and replay get the same per-task blocks. The stores are keyed and checkpointed with
the repository's own keys, so the run is what a long run leaves (minus its run.end: it is
still "running", so the server keeps tailing it).

``harness dashboard --port 0`` then serves the repository in a subprocess:

* ``ttfb_first_ms`` / ``ttfb_again_ms`` — from sending ``GET /runs/big`` on a fresh socket to
  the first response byte (first request: the server folds the whole run; again: cached);
  ``page_ms`` / ``page_bytes`` — the whole first response.
* ``sse_events`` — events an SSE client (``GET /runs/big/events?cursor=<records>``) read
  while ``--grow`` more task blocks were appended (one group commit per task block, every
  ``--pace-ms``), then run.end; ``grown_records``, ``tail_s``;
* ``server_tail_peak_rss_mb`` — the server's highest VmRSS sampled during the tail;
  ``server_peak_rss_mb`` — its VmHWM (peak RSS over its whole life: includes the big page);
  ``server_rss_before_tail_mb`` / ``server_rss_after_tail_mb`` — its VmRSS around the tail.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RUN = "big"
STORES = ("audit", "lineage", "replay", "events", "control")

PLAN = """[plan]
name = "seed"
[[task]]
id = "t0"
role = "coder"
prompt = "Write the seed file."
gates = [{ name = "ok", command = [PYTHON, "-c", "pass"] }]
[[task.edits]]
path = "seed0.txt"
content = "seed\\n"
""".replace("PYTHON", json.dumps(sys.executable))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _subst(body: dict[str, Any], k: int) -> dict[str, Any]:
    text = json.dumps(body)
    text = text.replace('"t0"', f'"t{k:05d}"').replace("b0001", f"b{k + 1:05d}")
    text = text.replace("harness/seed/", f"harness/{RUN}/").replace("seed0.txt", f"f{k}.txt")
    out: dict[str, Any] = json.loads(text)
    return out


class Seed:
    """The seed run's records, cut into header / per-task block / footer."""

    def __init__(self, run_dir: Path) -> None:
        audit = _records(run_dir / "audit.jsonl")
        running = next(
            i
            for i, r in enumerate(audit)
            if r["kind"] == "run.status" and r["body"]["status"] == "running"
        )
        ending = next(i for i, r in enumerate(audit) if i > running and r["kind"] == "run.status")
        self.header = [r for r in audit[: running + 1] if r["kind"] != "task.planned"]
        self.planned = next(r for r in audit if r["kind"] == "task.planned")
        # phase switches and the 25/50/75 % reviews happen a bounded number of times a run
        self.block = [
            r
            for r in audit[running + 1 : ending]
            if r["kind"] not in ("control.phase", "control.review")
        ]
        self.footer = audit[ending:]
        self.others = {s: _records(run_dir / f"{s}.jsonl") for s in STORES if s != "audit"}


def build(repo: Path, records: int) -> tuple[Any, Seed, int]:
    """The seed run, then the big run's stores; returns (writers, seed, tasks written)."""
    from harness.orchestrate.demo import make_repo
    from harness.orchestrate.state import init_state, load_run_keys, run_plan, state_dir
    from harness.receipts.store import StoreWriter

    make_repo(repo)
    init_state(repo)
    (repo.parent / "seed.toml").write_text(PLAN)
    run_plan(repo, repo.parent / "seed.toml", run_id="seed", no_sandbox=True)
    seed = Seed(state_dir(repo) / "runs" / "seed")
    _, keys = load_run_keys(repo)
    folder = state_dir(repo) / "runs" / RUN
    folder.mkdir(parents=True)
    shutil.copy(state_dir(repo) / "runs" / "seed" / "plan.json", folder / "plan.json")
    writers = {
        s: StoreWriter(folder / f"{s}.jsonl", store=s, run_id=RUN, hmac_master=keys.hmac_master)
        for s in STORES
    }
    per_task = len(seed.block) + 1
    tasks = max(1, (records - len(seed.header) - len(seed.footer)) // per_task)
    head = seed.header[:1] + [
        {"kind": "task.planned", "body": _subst(seed.planned["body"], k)} for k in range(tasks)
    ]
    writers["audit"].append_many((r["kind"], r["body"]) for r in head)
    writers["audit"].append_many((r["kind"], r["body"]) for r in seed.header[1:])
    for start in range(0, tasks, 200):
        _append_tasks(writers, seed, range(start, min(tasks, start + 200)))
    for store in ("events", "control"):
        writers[store].append_many((r["kind"], r["body"]) for r in seed.others[store])
    signer = keys.note_signer()
    for writer in writers.values():
        writer.checkpoint(signer)
    return writers, seed, tasks


def _append_tasks(writers: Any, seed: Seed, ks: range) -> None:
    writers["audit"].append_many((r["kind"], _subst(r["body"], k)) for k in ks for r in seed.block)
    for store in ("lineage", "replay"):
        writers[store].append_many(
            (r["kind"], _subst(r["body"], k)) for k in ks for r in seed.others[store]
        )


def _start_server(repo: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "dashboard", "--repo", str(repo), "--port", "0"],
        cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("dashboard: http://"):
        proc.kill()
        raise SystemExit(f"the dashboard did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1].strip().rstrip("/"))


def _get(port: int, path: str) -> tuple[float, float, int, int]:
    """(seconds to first byte, seconds to the whole response, bytes, HTTP status)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        t0 = time.perf_counter()
        sock.sendall(request.encode())
        first = sock.recv(65536)
        ttfb = time.perf_counter() - t0
        chunks = [first]
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
        whole = time.perf_counter() - t0
    data = b"".join(chunks)
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return ttfb, whole, len(data), status


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _sse_lines(port: int, cursor: int, stop: threading.Event, counter: list[int]) -> None:
    """Read the run's event stream from ``cursor`` until ``stop``; count ``event:`` lines."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(
            f"GET /runs/{RUN}/events?cursor={cursor} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        buffer = b""
        while not stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            counter[0] += sum(1 for line in lines if line.startswith(b"event:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="audit records of the run")
    parser.add_argument("--grow", type=int, default=200, help="task blocks appended while tailing")
    parser.add_argument("--pace-ms", type=float, default=5, help="pause between task blocks")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: temp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        env = dict(os.environ)
        env.update(XDG_CONFIG_HOME=str(root / "config"), XDG_CACHE_HOME=str(root / "cache"))
        env.pop("HARNESS_DASHBOARD_TOKEN", None)
        os.environ.update(
            XDG_CONFIG_HOME=env["XDG_CONFIG_HOME"], XDG_CACHE_HOME=env["XDG_CACHE_HOME"]
        )
        repo = root / "repo"
        t0 = time.perf_counter()
        writers, seed, tasks = build(repo, args.records)
        build_s = time.perf_counter() - t0
        figures: dict[str, object] = {
            "records": writers["audit"].size,
            "tasks": tasks,
            "build_s": build_s,
        }
        server, port = _start_server(repo, env)
        try:
            ttfb, whole, size, status = _get(port, f"/runs/{RUN}")
            if status != 200:
                raise SystemExit(f"GET /runs/{RUN} answered {status}")
            again, _, _, _ = _get(port, f"/runs/{RUN}")
            figures.update(
                ttfb_first_ms=ttfb * 1e3,
                ttfb_again_ms=again * 1e3,
                page_ms=whole * 1e3,
                page_bytes=size,
                page_status=status,
                server_rss_before_tail_mb=_status_kb(server.pid, "VmRSS") / 1024,
            )
            stop, counter = threading.Event(), [0]
            cursor = writers["audit"].size
            reader = threading.Thread(
                target=_sse_lines, args=(port, cursor, stop, counter), daemon=True
            )
            reader.start()
            t1 = time.perf_counter()
            tail_peak = 0
            for k in range(tasks, tasks + args.grow):
                _append_tasks(writers, seed, range(k, k + 1))
                tail_peak = max(tail_peak, _status_kb(server.pid, "VmRSS"))
                time.sleep(args.pace_ms / 1e3)
            writers["audit"].append_many((r["kind"], r["body"]) for r in seed.footer)
            # one ``task`` event per recorded transition of the appended tasks
            wanted = args.grow * sum(1 for r in seed.block if r["kind"] == "task.transition")
            deadline = time.monotonic() + 60
            while counter[0] < wanted and time.monotonic() < deadline:
                time.sleep(0.05)
                tail_peak = max(tail_peak, _status_kb(server.pid, "VmRSS"))
            figures.update(
                grown_records=writers["audit"].size - cursor,
                tail_s=time.perf_counter() - t1,
                sse_events=counter[0],
                sse_transitions_appended=wanted,
                server_tail_peak_rss_mb=tail_peak / 1024,
                server_rss_after_tail_mb=_status_kb(server.pid, "VmRSS") / 1024,
                # VmHWM is folded from the RSS counters lazily: a later sample can exceed it
                server_peak_rss_mb=max(tail_peak, _status_kb(server.pid, "VmHWM")) / 1024,
            )
            stop.set()
        finally:
            server.terminate()
            server.wait(timeout=15)
            for writer in writers.values():
                writer.close()
        print(
            json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()})
        )


if __name__ == "__main__":
    main()
