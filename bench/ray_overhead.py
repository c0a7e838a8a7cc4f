"""Ray executor benchmark: what shipping a batch's agent phase to Ray costs per batch.

Prints one JSON line. Run: ``python bench/ray_overhead.py --runs 10`` (starts a one-node
local Ray cluster on 127.0.0.1 and stops it by session id afterwards), or ``--address
HOST:PORT`` for an existing cluster that declares ``harness_role_bench``.

The agent is trivial (writes one file, exits 0), so the figures are the executor's own cost.
Three ways of running it, interleaved so machine noise hits all alike, each ``--runs`` times:

* ``local_ms``: ``run_process`` of the agent in its sandbox profile in an existing worktree,
  the local runner's agent step;
* ``unit_ms``: ``run_unit`` in-process (unpack the base bundle, add the worktree, sandbox,
  agent, commit, branch bundle), the work a Ray worker does, without Ray;
* ``ray_ms``: ``RayExecutor.submit`` + polling ``step`` until done + ``apply_branch_bundle``
  on the coordinator, end to end (``apply_ms``: the checked apply alone).

``overhead_ms_median`` = median(ray) - median(local): the per-batch price of the Ray executor;
``ray_only_ms_median`` = median(ray) - median(unit): Ray's scheduling and transfer alone.
Integers only (microseconds where the name says ``_us``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.orchestrate import git
from harness.orchestrate.executors.gitbundle import apply_branch_bundle, base_bundle
from harness.orchestrate.executors.ray_executor import RayExecutor
from harness.orchestrate.executors.unit import AgentUnit, run_unit
from harness.orchestrate.proc import run_process
from harness.orchestrate.sandbox import BatchDirs, Sandbox, Settings, probe, support_for

DATE = "2024-01-02T03:04:05+00:00"
AGENT = "from pathlib import Path; Path('out.txt').write_text('x')"


def _members(session: int, marker: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if fields[0] not in (b"Z", b"X") and (
            int(fields[3]) == session or marker.encode() in cmdline
        ):
            out.append(int(entry))
    return out


def _start_cluster(temp: Path) -> tuple[str, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    argv = [
        str(Path(sys.executable).parent / "ray"), "start", "--head",
        "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
        "--num-cpus=2", '--resources={"harness_role_bench": 1}', f"--temp-dir={temp}",
        "--disable-usage-stats",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    if proc.wait(timeout=90) != 0:
        raise SystemExit("ray start failed")
    return f"127.0.0.1:{port}", proc.pid


def _stop_cluster(session: int, temp: Path) -> None:
    for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        for pid in _members(session, str(temp)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + wait_s
        while _members(session, str(temp)) and time.monotonic() < end:
            time.sleep(0.1)


def _median_ms(values_us: list[int]) -> int:
    return int(statistics.median(values_us)) // 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--address", default=None)
    args = parser.parse_args()
    settings = Settings(opt_out=not probe("bwrap").available)
    root = Path(tempfile.mkdtemp(prefix="hr-bench-", dir="/tmp"))
    session = None
    executor: RayExecutor | None = None
    try:
        address = args.address
        if address is None:
            address, session = _start_cluster(root / "ray")
        executor = RayExecutor(address)
        executor.connect()
        repo = root / "repo"
        git.init_repo(repo, date=DATE)
        (repo / "README.md").write_text("hello\n")
        git.commit_all(repo, "readme", date=DATE)
        base = git.head(repo)
        bundle = base_bundle(repo, base)
        argv = (os.path.abspath(sys.executable), "-c", AGENT)  # bwrap execs it literally
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

        def unit(i: int) -> AgentUnit:
            return AgentUnit(batch=f"b{i}", base=base, branch=f"bench/b{i}", base_bundle=bundle,
                             argv=argv, env=env, settings=settings, git_date=DATE)  # fmt: skip

        sandbox = Sandbox(settings, support_for(settings), (Path.home(),), (), None, host_env=env)
        dirs = BatchDirs(root / "local")
        dirs.create()
        git.add_worktree(repo, dirs.tree, "local", base)
        profile, penv = sandbox.agent(dirs, programs=[argv[0]], network=False)
        wrapped = sandbox.argv(profile, argv)
        # Warm-up: the first Ray task starts a worker process; that is start-up, not per batch.
        warm = executor.submit(unit(-1), {"harness_role_bench": 1})
        while warm.step(0.5) is None:
            pass
        local: list[int] = []
        units: list[int] = []
        rays: list[int] = []
        applies: list[int] = []
        for i in range(args.runs):
            t0 = time.perf_counter_ns()
            plain = run_process(wrapped, cwd=dirs.tree, timeout_s=60, env=penv,
                                sandboxed=profile.kind == "bwrap")  # fmt: skip
            t1 = time.perf_counter_ns()
            done = run_unit(unit(i), root / f"unit{i}")
            t2 = time.perf_counter_ns()
            if plain.exit_code != 0 or done.result.exit_code != 0 or done.branch_bundle is None:
                raise SystemExit(f"local run {i} failed: {plain} {done.result}")
            handle = executor.submit(unit(i), {"harness_role_bench": 1})
            while (outcome := handle.step(0.005)) is None:
                pass
            result = handle.unit_result
            if result is None or result.branch_bundle is None:
                raise SystemExit(f"ray unit {i} failed: {outcome}")
            t_back = time.perf_counter_ns()
            apply_branch_bundle(repo, result.branch_bundle, branch=f"bench/b{i}", base=base,
                                tip=result.tip)  # fmt: skip
            t3 = time.perf_counter_ns()
            local.append((t1 - t0) // 1000)
            units.append((t2 - t1) // 1000)
            rays.append((t3 - t2) // 1000)
            applies.append((t3 - t_back) // 1000)
        print(json.dumps({
            "bench": "ray_overhead",
            "runs": args.runs,
            "sandbox": profile.kind,
            "local_ms_median": _median_ms(local),
            "unit_ms_median": _median_ms(units),
            "ray_ms_median": _median_ms(rays),
            "overhead_ms_median": _median_ms(rays) - _median_ms(local),
            "ray_only_ms_median": _median_ms(rays) - _median_ms(units),
            "apply_ms_median": _median_ms(applies),
            "base_bundle_bytes": len(bundle),
        }, sort_keys=True))  # fmt: skip
    finally:
        if executor is not None:
            executor.close()
        if session is not None:
            _stop_cluster(session, root / "ray")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
