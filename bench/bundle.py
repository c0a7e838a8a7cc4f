"""Bundle verification benchmark: ``harness-verify`` end to end, keyed and keyless.

Prints one JSON line. Run: ``python bench/bundle.py --records 100000``.

A run with ``--records`` lineage records (plus one record in each other store, and a checkpoint
every ``--checkpoint-every`` records so consistency proofs are exercised) is exported to a
bundle; then the verifier runs in a fresh interpreter (its own peak RSS, as a CI job sees it):
keyless (everything but the HMAC chains) and keyed (``--hmac-key``; also with ``--jobs 1``, the
records checked in one process), and keyless on the same
bundle gzipped (``gzip_vs_tar``: the verifier reads an archive once, so a .tar.gz costs one
decompression more, not a re-inflation per member). ``floor_records_per_s`` is bare SHA-256
leaf hash + HMAC-SHA256 over the same record bytes in this process (one core). ``*_cpu_s`` is
the CPU time of the verifier and its worker processes, which a loaded machine inflates less
than wall time.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import hmac
import json
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from workload import lineage_body  # bench/workload.py (scripts run from bench/)

from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.storepool import usable_cores

MASTER = bytes(range(32))


_body = lineage_body


def build(folder: Path, records: int, every: int) -> tuple[Path, OperatorKeys]:
    keys = OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), MASTER)
    state = folder / "state"
    with RunRecorder(state, "bench-run", keys) as run:
        lineage = run.store("lineage")
        signer = keys.note_signer()
        for start in range(0, records, 1000):
            stop = min(records, start + 1000)
            lineage.append_many(("artifact.write", _body(i)) for i in range(start, stop))
            if stop % every < 1000 and stop != records:
                lineage.checkpoint(signer)
        run.record("audit", "event", {"name": "bench", "data": {}})
        run.record("replay", "model.call", {
            "adapter": "a", "key": "0" * 64, "model": "m",
            "request_sha256": "0" * 64, "response_sha256": "0" * 64,
        })  # fmt: skip
        run.record(
            "control",
            "command",
            {"operator": "o", "command": "run", "args": {}, "id": "c1", "revision": 0},
        )
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    (folder / "hmac.key").write_text(MASTER.hex() + "\n")
    return bundle, keys


def verify_in_fresh_process(
    bundle: Path, keys: OperatorKeys, keyed: bool, jobs: int | None = None
) -> dict[str, float]:
    """One CLI run: wall seconds, CPU seconds of the CLI and its workers, the CLI's peak RSS."""
    args = [
        sys.executable, "-m", "harness.verify.cli", str(bundle),
        "--trusted-key", keys.key_id, "--quiet", "--format", "json",
    ]  # fmt: skip
    if keyed:
        args += ["--hmac-key", str(bundle.parent / "hmac.key")]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    args = [args[0], "-c", _REPORT_OWN_RSS, *args[3:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"verification failed ({done.returncode}): {done.stdout}{done.stderr}")
    peak_kb = int(done.stderr.strip().splitlines()[-1].split()[-1])
    records = sum(store["records"] for store in json.loads(done.stdout)["stores"])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"records": records, "seconds": seconds, "cpu_s": cpu, "peak_rss_mb": peak_kb / 1024}


# Runs the CLI and, at exit, prints this process's own peak RSS (KiB) on stderr: VmHWM of the
# image after exec. (ru_maxrss would also count the pages of the parent before exec, i.e. this
# benchmark's own memory after building the bundle.)
_REPORT_OWN_RSS = (
    "import atexit, sys\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            sys.stderr.write('peak_rss_kb %s\\n' % line.split()[1])\n"
    "atexit.register(_hwm)\n"
    "from harness.verify.cli import main\n"
    "main(sys.argv[1:])\n"
)


def cli_startup_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "harness.verify.cli", "--help"], capture_output=True, check=False
    )
    return time.perf_counter() - t0


def floor(bundle: Path) -> float:
    key = hashlib.sha256(b"k").digest()
    sha256, digest = hashlib.sha256, hmac.digest
    count = 0
    with tarfile.open(bundle) as tar:
        t0 = time.perf_counter()
        for member in tar.getmembers():
            if not member.name.endswith(".jsonl"):
                continue
            stream = tar.extractfile(member)
            assert stream is not None
            for line in stream:
                record = line[:-1]
                sha256(b"\x00" + record).digest()
                digest(key, record, "sha256")
                count += 1
        return count / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--checkpoint-every", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        bundle, keys = build(Path(tmp), args.records, args.checkpoint_every)
        keyless = verify_in_fresh_process(bundle, keys, keyed=False)
        keyed = verify_in_fresh_process(bundle, keys, keyed=True)
        one_core = verify_in_fresh_process(bundle, keys, keyed=True, jobs=1)
        packed = bundle.with_name("bundle.tar.gz")
        packed.write_bytes(gzip.compress(bundle.read_bytes(), mtime=0))
        gzipped = verify_in_fresh_process(packed, keys, keyed=False)
        floor_rate = floor(bundle)
        keyed_rate = keyed["records"] / keyed["seconds"]
        figures = {
            "records": keyed["records"],
            "bundle_mb": bundle.stat().st_size / 1e6,
            "verify_keyless_records_per_s": keyless["records"] / keyless["seconds"],
            "verify_keyed_records_per_s": keyed_rate,
            "verify_keyed_cpu_s": keyed["cpu_s"],
            "verify_keyed_one_process_records_per_s": one_core["records"] / one_core["seconds"],
            "verify_keyed_one_process_cpu_s": one_core["cpu_s"],
            "cores": usable_cores(),
            "floor_records_per_s": floor_rate,
            "keyed_vs_floor": floor_rate / keyed_rate,
            "peak_rss_mb_keyless": keyless["peak_rss_mb"],
            "verify_tar_s": keyless["seconds"],
            "verify_tar_gz_s": gzipped["seconds"],
            "gzip_vs_tar": gzipped["seconds"] / keyless["seconds"],
            "bundle_gz_mb": packed.stat().st_size / 1e6,
            "peak_rss_mb_gzip": gzipped["peak_rss_mb"],
            "peak_rss_mb_keyed": keyed["peak_rss_mb"],
            "cli_startup_s": cli_startup_seconds(),
        }
        print(
            json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()})
        )


if __name__ == "__main__":
    main()
