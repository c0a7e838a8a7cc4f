"""Helpers shared by store and verifier tests: keys, a recorded run, verification of a folder."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.receipts.keys import OperatorKeys
from harness.receipts.store import StoreWriter, read_checkpoints
from harness.verify.checkpoint import Checkpoint
from harness.verify.runcheck import open_checkpoints
from harness.verify.storecheck import StoreResult, iter_store_lines, verify_store

MASTER = bytes(range(32))


def make_keys(seed: int = 1) -> OperatorKeys:
    return OperatorKeys(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32), MASTER)


def event(n: int) -> tuple[str, dict[str, object]]:
    return ("event", {"name": f"e{n}", "data": {"n": n}})


def checkpoints_of(writer: StoreWriter, keys: OperatorKeys) -> list[Checkpoint]:
    notes = [(f"cp{i}", note) for i, note in enumerate(read_checkpoints(writer.checkpoint_dir))]
    return open_checkpoints(notes, [keys.note_signer().verifier_key()])


def verify_bytes(
    data: bytes,
    checkpoints: Sequence[Checkpoint],
    *,
    store: str = "audit",
    run_id: str = "run-1",
    hmac_master: bytes | None = MASTER,
) -> StoreResult:
    return verify_store(
        iter_store_lines(io.BytesIO(data), f"{store}.jsonl"),
        member=f"{store}.jsonl",
        store=store,
        run_id=run_id,
        checkpoints=checkpoints,
        hmac_master=hmac_master,
    )


def open_writer(path: Path, store: str = "audit", run_id: str = "run-1") -> StoreWriter:
    return StoreWriter(path, store=store, run_id=run_id, hmac_master=MASTER)
