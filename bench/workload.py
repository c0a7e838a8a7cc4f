"""The synthetic lineage workload the benchmarks share (one definition, same bytes)."""

from __future__ import annotations

import hashlib


def lineage_body(i: int) -> dict[str, object]:
    """An artifact.write body of realistic size: ~1000 artifacts, many writes each."""
    digest = hashlib.sha256(b"%d" % i).hexdigest()
    return {
        "path": f"src/module_{i % 997 % 31}/file_{i % 997}.py",
        "sha256": digest,
        "mode": "100644",
        "parents": [hashlib.sha256(digest.encode()).hexdigest()],
        "parent_mode": "100644",
        "actor": "claude-code",
        "task": f"task-{i // 100}",
        "step": i % 50,
        "model": "claude-sonnet-4",
    }
