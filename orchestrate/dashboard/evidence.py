"""Evidence health of a run: records per store, sealed size, unsealed tail, and what the
verifier says about a fresh export of the run as it is now.

Why a copy: the dashboard must not write into a run's folder (opening a store writer there
takes its lock and could recover a torn tail: the writer's job), yet the interesting answer is
"would the evidence verify if exported now", unsealed tail included. So the run folder is
copied (complete lines only, symlinks refused, bounded size) into a temporary state folder,
exported there with ``receipts.bundle.export_bundle`` (which seals the copy's stores, signed
with the operator's key, in the copy only), and the bundle is verified by
``harness.verify.bundle.verify_bundle`` pinned to that key with the HMAC master key, exactly
as ``harness demo`` checks its own run. The copy is deleted afterwards.

The check runs in a child process (``python -m harness.orchestrate.dashboard.evidence``,
keys handed over on its stdin, never in its arguments or environment; niced), driven by one
worker thread: the server's event loop, its GIL and its memory are not spent on exporting and
verifying a run of 10^5 records, and a check is bounded by ``CHECK_TIMEOUT_S``. One run at a
time; the result is cached by the sizes of the run's store files, so an idle run is checked
once and a live run at most once per change, and never two checks of the same state at once.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.receipts.bundle import ExportError, export_bundle
from harness.receipts.keys import OperatorKeys
from harness.receipts.run import run_dir
from harness.receipts.store import StoreError
from harness.verify.policy import TrustPolicy
from harness.verify.records import STORES

from .tail import StoreTail, TailError

MAX_COPY_BYTES: Final = 512 << 20
"""Runs larger than this are not copied for a check (reported as too large)."""
MAX_FILES: Final = 100_000
CHECK_TIMEOUT_S: Final = 600
MAX_ANSWER: Final = 1 << 20


def store_sizes(folder: Path) -> tuple[int, ...]:
    out = []
    for store in STORES:
        try:
            out.append((folder / f"{store}.jsonl").lstat().st_size)
        except OSError:
            out.append(-1)
    return tuple(out)


def sealed_size(folder: Path, store: str) -> int:
    """The newest checkpoint's tree size (the largest ``<size>.note`` name), 0 when none."""
    root = folder / "checkpoints" / store
    if root.is_symlink() or not root.is_dir():
        return 0
    sizes = [int(p.stem) for p in root.glob("*.note") if p.stem.isdigit()]
    return max(sizes, default=0)


