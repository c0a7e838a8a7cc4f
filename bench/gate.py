"""Merge-gate benchmarks: one large blob (memory), or a change of many files (time).

    python bench/gate.py [--size-mib 200]
    python bench/gate.py --files 10000 [--uncovered] [--dir DIR]

``--size-mib`` (the default mode): the gate streams blobs, so peak RSS must not grow with the
blob (issue 9 §3: before, a 200 MiB file pushed the gate to 455 MB). Builds the demo repository
and bundle, commits one extra file of the given size (random bytes, so git cannot shrink it),
runs ``harness-verify gate`` on the change in a child process.

``--files N`` (issue 14: 10^4 changed files in at most 5 s): a real run of the runtime, one
merged task writing N files (spread over 100 folders), exported to a real bundle; the change
from the run's base to its head touches those N files, each covered by its own lineage record
and receipt. With ``--uncovered`` the N files are committed by hand instead, and the bundle
(a real run that wrote one other file) covers none of them. ``--dir`` keeps the repository and
bundle in DIR and reuses them on the next call with the same figures (building 10^4 files
through the runtime takes about half a minute).

Either mode prints one JSON line: the gate's exit code, verdict counts, its wall time and its
own peak RSS (VmHWM of the child image after exec). The many-files mode adds the CPU time of
the gate and its children (git; a loaded machine inflates it less than wall time), and the
wall and CPU time of ``harness-verify BUNDLE`` alone on the same bundle: the gate's own share is
the difference. Its children cache bytecode in a temporary folder, compiled before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bundle import _REPORT_OWN_RSS  # bench/bundle.py (scripts run from bench/)

from harness.orchestrate import git
from harness.orchestrate.capabilities import DEFAULT_MATRIX
from harness.orchestrate.clock import LogicalClock
from harness.orchestrate.demo import _gate, make_repo, run_demo
from harness.orchestrate.plan import parse_plan
from harness.orchestrate.runtime import Runtime
from harness.orchestrate.sandbox import Settings
from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys


def _child_env(pycache: Path | None) -> dict[str, str] | None:
    """With ``pycache``: bytecode cached there (a CI's installed package has its .pyc files;
    a PYTHONDONTWRITEBYTECODE shell would recompile every module of ours at each start)."""
    if pycache is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def warm_bytecode(pycache: Path) -> None:
    """Compile our packages into ``pycache`` once, before anything is timed."""
    import harness
    import harness.verify

    folders = {Path(harness.__file__).parent, Path(harness.verify.__file__).parent}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *map(str, sorted(folders))],
        env=_child_env(pycache), check=True, capture_output=True,
    )  # fmt: skip


def _timed_child(argv: list[str], cwd: Path | None, pycache: Path | None) -> dict[str, Any]:
    """Run ``harness-verify ARGV`` in a fresh interpreter: wall and CPU time (its own and its
    children's: git, workers), its peak RSS, exit code and standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _REPORT_OWN_RSS, *argv],
        cwd=cwd, capture_output=True, text=True, check=False, env=_child_env(pycache),
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak_kb = int(done.stderr.strip().splitlines()[-1].split()[-1])
    return {
        "exit_code": done.returncode,
        "stdout": done.stdout,
        "seconds": seconds,
        "cpu_s": cpu,
        "peak_rss_mb": peak_kb / 1024,
    }


def run_gate_child(
    repo: Path, base: str, key_id: str, bundle: Path, pycache: Path | None = None
) -> dict[str, Any]:
    """``harness-verify gate`` in a fresh interpreter: exit code, report, seconds, peak RSS."""
    argv = ["gate", "--base", base, "--trusted-key", key_id, "--format", "json", str(bundle)]
    done = _timed_child(argv, repo, pycache)
    done["report"] = json.loads(done["stdout"])
    return done


def verify_child(key_id: str, bundle: Path, pycache: Path) -> dict[str, Any]:
    """``harness-verify BUNDLE`` alone: the share of the gate's time that is not the gate's."""
    argv = [str(bundle), "--trusted-key", key_id, "--quiet", "--format", "json"]
    done = _timed_child(argv, None, pycache)
    if done["exit_code"] != 0:
        raise SystemExit(f"the bundle does not verify ({done['exit_code']}): {done['stdout']}")
    return done


def large_blob(size_mib: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        demo = run_demo(Path(tmp) / "demo")
        base = git.head(demo.repo)
        big = demo.repo / "assets" / "big.bin"
        big.parent.mkdir()
        with big.open("wb") as handle:
            for _ in range(size_mib):
                handle.write(os.urandom(1 << 20))
        git.commit_all(demo.repo, "add a large file by hand")
        gate = run_gate_child(demo.repo, base, demo.key_id, demo.bundle)
    files = gate["report"]["files"]
    return {
        "bench": "gate_large_blob",
        "blob_mib": size_mib,
        "exit_code": gate["exit_code"],
        "uncovered": [f["path"] for f in files if f["verdict"] == "uncovered"],
        "seconds": round(gate["seconds"], 2),
        "peak_rss_mb": round(gate["peak_rss_mb"], 1),
    }


def _file(index: int) -> tuple[str, str]:
    return f"gen/d{index % 100:02d}/f{index:05d}.txt", f"generated file {index}\n"


def _run(repo: Path, folder: Path, edits: list[dict[str, str]]) -> tuple[Path, str]:
    """One merged task applying ``edits`` through the runtime; the bundle and the key id."""
    state = folder / "state"
    keys = init_keys(folder / "keys")
    plan = {
        "plan": {"name": "gate-bench", "max_batch": 1, "settle_ticks": 2},
        "task": [
            {
                "id": "write-files",
                "role": "writer",
                "prompt": "Write the generated files.",
                "scope": ["**"],
                "tools": ["edit"],
                "gates": [_gate()],
                "edits": edits,
            }
        ],
    }
    summary = Runtime(
        repo=repo,
        plan=parse_plan(plan),
        state_dir=state,
        keys=keys,
        run_id="gate-bench",
        clock=LogicalClock(),
        capabilities=DEFAULT_MATRIX,
        git_date="2026-01-01T00:00:00+00:00",
        # Explicitly opted out of the sandbox (and recorded so): the figure is the gate's, and
        # a sandboxed agent fails when sys.executable's path runs through a folder the sandbox
        # does not mount (``../.venv/bin/python`` from bench/).
        sandbox=Settings(opt_out=True),
    ).run()
    if not summary.merged:
        raise SystemExit(f"the bench run merged nothing: {summary.states}")
    return export_bundle(state, folder / "bundle.tar", keys).path, keys.key_id


def build_many(folder: Path, files: int, uncovered: bool) -> dict[str, str]:
    """The repository, base, bundle and key id of a change of ``files`` files (built once)."""
    meta_file = folder / "meta.json"
    if meta_file.exists():
        meta: dict[str, str] = json.loads(meta_file.read_text())
        if meta.get("files") == str(files) and meta.get("uncovered") == str(uncovered):
            return meta
        raise SystemExit(f"{folder} holds another build ({meta}): use another --dir")
    repo = folder / "repo"
    make_repo(repo)
    base = git.head(repo)
    generated = [_file(index) for index in range(files)]
    if uncovered:
        bundle, key_id = _run(repo, folder, [{"path": "NOTES.md", "content": "notes\n"}])
        for path, content in generated:
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        git.commit_all(repo, "add generated files by hand")
    else:
        edits = [{"path": path, "content": content} for path, content in generated]
        bundle, key_id = _run(repo, folder, edits)
    meta = {
        "files": str(files),
        "uncovered": str(uncovered),
        "repo": str(repo),
        "base": base,
        "bundle": str(bundle),
        "key_id": key_id,
    }
    meta_file.write_text(json.dumps(meta))
    return meta


def many_files(files: int, uncovered: bool, keep: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        meta = build_many(folder, files, uncovered)
        bundle = Path(meta["bundle"])
        pycache = Path(tmp) / "pycache"
        warm_bytecode(pycache)
        gate = run_gate_child(Path(meta["repo"]), meta["base"], meta["key_id"], bundle, pycache)
        verify = verify_child(meta["key_id"], bundle, pycache)
        bundle_mb = bundle.stat().st_size / 1e6
    report = gate["report"]
    return {
        "bench": "gate_many_files",
        "files": len(report["files"]),
        "uncovered_mode": uncovered,
        "bundle_mb": round(bundle_mb, 1),
        "exit_code": gate["exit_code"],
        "verdicts": dict(Counter(entry["verdict"] for entry in report["files"])),
        "seconds": round(gate["seconds"], 2),
        "cpu_s": round(gate["cpu_s"], 2),
        "peak_rss_mb": round(gate["peak_rss_mb"], 1),
        "bundle_verify_seconds": round(verify["seconds"], 2),
        "bundle_verify_cpu_s": round(verify["cpu_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=200, help="large-blob mode")
    parser.add_argument("--files", type=int, default=None, help="many-files mode (e.g. 10000)")
    parser.add_argument("--uncovered", action="store_true", help="files committed by hand")
    parser.add_argument("--dir", type=Path, default=None, help="keep and reuse the build here")
    args = parser.parse_args()
    if args.files is None:
        figures = large_blob(args.size_mib)
    else:
        figures = many_files(args.files, args.uncovered, args.dir)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
