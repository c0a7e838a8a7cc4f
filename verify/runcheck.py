"""Verify every store of one run: checkpoint signatures first, then each store's records.

The caller supplies how to read members (a bundle in memory, or a run folder), so the same
checks run wherever the evidence sits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

from .checkpoint import Checkpoint, parse_checkpoint
from .errors import CheckpointError, NoteError
from .note import open_note_signed_once
from .records import STORES
from .storecheck import StoreResult, iter_store_lines, verify_store


def open_checkpoints(
    notes: Sequence[tuple[str, bytes]], verifier_keys: Sequence[str]
) -> list[Checkpoint]:
    """Check each signed checkpoint note against the trusted keys, then parse its body."""
    checkpoints = []
    for name, data in notes:
        try:
            note = open_note_signed_once(data, verifier_keys)
        except NoteError as exc:
            raise type(exc)(f"{name}: {exc}") from None
        try:
            checkpoints.append(parse_checkpoint(note.text.encode("utf-8")))
        except CheckpointError as exc:
            raise CheckpointError(f"{name}: {exc}") from None
    return checkpoints


def verify_run(
    run_id: str,
    *,
    open_store: Callable[[str], BinaryIO],
    checkpoint_notes: Mapping[str, Sequence[tuple[str, bytes]]],
    verifier_keys: Sequence[str],
    hmac_master: bytes | None = None,
    store_member: Callable[[str], str] = lambda store: f"{store}.jsonl",
) -> dict[str, StoreResult]:
    """Verify the four stores of ``run_id``; raises at the first failure."""
    results: dict[str, StoreResult] = {}
    for store in STORES:
        checkpoints = open_checkpoints(checkpoint_notes.get(store, ()), verifier_keys)
        member = store_member(store)
        with open_store(store) as stream:
            results[store] = verify_store(
                iter_store_lines(stream, member),
                member=member,
                store=store,
                run_id=run_id,
                checkpoints=checkpoints,
                hmac_master=hmac_master,
            )
    return results
