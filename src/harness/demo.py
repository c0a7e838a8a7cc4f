"""``harness demo``: the main job end to end on an embedded default.

Today it records a small run into all four stores (with a checkpoint mid-run and one at the
end), exports ``bundle.tar``, and verifies the bundle with the standalone verifier, pinning the
demo's own key and checking the HMAC chains. Later stages add agents, worktrees and gates.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.receipts.bundle import export_bundle
from harness.receipts.keys import init_keys
from harness.receipts.run import RunRecorder
from harness.verify.bundle import verify_bundle
from harness.verify.policy import TrustPolicy
from harness.verify.report import Report


@dataclass(frozen=True)
class DemoResult:
    folder: Path
    run_id: str
    key_id: str
    bundle: Path
    report: Report


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_demo(folder: Path | None = None) -> DemoResult:
    """Record a small run, export it, and verify the bundle; the report says how it went."""
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
        run.checkpoint_all()  # a mid-run seal: the bundle then carries consistency proofs
        run.record("audit", "event", {"name": "gate.passed", "data": {"task": "t1"}})
        run.record("audit", "run.end", {"outcome": "succeeded"})
        run.checkpoint_all()
    bundle = export_bundle(state, folder / "bundle.tar", keys).path
    report = verify_bundle(
        bundle,
        pins=TrustPolicy(frozenset({keys.key_id}), "demo key"),
        hmac_master=keys.hmac_master,
    )
    return DemoResult(folder, run_id, keys.key_id, bundle, report)