class _Counter:
    """Line counts of the stores the fold does not tail (incremental, by ``StoreTail``)."""

    def __init__(self, folder: Path) -> None:
        self.tails = {store: StoreTail(folder / f"{store}.jsonl", keep=False) for store in STORES}
        self.lock = threading.Lock()

    def counts(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for store, tail in self.tails.items():
                try:
                    for _ in range(64):  # bounded: 64 budgets at most per call
                        before = tail.offset
                        tail.refresh()
                        if tail.offset >= tail.size or tail.offset == before:
                            break
                except TailError:
                    pass
                out[store] = tail.count
            return out


def _copy_complete(source: Path, target: Path, budget: list[int]) -> None:
    """Copy a regular file; ``*.jsonl`` up to its last complete line (a live writer's
    partial line is left out)."""
    info = source.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise ExportError(f"{source}: not a regular file")
    budget[0] -= info.st_size
    if budget[0] < 0:
        raise ExportError("the run is too large to check here")
    data = source.read_bytes()
    if source.suffix == ".jsonl":
        data = data[: data.rfind(b"\n") + 1]
    target.write_bytes(data)


def _copy_run(folder: Path, target: Path) -> None:
    """Copy a run folder (audit store first: every store copied after it is at least as
    new, so what the audit records refer to is in the copy)."""
    target.mkdir(parents=True)
    budget = [MAX_COPY_BYTES]
    names = sorted(os.listdir(folder), key=lambda n: (n != "audit.jsonl", n))
    files = 0
    for name in names:
        source = folder / name
        if source.is_symlink():
            raise ExportError(f"{source}: a symlink in the run folder")
        if source.is_dir():
            for below in sorted(source.rglob("*")):
                files += 1
                if files > MAX_FILES:
                    raise ExportError("the run has too many files to check here")
                if below.is_symlink():
                    raise ExportError(f"{below}: a symlink in the run folder")
                out = target / below.relative_to(folder)
                if below.is_dir():
                    out.mkdir(parents=True, exist_ok=True)
                else:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    _copy_complete(below, out, budget)
        else:
            _copy_complete(source, target / name, budget)


def check_run(state: Path, run_id: str, keys: OperatorKeys) -> dict[str, Any]:
    """Copy, export and verify one run now; a dict for the pages (never raises for bad
    evidence: that is the answer)."""
    from harness.verify.bundle import verify_bundle

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-dashboard-") as tmp:
        copy = Path(tmp) / "state"
        try:
            _copy_run(run_dir(state, run_id), run_dir(copy, run_id))
            bundle = export_bundle(copy, Path(tmp) / "bundle.tar", keys, [run_id]).path
        except StoreError as exc:  # the stores' own chain check refused them at open
            return {"status": "invalid", "detail": f"export refused: {exc}"}
        except (ExportError, OSError, ValueError) as exc:
            return {"status": "export-failed", "detail": str(exc)}
        report = verify_bundle(
            bundle,
            pins=TrustPolicy(frozenset({keys.key_id}), "the operator key"),
            hmac_master=keys.hmac_master,
            display_name=f"fresh export of {run_id}",
        )
    detail = ""
    if report.failure is not None:
        detail = f"{report.failure.check}: {report.failure.reason}"
    return {
        "status": str(report.status),
        "detail": detail,
        "hmac_checked": report.hmac_checked,
        "seconds": round(time.monotonic() - started, 3),
    }


def check_in_child(
    state: Path,
    run_id: str,
    keys: OperatorKeys,
    started: Callable[[subprocess.Popen[bytes]], None] = lambda child: None,
) -> dict[str, Any]:
    """``check_run`` in a child process (see the module docstring); its answer, or an
    ``error`` saying why there is none. ``started`` is given the child (to stop it)."""
    from cryptography.hazmat.primitives import serialization

    secret = keys.signing_key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    request = json.dumps(
        {"state": str(state), "run": run_id, "key": secret.hex(), "hmac": keys.hmac_master.hex()}
    )
    child = subprocess.Popen(
        [sys.executable, "-m", __name__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    started(child)
    try:
        out, err = child.communicate(request.encode(), timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"status": "error", "detail": f"the check took over {CHECK_TIMEOUT_S} s"}
    try:
        answer = json.loads(out[:MAX_ANSWER])
    except ValueError:
        answer = None
    if child.returncode != 0 or not isinstance(answer, dict):
        tail = err[-500:].decode("utf-8", "replace").strip()
        return {"status": "error", "detail": f"the check failed (exit {child.returncode}): {tail}"}
    return answer


def main() -> None:
    """The child's side: the request on stdin, the answer as one JSON line on stdout."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    os.nice(10)
    # SIGTERM (the server stopping) unwinds, so the temporary copy is removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    request = json.loads(sys.stdin.buffer.read(1 << 16))
    keys = OperatorKeys(
        Ed25519PrivateKey.from_private_bytes(bytes.fromhex(request["key"])),
        bytes.fromhex(request["hmac"]),
    )
    print(json.dumps(check_run(Path(request["state"]), str(request["run"]), keys)), flush=True)


@dataclass
class _Entry:
    sizes: tuple[int, ...]
    result: dict[str, Any] | None = None


class Evidence:
    """Health and cached verification of every run of one state folder."""

    def __init__(self, state: Path, keys: OperatorKeys | None) -> None:
        self.state = state
        self.keys = keys
        self._cache: dict[str, _Entry] = {}
        self._counters: dict[str, _Counter] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, tuple[int, ...]]] = queue.Queue()
        self._queued: set[str] = set()
        self._worker: threading.Thread | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.done = threading.Condition(self._lock)
        """Notified after each check (tests and the bench wait on it, bounded)."""

    def verification(self, run_id: str) -> dict[str, Any]:
        """The verifier's result for the run's current store sizes, or ``pending`` (a check
        is queued) or ``unavailable`` (no keys to export with)."""
        if self.keys is None:
            return {"status": "unavailable", "detail": "no operator keys: cannot export"}
        sizes = store_sizes(run_dir(self.state, run_id))
        with self._lock:
            entry = self._cache.get(run_id)
            if entry is not None and entry.sizes == sizes and entry.result is not None:
                return entry.result
            if run_id not in self._queued and not self._closed:
                self._queued.add(run_id)
                self._queue.put((run_id, sizes))
                if self._worker is None:
                    self._worker = threading.Thread(
                        target=self._work, name="dashboard-verify", daemon=True
                    )
                    self._worker.start()
            previous = entry.result if entry is not None else None
        out: dict[str, Any] = {"status": "pending", "detail": "a check is running"}
        if previous is not None:
            out["previous"] = previous
        return out

    def wait(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        """The verification result, waiting (bounded) for a pending check to finish."""
        deadline = time.monotonic() + timeout_s
        result = self.verification(run_id)
        with self._lock:
            while result["status"] == "pending":
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.done.wait(left)
                entry = self._cache.get(run_id)
                if entry is not None and entry.result is not None and run_id not in self._queued:
                    result = entry.result
        return result

    def _work(self) -> None:
        assert self.keys is not None
        while True:
            run_id, _ = self._queue.get()
            sizes = store_sizes(run_dir(self.state, run_id))  # the state actually copied
            try:
                result = check_in_child(self.state, run_id, self.keys, self._started)
            except Exception as exc:  # a bug must not kill the worker: show it
                result = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}
            with self._lock:
                self._child = None
                self._cache[run_id] = _Entry(sizes, result)
                self._queued.discard(run_id)
                self.done.notify_all()

    def _started(self, child: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._child = child
            closed = self._closed
        if closed:
            child.terminate()

    def close(self) -> None:
        """Stop a running check (the server is shutting down): its child is terminated and
        no further check starts."""
        with self._lock:
            self._closed = True
            child = self._child
        if child is not None and child.poll() is None:
            child.terminate()

    def health(self, run_id: str) -> dict[str, Any]:
        folder = run_dir(self.state, run_id)
        with self._lock:
            counter = self._counters.get(run_id)
            if counter is None:
                counter = self._counters[run_id] = _Counter(folder)
        counts = counter.counts()
        stores = {}
        for store in STORES:
            sealed = sealed_size(folder, store)
            stores[store] = {
                "records": counts[store],
                "sealed": sealed,
                "unsealed": max(0, counts[store] - sealed),
            }
        return {"stores": stores, "verification": self.verification(run_id)}


if __name__ == "__main__":
    main()
