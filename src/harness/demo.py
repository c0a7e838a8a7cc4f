"""``harness demo``: the main job end to end on an embedded default.

Today it records a small run into all four stores, signs checkpoints, and verifies the result
with the standalone verifier's checks (signatures, canonical records, Merkle roots, HMAC
chains). Later stages grow it into agents, worktrees, gates and a bundle.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from harness.receipts.keys import init_keys
from harness.receipts.run import RunRecorder
from harness.verify.records import STORES
from harness.verify.runcheck import verify_run
from harness.verify.storecheck import StoreResult


@dataclass(frozen=True)
class DemoResult:
    folder: Path
    run_id: str
    key_id: str
    verifier_key: str
    stores: dict[str, StoreResult]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_demo(folder: Path | None = None) -> DemoResult:
    """Record a small run, checkpoint it, verify it; raises VerificationError on failure."""
    folder = Path(tempfile.mkdtemp(prefix="harness-demo-")) if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    keys = init_keys(folder / "keys")
    run_id = "demo-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    state = folder / "state"
    files = {"src/app.py": "print('hello')\n", "tests/test_app.py": "def test(): pass\n"}
    with RunRecorder(state, run_id, keys) as run:
        run.record("audit", "run.start", {"producer": "harness demo", "plan": "embedded"})
        run.record("control", "command", {"operator": "demo", "command": "run", "args": {}})
        request, response = "add a hello app", "print('hello')"
        key = _sha(f"scripted|demo-model|{request}")
        run.record(
            "replay",
            "model.call",
            {
                "adapter": "scripted",
                "key": key,
                "model": "demo-model",
                "request_sha256": _sha(request),
                "response_sha256": _sha(response),
            },
        )
        for step, (path, content) in enumerate(sorted(files.items())):
            run.record(
                "lineage",
                "artifact.write",
                {
                    "actor": "scripted-agent",
                    "model": "demo-model",
                    "parents": [],
                    "path": path,
                    "sha256": _sha(content),
                    "step": step,
                    "task": "t1",
                },
            )
        run.record("audit", "event", {"name": "gate.passed", "data": {"task": "t1"}})
        run.record("audit", "run.end", {"outcome": "succeeded"})
        run.checkpoint_all()
    run_folder = state / "runs" / run_id
    verifier_key = keys.note_signer().verifier_key()

    def open_store(store: str) -> BinaryIO:
        return (run_folder / f"{store}.jsonl").open("rb")

    notes = {
        store: [
            (str(path.relative_to(folder)), path.read_bytes())
            for path in sorted((run_folder / "checkpoints" / store).glob("*.note"))
        ]
        for store in STORES
    }
    stores = verify_run(
        run_id,
        open_store=open_store,
        checkpoint_notes=notes,
        verifier_keys=[verifier_key],
        hmac_master=keys.hmac_master,
    )
    return DemoResult(folder, run_id, keys.key_id, verifier_key, stores)
