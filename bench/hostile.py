"""Cost benchmark: does verification stay linear, and do hostile shapes stay cheap?

Prints one JSON line. Run: ``python bench/hostile.py --receipts 1000 4000``.

* ``receipts_<n>_tar_s`` / ``_tar_gz_s``: ``harness-verify`` (fresh process) on a bundle with
  ``n`` final artifacts, each with its receipt member, as .tar and .tar.gz; ``per_receipt_ms``
  of the largest and smallest must agree (linear), and ``gz_vs_tar`` stay under 1.5. Before the
  single pass, the .tar.gz cost grew with the square of the member count (4000: 23-101 s).
* ``junk_manifest_*``: 65 KB of .tar.gz whose manifest.json is a 64 MiB JSON list and whose
  signature is junk (was 34 s and 2.1 GB).
* ``zeros_store_*``: a store declaring 3 GiB of zeros in 3 MB of gzip (a bomb past the head).

Peak RSS is the child's own (VmHWM), as bench/bundle.py measures it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bundle import _REPORT_OWN_RSS  # bench/bundle.py (scripts run from bench/)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.bundle import export_bundle
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import RunRecorder
from harness.verify.layout import tar_header_bytes

MASTER = bytes(range(32))


def _keys() -> OperatorKeys:
    return OperatorKeys(Ed25519PrivateKey.from_private_bytes(b"\x05" * 32), MASTER)


def _body(i: int) -> dict[str, object]:
    return {
        "path": f"src/module_{i % 37}/file_{i}.py",
        "sha256": hashlib.sha256(b"%d" % i).hexdigest(),
        "mode": "100644",
        "parents": [],
        "parent_mode": None,
        "actor": "claude-code",
        "task": f"task-{i // 100}",
        "step": i,
        "model": "claude-sonnet-4",
    }


def receipts_bundle(folder: Path, count: int) -> Path:
    """One run with ``count`` final artifacts (so ``count`` receipt members)."""
    keys = _keys()
    with RunRecorder(folder / "state", "bench-run", keys) as run:
        run.store("lineage").append_many(("artifact.write", _body(i)) for i in range(count))
        run.record("audit", "event", {"name": "bench", "data": {}})
    return export_bundle(folder / "state", folder / "bundle.tar", keys).path


def verify(path: Path, key_id: str) -> dict[str, float]:
    args = [sys.executable, "-c", _REPORT_OWN_RSS, str(path), "--trusted-key", key_id, "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    peak_kb = int(done.stderr.strip().splitlines()[-1].split()[-1])
    return {"exit": done.returncode, "s": seconds, "rss_mb": peak_kb / 1024}


def _members(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        return [(i.name, tar.extractfile(i).read()) for i in tar]  # type: ignore[union-attr]


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _zeros_gz(total: int, chunk: int = 16 << 20) -> bytes:
    one = gzip.compress(b"\0" * chunk, compresslevel=9, mtime=0)
    return one * (total // chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receipts", type=int, nargs="+", default=[1000, 4000])
    args = parser.parse_args()
    figures: dict[str, float | int] = {}
    key_id = _keys().key_id
    with tempfile.TemporaryDirectory() as tmp:
        base: Path | None = None
        for count in args.receipts:
            path = receipts_bundle(Path(tmp) / f"r{count}", count)
            base = base or path
            packed = path.with_name("bundle.tar.gz")
            packed.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
            plain, zipped = verify(path, key_id), verify(packed, key_id)
            assert plain["exit"] == zipped["exit"] == 0, (plain, zipped)
            figures[f"receipts_{count}_tar_s"] = plain["s"]
            figures[f"receipts_{count}_tar_gz_s"] = zipped["s"]
            figures[f"receipts_{count}_gz_mb"] = packed.stat().st_size / 1e6
            figures[f"receipts_{count}_gz_vs_tar"] = zipped["s"] / plain["s"]
            figures[f"receipts_{count}_per_receipt_ms_gz"] = 1000 * zipped["s"] / count
            figures[f"receipts_{count}_rss_mb"] = max(plain["rss_mb"], zipped["rss_mb"])
        assert base is not None
        low, high = min(args.receipts), max(args.receipts)
        if high > low:
            for kind in ("tar", "tar_gz"):
                spent = figures[f"receipts_{high}_{kind}_s"] - figures[f"receipts_{low}_{kind}_s"]
                figures[f"marginal_ms_per_receipt_{kind}"] = 1000 * spent / (high - low)
        members = _members(base)
        junk = [("manifest.json", b"[" + b"0," * (32 << 20) + b"0]"), ("manifest.sig", b"junk\n")]
        hostile = Path(tmp) / "junk.tar.gz"
        hostile.write_bytes(gzip.compress(_tar(junk + members[2:3]), mtime=0))
        ran = verify(hostile, key_id)
        figures |= {
            "junk_manifest_gz_kb": hostile.stat().st_size / 1e3,
            "junk_manifest_exit": ran["exit"],
            "junk_manifest_s": ran["s"],
            "junk_manifest_rss_mb": ran["rss_mb"],
        }
        store = next(i for i, (name, _) in enumerate(members) if name.endswith("audit.jsonl"))
        head = b"".join(
            tar_header_bytes(name, len(data)) + data + b"\0" * (-len(data) % 512)
            for name, data in members[:store]
        ) + tar_header_bytes(members[store][0], 3 << 30)
        bomb = Path(tmp) / "zeros.tar.gz"
        bomb.write_bytes(gzip.compress(head, mtime=0) + _zeros_gz(3 << 30))
        ran = verify(bomb, key_id)
        figures |= {
            "zeros_store_gz_mb": bomb.stat().st_size / 1e6,
            "zeros_store_exit": ran["exit"],
            "zeros_store_s": ran["s"],
            "zeros_store_rss_mb": ran["rss_mb"],
        }
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
