"""Bundle member names (docs/spec/bundle.md): one place that says where each thing lives.

Order inside the tar (not required by the verifier, chosen for one forward pass): manifest
first, then names sorted, which puts each run's checkpoints and proofs before its stores.
"""

from __future__ import annotations

from typing import Final

BUNDLE_FORMAT: Final = "harness-verify/bundle"
BUNDLE_VERSION: Final = 1
MANIFEST: Final = "manifest.json"
MANIFEST_SIG: Final = "manifest.sig"
MANIFEST_NOTE_ORIGIN: Final = "harness-verify/v1/bundle"
"""First line of the note signing the manifest; the second line is its SHA-256 (hex)."""


def key_member(key_id: str) -> str:
    return f"keys/{key_id}.vkey"


def store_member(run_id: str, store: str) -> str:
    return f"runs/{run_id}/stores/{store}.jsonl"


def quarantine_member(run_id: str, store: str) -> str:
    return f"runs/{run_id}/stores/{store}.quarantine.jsonl"


def checkpoint_member(run_id: str, store: str, size: int) -> str:
    return f"runs/{run_id}/checkpoints/{store}/{size:020d}.note"


def consistency_member(run_id: str, store: str, size1: int, size2: int) -> str:
    return f"runs/{run_id}/proofs/{store}/{size1:020d}-{size2:020d}.json"


def manifest_note_text(manifest_sha256_hex: str) -> str:
    return f"{MANIFEST_NOTE_ORIGIN}\n{manifest_sha256_hex}\n"
